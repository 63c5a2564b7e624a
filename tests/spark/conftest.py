"""Fixtures of the Spark tests: one local Spark session and one broker per module."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.testing import EmbeddedBroker

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java (17)", allow_module_level=True)


def spark_session(master: str = "local[2]", **conf: str) -> Any:
    from pyspark.sql import SparkSession

    import magnetar.spark

    # Spark's Python workers must run this interpreter (the venv's), not `python3`.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName("magnetar-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(session)
    return session


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A broker of this module's own, on a data directory that survives a restart
    (a restart opens a new ledger on every topic)."""
    data = Path(tmp_path_factory.mktemp("spark-broker"))
    with EmbeddedBroker(data_dir=data, admin=True) as broker:
        yield broker
