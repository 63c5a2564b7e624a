"""Run every benchmark in this folder in turn (``make bench``); each prints its own table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["broker_throughput.py", "client_throughput.py", "rpc.py"]


def main() -> int:
    failures = 0
    for name in BENCHMARKS:
        script = HERE / name
        if not script.exists():
            continue
        print(f"=== {name}", flush=True)
        failures += subprocess.call([sys.executable, str(script)]) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
