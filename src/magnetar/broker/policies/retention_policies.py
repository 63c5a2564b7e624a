"""Retention, message TTL and backlog quotas: their values, and where they are kept.

The values have Pulsar's REST forms::

    retention      {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}
    messageTTL     3600                                   (seconds; 0: off)
    backlogQuota   {"limitSize": 1048576, "limitTime": 600,
                    "policy": "producer_request_hold"}    (one per quota type)

A topic's value comes from, most specific first, the topic's own policy (kept in its
metadata), its namespace's (kept in the namespace's policies file) and the broker's
configuration (``default_retention_time_in_minutes`` and the rest), as in Pulsar.
Retention is taken whole from one level; each backlog quota type on its own.
Enforcement is topic_policies.py's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.broker.policies.hierarchy import in_force
from magnetar.storage.metadata import NamespacePolicies

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.topics.view import TopicView

# The policies' keys in the files (their REST names, as the other policies use).
RETENTION = "retention"
MESSAGE_TTL = "messageTTL"
BACKLOG_QUOTAS = "backlogQuotaMap"

DESTINATION_STORAGE = "destination_storage"  # Pulsar's BacklogQuotaType values
MESSAGE_AGE = "message_age"
QUOTA_TYPES = (DESTINATION_STORAGE, MESSAGE_AGE)

PRODUCER_REQUEST_HOLD = "producer_request_hold"  # Pulsar's BacklogQuota.RetentionPolicy
PRODUCER_EXCEPTION = "producer_exception"
CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
QUOTA_POLICIES = (PRODUCER_REQUEST_HOLD, PRODUCER_EXCEPTION, CONSUMER_BACKLOG_EVICTION)

MEGABYTE = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Retention:
    """Pulsar's RetentionPolicies: acknowledged data is kept while it is younger than
    ``time_minutes`` or the topic is under ``size_mb``; -1 is no limit, and (0, 0) keeps
    nothing (the default)."""

    time_minutes: int
    size_mb: int

    def __post_init__(self) -> None:
        # Pulsar's own checks and words (NamespacesBase.validateRetentionPolicies).
        if self.size_mb < -1:
            raise ValueError("Invalid retention policy: size limit must be >= -1")
        if self.time_minutes < -1:
            raise ValueError("Invalid retention policy: time limit must be >= -1")
        if (self.time_minutes == 0) != (self.size_mb == 0):
            raise ValueError(
                "Invalid retention policy: Setting a single time or size limit to 0 is invalid "
                "when one of the limits has a non-zero value. Use the value of -1 instead of 0 "
                "to ignore a specific limit. To disable retention both limits must be set to 0."
            )

    @property
    def time_ms(self) -> int:
        return self.time_minutes * 60_000 if self.time_minutes >= 0 else -1

    @property
    def size_bytes(self) -> int:
        return self.size_mb * MEGABYTE if self.size_mb >= 0 else -1

    @property
    def keeps_nothing(self) -> bool:
        return self.time_minutes == 0 and self.size_mb == 0

    def to_json(self) -> dict[str, int]:
        return {"retentionTimeInMinutes": self.time_minutes, "retentionSizeInMB": self.size_mb}

    @classmethod
    def from_json(cls, doc: object) -> Retention:
        if not isinstance(doc, dict):
            raise ValueError(
                'retention is a JSON object: {"retentionTimeInMinutes": .., '
                '"retentionSizeInMB": ..}'
            )
        _no_unknown(doc, ("retentionTimeInMinutes", "retentionSizeInMB"))
        # Absent fields are 0, as Jackson leaves Pulsar's ints.
        return cls(_whole(doc, "retentionTimeInMinutes", 0), _whole(doc, "retentionSizeInMB", 0))


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """Pulsar's BacklogQuota: ``limit_size`` bytes (destination_storage) or
    ``limit_time`` seconds (message_age) of backlog, and what happens past it."""

    limit_size: int = -1
    limit_time: int = -1
    policy: str = PRODUCER_REQUEST_HOLD

    def __post_init__(self) -> None:
        if self.policy not in QUOTA_POLICIES:
            raise ValueError(
                f"policy must be one of {', '.join(QUOTA_POLICIES)}, not {self.policy!r}"
            )

    def to_json(self) -> dict[str, Any]:
        # "limit" is the deprecated name of limitSize, which Pulsar's JSON still carries.
        return {
            "limit": self.limit_size,
            "limitSize": self.limit_size,
            "limitTime": self.limit_time,
            "policy": self.policy,
        }

    @classmethod
    def from_json(cls, doc: object) -> BacklogQuota:
        if not isinstance(doc, dict):
            raise ValueError(
                'a backlog quota is a JSON object: {"limitSize": .., "limitTime": .., '
                '"policy": ..}'
            )
        _no_unknown(doc, ("limit", "limitSize", "limitTime", "policy"))
        size = _whole(doc, "limitSize", _whole(doc, "limit", -1))
        policy = doc.get("policy", PRODUCER_REQUEST_HOLD)
        if not isinstance(policy, str):
            raise ValueError(f"policy must be a string, not {policy!r}")
        return cls(size, _whole(doc, "limitTime", -1), policy)


def check_quota_type(value: str) -> str:
    if value not in QUOTA_TYPES:
        raise ValueError(
            f"backlogQuotaType must be one of {', '.join(QUOTA_TYPES)}, not {value!r}"
        )
    return value


def check_ttl(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("Invalid value for message TTL")  # Pulsar's words
    return value


def quota_fits_retention(quota: BacklogQuota, retention: Retention | None) -> bool:
    """Pulsar's check that a backlog quota stays under the retention it goes with (a
    backlog bigger or older than what retention keeps would make no sense)."""
    if retention is None or (retention.size_mb <= 0 and retention.time_minutes <= 0):
        return True
    if retention.size_mb > 0 and quota.limit_size >= retention.size_mb * MEGABYTE:
        return False
    return not (retention.time_minutes > 0 and quota.limit_time >= retention.time_minutes * 60)


def _no_unknown(doc: dict[str, Any], keys: tuple[str, ...]) -> None:
    unknown = sorted(set(doc) - set(keys))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; expected {', '.join(keys)}")


def _whole(doc: dict[str, Any], key: str, default: int) -> int:
    value = doc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a whole number, not {value!r}")
    return value


# ------------------------------------------------------------------ the store


@dataclass(frozen=True, slots=True)
class _Level:
    """The three policies as one level (a topic's or a namespace's) sets them."""

    retention: Retention | None = None
    ttl: int | None = None
    quotas: tuple[tuple[str, BacklogQuota], ...] = ()

    def quota(self, kind: str) -> BacklogQuota | None:
        for name, quota in self.quotas:
            if name == kind:
                return quota
        return None


def _level(doc: dict[str, Any]) -> _Level:
    """The policies of a file's ``policies`` object; a hand-edited value that does not
    parse counts as unset rather than failing every check of the topic."""
    retention = None
    if RETENTION in doc:
        with contextlib.suppress(ValueError):
            retention = Retention.from_json(doc[RETENTION])
    ttl = doc.get(MESSAGE_TTL)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
        ttl = None
    quotas = []
    raw = doc.get(BACKLOG_QUOTAS)
    if isinstance(raw, dict):
        for kind in QUOTA_TYPES:
            if kind in raw:
                with contextlib.suppress(ValueError):
                    quotas.append((kind, BacklogQuota.from_json(raw[kind])))
    return _Level(retention, ttl, tuple(quotas))


class RetentionPolicyStore:
    """The broker's defaults and the namespace and topic values. Loop thread only.

    Namespace files are shared with other policies: a change reads the file afresh,
    changes only its own key, and calls ``on_namespace_written(tenant, namespace)``
    so that other holders of the file can drop what they cached. What this store
    caches of a namespace is dropped with :meth:`forget_namespace`.
    """

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        on_namespace_written: Callable[[str, str], None] | None = None,
    ) -> None:
        self.default_retention = Retention(
            config.default_retention_time_in_minutes, config.default_retention_size_in_mb
        )
        self.default_ttl = config.ttl_duration_default_in_seconds
        # Pulsar's BacklogQuotaManager.getDefaultQuota: one quota for both types.
        self.default_quota = BacklogQuota(
            config.backlog_quota_default_limit_bytes,
            config.backlog_quota_default_limit_second,
            config.backlog_quota_default_retention_policy,
        )
        self._data_dir = Path(data_dir)
        self._namespaces: dict[str, _Level] = {}
        self._on_namespace_written = on_namespace_written

    # ------------------------------------------------------------ namespaces

    def _path(self, tenant: str, namespace: str) -> Path:
        return NamespacePolicies.path_for(self._data_dir, tenant, namespace)

    def _namespace(self, tenant: str, namespace: str) -> _Level:
        key = f"{tenant}/{namespace}"
        level = self._namespaces.get(key)
        if level is None:
            doc = NamespacePolicies.load(self._path(tenant, namespace)).policies
            level = self._namespaces[key] = _level(doc)
        return level

    def forget_namespace(self, tenant: str, namespace: str) -> None:
        """Drop what is cached of the namespace (its file changed or went)."""
        self._namespaces.pop(f"{tenant}/{namespace}", None)

    def namespace_retention(self, tenant: str, namespace: str) -> Retention | None:
        return self._namespace(tenant, namespace).retention

    def namespace_ttl(self, tenant: str, namespace: str) -> int | None:
        return self._namespace(tenant, namespace).ttl

    def namespace_quotas(self, tenant: str, namespace: str) -> dict[str, BacklogQuota]:
        return dict(self._namespace(tenant, namespace).quotas)

    def set_namespace_retention(
        self, tenant: str, namespace: str, retention: Retention | None
    ) -> None:
        self._write_namespace(tenant, namespace, RETENTION,
                              None if retention is None else retention.to_json())

    def set_namespace_ttl(self, tenant: str, namespace: str, ttl: int | None) -> None:
        self._write_namespace(tenant, namespace, MESSAGE_TTL, ttl)

    def set_namespace_quota(
        self, tenant: str, namespace: str, kind: str, quota: BacklogQuota | None
    ) -> None:
        quotas = self.namespace_quotas(tenant, namespace)
        _put(quotas, kind, quota)
        self._write_namespace(tenant, namespace, BACKLOG_QUOTAS, _quotas_json(quotas))

    def _write_namespace(self, tenant: str, namespace: str, key: str, value: object) -> None:
        """Set (None: remove) one key of the namespace's file, persisted before it
        applies; a failed write changes nothing."""
        current = NamespacePolicies.load(self._path(tenant, namespace))
        policies = dict(current.policies)
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        NamespacePolicies(current.path, policies).save()
        self._namespaces[f"{tenant}/{namespace}"] = _level(policies)
        if self._on_namespace_written is not None:
            self._on_namespace_written(tenant, namespace)

    # ------------------------------------------------------------ topics

    @staticmethod
    def _topic(topic: TopicView) -> _Level:
        return _level(topic.metadata.policies)

    def topic_retention(self, topic: TopicView) -> Retention | None:
        return self._topic(topic).retention

    def topic_ttl(self, topic: TopicView) -> int | None:
        return self._topic(topic).ttl

    def topic_quotas(self, topic: TopicView) -> dict[str, BacklogQuota]:
        return dict(self._topic(topic).quotas)

    def set_topic_retention(self, topic: TopicView, retention: Retention | None) -> None:
        _write_topic(topic, RETENTION, None if retention is None else retention.to_json())

    def set_topic_ttl(self, topic: TopicView, ttl: int | None) -> None:
        _write_topic(topic, MESSAGE_TTL, ttl)

    def set_topic_quota(self, topic: TopicView, kind: str, quota: BacklogQuota | None) -> None:
        quotas = self.topic_quotas(topic)
        _put(quotas, kind, quota)
        _write_topic(topic, BACKLOG_QUOTAS, _quotas_json(quotas))

    # ------------------------------------------------------------ in force

    def retention(self, topic: TopicView) -> Retention:
        """The retention in force: the topic's, else its namespace's, else the broker's."""
        return in_force(
            self.topic_retention(topic),
            topic.topic_name,
            self.namespace_retention,
            self.default_retention,
        )

    def ttl(self, topic: TopicView) -> int:
        """The message TTL in force, in seconds (0: off)."""
        return in_force(
            self.topic_ttl(topic), topic.topic_name, self.namespace_ttl, self.default_ttl
        )

    def quota(self, topic: TopicView, kind: str) -> BacklogQuota:
        """The backlog quota of type ``kind`` in force."""
        return in_force(
            self._topic(topic).quota(kind),
            topic.topic_name,
            lambda tenant, namespace: self._namespace(tenant, namespace).quota(kind),
            self.default_quota,
        )

    def applied_quotas(self, topic: TopicView) -> dict[str, BacklogQuota]:
        """Pulsar's applied backlogQuotaMap: the topic's map if it has one, else its
        namespace's, else the broker's default for every type."""
        # An empty map is no map: Pulsar's applied map is one level's map, whole.
        return in_force(
            self.topic_quotas(topic) or None,
            topic.topic_name,
            lambda tenant, namespace: self.namespace_quotas(tenant, namespace) or None,
            {kind: self.default_quota for kind in QUOTA_TYPES},
        )


def _put(quotas: dict[str, BacklogQuota], kind: str, quota: BacklogQuota | None) -> None:
    if quota is None:
        quotas.pop(kind, None)
    else:
        quotas[kind] = quota


def _quotas_json(quotas: dict[str, BacklogQuota]) -> dict[str, Any] | None:
    if not quotas:
        return None
    return {kind: quota.to_json() for kind, quota in quotas.items()}


def _write_topic(topic: TopicView, key: str, value: object) -> None:
    """Set (None: remove) one of the topic's policies, persisted in its metadata."""
    topic.metadata.set_policy(key, value)
