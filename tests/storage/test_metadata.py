"""TopicMetadata: defaults, atomic save, round trip with binary schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar.storage import SchemaEntry, StorageCorruption, TopicMetadata


def test_missing_file_gives_defaults_without_saving(tmp_path: Path) -> None:
    path = tmp_path / "topic" / "metadata.json"
    metadata = TopicMetadata.load(path)
    assert metadata.path == path
    assert (metadata.ledger_id, metadata.topic_epoch) == (0, 0)
    assert metadata.properties == {}
    assert metadata.schemas == []
    assert metadata.latest_schema() is None
    assert not path.exists()


def test_round_trip_with_binary_schema_data(tmp_path: Path) -> None:
    path = tmp_path / "topic" / "metadata.json"
    metadata = TopicMetadata.load(path)
    metadata.ledger_id = 42
    metadata.topic_epoch = 7
    metadata.properties["retention"] = "1h"
    binary = bytes(range(256)) + b"\x00\xff"
    metadata.schemas.append(SchemaEntry(0, 2, "s", b'{"type":"record"}', {"k": "v"}))
    metadata.schemas.append(SchemaEntry(1, 16, "s", binary, {}))
    metadata.save()
    assert not list(path.parent.glob("*.tmp"))
    json.loads(path.read_bytes())  # plain JSON on disk

    loaded = TopicMetadata.load(path)
    assert loaded == metadata
    assert loaded.schemas[1].data == binary
    latest = loaded.latest_schema()
    assert latest is not None and latest.version == 1

    loaded.topic_epoch += 1
    loaded.save()
    assert TopicMetadata.load(path).topic_epoch == 8


def test_damaged_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text('{"schemas": [{"version": 0}]}')
    with pytest.raises(StorageCorruption, match=r"metadata\.json"):
        TopicMetadata.load(path)
