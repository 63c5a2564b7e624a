"""Where a topic's deduplication switch comes from, most specific first, as in Pulsar:
the topic's own policy (admin API; kept in its metadata), its namespace's (kept in the
namespace's policies file), the broker's ``broker_deduplication_enabled``. Only
persistent topics deduplicate (Pulsar's non-persistent topics do not either).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.features.dedup import DedupSettings
from magnetar.broker.policies.hierarchy import in_force
from magnetar.storage.metadata import NamespacePolicies

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.topics.view import TopicView

# Pulsar's field name, in its namespace Policies and its TopicPolicies alike.
POLICY_NAME = "deduplicationEnabled"


def settings_from_config(config: BrokerConfig) -> DedupSettings:
    return DedupSettings(
        max_producers=config.broker_deduplication_max_number_of_producers,
        entries_interval=config.broker_deduplication_entries_interval,
        snapshot_interval_s=config.broker_deduplication_snapshot_interval_seconds,
        inactivity_timeout_ms=config.broker_deduplication_producer_inactivity_timeout_minutes
        * 60_000,
    )


class DedupPolicies:
    """The broker's default and the namespace and topic switches. Loop thread only.

    A namespace's policies file is shared with other policies: a change reads it
    afresh, changes only this key and calls ``on_namespace_written(tenant, namespace)``
    so that other holders of the file can drop what they cached.
    """

    def __init__(
        self,
        default: bool,
        data_dir: Path,
        on_namespace_written: Callable[[str, str], None] | None = None,
    ) -> None:
        self.default = default
        self._data_dir = Path(data_dir)
        self._namespaces: dict[str, bool | None] = {}
        self._on_namespace_written = on_namespace_written

    def _path(self, tenant: str, namespace: str) -> Path:
        return NamespacePolicies.path_for(self._data_dir, tenant, namespace)

    def namespace_policy(self, tenant: str, namespace: str) -> bool | None:
        key = f"{tenant}/{namespace}"
        if key not in self._namespaces:
            doc = NamespacePolicies.load(self._path(tenant, namespace)).policies
            self._namespaces[key] = _parse(doc.get(POLICY_NAME))
        return self._namespaces[key]

    def set_namespace_policy(self, tenant: str, namespace: str, enabled: bool | None) -> None:
        """Set (None: remove) the namespace's switch, persisted before it applies."""
        current = NamespacePolicies.load(self._path(tenant, namespace))
        policies = dict(current.policies)
        if enabled is None:
            policies.pop(POLICY_NAME, None)
        else:
            policies[POLICY_NAME] = enabled
        NamespacePolicies(current.path, policies).save()  # a failed write changes nothing
        self._namespaces[f"{tenant}/{namespace}"] = enabled
        if self._on_namespace_written is not None:
            self._on_namespace_written(tenant, namespace)

    @staticmethod
    def topic_policy(topic: TopicView) -> bool | None:
        return _parse(topic.metadata.policies.get(POLICY_NAME))

    @staticmethod
    def set_topic_policy(topic: TopicView, enabled: bool | None) -> None:
        """Set (None: remove) the topic's switch, persisted in its metadata."""
        topic.metadata.set_policy(POLICY_NAME, enabled)

    def applied(self, topic: TopicView) -> bool:
        """The switch in force: the topic's, else its namespace's, else the broker's."""
        return in_force(
            self.topic_policy(topic), topic.topic_name, self.namespace_policy, self.default
        )

    def enabled_for(self, topic: TopicView) -> bool:
        return topic.topic_name.persistent and self.applied(topic)


def _parse(value: object) -> bool | None:
    # A hand-edited file with something else in it counts as unset.
    return value if isinstance(value, bool) else None
