"""The ready file (setting ``ready_file``): where a running ``magnetar serve`` listens.

``serve`` writes it once the broker and its admin server serve, and removes it when it
stops cleanly; a broker killed leaves it behind, naming ports nobody answers on. It
holds the addresses the broker actually took, however they were given (flag,
``MAGNETAR_*`` variable or configuration file), so ``magnetar healthcheck`` finds the
admin port without reading those sources again, and cannot read them differently.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ready:
    pid: int
    service_url: str  # pulsar://, on an address this machine reaches
    admin_url: str | None  # http://, None when the admin server is off


def local_host(host: str) -> str:
    """An address of this machine that reaches a socket bound to ``host``: a wildcard
    bind is reached on the loopback."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def write(path: Path, ready: Ready) -> None:
    """Replace ``path`` whole (a reader never sees half a file)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(ready.__dict__) + "\n")
    os.replace(temporary, path)


def read(path: Path) -> Ready:
    """OSError if there is no such file, ValueError if it is not a ready file."""
    doc = json.loads(path.read_text())
    try:
        return Ready(int(doc["pid"]), str(doc["service_url"]),
                     None if doc["admin_url"] is None else str(doc["admin_url"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a ready file ({exc!r})") from None


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def of(host: str, port: int, admin_host: str, admin_port: int | None) -> Ready:
    """The ready file of a broker listening on host:port, its admin server (if any) on
    admin_host:admin_port."""
    admin = None if admin_port is None else f"http://{local_host(admin_host)}:{admin_port}"
    return Ready(os.getpid(), f"pulsar://{local_host(host)}:{port}", admin)
