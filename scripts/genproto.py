"""Regenerate src/magnetar/protocol/generated from proto/ (``make proto``).

protoc's .pyi names the enum value ``Schema.Type.None`` as an attribute, which is
not valid Python; that line is dropped from the stub (the runtime module keeps
the value, reachable as ``pb.Schema.Type.Value("None")``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "src" / "magnetar" / "protocol" / "generated"
PROTO = "magnetar_pulsar.proto"
_KEYWORD_ATTR = re.compile(r"^\s+None: .*\n", re.MULTILINE)


def generate(out_dir: Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(PROTO_DIR / PROTO),
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    stub = out_dir / PROTO.replace(".proto", "_pb2.pyi")
    stub.write_text(_KEYWORD_ATTR.sub("", stub.read_text()))


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DIR)
