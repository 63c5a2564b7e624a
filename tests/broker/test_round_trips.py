"""RoundTrips: the PIP-371 round-trip histogram kept as plain bucket counts."""

from __future__ import annotations

from magnetar.broker.observability.metrics import RoundTrips


def _buckets(trips: RoundTrips) -> dict[str, float]:
    family = trips.family()
    return {
        sample.labels["le"]: sample.value
        for sample in family.samples
        if sample.name.endswith("_bucket")
    }


def test_buckets_are_cumulative_and_bounds_inclusive() -> None:
    trips = RoundTrips()
    for seconds in (0.0004, 0.001, 0.0011, 0.3, 45.0):
        trips.observe(seconds)
    buckets = _buckets(trips)
    assert buckets["0.001"] == 2  # 0.0004 and exactly 0.001 (le is "less or equal")
    assert buckets["0.0025"] == 3
    assert buckets["0.25"] == 3
    assert buckets["0.5"] == 4
    assert buckets["30.0"] == 4
    assert buckets["+Inf"] == 5
    assert trips.count == 5
    samples = {s.name: s.value for s in trips.family().samples}
    assert samples["magnetar_rpc_round_trip_seconds_count"] == 5
    assert abs(samples["magnetar_rpc_round_trip_seconds_sum"] - 45.3025) < 1e-9


def test_a_requester_clock_ahead_counts_as_zero() -> None:
    trips = RoundTrips()
    trips.observe(-0.2)
    assert _buckets(trips)["0.001"] == 1
    assert trips.total == 0.0
