"""examples/spark_pipeline.py on a Spark standalone cluster: a master and two workers
started from the installed PySpark on loopback, so the source and the sink run in
executor processes that are not the driver and share nothing with it but what Spark
pickles to them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from magnetar.client import EARLIEST
from magnetar.client.sync import Client
from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from generate_events import make_events, send  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def wait_for(check: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise TimeoutError(f"{what} not within {timeout}s")


def master_state(ui_port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return json.load(r)  # type: ignore[no-any-return]
    except OSError:
        return {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A standalone master and two one-core workers (separate JVMs) on 127.0.0.1."""
    work = Path(tmp_path_factory.mktemp("spark-cluster"))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(work / "logs"))
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *args: str) -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        procs.append(subprocess.Popen([str(spark_class()), *args], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
               "--port", str(port), "--webui-port", str(ui))
        wait_for(lambda: master_state(ui).get("status") == "ALIVE", "the master")
        workers = []
        for i in range(2):
            directory = work / f"worker-{i}"
            directory.mkdir()
            workers.append(directory)
            launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", url,
                   "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                   "--webui-port", str(free_port()), "--work-dir", str(directory))
        wait_for(lambda: sum(w.get("state") == "ALIVE"
                             for w in master_state(ui).get("workers", [])) == 2, "two workers")
        yield {"url": url, "workers": workers, "logs": work}
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def expected_windows(events: list[dict[str, Any]], watermark_ms: int) -> dict[tuple[int, str],
                                                                           tuple[int, int, float]]:
    """The final one-minute windows per user: those the watermark (newest event time
    less its delay) has passed once every event is in."""
    newest = max(e["ts"] for e in events)
    windows: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for e in events:
        w = windows[(e["ts"] // 60_000 * 60_000, e["user"])]
        w[0] += 1
        w[1] += e["action"] == "buy"
        w[2] += e["amount"]
    return {k: (int(v[0]), int(v[1]), round(v[2], 2)) for k, v in windows.items()
            if k[0] + 60_000 <= newest - watermark_ms}


def test_pipeline_on_a_standalone_cluster(cluster: dict[str, Any], tmp_path: Path) -> None:
    events = make_events(3000, users=5, minutes=8, late=0.0, seed=11)
    out = tmp_path / "out"
    with EmbeddedBroker() as broker:
        asyncio.run(send(broker.service_url, "events", events, lambda n: None))
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        run = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "spark_pipeline.py"),
             "--master", cluster["url"], "--service-url", broker.service_url,
             "--output", "user-activity", "--watermark", "1 minute",
             "--parquet", str(out / "parquet"), "--checkpoint", str(out / "checkpoints")],
            env=env, capture_output=True, timeout=600, check=False,
        )
        assert run.returncode == 0, run.stderr.decode()[-5000:]

        client = Client(broker.service_url)
        try:
            reader = client.create_reader("user-activity", EARLIEST)
            published = []
            while reader.has_message_available():
                published.append(json.loads(reader.read_next(30).value))
        finally:
            client.close()

    expected = expected_windows(events, watermark_ms=60_000)
    assert len(expected) >= 5 * 5  # several minutes of five users are final
    table = pq.read_table(out / "parquet").to_pylist()
    assert len(table) == len(expected)
    assert_windows(table, expected)
    assert len(published) == len(expected)
    assert_windows(published, expected)
    # Both workers ran an executor for the application (its tasks ran there).
    for worker in cluster["workers"]:
        apps = [p for p in worker.iterdir() if p.name.startswith("app-")]
        assert apps and any(p.is_dir() for app in apps for p in app.iterdir()), worker


def assert_windows(rows: list[dict[str, Any]],
                   expected: dict[tuple[int, str], tuple[int, int, float]]) -> None:
    got = {(_ms(r["window_start"]), r["user"]): r for r in rows}
    assert got.keys() == expected.keys()
    for key, (events, purchases, amount) in expected.items():
        row = got[key]
        assert (row["events"], row["purchases"]) == (events, purchases), key
        assert row["amount"] == pytest.approx(amount, abs=0.011), key  # summing order


def _ms(value: Any) -> int:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return round(value.timestamp() * 1000)

