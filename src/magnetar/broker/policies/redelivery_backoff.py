"""Broker-side redelivery backoff (PIP-106 for clients that lack it).

The official Python and C++ clients redeliver a negatively acknowledged message after a
fixed delay. With a backoff policy in force, the broker holds a message named in a
REDELIVER_UNACKNOWLEDGED_MESSAGES request back for ``delay_ms(redelivery_count)``
before it dispatches it again, on top of whatever delay the client applied. A
redelivery because a consumer went away is never held (PIP-106: a crash does not
respect the backoff), and neither is a redelivery asked for by a consumer that declared
``magnetar.redelivery-backoff=client`` at subscribe (magnetar's client: it times its
own, and a policy here would stack on it).

Where a topic's policy comes from, most specific first: the topic's own policy (the
admin API; kept in its metadata), its namespace's (kept in the namespace's policies
file), the broker's configuration (``redelivery_backoff_min_ms`` and the rest). A
policy with ``minDelayMs`` 0 is "off": a topic can turn off what its namespace set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.broker.policies.hierarchy import in_force
from magnetar.storage.metadata import NamespacePolicies

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.topics.view import TopicView

# The policy's name in the admin REST paths and in the files that keep policies.
POLICY_NAME = "redeliveryBackoff"
DEFAULT_MAX_DELAY_MS = 60_000
DEFAULT_MULTIPLIER = 2.0
_KEYS = ("minDelayMs", "maxDelayMs", "multiplier")


@dataclass(frozen=True, slots=True)
class RedeliveryBackoffPolicy:
    """``min(max_delay_ms, min_delay_ms * multiplier ** redelivery_count)``: the curve of
    the Java client's MultiplierRedeliveryBackoff (and magnetar's client), where the
    count is the one the message was last delivered with, so the first redelivery of a
    fresh message waits ``min_delay_ms``. ``min_delay_ms`` 0 means off."""

    min_delay_ms: int
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    multiplier: float = DEFAULT_MULTIPLIER

    def __post_init__(self) -> None:
        if self.min_delay_ms < 0:
            raise ValueError(f"minDelayMs must be >= 0, not {self.min_delay_ms}")
        if self.enabled and self.max_delay_ms < self.min_delay_ms:
            raise ValueError(
                f"maxDelayMs ({self.max_delay_ms}) must be >= minDelayMs ({self.min_delay_ms})"
            )
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1):
            raise ValueError(f"multiplier must be a number >= 1, not {self.multiplier}")

    @property
    def enabled(self) -> bool:
        return self.min_delay_ms > 0

    def delay_ms(self, redelivery_count: int) -> int:
        """How long a message last delivered with ``redelivery_count`` is held."""
        if not self.enabled:
            return 0
        if self.multiplier == 1:
            return self.min_delay_ms
        # Past this exponent the curve is at its cap for sure: no count raises the
        # multiplier higher (closed form; any count costs the same).
        cap = math.ceil(math.log(self.max_delay_ms / self.min_delay_ms, self.multiplier)) + 1
        exponent = min(max(redelivery_count, 0), cap)
        return int(min(self.min_delay_ms * self.multiplier**exponent, self.max_delay_ms))

    def to_json(self) -> dict[str, Any]:
        return {
            "minDelayMs": self.min_delay_ms,
            "maxDelayMs": self.max_delay_ms,
            "multiplier": self.multiplier,
        }

    @classmethod
    def from_json(cls, doc: object) -> RedeliveryBackoffPolicy:
        """A policy from its REST form; ValueError names what is wrong. ``maxDelayMs``
        and ``multiplier`` may be left out (60000 and 2)."""
        if not isinstance(doc, dict):
            raise ValueError(
                'a redelivery backoff is a JSON object: {"minDelayMs": .., "maxDelayMs": .., '
                '"multiplier": ..}'
            )
        unknown = sorted(set(doc) - set(_KEYS))
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)}; expected {', '.join(_KEYS)}")
        if "minDelayMs" not in doc:
            raise ValueError("minDelayMs is missing (0 turns the backoff off)")
        return cls(
            _whole(doc, "minDelayMs"),
            _whole(doc, "maxDelayMs") if "maxDelayMs" in doc else DEFAULT_MAX_DELAY_MS,
            _number(doc, "multiplier") if "multiplier" in doc else DEFAULT_MULTIPLIER,
        )

    @classmethod
    def from_config(cls, config: BrokerConfig) -> RedeliveryBackoffPolicy:
        return cls(
            config.redelivery_backoff_min_ms,
            config.redelivery_backoff_max_ms,
            config.redelivery_backoff_multiplier,
        )


def _whole(doc: dict[str, Any], key: str) -> int:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a whole number of milliseconds, not {value!r}")
    return value


def _number(doc: dict[str, Any], key: str) -> float:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, not {value!r}")
    return float(value)


class BackoffPolicies:
    """The broker's redelivery backoff policies: its default, each namespace's (a file
    per namespace under the data directory, read once) and each topic's (its
    metadata). Loop thread only."""

    def __init__(self, default: RedeliveryBackoffPolicy, data_dir: Path) -> None:
        self.default = default
        self._data_dir = Path(data_dir)
        self._namespaces: dict[str, NamespacePolicies] = {}

    # ------------------------------------------------------------ namespaces

    def _namespace_file(self, tenant: str, namespace: str) -> NamespacePolicies:
        key = f"{tenant}/{namespace}"
        policies = self._namespaces.get(key)
        if policies is None:
            path = NamespacePolicies.path_for(self._data_dir, tenant, namespace)
            policies = self._namespaces[key] = NamespacePolicies.load(path)
        return policies

    def namespace_policy(self, tenant: str, namespace: str) -> RedeliveryBackoffPolicy | None:
        """The namespace's own policy, if it has one."""
        return _parse(self._namespace_file(tenant, namespace).policies.get(POLICY_NAME))

    def set_namespace_policy(
        self, tenant: str, namespace: str, policy: RedeliveryBackoffPolicy | None
    ) -> None:
        """Set (None: remove) the namespace's policy, persisted before it applies. The
        file is read afresh first: other policies (deduplication, schemas, ...) share it
        and write it through their own routes, and their keys must survive this write."""
        self.forget_namespace(tenant, namespace)
        current = self._namespace_file(tenant, namespace)
        policies = dict(current.policies)
        if policy is None:
            policies.pop(POLICY_NAME, None)
        else:
            policies[POLICY_NAME] = policy.to_json()
        updated = NamespacePolicies(current.path, policies)
        updated.save()  # a failed write changes nothing
        self._namespaces[f"{tenant}/{namespace}"] = updated

    def forget_namespace(self, tenant: str, namespace: str) -> None:
        """Drop the cached policies of a namespace (changed or deleted elsewhere)."""
        self._namespaces.pop(f"{tenant}/{namespace}", None)

    # ------------------------------------------------------------ topics

    @staticmethod
    def topic_policy(topic: TopicView) -> RedeliveryBackoffPolicy | None:
        """The topic's own policy, if it has one."""
        return _parse(topic.metadata.policies.get(POLICY_NAME))

    @staticmethod
    def set_topic_policy(topic: TopicView, policy: RedeliveryBackoffPolicy | None) -> None:
        """Set (None: remove) the topic's policy, persisted in its metadata."""
        topic.metadata.set_policy(POLICY_NAME, None if policy is None else policy.to_json())

    # ------------------------------------------------------------ in force

    def applied(self, topic: TopicView) -> RedeliveryBackoffPolicy:
        """The policy in force on ``topic``: its own, else its namespace's, else the
        broker's (which may be off)."""
        return in_force(
            self.topic_policy(topic), topic.topic_name, self.namespace_policy, self.default
        )

    def effective(self, topic: TopicView) -> RedeliveryBackoffPolicy | None:
        """The policy to hold ``topic``'s redeliveries by; None when it is off."""
        policy = self.applied(topic)
        return policy if policy.enabled else None


def _parse(doc: object) -> RedeliveryBackoffPolicy | None:
    # Files hold what the admin API validated; a hand-edited bad one counts as unset
    # rather than failing every redelivery on the topic.
    if doc is None:
        return None
    try:
        return RedeliveryBackoffPolicy.from_json(doc)
    except ValueError:
        return None
