"""The source's and sink's options, named as StreamNative's pulsar-spark names them.

Spark hands a data source its options as strings (case-insensitive keys).  They are
parsed once, on the driver, into frozen dataclasses that travel (pickled) to the
executors with every reader and writer: an executor needs nothing else.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.client import Client
from magnetar.client.schema import SchemaInfo
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import DEFAULT_NAMESPACE_PREFIX, complete_topic_name
from magnetar.spark.auth_options import AuthSpec
from magnetar.spark.positions import key_before, key_through, parse_topic_ids, parse_topic_times

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# Every option the source and the sink take, spelt as pulsar-spark and the official
# clients' configuration spell them (Spark hands them over lower-cased); any other is
# refused, naming the nearest valid one: a misspelt option silently ignored is a job
# that reads the wrong thing.
CLIENT_OPTIONS = (
    "service.url", "admin.url",
    "pulsar.client.operationTimeoutMs", "pulsar.client.connectionTimeoutMs",
    "pulsar.client.authPluginClassName", "pulsar.client.authParams",
    "pulsar.client.tlsTrustCertsFilePath", "pulsar.client.tlsAllowInsecureConnection",
    "pulsar.client.tlsHostnameVerificationEnable",
)
SOURCE_OPTIONS = (
    *CLIENT_OPTIONS,
    "topic", "topics", "topicsPattern", "startingOffsets", "endingOffsets", "startingTime",
    "failOnDataLoss", "maxEntriesPerTrigger", "maxBytesPerTrigger", "minPartitions",
    "predefinedSubscription", "subscriptionPrefix", "pollTimeoutMs", "rowsPerBatch",
    "allowDifferentTopicSchemas", "pulsar.reader.receiverQueueSize",
)
SINK_OPTIONS = (
    *CLIENT_OPTIONS,
    "topic", "pulsar.producer.batchingEnabled", "pulsar.producer.batchingMaxMessages",
    "pulsar.producer.batchingMaxPublishDelayMicros", "pulsar.producer.compressionType",
    "pulsar.producer.maxPendingMessages", "pulsar.producer.sendTimeoutMs",
)
# Spark's own options, which reach a data source with the user's.
SPARK_OPTIONS = ("path", "checkpointLocation")


def normalise(options: Mapping[str, str], valid: tuple[str, ...] = SOURCE_OPTIONS,
              side: str = "source") -> dict[str, str]:
    """Lower-case keys (Spark's own options are case-insensitive); an option that is
    not one of ``valid`` is an error naming the nearest valid option."""
    out = {str(k).lower(): str(v) for k, v in options.items()}
    names = {n.lower(): n for n in valid + SPARK_OPTIONS}
    for key in out:
        if key not in names:
            raise ValueError(_unknown(key, names, side))
    return out


def _unknown(key: str, names: Mapping[str, str], side: str) -> str:
    other = {n.lower(): n for n in (SINK_OPTIONS if side == "source" else SOURCE_OPTIONS)}
    if key in other:
        return (f"option {other[key]!r} applies to "
                f"{'writing' if side == 'source' else 'reading'} only, not to the {side}")
    if key.startswith("pulsar.admin."):
        return (f"option {key!r} is not supported: the pulsar source needs no admin client "
                "(partitions, topic lists and positions come over the binary protocol)")
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    hint = f"; did you mean {names[close[0]]!r}?" if close else ""
    return f"unknown option {key!r} for the pulsar {side}{hint}"


def _int(opts: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"option {key!r} must be an integer, not {raw!r}") from None


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {key!r} must be true or false, not {raw!r}")


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the broker: ``service.url`` and the ``pulsar.client.*`` options."""

    service_url: str
    operation_timeout: float = 30.0
    connection_timeout: float = 10.0
    auth: AuthSpec | None = None
    tls_trust_certs_file: str | None = None
    tls_allow_insecure: bool = False
    tls_validate_hostname: bool = False

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> ClientSettings:
        url = opts.get("service.url")
        if not url:
            raise ValueError("option 'service.url' is required, e.g. pulsar://127.0.0.1:6650")
        if not url.startswith(("pulsar://", "pulsar+ssl://")):
            raise ValueError(f"service.url must be pulsar:// or pulsar+ssl://, not {url!r}")
        admin = opts.get("admin.url")
        if admin and not admin.startswith(("http://", "https://")):
            raise ValueError(f"admin.url must be http:// or https://, not {admin!r}")
        auth = AuthSpec.from_options(opts.get("pulsar.client.authpluginclassname", ""),
                                     opts.get("pulsar.client.authparams", ""))
        trust = opts.get("pulsar.client.tlstrustcertsfilepath") or None
        if trust is not None and not os.path.isfile(trust):
            raise ValueError(f"pulsar.client.tlsTrustCertsFilePath {trust!r} is not a file")
        op_ms = _int(opts, "pulsar.client.operationtimeoutms", 30_000)
        conn_ms = _int(opts, "pulsar.client.connectiontimeoutms", 10_000)
        assert op_ms is not None and conn_ms is not None
        return cls(
            url, op_ms / 1000, conn_ms / 1000, auth, trust,
            _bool(opts, "pulsar.client.tlsallowinsecureconnection", False),
            _bool(opts, "pulsar.client.tlshostnameverificationenable", False),
        )

    def connect(self) -> Client:
        """A new asyncio client (connects on first use; call on the loop that uses it)."""
        return Client(
            self.service_url,
            operation_timeout=self.operation_timeout,
            connection_timeout=self.connection_timeout,
            auth=self.auth.provider() if self.auth else None,
            tls_trust_certs_file_path=self.tls_trust_certs_file,
            tls_validate_hostname=self.tls_validate_hostname,
            tls_allow_insecure_connection=self.tls_allow_insecure,
        )


@dataclass(frozen=True)
class TopicSelection:
    """``topic``, ``topics`` (comma list) or ``topicsPattern``: exactly one."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> TopicSelection:
        given = [k for k in ("topic", "topics", "topicspattern") if opts.get(k)]
        if len(given) != 1:
            raise ValueError(
                "exactly one of the options 'topic', 'topics' or 'topicsPattern' is needed"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if given[0] == "topicspattern":
            return cls(pattern=complete_pattern(opts["topicspattern"]))
        names = [t.strip() for t in opts[given[0]].split(",") if t.strip()]
        if not names:
            raise ValueError(f"option {given[0]!r} names no topic")
        return cls(topics=tuple(dict.fromkeys(complete_topic_name(t) for t in names)))


def complete_pattern(pattern: str) -> str:
    """A ``topicsPattern`` as a regex of full topic names, completed as Pulsar completes a
    topic name: ``tenant/ns/x-.*`` is in ``persistent://tenant/ns``, a bare ``x-.*`` in
    ``persistent://public/default``."""
    pattern = pattern.strip()
    if "://" not in pattern:
        prefix = "persistent://" if pattern.count("/") >= 2 else DEFAULT_NAMESPACE_PREFIX
        pattern = prefix + pattern
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"topicsPattern {pattern!r} is not a regular expression: {exc}") \
            from None
    return pattern


Start = str | dict[str, MessageId]  # "earliest", "latest", or per topic (inclusive)


@dataclass(frozen=True)
class SourceConfig:
    """Everything a reader needs, batch or streaming, on the driver and on executors."""

    client: ClientSettings
    selection: TopicSelection
    starting: Start
    ending: Start
    starting_time: int | dict[str, int] | None = None
    fail_on_data_loss: bool = True
    poll_timeout: float = 120.0
    receiver_queue_size: int = 1000
    min_partitions: int | None = None
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    allow_different_topic_schemas: bool = False
    subscription: str | None = None
    subscription_prefix: str = "spark-pulsar"
    rows_per_batch: int = 8192
    # The schema the topics' values are decoded with (set on the driver from the
    # topics' schema; None: values read as bytes).
    value_schema: SchemaInfo | None = None

    @classmethod
    def for_topics(cls, options: Mapping[str, str]) -> SourceConfig:
        """The topics and connection of a source, for a question about its topics
        before Spark says whether it reads a batch or a stream."""
        opts = normalise(options)
        return cls(client=ClientSettings.from_options(opts),
                   selection=TopicSelection.from_options(opts),
                   starting="earliest", ending="latest",
                   allow_different_topic_schemas=_bool(opts, "allowdifferenttopicschemas",
                                                       False))

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool) -> SourceConfig:
        opts = normalise(options)
        starting = _offsets(opts, "startingoffsets", "latest" if streaming else "earliest")
        if streaming and opts.get("endingoffsets"):
            raise ValueError("'endingOffsets' applies to batch queries only")
        ending = _offsets(opts, "endingoffsets", "latest")
        if not streaming and starting == "latest":
            raise ValueError("startingOffsets 'latest' is not allowed in a batch query")
        if ending == "earliest":
            raise ValueError("endingOffsets 'earliest' is not allowed")
        if isinstance(ending, dict) and any(m.is_earliest for m in ending.values()):
            raise ValueError("an endingOffsets message id may not be the earliest")
        if isinstance(starting, dict) and isinstance(ending, dict):
            _check_order(starting, ending)
        starting_time = None
        if opts.get("startingtime"):
            if opts.get("startingoffsets"):
                raise ValueError("give either 'startingOffsets' or 'startingTime', not both")
            starting_time = parse_topic_times(opts["startingtime"])
        per_trigger = _int(opts, "maxentriespertrigger", None)
        bytes_per_trigger = _int(opts, "maxbytespertrigger", None)
        if not streaming and (per_trigger is not None or bytes_per_trigger is not None):
            raise ValueError("'maxEntriesPerTrigger' and 'maxBytesPerTrigger' apply to "
                             "streaming queries only")
        poll_ms = _int(opts, "polltimeoutms", 120_000)
        queue = _int(opts, "pulsar.reader.receiverqueuesize", 1000)
        rows = _int(opts, "rowsperbatch", 8192)
        assert poll_ms is not None and queue is not None and rows is not None
        min_parts = _int(opts, "minpartitions", None)
        if min_parts is not None and min_parts < 1:
            raise ValueError("minPartitions must be at least 1")
        return cls(
            client=ClientSettings.from_options(opts),
            selection=TopicSelection.from_options(opts),
            starting=starting,
            ending=ending,
            starting_time=starting_time,
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            poll_timeout=poll_ms / 1000,
            receiver_queue_size=max(1, queue),
            min_partitions=min_parts,
            max_entries_per_trigger=per_trigger if per_trigger and per_trigger > 0 else None,
            max_bytes_per_trigger=(bytes_per_trigger if bytes_per_trigger
                                   and bytes_per_trigger > 0 else None),
            allow_different_topic_schemas=_bool(opts, "allowdifferenttopicschemas", False),
            subscription=opts.get("predefinedsubscription") or None,
            subscription_prefix=opts.get("subscriptionprefix") or "spark-pulsar",
            rows_per_batch=max(1, rows),
        )


def _offsets(opts: Mapping[str, str], key: str, default: str) -> Start:
    raw = (opts.get(key) or default).strip()
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    ids = parse_topic_ids(raw)
    return {complete_topic_name(topic): mid for topic, mid in ids.items()}


def _check_order(starting: dict[str, MessageId], ending: dict[str, MessageId]) -> None:
    """An end before its start is a mistake, not an empty range (both are inclusive)."""
    for topic in starting.keys() & ending.keys():
        start, end = starting[topic], ending[topic]
        if start.is_earliest or end.is_latest:
            continue
        if key_through(end) <= key_before(start):
            raise ValueError(f"endingOffsets of {topic} ({end}) is before its "
                             f"startingOffsets ({start})")


COMPRESSIONS = {"none": None, "lz4": "lz4", "zlib": "zlib", "zstd": "zstd", "snappy": "snappy"}


@dataclass(frozen=True)
class SinkConfig:
    """Everything a writer needs: where to send and how to batch."""

    client: ClientSettings
    topic: str | None = None
    batching: bool = True
    batching_max_messages: int = 1000
    batching_max_delay: float = 0.01
    compression: str | None = "lz4"
    max_pending_messages: int = 1000
    send_timeout: float = 30.0
    columns: tuple[str, ...] = field(default=())  # the metadata columns written
    values: StructType | None = None  # the value columns (all but the metadata ones)

    @classmethod
    def from_options(cls, options: Mapping[str, str], columns: tuple[str, ...],
                     values: StructType | None = None) -> SinkConfig:
        opts = normalise(options, SINK_OPTIONS, "sink")
        topic = opts.get("topic") or None
        if topic is None and "__topic" not in columns:
            raise ValueError("writing needs the option 'topic' or a '__topic' column")
        raw_compression = opts.get("pulsar.producer.compressiontype", "lz4").strip().lower()
        if raw_compression not in COMPRESSIONS:
            raise ValueError(
                f"pulsar.producer.compressionType must be one of {sorted(COMPRESSIONS)}, "
                f"not {raw_compression!r}"
            )
        max_messages = _int(opts, "pulsar.producer.batchingmaxmessages", 1000)
        delay_us = _int(opts, "pulsar.producer.batchingmaxpublishdelaymicros", 10_000)
        pending = _int(opts, "pulsar.producer.maxpendingmessages", 1000)
        send_ms = _int(opts, "pulsar.producer.sendtimeoutms", 30_000)
        assert max_messages and delay_us is not None and pending and send_ms is not None
        return cls(
            client=ClientSettings.from_options(opts),
            topic=complete_topic_name(topic) if topic else None,
            batching=_bool(opts, "pulsar.producer.batchingenabled", True),
            batching_max_messages=max(1, max_messages),
            batching_max_delay=max(0, delay_us) / 1_000_000,
            compression=COMPRESSIONS[raw_compression],
            max_pending_messages=max(1, pending),
            send_timeout=send_ms / 1000,
            columns=columns,
            values=values,
        )
