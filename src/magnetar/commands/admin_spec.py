"""How ``magnetar admin`` commands are described: a :class:`Command` turns its parsed
arguments into one REST call; the path helpers and argument types they share."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from magnetar.commands.connection import CliError, topic_path
from magnetar.commands.units import has_unit, seconds

# method, path, JSON body, query
Call = tuple[str, str, Any, dict[str, str] | None]
Arg = tuple[tuple[str, ...], dict[str, Any]]


class UsageError(CliError):
    """Bad usage found after parsing: one line, exit code 2."""


@dataclass
class Command:
    name: str
    help: str
    call: Callable[[argparse.Namespace], Call]
    args: list[Arg] = field(default_factory=list)
    binary: bool = False  # the answer is a message (peek, examine): headers and payload
    aliases: tuple[str, ...] = ()  # magnetar's older spellings
    # Asked again (a second apart) while this is true of the answer: compaction-status -w.
    again: Callable[[argparse.Namespace, Any], bool] | None = None


def arg(*names: str, **options: Any) -> Arg:
    return names, options


def topics(name: str) -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}/{topic}``."""
    return "/admin/v2" + topic_path(name)


def namespace_path(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"namespace {name!r} is not tenant/namespace")
    return "/" + "/".join(quote(p) for p in parts)


def namespaces(name: str) -> str:
    return "/admin/v2/namespaces" + namespace_path(name)


def subscription(a: argparse.Namespace) -> str:
    return f"{topics(a.topic)}/subscription/{quote(a.subscription, safe='')}"


def message_id(text: str) -> dict[str, int]:
    """``ledger:entry`` (Pulsar's CLI form) as the REST body Pulsar takes."""
    try:
        ledger, entry = (int(part) for part in text.split(":")[:2])
    except ValueError:
        raise UsageError(f"message id {text!r} is not ledgerId:entryId") from None
    return {"ledgerId": ledger, "entryId": entry}


def split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def publish_time_ms(text: str, now: float | None = None) -> int:
    """reset-cursor's ``--time``: Pulsar's relative form (``100m``, ``3h``, ``2d``:
    that long ago), or a bare number as magnetar has read it, ms since the epoch."""
    if has_unit(text):
        now = time.time() if now is None else now
        return int(now * 1000) - seconds(text) * 1000
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"time {text!r} is neither 100m/3h/2d nor ms since the epoch") from None


TOPIC = arg("topic", help="topic name, e.g. persistent://public/default/t or t")
NAMESPACE = arg("namespace", help="tenant/namespace")
SUBSCRIPTION = arg("-s", "--subscription", required=True, help="subscription name")
PARTITIONS = arg("-p", "--partitions", type=int, required=True, help="number of partitions")
ROLE = arg("--role", required=True, help="the role (a token's subject)")
ACTIONS = arg("--actions", required=True, help="comma-separated: produce,consume")
