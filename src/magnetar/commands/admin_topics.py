"""``magnetar admin topics`` and ``magnetar admin schemas``, in pulsar-admin's command
and flag spellings (magnetar's older ones kept as aliases: ``--message-id`` beside
``--messageId``, ``--expire-time`` beside ``--expireTime``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from magnetar.commands.admin_spec import (
    ACTIONS,
    NAMESPACE,
    PARTITIONS,
    ROLE,
    SUBSCRIPTION,
    TOPIC,
    Call,
    Command,
    UsageError,
    arg,
    message_id,
    namespace_path,
    publish_time_ms,
    split,
    subscription,
    topics,
)
from magnetar.commands.connection import topic_path
from magnetar.commands.units import seconds

FORCE = arg("-f", "--force", action="store_true",
            help="also with producers or consumers attached")
MESSAGE_ID = ("-m", "--messageId", "--message-id")


def _reset_cursor(a: argparse.Namespace) -> Call:
    if a.message_id:
        return ("POST", subscription(a) + "/resetcursor", message_id(a.message_id), None)
    if a.time is None:
        raise UsageError("reset-cursor needs --time (3h, 100m or ms since the epoch) "
                         "or --messageId")
    return ("POST", f"{subscription(a)}/resetcursor/{publish_time_ms(a.time)}", None, None)


def _create_subscription(a: argparse.Namespace) -> Call:
    body = message_id(a.message_id) if a.message_id not in ("latest", "earliest") else None
    query = {"messageId": a.message_id} if body is None else None
    return ("PUT", subscription(a), body, query)


def _still_running(a: argparse.Namespace, answer: Any) -> bool:
    return bool(a.wait_complete) and isinstance(answer, dict) and answer.get("status") == "RUNNING"


def _schemas(name: str) -> str:
    """``/admin/v2/schemas/{tenant}/{namespace}/{topic}`` (schemas have no domain)."""
    return "/admin/v2/schemas/" + topic_path(name).split("/", 2)[2]


def _schema_get(a: argparse.Namespace) -> Call:
    if a.all_version:
        return ("GET", _schemas(a.topic) + "/schemas", None, None)
    if a.version is not None:
        return ("GET", f"{_schemas(a.topic)}/schema/{a.version}", None, None)
    return ("GET", _schemas(a.topic) + "/schema", None, None)


def _schema_upload(a: argparse.Namespace) -> Call:
    """The file is Pulsar's: ``{"type": "AVRO", "schema": "...", "properties": {}}``."""
    try:
        body = json.loads(Path(a.filename).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {a.filename}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{a.filename} is not JSON: {exc}") from None
    return ("POST", _schemas(a.topic) + "/schema", body, None)


TOPIC_COMMANDS = [
    Command("list", "list a namespace's topics",
            lambda a: ("GET", "/admin/v2/persistent" + namespace_path(a.namespace),
                       None, None), [NAMESPACE]),
    Command("list-partitioned-topics", "list a namespace's partitioned topics",
            lambda a: ("GET", "/admin/v2/persistent" + namespace_path(a.namespace)
                       + "/partitioned", None, None), [NAMESPACE]),
    Command("create", "create a non-partitioned topic",
            lambda a: ("PUT", topics(a.topic), None, None), [TOPIC]),
    Command("delete", "delete a topic",
            lambda a: ("DELETE", topics(a.topic), None, {"force": "true"} if a.force else None),
            [TOPIC, FORCE]),
    Command("create-partitioned-topic", "create a partitioned topic",
            lambda a: ("PUT", topics(a.topic) + "/partitions", a.partitions, None),
            [TOPIC, PARTITIONS]),
    Command("update-partitioned-topic", "grow a partitioned topic's partitions",
            lambda a: ("POST", topics(a.topic) + "/partitions", a.partitions, None),
            [TOPIC, PARTITIONS]),
    Command("get-partitioned-topic-metadata", "a topic's partition count",
            lambda a: ("GET", topics(a.topic) + "/partitions", None, None), [TOPIC]),
    Command("delete-partitioned-topic", "delete a partitioned topic",
            lambda a: ("DELETE", topics(a.topic) + "/partitions", None,
                       {"force": "true"} if a.force else None), [TOPIC, FORCE]),
    Command("stats", "a topic's stats",
            lambda a: ("GET", topics(a.topic) + "/stats", None, None), [TOPIC]),
    Command("partitioned-stats", "a partitioned topic's stats",
            lambda a: ("GET", topics(a.topic) + "/partitioned-stats", None,
                       {"perPartition": "true"} if a.per_partition else None),
            [TOPIC, arg("--per-partition", action="store_true")]),
    Command("stats-internal", "a topic's ledgers and cursors",
            lambda a: ("GET", topics(a.topic) + "/internalStats", None, None), [TOPIC]),
    Command("last-message-id", "the id of a topic's last message",
            lambda a: ("GET", topics(a.topic) + "/lastMessageId", None, None), [TOPIC]),
    Command("examine-message", "one message of a topic by position",
            lambda a: ("GET", topics(a.topic) + "/examinemessage", None,
                       {"initialPosition": a.initial_position,
                        "messagePosition": str(a.message_position)}),
            [TOPIC, arg("-i", "--initialPosition", "--initial-position", dest="initial_position",
                        default="latest", type=str.lower, choices=["latest", "earliest"]),
             arg("-m", "--messagePosition", "--message-position", dest="message_position",
                 type=int, default=1)], binary=True),
    Command("peek-messages", "the n-th message of a subscription's backlog",
            lambda a: ("GET", f"{subscription(a)}/position/{a.count}", None, None),
            [TOPIC, SUBSCRIPTION, arg("-n", "--count", type=int, default=1,
                                      help="position in the backlog (1: the first)")],
            binary=True),
    Command("unload", "unload a topic (clients reconnect)",
            lambda a: ("PUT", topics(a.topic) + "/unload", None, None), [TOPIC]),
    Command("terminate", "terminate a topic (no more publishes)",
            lambda a: ("POST", topics(a.topic) + "/terminate", None, None), [TOPIC]),
    Command("compact", "compact a topic (keep each key's last message)",
            lambda a: ("PUT", topics(a.topic) + "/compaction", None, None), [TOPIC]),
    Command("compaction-status", "the last compaction's status",
            lambda a: ("GET", topics(a.topic) + "/compaction", None, None),
            [TOPIC, arg("-w", "--wait-complete", action="store_true",
                        help="wait while it runs")], again=_still_running),
    Command("permissions", "the roles granted on a topic (and its namespace)",
            lambda a: ("GET", topics(a.topic) + "/permissions", None, None), [TOPIC]),
    Command("grant-permission", "grant a role actions on a topic",
            lambda a: ("POST", f"{topics(a.topic)}/permissions/{quote(a.role, safe='')}",
                       split(a.actions), None), [TOPIC, ROLE, ACTIONS]),
    Command("revoke-permission", "revoke a role's actions on a topic",
            lambda a: ("DELETE", f"{topics(a.topic)}/permissions/{quote(a.role, safe='')}",
                       None, None), [TOPIC, ROLE]),
    Command("subscriptions", "list a topic's subscriptions",
            lambda a: ("GET", topics(a.topic) + "/subscriptions", None, None), [TOPIC]),
    Command("create-subscription", "create a subscription at a position",
            _create_subscription,
            [TOPIC, SUBSCRIPTION,
             arg(*MESSAGE_ID, dest="message_id", default="latest",
                 help="latest, earliest or ledgerId:entryId (default: latest)")]),
    Command("unsubscribe", "delete a subscription",
            lambda a: ("DELETE", subscription(a), None, {"force": "true"} if a.force else None),
            [TOPIC, SUBSCRIPTION, FORCE]),
    Command("skip", "skip n messages of a subscription",
            lambda a: ("POST", f"{subscription(a)}/skip/{a.count}", None, None),
            [TOPIC, SUBSCRIPTION, arg("-n", "--count", type=int, required=True)]),
    Command("clear-backlog", "skip all of a subscription's backlog",
            lambda a: ("POST", f"{subscription(a)}/skip_all", None, None),
            [TOPIC, SUBSCRIPTION]),
    Command("reset-cursor", "move a subscription to a time or a message id",
            _reset_cursor,
            [TOPIC, SUBSCRIPTION,
             arg("-t", "--time", help="that long ago (100m, 3h, 2d, 5w), or a bare number: "
                                      "a publish time in ms since the epoch"),
             arg(*MESSAGE_ID, dest="message_id", help="ledgerId:entryId")]),
    Command("expire-messages", "expire a subscription's messages older than a time",
            lambda a: ("POST", f"{subscription(a)}/expireMessages/{a.expire_time}", None, None),
            [TOPIC, SUBSCRIPTION,
             arg("-t", "--expireTime", "--expire-time", dest="expire_time", type=seconds,
                 required=True, help="seconds, or 100m, 3h, 2d")]),
]

SCHEMA_COMMANDS = [
    Command("get", "a topic's schema (the latest, --version V or --all-version)",
            _schema_get,
            [TOPIC, arg("-v", "--version", type=int, help="this version"),
             arg("-a", "--all-version", action="store_true", help="every version")]),
    Command("upload", "register a schema from a file", _schema_upload,
            [TOPIC, arg("-f", "--filename", required=True,
                        help='a JSON file: {"type": "AVRO", "schema": "...", '
                             '"properties": {}}')]),
    Command("delete", "delete a topic's schema",
            lambda a: ("DELETE", _schemas(a.topic) + "/schema", None,
                       {"force": "true"} if a.force else None),
            [TOPIC, arg("-f", "--force", action="store_true")]),
]
