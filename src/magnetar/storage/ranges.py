"""A set of integers kept as sorted, disjoint, non-adjacent inclusive ranges.

Cursors use it for individually acknowledged entry ids: scattered acks cost one range
each and merge as the holes between them fill in, so memory and the persisted form
grow with the number of holes, not with the number of acks.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class RangeSet:
    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self) -> None:
        # Parallel lists: range i is starts[i]..ends[i].  Both are sorted because the
        # ranges are disjoint, which lets bisect work on either.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._count = 0

    @property
    def count(self) -> int:
        """Number of integers in the set."""
        return self._count

    def __len__(self) -> int:
        """Number of ranges."""
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __contains__(self, value: int) -> bool:
        index = bisect_right(self._starts, value) - 1
        return index >= 0 and self._ends[index] >= value

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def first_start(self) -> int | None:
        return self._starts[0] if self._starts else None

    def add(self, value: int) -> bool:
        """Add one integer; True if it was not there already."""
        starts, ends = self._starts, self._ends
        index = bisect_right(starts, value)  # ranges before index start at or below value
        if index and ends[index - 1] >= value:
            return False
        joins_left = index > 0 and ends[index - 1] == value - 1
        joins_right = index < len(starts) and starts[index] == value + 1
        if joins_left and joins_right:
            ends[index - 1] = ends[index]
            del starts[index]
            del ends[index]
        elif joins_left:
            ends[index - 1] = value
        elif joins_right:
            starts[index] = value
        else:
            starts.insert(index, value)
            ends.insert(index, value)
        self._count += 1
        return True

    def add_range(self, low: int, high: int) -> int:
        """Add ``low..high`` inclusive; returns how many integers were new."""
        if low > high:
            return 0
        starts, ends = self._starts, self._ends
        first = bisect_left(ends, low - 1)  # first range that overlaps or touches
        stop = bisect_right(starts, high + 1)  # one past the last such range
        if first < stop:
            covered = sum(ends[i] - starts[i] + 1 for i in range(first, stop))
            low = min(low, starts[first])
            high = max(high, ends[stop - 1])
            starts[first:stop] = [low]
            ends[first:stop] = [high]
        else:
            covered = 0
            starts.insert(first, low)
            ends.insert(first, high)
        added = high - low + 1 - covered
        self._count += added
        return added

    def discard_through(self, value: int) -> None:
        """Remove every integer <= ``value``."""
        starts, ends = self._starts, self._ends
        whole = bisect_right(ends, value)  # ranges that end at or below value
        if whole:
            self._count -= sum(ends[i] - starts[i] + 1 for i in range(whole))
            del starts[:whole]
            del ends[:whole]
        if starts and starts[0] <= value:
            self._count -= value - starts[0] + 1
            starts[0] = value + 1

    def pop_range_starting_at(self, value: int) -> int | None:
        """If a range starts exactly at ``value``, remove it and return its end."""
        starts = self._starts
        if not starts or starts[0] != value:
            return None
        end = self._ends[0]
        del starts[0]
        del self._ends[0]
        self._count -= end - value + 1
        return end

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._count = 0
