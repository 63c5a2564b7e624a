"""A data directory the broker may not write in (a root-owned directory bind-mounted
into the image, whose user is uid 10001) stops `magnetar serve` with one line that
names the process's uid and gid and the directory's owner: what to chown it to."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.testing.embedded import free_port

# Imports first, then the user of the image (when run as root): the interpreter's own
# files need not be readable by that user.
SERVE_AS = """
import os, sys
from magnetar.cli import _parser, main
_parser()  # the subcommands import their modules lazily: before the uid changes
uid, gid = int(sys.argv[1]), int(sys.argv[2])
if os.geteuid() != uid:
    os.setgid(gid)
    os.setuid(uid)
sys.exit(main(["serve", "--data-dir", sys.argv[3], "--port", sys.argv[4],
               "--admin-port", sys.argv[5], "--log-format", "text"]))
"""


@pytest.fixture
def directory() -> Iterator[Path]:
    # Not under pytest's tmp_path: its parents are private to this user.
    path = Path(tempfile.mkdtemp(prefix="magnetar-owner-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in (path, *path.iterdir()):
            p.chmod(0o755)
        subprocess.run(["rm", "-rf", str(path)], check=True)


def test_a_data_dir_it_cannot_write_names_the_uid(directory: Path) -> None:
    data = directory / "data"
    data.mkdir()
    if os.geteuid() == 0:  # as the image's user meets a root-owned bind mount
        uid = gid = 10001
        data.chmod(0o755)
    else:
        uid, gid = os.geteuid(), os.getegid()
        data.chmod(0o555)
    done = subprocess.run(
        [sys.executable, "-c", SERVE_AS, str(uid), str(gid), str(data), str(free_port()),
         str(free_port())], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    owner = data.stat()
    assert line.startswith(f"magnetar: bad configuration: data_dir = {data}: not writable")
    assert f"by this process (uid {uid}, gid {gid})" in line
    assert f"owned by uid {owner.st_uid}, gid {owner.st_gid}" in line
    assert f"chown it to {uid}:{gid}" in line
