"""README.md's fenced code blocks, in document order, and the rule that decides
how the README test treats each one.

A block is *run* or *skipped*, and a skip always has a stated reason, so a block
nobody thought about fails the test instead of being ignored:

- ``<!-- not run: REASON -->`` on the line before a block (blank lines between are
  allowed) skips it with that reason;
- ``<!-- file: NAME -->`` writes the block to NAME in the working directory (a
  configuration file a later block reads); it counts as run;
- blocks in a data or listing language (``json``, ``toml``, ``text``) are not
  programs: skipped as such;
- ``python`` blocks run in a child interpreter; a block that defines ``test_``
  functions runs under pytest;
- ``sh`` blocks and blocks with no language run in bash, line by line except the
  *set-up* lines (``SETUP_PREFIXES``: installing, building, Docker, starting a
  broker), for which the test's broker stands in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Lines that set up rather than use a broker: the test has its own venv and broker.
SETUP_PREFIXES = (
    "make ",
    "docker ",
    "pip install",
    "magnetar serve",
)
DATA_LANGUAGES = frozenset({"json", "toml", "text"})
SHELL_LANGUAGES = frozenset({"sh", "bash", ""})

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.+?)\s*-->\s*$")
_FILE = re.compile(r"^\s*<!--\s*file:\s*(?P<name>\S+)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None = None  # the stated reason, when marked
    file_name: str | None = None

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang or 'no language'})"


def parse_blocks(markdown: str) -> list[Block]:
    """Every fenced block in order, with the marker comment that precedes it."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = len(opening["indent"])
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        not_run, file_name = _marker_before(lines, i)
        blocks.append(
            Block(i + 1, opening["lang"].lower(), "\n".join(body) + "\n", not_run, file_name)
        )
        i = j + 1
    return blocks


def _marker_before(lines: list[str], fence: int) -> tuple[str | None, str | None]:
    k = fence - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0:
        return None, None
    if m := _NOT_RUN.match(lines[k]):
        return m["reason"], None
    if m := _FILE.match(lines[k]):
        return None, m["name"]
    return None, None


def skip_reason(block: Block) -> str | None:
    """Why a block is not run, or None when it runs."""
    if block.not_run:
        return block.not_run
    if block.file_name:
        return None
    if block.lang in DATA_LANGUAGES:
        return f"{block.lang} is data, not a program"
    if block.lang == "python" or block.lang in SHELL_LANGUAGES:
        if block.lang != "python" and not _has_command(shell_commands(block.text)):
            return "set-up lines only (" + ", ".join(p.strip() for p in SETUP_PREFIXES) + ")"
        return None
    return None  # an unknown language: the test fails on it


def _has_command(script: str) -> bool:
    return any(ln.strip() and not ln.lstrip().startswith("#") for ln in script.splitlines())


def shell_commands(text: str) -> str:
    """The block's shell text without its set-up commands (a continued line with them)."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if skipping:
            skipping = line.rstrip().endswith("\\")
            continue
        if line.lstrip().startswith(SETUP_PREFIXES):
            skipping = line.rstrip().endswith("\\")
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def rewrite_addresses(text: str, broker_port: int, admin_port: int) -> str:
    """The README's 6650/8080 addresses pointed at the test broker's ports."""
    for host in ("127.0.0.1", "localhost"):
        text = text.replace(f"{host}:6650", f"127.0.0.1:{broker_port}")
        text = text.replace(f"{host}:8080", f"127.0.0.1:{admin_port}")
    return text


def read_readme(root: Path) -> list[Block]:
    return parse_blocks((root / "README.md").read_text(encoding="utf-8"))
