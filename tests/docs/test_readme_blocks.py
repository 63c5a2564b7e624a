"""Every code block of README.md, run in document order against one broker on free
ports, as a new user following the README top to bottom would run them.

Which blocks run and why the others do not: tests/docs/readme_blocks.py. A block
that fails is a README bug: fix the README, not this test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.testing import EmbeddedBroker

from .readme_blocks import (
    Block,
    parse_blocks,
    read_readme,
    rewrite_addresses,
    shell_commands,
    skip_reason,
)

ROOT = Path(__file__).resolve().parents[2]
BLOCK_TIMEOUT = 180  # a hang guard only; a block takes seconds
# curl as a user reads its answer: an HTTP error status fails the block.
SHELL_PRELUDE = """set -e -o pipefail
curl() { command curl -sS --fail-with-body "$@"; echo; }
"""


def _env(broker: EmbeddedBroker) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)  # the venv's `magnetar` command
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["MAGNETAR_SERVICE_URL"] = broker.service_url
    assert broker.admin_url is not None
    env["MAGNETAR_ADMIN_URL"] = broker.admin_url
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    return env


def _command(block: Block, text: str, work: Path) -> list[str]:
    if block.lang == "python":
        is_test = "\ndef test_" in "\n" + text
        path = work / (f"test_block_{block.line}.py" if is_test else f"block_{block.line}.py")
        path.write_text(text, encoding="utf-8")
        if is_test:
            return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        return [sys.executable, str(path)]
    script = work / f"block_{block.line}.sh"
    script.write_text(SHELL_PRELUDE + shell_commands(text), encoding="utf-8")
    return ["bash", str(script)]


def run_block(block: Block, broker: EmbeddedBroker, work: Path) -> str | None:
    """None when the block ran cleanly, else what it printed."""
    assert broker.admin_port is not None
    text = rewrite_addresses(block.text, broker.port, broker.admin_port)
    if block.file_name:
        (work / block.file_name).write_text(text, encoding="utf-8")
        return None
    try:
        done = subprocess.run(
            _command(block, text, work),
            cwd=work,
            env=_env(broker),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        return f"no end within {BLOCK_TIMEOUT} s\n{exc.stdout!r}\n{exc.stderr!r}"
    if done.returncode == 0:
        return None
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_every_block_runs_in_order_or_says_why_not(tmp_path: Path) -> None:
    blocks = read_readme(ROOT)
    ran: list[Block] = []
    skipped: list[tuple[Block, str]] = []
    failures: list[str] = []
    with EmbeddedBroker(mode="subprocess", admin=True, data_dir=tmp_path / "data") as broker:
        for block in blocks:
            lang_known = block.lang in {"python", "sh", "bash", "", "json", "toml", "text"}
            if not lang_known and not block.not_run:
                failures.append(f"{block}: a language the test cannot run, and no reason")
                continue
            reason = skip_reason(block)
            if reason is not None:
                skipped.append((block, reason))
                continue
            ran.append(block)
            failed = run_block(block, broker, tmp_path)
            if failed is not None:
                failures.append(f"{block} failed: {failed}")
    summary = f"{len(ran)} blocks ran, {len(skipped)} skipped with a reason"
    print(summary)
    for block, reason in skipped:
        print(f"  skipped {block}: {reason}")
    assert not failures, summary + "\n\n" + "\n\n".join(failures)
    assert len(ran) >= 20, summary  # the README's examples, not only its set-up


def test_markers_and_set_up_lines_decide_what_runs() -> None:
    blocks = parse_blocks(
        "text\n<!-- not run: needs a second cluster -->\n\n```sh\nmagnetar mirror\n```\n"
        "<!-- file: c.toml -->\n```toml\na = 1\n```\n"
        "```sh\nmake run\npip install x\nmagnetar serve --port 1 \\\n  --x 2\ncurl -s u\n```\n"
        "```sh\ndocker build .\n# a comment\n```\n"
        "  ```\n  curl a\n  ```\n"
        "```json\n{}\n```\n"
    )
    assert [b.line for b in blocks] == [4, 8, 11, 18, 22, 25]
    mirror, conf, mixed, docker, indented, data = blocks
    assert skip_reason(mirror) == "needs a second cluster"
    assert skip_reason(conf) is None and conf.file_name == "c.toml"
    assert skip_reason(mixed) is None and shell_commands(mixed.text) == "curl -s u\n"
    assert skip_reason(docker) is not None and "set-up" in str(skip_reason(docker))
    assert indented.text == "curl a\n" and skip_reason(indented) is None
    assert skip_reason(data) == "json is data, not a program"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pulsar://127.0.0.1:6650", "pulsar://127.0.0.1:7001"),
        ("http://localhost:8080/admin", "http://127.0.0.1:7002/admin"),
        ("curl localhost:8080/x", "curl 127.0.0.1:7002/x"),
    ],
)
def test_readme_addresses_point_at_the_test_broker(text: str, expected: str) -> None:
    assert rewrite_addresses(text, 7001, 7002) == expected
