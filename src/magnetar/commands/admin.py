"""``magnetar admin``: Pulsar's admin REST calls grouped as ``pulsar-admin`` groups them
(``clusters``, ``brokers``, ``tenants``, ``namespaces`` with their policies and
permissions, ``topics`` with their subscriptions, permissions and compaction,
``schemas``), printing the broker's JSON, or a table with ``--table``. The connection
options (``--admin-url``, ``--token``, ``--conf``, ...) go anywhere on the line.

Exit codes: 0 done, 1 the broker refused (its reason on stderr) or could not be
reached, 2 bad usage (argparse's own code).
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from typing import Any

from magnetar.commands.admin_namespaces import GROUPS as NAMESPACE_GROUPS
from magnetar.commands.admin_spec import Command
from magnetar.commands.admin_topics import SCHEMA_COMMANDS, TOPIC_COMMANDS
from magnetar.commands.connection import DEFAULT_ADMIN_URL, Settings, add_connection_options
from magnetar.commands.output import print_result
from magnetar.commands.rest import AdminError, Response

GROUPS: dict[str, tuple[str, list[Command]]] = {
    **NAMESPACE_GROUPS,
    "topics": ("topics, their subscriptions, permissions and compaction", TOPIC_COMMANDS),
    "schemas": ("topics' schemas", SCHEMA_COMMANDS),
}


def _options(parser: argparse.ArgumentParser) -> None:
    """The options every level of ``magnetar admin`` takes (absent unless given)."""
    add_connection_options(parser, admin=True)
    parser.add_argument("--table", action="store_true", default=argparse.SUPPRESS,
                        help="print a table, not JSON")


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
    _options(admin)
    groups = admin.add_subparsers(dest="admin_group", required=True, metavar="GROUP")
    for group, (text, group_commands) in GROUPS.items():
        parser = groups.add_parser(group, help=text, description=f"Admin calls on {text}.")
        _options(parser)
        actions = parser.add_subparsers(dest="admin_action", required=True, metavar="COMMAND")
        for command in group_commands:
            sub = actions.add_parser(command.name, help=command.help, aliases=command.aliases,
                                     description=command.help[0].upper() + command.help[1:] + ".")
            for names, options in command.args:
                sub.add_argument(*names, **options)
            _options(sub)
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
    method, path, body, query = command.call(args)  # a UsageError is exit code 2
    client = Settings.of(args).rest_client()
    try:
        while True:
            answer = client.call(method, path, body, query)
            result = _message(answer) if command.binary else answer.json()
            if command.again is None or not command.again(args, result):
                break
            time.sleep(1.0)
    except AdminError as exc:
        print(f"magnetar admin: {exc}", file=sys.stderr)
        return 1
    if result is None:
        return 0  # Pulsar answers 204 to most changes
    print_result(result, table=getattr(args, "table", False))
    return 0


__all__ = ["DEFAULT_ADMIN_URL", "add_admin_parser", "run_admin"]
