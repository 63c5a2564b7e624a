"""``magnetar admin`` groups ``clusters``, ``brokers``, ``tenants`` and ``namespaces``
(with the namespace policies and permissions), in pulsar-admin's spellings."""

from __future__ import annotations

import argparse
from urllib.parse import quote

from magnetar.commands.admin_spec import (
    ACTIONS,
    NAMESPACE,
    ROLE,
    Call,
    Command,
    UsageError,
    arg,
    namespaces,
    split,
)
from magnetar.commands.units import seconds, size_bytes

# A tenant's admin roles may administer its namespaces and topics (as in Pulsar).
TENANT_INFO = [
    arg("tenant"),
    arg("-r", "--admin-roles", help="comma-separated roles that administer the tenant"),
    arg("-c", "--allowed-clusters", help="comma-separated (default: standalone)"),
]
QUOTA_TYPES = ("destination_storage", "message_age")
QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
STRATEGIES = ("UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD",
              "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")


def _tenant_info(a: argparse.Namespace) -> dict[str, list[str]]:
    return {"adminRoles": split(a.admin_roles),
            "allowedClusters": split(a.allowed_clusters) or ["standalone"]}


def _retention(a: argparse.Namespace) -> Call:
    """Pulsar's CLI: a time (seconds unless 100m/3h/2d) and a size (bytes unless
    10M/1G), -1 unlimited; the REST body is in minutes and MB."""
    minutes = -1 if a.time == -1 else a.time // 60
    mb = -1 if a.size == -1 else a.size // (1024 * 1024)
    body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}
    return ("POST", namespaces(a.namespace) + "/retention", body, None)


def _backlog_quota(a: argparse.Namespace) -> Call:
    body: dict[str, object] = {"policy": a.policy}
    if a.limit is not None:
        body["limitSize"] = a.limit
    if a.limitTime is not None:
        body["limitTime"] = a.limitTime
    return ("POST", namespaces(a.namespace) + "/backlogQuota", body,
            {"backlogQuotaType": a.type})


def _dedup(a: argparse.Namespace) -> Call:
    if a.enable == a.disable:
        raise UsageError("set-deduplication needs one of --enable (-e) or --disable (-d)")
    return ("POST", namespaces(a.namespace) + "/deduplication", bool(a.enable), None)


def _policy(name: str, path: str, text: str) -> list[Command]:
    """get-NAME and remove-NAME of the policy at ``path``."""
    return [
        Command(f"get-{name}", f"a namespace's {text}",
                lambda a: ("GET", namespaces(a.namespace) + path, None, None), [NAMESPACE]),
        Command(f"remove-{name}", f"remove a namespace's {text}",
                lambda a: ("DELETE", namespaces(a.namespace) + path, None, None), [NAMESPACE]),
    ]


TYPE = arg("-t", "--type", "--backlogQuotaType", dest="type", choices=QUOTA_TYPES,
           type=str.lower, default="destination_storage",
           help="destination_storage (default) or message_age")

NAMESPACE_COMMANDS = [
    Command("list", "list a tenant's namespaces",
            lambda a: ("GET", f"/admin/v2/namespaces/{quote(a.tenant)}", None, None),
            [arg("tenant")]),
    Command("create", "create a namespace",
            lambda a: ("PUT", namespaces(a.namespace), None, None), [NAMESPACE]),
    Command("delete", "delete a namespace (it must have no topics)",
            lambda a: ("DELETE", namespaces(a.namespace), None, None), [NAMESPACE]),
    Command("policies", "a namespace's policies",
            lambda a: ("GET", namespaces(a.namespace), None, None), [NAMESPACE]),
    Command("set-retention", "set a namespace's retention",
            _retention,
            [NAMESPACE,
             arg("-t", "--time", type=seconds, required=True,
                 help="how long: seconds, or 100m, 3h, 2d, 5w; -1 unlimited"),
             arg("-s", "--size", type=size_bytes, required=True,
                 help="how much: bytes, or 10M, 1G; -1 unlimited")]),
    *_policy("retention", "/retention", "retention"),
    Command("set-message-ttl", "set a namespace's message TTL",
            lambda a: ("POST", namespaces(a.namespace) + "/messageTTL", a.messageTTL, None),
            [NAMESPACE, arg("-ttl", "--messageTTL", "--message-ttl", dest="messageTTL",
                            type=seconds, required=True,
                            help="seconds, or 100m, 3h, 2d; 0 turns TTL off")]),
    *_policy("message-ttl", "/messageTTL", "message TTL in seconds"),
    Command("set-backlog-quota", "set a namespace's backlog quota",
            _backlog_quota,
            [NAMESPACE,
             arg("-l", "--limit", type=size_bytes, help="size limit: bytes, or 10M, 2G"),
             arg("-lt", "--limitTime", "--limit-time", dest="limitTime", type=seconds,
                 help="age limit (message_age): seconds, or 100m, 3h"),
             arg("-p", "--policy", required=True, choices=QUOTA_POLICIES, type=str.lower),
             TYPE]),
    Command("get-backlog-quotas", "a namespace's backlog quotas",
            lambda a: ("GET", namespaces(a.namespace) + "/backlogQuotaMap", None, None),
            [NAMESPACE]),
    Command("remove-backlog-quota", "remove a namespace's backlog quota",
            lambda a: ("DELETE", namespaces(a.namespace) + "/backlogQuota", None,
                       {"backlogQuotaType": a.type}), [NAMESPACE, TYPE]),
    Command("set-deduplication", "turn a namespace's deduplication on or off", _dedup,
            [NAMESPACE, arg("-e", "--enable", action="store_true"),
             arg("-d", "--disable", action="store_true")]),
    *_policy("deduplication", "/deduplication", "deduplication switch"),
    Command("set-compaction-threshold", "compact a namespace's topics past a backlog size",
            lambda a: ("POST", namespaces(a.namespace) + "/compactionThreshold",
                       a.threshold, None),
            [NAMESPACE, arg("-t", "--threshold", type=size_bytes, required=True,
                            help="bytes, or 10M, 1G; 0 turns it off")]),
    *_policy("compaction-threshold", "/compactionThreshold", "compaction threshold"),
    Command("set-schema-compatibility-strategy", "set a namespace's schema strategy",
            lambda a: ("PUT", namespaces(a.namespace) + "/schemaCompatibilityStrategy",
                       a.compatibility, None),
            [NAMESPACE, arg("-c", "--compatibility", required=True, type=str.upper,
                            choices=STRATEGIES)]),
    Command("get-schema-compatibility-strategy", "a namespace's schema strategy",
            lambda a: ("GET", namespaces(a.namespace) + "/schemaCompatibilityStrategy",
                       None, None), [NAMESPACE]),
    Command("permissions", "the roles granted on a namespace and their actions",
            lambda a: ("GET", namespaces(a.namespace) + "/permissions", None, None),
            [NAMESPACE]),
    Command("grant-permission", "grant a role actions on a namespace",
            lambda a: ("POST", f"{namespaces(a.namespace)}/permissions/{quote(a.role, safe='')}",
                       split(a.actions), None), [NAMESPACE, ROLE, ACTIONS]),
    Command("revoke-permission", "revoke a role's actions on a namespace",
            lambda a: ("DELETE",
                       f"{namespaces(a.namespace)}/permissions/{quote(a.role, safe='')}",
                       None, None), [NAMESPACE, ROLE]),
]

GROUPS: dict[str, tuple[str, list[Command]]] = {
    "clusters": ("the broker's cluster", [
        Command("list", "list clusters", lambda a: ("GET", "/admin/v2/clusters", None, None)),
        Command("get", "a cluster's URLs",
                lambda a: ("GET", f"/admin/v2/clusters/{quote(a.cluster)}", None, None),
                [arg("cluster")]),
    ]),
    "brokers": ("broker health", [
        Command("healthcheck", "check the broker is serving",
                lambda a: ("GET", "/admin/v2/brokers/health", None, None)),
    ]),
    "tenants": ("tenants", [
        Command("list", "list tenants", lambda a: ("GET", "/admin/v2/tenants", None, None)),
        Command("get", "a tenant's admin roles and allowed clusters",
                lambda a: ("GET", f"/admin/v2/tenants/{quote(a.tenant)}", None, None),
                [arg("tenant")]),
        Command("create", "create a tenant",
                lambda a: ("PUT", f"/admin/v2/tenants/{quote(a.tenant)}", _tenant_info(a),
                           None), TENANT_INFO),
        Command("update", "replace a tenant's admin roles and allowed clusters",
                lambda a: ("POST", f"/admin/v2/tenants/{quote(a.tenant)}", _tenant_info(a),
                           None), TENANT_INFO),
        Command("delete", "delete a tenant (it must have no namespaces)",
                lambda a: ("DELETE", f"/admin/v2/tenants/{quote(a.tenant)}", None, None),
                [arg("tenant")]),
    ]),
    "namespaces": ("namespaces and their policies", NAMESPACE_COMMANDS),
}
