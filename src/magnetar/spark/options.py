"""The source's and sink's options, named as StreamNative's pulsar-spark names them.

Spark hands a data source its options as strings (case-insensitive keys).  They are
parsed once, on the driver, into frozen dataclasses that travel (pickled) to the
executors with every reader and writer: an executor needs nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.client import AuthenticationToken, Client
from magnetar.client.topic_name import complete_topic_name
from magnetar.protocol.message_id import MessageId
from magnetar.spark.positions import parse_topic_ids, parse_topic_times

# Options under these prefixes tune the client, the readers and the producers (as in
# pulsar-spark, with the official clients' configuration names); the ones magnetar
# understands are listed here, any other is an error rather than silently ignored.
CLIENT_KEYS = {
    "pulsar.client.operationtimeoutms",
    "pulsar.client.connectiontimeoutms",
    "pulsar.client.authpluginclassname",
    "pulsar.client.authparams",
}
READER_KEYS = {"pulsar.reader.receiverqueuesize"}
PRODUCER_KEYS = {
    "pulsar.producer.batchingenabled",
    "pulsar.producer.batchingmaxmessages",
    "pulsar.producer.batchingmaxpublishdelaymicros",
    "pulsar.producer.compressiontype",
    "pulsar.producer.maxpendingmessages",
    "pulsar.producer.sendtimeoutms",
}
PREFIXES = ("pulsar.client.", "pulsar.reader.", "pulsar.producer.", "pulsar.admin.")


def normalise(options: Mapping[str, str]) -> dict[str, str]:
    """Lower-case keys (Spark's own options are case-insensitive), checked prefixes."""
    out = {str(k).lower(): str(v) for k, v in options.items()}
    known = CLIENT_KEYS | READER_KEYS | PRODUCER_KEYS
    for key in out:
        if key.startswith(PREFIXES) and key not in known and not key.startswith("pulsar.admin."):
            raise ValueError(
                f"option {key!r} is not supported by magnetar's pulsar source; supported: "
                f"{', '.join(sorted(known))}"
            )
    return out


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
    auth_token: str | None = None

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> ClientSettings:
        url = opts.get("service.url")
        if not url:
            raise ValueError("option 'service.url' is required, e.g. pulsar://127.0.0.1:6650")
        token = None
        plugin = opts.get("pulsar.client.authpluginclassname", "")
        params = opts.get("pulsar.client.authparams")
        if plugin or params:
            if plugin and not plugin.endswith("AuthenticationToken"):
                raise ValueError(f"only token authentication is supported, not {plugin!r}")
            if not params:
                raise ValueError("token authentication needs 'pulsar.client.authParams'")
            token = params.removeprefix("token:")
        op_ms = _int(opts, "pulsar.client.operationtimeoutms", 30_000)
        conn_ms = _int(opts, "pulsar.client.connectiontimeoutms", 10_000)
        assert op_ms is not None and conn_ms is not None
        return cls(url, op_ms / 1000, conn_ms / 1000, token)

    def connect(self) -> Client:
        """A new asyncio client (connects on first use; call on the loop that uses it)."""
        return Client(
            self.service_url,
            operation_timeout=self.operation_timeout,
            connection_timeout=self.connection_timeout,
            auth=AuthenticationToken(self.auth_token) if self.auth_token else None,
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
            return cls(pattern=opts["topicspattern"])
        names = [t.strip() for t in opts[given[0]].split(",") if t.strip()]
        if not names:
            raise ValueError(f"option {given[0]!r} names no topic")
        return cls(topics=tuple(dict.fromkeys(complete_topic_name(t) for t in names)))


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
    subscription: str | None = None
    subscription_prefix: str = "spark-pulsar"
    rows_per_batch: int = 8192

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
        starting_time = None
        if opts.get("startingtime"):
            if opts.get("startingoffsets"):
                raise ValueError("give either 'startingOffsets' or 'startingTime', not both")
            starting_time = parse_topic_times(opts["startingtime"])
        per_trigger = _int(opts, "maxentriespertrigger", None)
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
    columns: tuple[str, ...] = field(default=())

    @classmethod
    def from_options(cls, options: Mapping[str, str], columns: tuple[str, ...]) -> SinkConfig:
        opts = normalise(options)
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
        )
