"""A PySpark data source for magnetar (and Pulsar) topics: ``format("pulsar")``.

```
import magnetar.spark
magnetar.spark.register(spark)
df = (spark.read.format("pulsar")
      .option("service.url", "pulsar://127.0.0.1:6650")
      .option("topic", "events").load())
```

Batch and streaming reads and writes, built on :mod:`magnetar.client` (no JVM jar).
Options and columns follow StreamNative's pulsar-spark connector; see the README's
Spark section for the list.  Needs the ``spark`` extra (PySpark, PyArrow).
"""

from __future__ import annotations

from typing import Any

from magnetar.spark.positions import id_to_json
from magnetar.spark.source import PulsarDataSource

__all__ = ["PulsarDataSource", "id_to_json", "register"]


def register(spark: Any) -> None:
    """Make ``format("pulsar")`` available in the session ``spark``."""
    spark.dataSource.register(PulsarDataSource)
