"""``magnetar healthcheck``: exit 0 when the broker's health route answers 200, else 1
with one line on stderr (what Docker's HEALTHCHECK and compose's ``service_healthy``
want).

Where the admin server is, first found: ``--admin-url``; the ready file a running
``magnetar serve`` wrote (``--ready-file``, or the ``ready_file`` setting from the
sources ``serve`` reads: ``--config FILE`` and ``MAGNETAR_READY_FILE``), which holds
the admin port the broker was actually given, whether by flag, variable or file;
else ``admin_host``/``admin_port`` from those sources.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from magnetar import ready_file
from magnetar.broker.config import ConfigError, load_config

HEALTH = "/admin/v2/brokers/health"


def add_healthcheck_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "healthcheck",
        help="exit 0 if a broker serves (its admin health route answers), else 1",
        description=__doc__.split("\n\n", 1)[1].replace("``", "") if __doc__ else None,
    )
    parser.add_argument("--admin-url", help="the admin server, e.g. http://127.0.0.1:8080")
    parser.add_argument("--ready-file", type=Path,
                        help="the ready file of the broker (its ready_file setting)")
    parser.add_argument("--config", type=Path, help="the broker's TOML configuration file")
    parser.add_argument("--token", help="a token, when the broker authenticates")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the answer (default: 5)")


def admin_url(args: argparse.Namespace) -> str:
    """Where to ask; ValueError (or OSError, ConfigError) says why there is nowhere."""
    if args.admin_url:
        return str(args.admin_url)
    path = args.ready_file
    config = None
    if path is None:
        config = load_config(args.config)
        path = Path(config.ready_file) if config.ready_file else None
    if path is not None:
        try:
            ready = ready_file.read(path)
        except FileNotFoundError:
            raise ValueError(f"no ready file {path}: the broker is not serving") from None
        if ready.admin_url is None:
            raise ValueError(f"the broker of {path} has no admin server (admin_port off)")
        return ready.admin_url
    assert config is not None
    if config.admin_port is None:
        raise ValueError("admin_port is off: no health route to ask")
    return f"http://{ready_file.local_host(config.admin_host)}:{config.admin_port}"


def run_healthcheck(args: argparse.Namespace) -> int:
    from magnetar.commands.rest import AdminError, RestClient

    try:
        url = admin_url(args)
        RestClient(url, args.token, args.timeout).call("GET", HEALTH)
    except ConfigError as exc:
        print(f"magnetar healthcheck: bad configuration: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError, AdminError) as exc:
        print(f"magnetar healthcheck: unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0
