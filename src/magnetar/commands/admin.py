"""``magnetar admin``: Pulsar's admin REST calls grouped as ``pulsar-admin`` groups them
(``clusters``, ``tenants``, ``namespaces``, ``topics`` with its subscription commands,
``brokers``), printing the broker's JSON, or a table with ``--table``.

Exit codes: 0 done, 1 the broker refused (its reason on stderr) or could not be
reached, 2 bad usage (argparse's own code).
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from magnetar.commands.output import print_result
from magnetar.commands.rest import AdminError, Response, RestClient

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"

# method, path, JSON body, query
Call = tuple[str, str, Any, dict[str, str] | None]


def _topic_path(name: str) -> str:
    """``/{domain}/{tenant}/{namespace}/{topic}`` of a full or short topic name."""
    from magnetar.broker.topic_name import InvalidTopicName, TopicName

    try:
        parsed = TopicName.parse(name)
    except InvalidTopicName as exc:
        raise UsageError(str(exc)) from None
    return (f"/{parsed.domain}/{quote(parsed.tenant)}/{quote(parsed.namespace)}/"
            f"{quote(parsed.local, safe='')}")


def _namespace_path(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"namespace {name!r} is not tenant/namespace")
    return "/" + "/".join(quote(p) for p in parts)


def _topics(topic: str) -> str:
    return "/admin/v2" + _topic_path(topic)


def _sub(args: argparse.Namespace) -> str:
    return f"{_topics(args.topic)}/subscription/{quote(args.subscription, safe='')}"


def _message_id(text: str) -> dict[str, int]:
    """``ledger:entry`` (Pulsar's CLI form) as the REST body Pulsar takes."""
    try:
        ledger, entry = (int(part) for part in text.split(":")[:2])
    except ValueError:
        raise UsageError(f"message id {text!r} is not ledgerId:entryId") from None
    return {"ledgerId": ledger, "entryId": entry}


def _split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


class UsageError(Exception):
    pass


@dataclass
class Command:
    name: str
    help: str
    call: Callable[[argparse.Namespace], Call]
    args: list[tuple[tuple[str, ...], dict[str, Any]]] = field(default_factory=list)
    binary: bool = False  # the answer is a message (peek, examine): headers and payload


def _arg(*names: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return names, options


TOPIC = _arg("topic", help="topic name, e.g. persistent://public/default/t or t")
NAMESPACE = _arg("namespace", help="tenant/namespace")
SUBSCRIPTION = _arg("-s", "--subscription", required=True, help="subscription name")
PARTITIONS = _arg("-p", "--partitions", type=int, required=True, help="number of partitions")


# A tenant's admin roles may administer its namespaces and topics (as in Pulsar).
TENANT_INFO = [
    _arg("tenant"),
    _arg("-r", "--admin-roles", help="comma-separated roles that administer the tenant"),
    _arg("-c", "--allowed-clusters", help="comma-separated (default: standalone)"),
]


def _tenant_info(a: argparse.Namespace) -> dict[str, list[str]]:
    return {"adminRoles": _split(a.admin_roles),
            "allowedClusters": _split(a.allowed_clusters) or ["standalone"]}


def _reset_cursor(a: argparse.Namespace) -> Call:
    if a.message_id:
        return ("POST", _sub(a) + "/resetcursor", _message_id(a.message_id), None)
    if a.time is None:
        raise UsageError("reset-cursor needs --time (ms since the epoch) or --message-id")
    return ("POST", f"{_sub(a)}/resetcursor/{a.time}", None, None)


def _create_subscription(a: argparse.Namespace) -> Call:
    body = _message_id(a.message_id) if a.message_id not in ("latest", "earliest") else None
    query = {"messageId": a.message_id} if body is None else None
    return ("PUT", _sub(a), body, query)


GROUPS: dict[str, tuple[str, list[Command]]] = {
    "clusters": ("the broker's cluster", [
        Command("list", "list clusters", lambda a: ("GET", "/admin/v2/clusters", None, None)),
    ]),
    "brokers": ("broker health", [
        Command("healthcheck", "check the broker is serving",
                lambda a: ("GET", "/admin/v2/brokers/health", None, None)),
    ]),
    "tenants": ("tenants", [
        Command("list", "list tenants", lambda a: ("GET", "/admin/v2/tenants", None, None)),
        Command("get", "a tenant's admin roles and allowed clusters",
                lambda a: ("GET", f"/admin/v2/tenants/{quote(a.tenant)}", None, None),
                [_arg("tenant")]),
        Command("create", "create a tenant",
                lambda a: ("PUT", f"/admin/v2/tenants/{quote(a.tenant)}", _tenant_info(a),
                           None), TENANT_INFO),
        Command("update", "replace a tenant's admin roles and allowed clusters",
                lambda a: ("POST", f"/admin/v2/tenants/{quote(a.tenant)}", _tenant_info(a),
                           None), TENANT_INFO),
        Command("delete", "delete a tenant (it must have no namespaces)",
                lambda a: ("DELETE", f"/admin/v2/tenants/{quote(a.tenant)}", None, None),
                [_arg("tenant")]),
    ]),
    "namespaces": ("namespaces", [
        Command("list", "list a tenant's namespaces",
                lambda a: ("GET", f"/admin/v2/namespaces/{quote(a.tenant)}", None, None),
                [_arg("tenant")]),
        Command("create", "create a namespace",
                lambda a: ("PUT", "/admin/v2/namespaces" + _namespace_path(a.namespace),
                           None, None), [NAMESPACE]),
        Command("delete", "delete a namespace (it must have no topics)",
                lambda a: ("DELETE", "/admin/v2/namespaces" + _namespace_path(a.namespace),
                           None, None), [NAMESPACE]),
        Command("policies", "a namespace's policies",
                lambda a: ("GET", "/admin/v2/namespaces" + _namespace_path(a.namespace),
                           None, None), [NAMESPACE]),
    ]),
    "topics": ("topics and their subscriptions", [
        Command("list", "list a namespace's topics",
                lambda a: ("GET", "/admin/v2/persistent" + _namespace_path(a.namespace),
                           None, None), [NAMESPACE]),
        Command("list-partitioned-topics", "list a namespace's partitioned topics",
                lambda a: ("GET", "/admin/v2/persistent" + _namespace_path(a.namespace)
                           + "/partitioned", None, None), [NAMESPACE]),
        Command("create", "create a non-partitioned topic",
                lambda a: ("PUT", _topics(a.topic), None, None), [TOPIC]),
        Command("delete", "delete a topic",
                lambda a: ("DELETE", _topics(a.topic), None,
                           {"force": "true"} if a.force else None),
                [TOPIC, _arg("-f", "--force", action="store_true",
                             help="also with producers or consumers attached")]),
        Command("create-partitioned-topic", "create a partitioned topic",
                lambda a: ("PUT", _topics(a.topic) + "/partitions", a.partitions, None),
                [TOPIC, PARTITIONS]),
        Command("update-partitioned-topic", "grow a partitioned topic's partitions",
                lambda a: ("POST", _topics(a.topic) + "/partitions", a.partitions, None),
                [TOPIC, PARTITIONS]),
        Command("get-partitioned-topic-metadata", "a topic's partition count",
                lambda a: ("GET", _topics(a.topic) + "/partitions", None, None), [TOPIC]),
        Command("delete-partitioned-topic", "delete a partitioned topic",
                lambda a: ("DELETE", _topics(a.topic) + "/partitions", None, None), [TOPIC]),
        Command("stats", "a topic's stats",
                lambda a: ("GET", _topics(a.topic) + "/stats", None, None), [TOPIC]),
        Command("partitioned-stats", "a partitioned topic's stats",
                lambda a: ("GET", _topics(a.topic) + "/partitioned-stats", None,
                           {"perPartition": "true"} if a.per_partition else None),
                [TOPIC, _arg("--per-partition", action="store_true")]),
        Command("stats-internal", "a topic's ledgers and cursors",
                lambda a: ("GET", _topics(a.topic) + "/internalStats", None, None), [TOPIC]),
        Command("last-message-id", "the id of a topic's last message",
                lambda a: ("GET", _topics(a.topic) + "/lastMessageId", None, None), [TOPIC]),
        Command("examine-message", "one message of a topic by position",
                lambda a: ("GET", _topics(a.topic) + "/examinemessage", None,
                           {"initialPosition": a.initial_position,
                            "messagePosition": str(a.message_position)}),
                [TOPIC, _arg("-i", "--initial-position", default="latest",
                             choices=["latest", "earliest"]),
                 _arg("-m", "--message-position", type=int, default=1)], binary=True),
        Command("peek-messages", "the n-th message of a subscription's backlog",
                lambda a: ("GET", f"{_sub(a)}/position/{a.count}", None, None),
                [TOPIC, SUBSCRIPTION, _arg("-n", "--count", type=int, default=1,
                                           help="position in the backlog (1: the first)")],
                binary=True),
        Command("unload", "unload a topic (clients reconnect)",
                lambda a: ("PUT", _topics(a.topic) + "/unload", None, None), [TOPIC]),
        Command("terminate", "terminate a topic (no more publishes)",
                lambda a: ("POST", _topics(a.topic) + "/terminate", None, None), [TOPIC]),
        Command("subscriptions", "list a topic's subscriptions",
                lambda a: ("GET", _topics(a.topic) + "/subscriptions", None, None), [TOPIC]),
        Command("create-subscription", "create a subscription at a position",
                _create_subscription,
                [TOPIC, SUBSCRIPTION,
                 _arg("-m", "--message-id", default="latest",
                      help="latest, earliest or ledgerId:entryId (default: latest)")]),
        Command("unsubscribe", "delete a subscription",
                lambda a: ("DELETE", _sub(a), None, {"force": "true"} if a.force else None),
                [TOPIC, SUBSCRIPTION, _arg("-f", "--force", action="store_true")]),
        Command("skip", "skip n messages of a subscription",
                lambda a: ("POST", f"{_sub(a)}/skip/{a.count}", None, None),
                [TOPIC, SUBSCRIPTION, _arg("-n", "--count", type=int, required=True)]),
        Command("clear-backlog", "skip all of a subscription's backlog",
                lambda a: ("POST", f"{_sub(a)}/skip_all", None, None), [TOPIC, SUBSCRIPTION]),
        Command("reset-cursor", "move a subscription to a time or a message id",
                _reset_cursor,
                [TOPIC, SUBSCRIPTION,
                 _arg("-t", "--time", type=int, help="publish time, ms since the epoch"),
                 _arg("-m", "--message-id", help="ledgerId:entryId")]),
        Command("expire-messages", "expire a subscription's messages older than t seconds",
                lambda a: ("POST", f"{_sub(a)}/expireMessages/{a.expire_time}", None, None),
                [TOPIC, SUBSCRIPTION, _arg("-t", "--expire-time", type=int, required=True,
                                           help="seconds")]),
    ]),
}


def add_admin_parser(commands: Any) -> None:
    admin = commands.add_parser(
        "admin",
        help="admin REST calls, like pulsar-admin",
        description=(
            "Call a broker's admin REST API (Pulsar's /admin/v2 paths) and print the "
            "answer as JSON, or as a table with --table. Exit code 0: done; 1: the "
            "broker refused (its reason on stderr) or could not be reached; 2: bad usage."
        ),
    )
    admin.add_argument("--admin-url", default=DEFAULT_ADMIN_URL,
                       help=f"the broker's admin URL (default: {DEFAULT_ADMIN_URL})")
    admin.add_argument("--token", help="a token for token authentication")
    admin.add_argument("--table", action="store_true", help="print a table, not JSON")
    groups = admin.add_subparsers(dest="admin_group", required=True, metavar="GROUP")
    for group, (text, group_commands) in GROUPS.items():
        parser = groups.add_parser(group, help=text, description=f"Admin calls on {text}.")
        actions = parser.add_subparsers(dest="admin_action", required=True, metavar="COMMAND")
        for command in group_commands:
            sub = actions.add_parser(command.name, help=command.help,
                                     description=command.help[0].upper() + command.help[1:] + ".")
            for names, options in command.args:
                sub.add_argument(*names, **options)
            sub.set_defaults(admin_command=command)


def _message(answer: Response) -> dict[str, Any]:
    """A message answer (peek, examine): its X-Pulsar-* headers and its payload."""
    headers = {k: v for k, v in answer.headers.items() if k.lower().startswith("x-pulsar")}
    try:
        payload: str = answer.body.decode()
        encoding = "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(answer.body).decode(), "base64"
    return {"headers": headers, "payload": payload, "payloadEncoding": encoding}


def run_admin(args: argparse.Namespace) -> int:
    command: Command = args.admin_command
    try:
        method, path, body, query = command.call(args)
    except UsageError as exc:
        print(f"magnetar admin: {exc}", file=sys.stderr)
        return 2
    client = RestClient(args.admin_url, token=args.token)
    try:
        answer = client.call(method, path, body, query)
    except AdminError as exc:
        print(f"magnetar admin: {exc}", file=sys.stderr)
        return 1
    result = _message(answer) if command.binary else answer.json()
    if result is None:
        return 0  # Pulsar answers 204 to most changes
    print_result(result, table=args.table)
    return 0


__all__ = ["DEFAULT_ADMIN_URL", "add_admin_parser", "run_admin"]
