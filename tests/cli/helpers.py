"""Running ``magnetar`` as a subprocess, as a script would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MAGNETAR = [sys.executable, "-m", "magnetar"]
TIMEOUT = 90  # generous: the machine is shared


def magnetar(*args: str, stdin: str | None = None,
             timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MAGNETAR, *args], capture_output=True, text=True, input=stdin,
                          timeout=timeout, cwd=Path(__file__).parent)
