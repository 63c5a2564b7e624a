"""Retention, TTL and backlog quota evaluation on their own (broker/policies/topic_policies.py,
broker/policies/retention_policies.py): the time is an argument, segments and publish times are
made up, namespace policies live in a real data directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.policies.retention_policies import (
    MEGABYTE,
    BacklogQuota,
    Retention,
    RetentionPolicyStore,
    check_ttl,
    quota_fits_retention,
)
from magnetar.broker.policies.topic_policies import (
    age_exceeded,
    expired_through,
    first_within,
    retention_bound,
    size_exceeded,
)
from magnetar.storage.ledger import SegmentSpan
from magnetar.storage.metadata import NamespacePolicies

MINUTE = 60_000
NOW = 1_000 * MINUTE


def spans(*sizes: int) -> list[SegmentSpan]:
    """Consecutive sealed segments of 10 entries each, with the given byte sizes."""
    return [
        SegmentSpan(index * 10, index * 10 + 10, size, Path(f"seg{index}"))
        for index, size in enumerate(sizes)
    ]


def sealed(minutes_ago: dict[str, int]) -> dict[str, int]:
    return {name: NOW - ago * MINUTE for name, ago in minutes_ago.items()}


def bound(
    segments: list[SegmentSpan],
    retention: Retention,
    consumed_end: int = 1_000,
    total: int | None = None,
    ages: dict[str, int] | None = None,
) -> int:
    at = sealed(ages or {})
    size = total if total is not None else sum(s.size for s in segments) + 100  # + active

    def sealed_at(span: SegmentSpan) -> int:
        return at.get(str(span.path), NOW)

    return retention_bound(segments, consumed_end, size, retention, NOW, sealed_at)


# ------------------------------------------------------------------ retention


def test_no_retention_removes_every_consumed_segment_and_nothing_unconsumed() -> None:
    segments = spans(100, 100, 100)
    assert bound(segments, Retention(0, 0)) == 30
    assert bound(segments, Retention(0, 0), consumed_end=25) == 20  # the third is not consumed
    assert bound(segments, Retention(0, 0), consumed_end=5) == 0


def test_infinite_retention_keeps_everything() -> None:
    assert bound(spans(100, 100), Retention(-1, -1), ages={"seg0": 10_000}) == 0


def test_time_retention_removes_segments_sealed_longer_ago_than_the_limit() -> None:
    segments = spans(100, 100, 100)
    ages = {"seg0": 90, "seg1": 61, "seg2": 30}
    assert bound(segments, Retention(60, -1), ages=ages) == 20
    assert bound(segments, Retention(120, -1), ages=ages) == 0
    # Exactly the limit is not past it (Pulsar: elapsed > retention).
    assert bound(segments, Retention(61, -1), ages=ages) == 10


def test_the_walk_stops_at_the_first_segment_retention_keeps() -> None:
    # seg1 is young, so seg2 stays even though it is old (Pulsar's loop breaks too).
    ages = {"seg0": 90, "seg1": 5, "seg2": 90}
    assert bound(spans(100, 100, 100), Retention(60, -1), ages=ages) == 10


def test_size_retention_keeps_the_topic_at_or_over_the_limit() -> None:
    segments = spans(MEGABYTE, MEGABYTE, MEGABYTE)
    total = 3 * MEGABYTE + 1000  # the active segment holds 1000 bytes
    # Removing seg0 leaves 2 MB + 1000 >= 2 MB: it goes; removing seg1 too would leave
    # 1 MB + 1000 < 2 MB: it stays.
    assert bound(segments, Retention(-1, 2), total=total) == 10
    assert bound(segments, Retention(-1, 1), total=total) == 20
    assert bound(segments, Retention(-1, 3), total=total) == 0


def test_time_or_size_either_lets_a_segment_go() -> None:
    segments = spans(MEGABYTE, MEGABYTE)
    total = 2 * MEGABYTE + 10
    young = {"seg0": 1, "seg1": 1}
    assert bound(segments, Retention(60, 1), total=total, ages=young) == 10  # size says so
    old = {"seg0": 100, "seg1": 100}
    assert bound(segments, Retention(60, 100), total=total, ages=old) == 20  # time says so


def test_retention_values_are_checked_as_pulsar_checks_them() -> None:
    for time_minutes, size_mb in ((0, 10), (10, 0), (-2, -1), (-1, -2)):
        with pytest.raises(ValueError, match="Invalid retention policy"):
            Retention(time_minutes, size_mb)
    assert Retention.from_json({"retentionTimeInMinutes": -1, "retentionSizeInMB": 5}) == (
        Retention(-1, 5)
    )
    assert Retention(3, -1).to_json() == {"retentionTimeInMinutes": 3, "retentionSizeInMB": -1}
    with pytest.raises(ValueError, match="unknown field"):
        Retention.from_json({"retentionTime": 5})
    with pytest.raises(ValueError, match="whole number"):
        Retention.from_json({"retentionTimeInMinutes": "5", "retentionSizeInMB": 1})


# ------------------------------------------------------------------ TTL


def test_expired_through_finds_the_newest_entry_published_before_the_cutoff() -> None:
    times = {entry_id: 1000 + entry_id * 10 for entry_id in range(100)}
    assert expired_through(0, 99, times.__getitem__, cutoff_ms=1000) == -1  # none
    assert expired_through(0, 99, times.__getitem__, cutoff_ms=1001) == 0
    assert expired_through(0, 99, times.__getitem__, cutoff_ms=1500) == 49
    assert expired_through(0, 99, times.__getitem__, cutoff_ms=10**9) == 99
    assert expired_through(40, 99, times.__getitem__, cutoff_ms=1100) == 39  # start - 1


def test_ttl_values() -> None:
    assert check_ttl(0) == 0
    for bad in (-1, "5", True, 1.5):
        with pytest.raises(ValueError, match="Invalid value for message TTL"):
            check_ttl(bad)


# ------------------------------------------------------------------ backlog quotas


def test_size_and_age_quotas() -> None:
    assert not size_exceeded(10**9, BacklogQuota(limit_size=-1))
    assert size_exceeded(100, BacklogQuota(limit_size=100))  # at the limit is over it
    assert not size_exceeded(99, BacklogQuota(limit_size=100))
    quota = BacklogQuota(limit_time=60)
    assert age_exceeded(NOW - 61_000, quota, NOW)
    assert not age_exceeded(NOW - 60_000, quota, NOW)
    assert not age_exceeded(None, quota, NOW)  # no backlog
    assert not age_exceeded(0, BacklogQuota(limit_time=0), NOW)  # 0 is no limit


def test_eviction_resumes_where_the_backlog_fits_the_target() -> None:
    sizes = [100] * 50  # entry i holds 100 bytes: from i on there are (50 - i) * 100

    def size_from(entry_id: int) -> int:
        return sum(sizes[entry_id:])

    assert first_within(0, 50, size_from, 900) == 41
    assert first_within(0, 50, size_from, 10**6) == 0
    assert first_within(0, 50, size_from, 0) == 50
    assert first_within(45, 50, size_from, 900) == 45  # never before the start


def test_backlog_quota_json_is_pulsars() -> None:
    quota = BacklogQuota.from_json({"limit": 5, "policy": "producer_exception"})
    assert quota == BacklogQuota(5, -1, "producer_exception")
    assert quota.to_json() == {
        "limit": 5, "limitSize": 5, "limitTime": -1, "policy": "producer_exception",
    }
    assert BacklogQuota.from_json({"limitSize": 7, "limit": 5}).limit_size == 7
    with pytest.raises(ValueError, match="policy must be one of"):
        BacklogQuota.from_json({"limitSize": 7, "policy": "drop_everything"})


def test_a_quota_must_stay_under_retention() -> None:
    assert quota_fits_retention(BacklogQuota(10 * MEGABYTE), None)
    assert quota_fits_retention(BacklogQuota(10 * MEGABYTE), Retention(0, 0))
    assert not quota_fits_retention(BacklogQuota(10 * MEGABYTE), Retention(-1, 10))
    assert quota_fits_retention(BacklogQuota(10 * MEGABYTE - 1), Retention(-1, 10))
    assert not quota_fits_retention(BacklogQuota(limit_time=3600), Retention(60, -1))
    assert quota_fits_retention(BacklogQuota(limit_time=3599), Retention(60, -1))


# ------------------------------------------------------------------ store and config


def test_namespace_policies_share_the_file_and_survive_a_new_store(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path)
    path = NamespacePolicies.path_for(tmp_path, "acme", "orders")
    NamespacePolicies(path, {"deduplicationEnabled": True}).save()  # another policy's key
    written: list[tuple[str, str]] = []
    store = RetentionPolicyStore(config, tmp_path, lambda t, n: written.append((t, n)))
    store.set_namespace_retention("acme", "orders", Retention(10, -1))
    store.set_namespace_ttl("acme", "orders", 30)
    store.set_namespace_quota("acme", "orders", "message_age", BacklogQuota(limit_time=5))
    assert written == [("acme", "orders")] * 3
    doc = json.loads(path.read_text())["policies"]
    assert doc["deduplicationEnabled"] is True
    # Kept under Pulsar's Policies keys.
    assert doc["retention_policies"] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    assert doc["message_ttl_in_seconds"] == 30
    fresh = RetentionPolicyStore(config, tmp_path)
    assert fresh.namespace_retention("acme", "orders") == Retention(10, -1)
    assert fresh.namespace_ttl("acme", "orders") == 30
    assert fresh.namespace_quotas("acme", "orders") == {"message_age": BacklogQuota(limit_time=5)}
    store.set_namespace_quota("acme", "orders", "message_age", None)
    store.set_namespace_ttl("acme", "orders", None)
    doc = json.loads(path.read_text())["policies"]
    assert "backlog_quota_map" not in doc and "message_ttl_in_seconds" not in doc


def test_a_hand_edited_bad_value_counts_as_unset(tmp_path: Path) -> None:
    path = NamespacePolicies.path_for(tmp_path, "acme", "orders")
    NamespacePolicies(path, {
        "retention": {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5},
        "messageTTL": -3,
        "backlogQuotaMap": {"destination_storage": {"policy": "nope"}},
    }).save()
    store = RetentionPolicyStore(BrokerConfig(data_dir=tmp_path), tmp_path)
    assert store.namespace_retention("acme", "orders") is None
    assert store.namespace_ttl("acme", "orders") is None
    assert store.namespace_quotas("acme", "orders") == {}


def test_config_defaults_are_pulsars_and_bad_values_are_refused(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path)
    store = RetentionPolicyStore(config, tmp_path)
    assert store.default_retention == Retention(0, 0)
    assert store.default_ttl == 0
    assert store.default_quota == BacklogQuota(-1, -1, "producer_request_hold")
    bad: tuple[tuple[str, Any], ...] = (
        ("default_retention_size_in_mb", -2),
        ("default_retention_time_in_minutes", 5),  # with size 0
        ("ttl_duration_default_in_seconds", -1),
        ("backlog_quota_default_retention_policy", "drop"),
        ("backlog_quota_check_interval_in_seconds", 0),
    )
    for setting, value in bad:
        with pytest.raises(ConfigError) as caught:
            BrokerConfig(data_dir=tmp_path, **{setting: value}).validate()
        assert caught.value.setting in (setting, "default_retention_size_in_mb")
