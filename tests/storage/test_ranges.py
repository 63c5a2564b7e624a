"""RangeSet against a plain Python set."""

from __future__ import annotations

import itertools
import random

from magnetar.storage.ranges import RangeSet


def check(ranges: RangeSet, model: set[int]) -> None:
    pairs = ranges.ranges()
    expanded = {value for start, end in pairs for value in range(start, end + 1)}
    assert expanded == model
    assert ranges.count == len(model)
    # Sorted, disjoint and never adjacent (adjacent ranges must have merged).
    for (_, end), (start, _) in itertools.pairwise(pairs):
        assert start > end + 1


def test_random_operations_match_a_set() -> None:
    rng = random.Random(7)
    ranges = RangeSet()
    model: set[int] = set()
    for _ in range(3000):
        op = rng.random()
        if op < 0.6:
            value = rng.randrange(300)
            assert ranges.add(value) == (value not in model)
            model.add(value)
        elif op < 0.85:
            low = rng.randrange(300)
            high = low + rng.randrange(-2, 15)
            new = {v for v in range(low, high + 1)} - model
            assert ranges.add_range(low, high) == len(new)
            model |= new
        elif op < 0.97:
            value = rng.randrange(-5, 300)
            ranges.discard_through(value)
            model = {v for v in model if v > value}
        else:
            ranges.clear()
            model.clear()
        check(ranges, model)
        probe = rng.randrange(-5, 310)
        assert (probe in ranges) == (probe in model)


def test_scattered_values_fill_in_to_one_range() -> None:
    ranges = RangeSet()
    values = list(range(0, 1000, 2)) + list(range(1, 1000, 2))
    for value in values[:500]:
        ranges.add(value)
    assert len(ranges) == 500
    for value in values[500:]:
        ranges.add(value)
    assert ranges.ranges() == [(0, 999)]
    assert ranges.pop_range_starting_at(1) is None
    assert ranges.pop_range_starting_at(0) == 999
    assert not ranges
    assert ranges.count == 0
