"""Store: directory layout, topic listing, partitioned-topic registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.storage import LedgerConfig, Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "data", LedgerConfig())


def test_topic_dir_layout(store: Store) -> None:
    root = store.root
    assert store.topic_dir("persistent://public/default/my-topic") == (
        root / "persistent" / "public" / "default" / "my-topic")
    assert store.topic_dir("persistent://public/default/my-topic-partition-3") == (
        root / "persistent" / "public" / "default" / "my-topic-partition-3")
    odd = store.topic_dir("persistent://t/ns/a/b c")
    assert odd == root / "persistent" / "t" / "ns" / "a%2Fb%20c"
    # No way out of the namespace directory.
    assert store.topic_dir("persistent://t/ns/..").name == "%2E%2E"
    assert store.topic_dir("persistent://t/ns/.").name == "%2E"


@pytest.mark.parametrize("bad", [
    "public/default/x", "persistent://public/default", "persistent://public/default/",
    "persistent://../default/x", "persistent://public/a b/x", "http://public/default/x",
])
def test_bad_topic_names(store: Store, bad: str) -> None:
    with pytest.raises(ValueError):
        store.topic_dir(bad)


async def test_ledger_and_metadata_live_in_the_topic_dir(store: Store) -> None:
    topic = "persistent://public/default/t1"
    ledger = store.open_ledger(topic)
    assert ledger.directory == store.topic_dir(topic)
    ledger.append(b"hello")
    await ledger.close()
    metadata = store.topic_metadata(topic)
    metadata.topic_epoch = 3
    metadata.save()
    assert metadata.path == store.topic_dir(topic) / "metadata.json"
    reopened = store.open_ledger(topic)
    assert reopened.read(0) == b"hello"
    assert store.topic_metadata(topic).topic_epoch == 3
    await reopened.close()


async def test_list_and_delete_topics(store: Store) -> None:
    names = [
        "persistent://public/default/a",
        "persistent://public/default/odd/name ü%",
        "persistent://public/default/a-partition-0",
        "persistent://other/ns/..",
        "non-persistent://public/default/np",
    ]
    assert store.list_topics() == []
    for name in names:
        await store.open_ledger(name).close()
    store.topic_metadata("persistent://t2/ns/only-metadata").save()
    assert store.list_topics() == sorted([*names, "persistent://t2/ns/only-metadata"])
    store.delete_topic("persistent://public/default/a")
    store.delete_topic("persistent://public/default/never-existed")
    assert "persistent://public/default/a" not in store.list_topics()
    assert "persistent://public/default/a-partition-0" in store.list_topics()


def test_partitioned_registry(store: Store) -> None:
    assert store.list_partitioned() == {}
    assert store.get_partitions("persistent://public/default/p") is None
    store.set_partitions("persistent://public/default/p", 4)
    store.set_partitions("persistent://public/default/with/slash", 2)
    store.set_partitions("non-persistent://public/other/q", 1)
    assert store.get_partitions("persistent://public/default/p") == 4
    assert (store.root / "partitioned" / "public" / "default" / "p.json").exists()
    store.set_partitions("persistent://public/default/p", 8)  # update in place
    assert store.list_partitioned() == {
        "persistent://public/default/p": 8,
        "persistent://public/default/with/slash": 2,
        "non-persistent://public/other/q": 1,
    }
    assert not list((store.root / "partitioned").rglob("*.tmp"))
    store.delete_partitioned("persistent://public/default/p")
    store.delete_partitioned("persistent://public/default/p")  # idempotent
    assert store.get_partitions("persistent://public/default/p") is None
    assert list(store.list_partitioned()) == [
        "persistent://public/default/with/slash", "non-persistent://public/other/q"]
    assert store.list_topics() == []  # the registry is not a topic
    with pytest.raises(ValueError):
        store.set_partitions("persistent://public/default/p", -1)


def test_partitioned_registry_after_a_namespace_was_listed(tmp_path: Path) -> None:
    """A namespace's registry is listed on the first question about it; what the
    store writes or deletes afterwards, and what an earlier store left, is still seen."""
    root = tmp_path / "data"
    Store(root, LedgerConfig()).set_partitions("persistent://t/ns/earlier", 3)
    store = Store(root, LedgerConfig())
    assert store.get_partitions("persistent://t/ns/unknown") is None  # lists t/ns
    assert store.get_partitions("persistent://t/ns/earlier") == 3
    assert store.get_partitions("persistent://t/ns/a/b") is None
    store.set_partitions("persistent://t/ns/a/b", 2)
    store._partitions.clear()  # forget the counts; the listing stays
    assert store.get_partitions("persistent://t/ns/a/b") == 2
    store.delete_partitioned("persistent://t/ns/earlier")
    store.set_partitions("persistent://t/ns/earlier", 5)
    store._partitions.clear()
    assert store.get_partitions("persistent://t/ns/earlier") == 5
    store.delete_partitioned("persistent://t/ns/earlier")
    store._partitions.clear()
    assert store.get_partitions("persistent://t/ns/earlier") is None
    assert Store(root, LedgerConfig()).list_partitioned() == {"persistent://t/ns/a/b": 2}
