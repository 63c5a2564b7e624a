"""Running ``magnetar`` as a subprocess, as a script would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

MAGNETAR = [sys.executable, "-m", "magnetar"]
TIMEOUT = 90  # generous: the machine is shared


def magnetar(*args: str, stdin: str | None = None, timeout: float = TIMEOUT,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``env`` adds to (or, with a value "", removes from) this process's environment."""
    merged = {k: v for k, v in {**os.environ, **(env or {})}.items() if v != ""}
    return subprocess.run([*MAGNETAR, *args], capture_output=True, text=True, input=stdin,
                          timeout=timeout, cwd=Path(__file__).parent, env=merged)


def popen(*args: str) -> subprocess.Popen[str]:
    """``magnetar`` running, its stdout and stderr pipes to read from."""
    return subprocess.Popen([*MAGNETAR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=Path(__file__).parent)
