"""A namespace's policies as Pulsar's ``Policies`` JSON: the body of
``PUT /admin/v2/namespaces/{tenant}/{namespace}`` (the namespace is created with them)
and the answer of ``GET`` on the same path.

Policies magnetar implements per namespace, by Pulsar's key (kept in the namespace's
policies file under the name its own route uses)::

    auth_policies                  namespace_auth, destination_auth (grants)
    retention_policies             {"retentionTimeInMinutes", "retentionSizeInMB"}
    message_ttl_in_seconds         seconds
    backlog_quota_map              {"destination_storage"|"message_age": quota}
    deduplicationEnabled           true/false
    schema_compatibility_strategy  BACKWARD, FULL, ... (UNDEFINED: unset)
    compaction_threshold           bytes
    redeliveryBackoff              magnetar's own (PIP-106), as its route takes it

``replication_clusters`` may name only ``standalone`` and ``bundles`` is taken and
ignored (a namespace here is one bundle). Pulsar's admin clients send a whole Policies
object, defaults included, so any other field is tolerated when it holds Pulsar's
default or nothing (null, false, "", [], {}, 0 for a ``max_*`` limit, the defaults in
``_DEFAULTS``); one set to anything else is a policy magnetar does not implement and
the request is refused with 400 naming it, rather than creating a namespace without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magnetar.broker.auth.authorization import POLICY_NAME as AUTH
from magnetar.broker.auth.authorization import check_actions
from magnetar.broker.features.compaction_service import POLICY_NAME as COMPACTION
from magnetar.broker.features.schema_compat import Strategy
from magnetar.broker.features.schemas import POLICY_NAME as SCHEMA_STRATEGY
from magnetar.broker.policies.dedup_policy import POLICY_NAME as DEDUP
from magnetar.broker.policies.namespaces import CLUSTER
from magnetar.broker.policies.redelivery_backoff import POLICY_NAME as BACKOFF
from magnetar.broker.policies.redelivery_backoff import RedeliveryBackoffPolicy
from magnetar.broker.policies.retention_policies import (
    BACKLOG_QUOTAS,
    DESTINATION_STORAGE,
    MESSAGE_TTL,
    RETENTION,
    BacklogQuota,
    Retention,
    check_quota_type,
    check_ttl,
    quota_fits_retention,
)
from magnetar.protocol.topic_name import InvalidTopicName, TopicName


class PolicyRefused(ValueError):
    """The body holds a policy that is malformed (``status`` 400) or not implemented
    (400), or values Pulsar refuses together (412); the message names the field."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# Pulsar's defaults of fields magnetar does not implement, where they are not empty.
_DEFAULTS: dict[str, object] = {
    "offload_threshold": -1,
    "offload_threshold_in_seconds": -1,
    "schema_auto_update_compatibility_strategy": "Full",
    "subscription_auth_mode": "None",
    "is_allow_auto_update_schema": True,  # schemas here always update automatically
}
_IGNORED = ("bundles",)


def _auth(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    if value.get("subscription_auth_roles"):
        raise PolicyRefused("auth_policies.subscription_auth_roles is not implemented by magnetar")
    namespace_auth = value.get("namespace_auth") or {}
    topics = value.get("destination_auth") or {}
    if not isinstance(namespace_auth, dict) or not isinstance(topics, dict):
        raise ValueError("namespace_auth and destination_auth must be JSON objects")
    out: dict[str, Any] = {"namespace_auth": _grants(namespace_auth), "destination_auth": {}}
    for topic, grants in topics.items():
        try:
            TopicName.parse(topic)
        except InvalidTopicName as exc:
            raise ValueError(f"destination_auth: {exc}") from None
        if not isinstance(grants, dict):
            raise ValueError(f"destination_auth[{topic!r}] must be a JSON object")
        out["destination_auth"][topic] = _grants(grants)
    return out


def _grants(doc: dict[Any, Any]) -> dict[str, list[str]]:
    out = {}
    for role, actions in doc.items():
        if not isinstance(actions, list):
            raise ValueError(f"the actions of {role!r} must be a JSON list")
        out[str(role)] = check_actions(actions)
    return out


def _dedup(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _quotas(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object of quotas by type")
    return {check_quota_type(kind): BacklogQuota.from_json(quota).to_json()
            for kind, quota in value.items()}


def _strategy(value: Any) -> str | None:
    if not isinstance(value, str):
        raise ValueError("must be a strategy's name")
    strategy = Strategy.parse(value)
    return None if strategy is Strategy.UNDEFINED else strategy.value


def _threshold(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("must be a number of bytes, 0 or more")
    return value


# Pulsar's key -> (the key in magnetar's file, the check giving the value kept).
IMPLEMENTED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "auth_policies": (AUTH, _auth),
    "retention_policies": (RETENTION, lambda v: Retention.from_json(v).to_json()),
    "message_ttl_in_seconds": (MESSAGE_TTL, check_ttl),
    "backlog_quota_map": (BACKLOG_QUOTAS, _quotas),
    "deduplicationEnabled": (DEDUP, _dedup),
    "schema_compatibility_strategy": (SCHEMA_STRATEGY, _strategy),
    "compaction_threshold": (COMPACTION, _threshold),
    # magnetar's own (PIP-106 broker-side backoff), by its route's name, as GET gives it
    BACKOFF: (BACKOFF, lambda v: RedeliveryBackoffPolicy.from_json(v).to_json()),
}


def initial_policies(body: dict[str, Any]) -> dict[str, Any]:
    """The policies file's content for a namespace created with Pulsar's Policies
    ``body``; PolicyRefused names the first field that cannot be kept."""
    kept: dict[str, Any] = {}
    for key, value in body.items():
        if key in IMPLEMENTED:
            if value is None:
                continue
            name, check = IMPLEMENTED[key]
            try:
                checked = check(value)
            except PolicyRefused:
                raise
            except ValueError as exc:
                raise PolicyRefused(f"{key}: {exc}") from None
            if checked is not None and checked != {}:
                kept[name] = checked
        elif key == "replication_clusters":
            listed = value if isinstance(value, list) else [] if value is None else [value]
            others = [c for c in listed if c != CLUSTER]
            if others:
                raise PolicyRefused(f"replication_clusters: replication to {others} is not "
                                    f"implemented by magnetar (its one cluster is {CLUSTER})")
        elif key not in _IGNORED and not _is_default(key, value):
            raise PolicyRefused(f"{key}: this policy is not implemented by magnetar "
                                f"(only its default is accepted, not {value!r})")
    _check_quotas_fit(kept)
    return kept


def _is_default(key: str, value: object) -> bool:
    if value is None:
        return True
    if key in _DEFAULTS:
        return value is _DEFAULTS[key] or (
            not isinstance(value, bool) and value == _DEFAULTS[key]
        )
    if value is False or value in ("", [], {}):
        return True
    return key.startswith("max_") and value == 0  # Pulsar's "no limit"


def _check_quotas_fit(kept: dict[str, Any]) -> None:
    """Pulsar's rule between a backlog quota and the retention it goes with."""
    if RETENTION not in kept or BACKLOG_QUOTAS not in kept:
        return
    retention = Retention.from_json(kept[RETENTION])
    quota = kept[BACKLOG_QUOTAS].get(DESTINATION_STORAGE)
    if quota is not None and not quota_fits_retention(BacklogQuota.from_json(quota), retention):
        raise PolicyRefused("backlog_quota_map: Backlog Quota exceeds configured retention "
                            "quota for namespace", 412)


def pulsar_policies(stored: dict[str, Any]) -> dict[str, Any]:
    """GET's answer: the namespace's policies by Pulsar's keys (Pulsar's empty values
    where a policy is not set); magnetar's own policies keep their names."""
    auth = stored.get(AUTH) or {}
    out: dict[str, Any] = {
        "auth_policies": {
            "namespace_auth": auth.get("namespace_auth", {}),
            "destination_auth": auth.get("destination_auth", {}),
            "subscription_auth_roles": {},
        },
        "replication_clusters": [CLUSTER],
        "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        "backlog_quota_map": stored.get(BACKLOG_QUOTAS) or {},
        "schema_compatibility_strategy": stored.get(SCHEMA_STRATEGY, Strategy.UNDEFINED.value),
        "is_allow_auto_update_schema": True,
    }
    for key in ("retention_policies", "message_ttl_in_seconds", "deduplicationEnabled",
                "compaction_threshold"):
        out[key] = stored.get(IMPLEMENTED[key][0])
    known = {name for name, _ in IMPLEMENTED.values()}
    out.update({key: value for key, value in stored.items() if key not in known})
    return out
