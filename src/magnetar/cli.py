"""The ``magnetar`` command: ``magnetar serve`` runs a broker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from magnetar import __version__
from magnetar.broker.config import BrokerConfig, load_config
from magnetar.broker.service import BrokerService
from magnetar.logs import configure_logging

log = logging.getLogger("magnetar")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magnetar",
        description="A broker that speaks the Apache Pulsar binary protocol.",
    )
    parser.add_argument("--version", action="version", version=f"magnetar {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run a broker",
        description=(
            "Run a broker. Settings come from (lowest first) defaults, --config FILE "
            "(TOML, keys as below with underscores, optionally under [broker]), "
            "MAGNETAR_<SETTING> environment variables, then these flags."
        ),
    )
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="Pulsar protocol port (default 6650)")
    serve.add_argument("--advertised-address", help="host[:port] given to clients in lookups")
    serve.add_argument("--admin-port", help="admin HTTP port (default 8080; 'off' disables)")
    serve.add_argument("--data-dir", type=Path, help="where topics are stored (default ./data)")
    serve.add_argument(
        "--sync-policy",
        choices=["always", "interval"],
        help="'always': fsync before each send receipt, with group commit (default); "
        "'interval': fsync every --sync-interval seconds",
    )
    serve.add_argument("--sync-interval", type=float, help="seconds between fsyncs (interval)")
    serve.add_argument("--max-message-size", type=int, help="bytes (default 5 MiB)")
    serve.add_argument(
        "--idle-poll-us",
        type=int,
        help="microseconds to keep polling after input before sleeping: lower latency "
        "for some CPU while traffic trickles (default 200; 0 disables)",
    )
    serve.add_argument(
        "--default-partitions", type=int, help="partitions of auto-created topics (default 0)"
    )
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    serve.add_argument("--log-format", choices=["json", "text"], help="log line format")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    keys = [
        "host",
        "port",
        "advertised_address",
        "admin_port",
        "data_dir",
        "sync_policy",
        "sync_interval",
        "max_message_size",
        "idle_poll_us",
        "default_partitions",
        "log_level",
        "log_format",
    ]
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


async def serve(config: BrokerConfig) -> None:
    service = BrokerService(config)
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"magnetar {__version__} ready on {config.service_url}", file=sys.stderr, flush=True)
    await stop.wait()
    log.info("shutting down: flushing topics")
    await service.stop()


def _run(coro: object) -> None:
    try:
        import uvloop

        uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        asyncio.run(coro)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        try:
            config = load_config(args.config, overrides=_overrides(args))
        except (ValueError, OSError) as exc:
            print(f"magnetar: bad configuration: {exc}", file=sys.stderr)
            return 2
        configure_logging(config.log_level, config.log_format)
        _run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
