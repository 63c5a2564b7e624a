"""Sharing work out: Spark partitions among topic partitions, and a micro-batch's entry
budget (``maxEntriesPerTrigger``) among the topic partitions with a backlog.  Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def allocate_parts(weights: Sequence[int], total: int) -> list[int]:
    """How many pieces to cut each of ``weights`` into so that there are about
    ``total`` in all: at least one each, the rest in proportion to the weights
    (largest remainders first)."""
    n = len(weights)
    extra = total - n
    if n == 0 or extra <= 0:
        return [1] * n
    weight_sum = sum(max(w, 0) for w in weights) or n
    exact = [extra * max(w, 0) / weight_sum if weight_sum else extra / n for w in weights]
    parts = [int(x) for x in exact]
    order = sorted(range(n), key=lambda i: (parts[i] - exact[i], i))
    for i in order[: extra - sum(parts)]:
        parts[i] += 1
    return [1 + p for p in parts]


def share_budget(available: Mapping[str, int | None], budget: int) -> dict[str, int]:
    """Entries each topic partition may read this micro-batch: ``budget`` in all, spread
    evenly, none given more than it has (``None``: it has an unknown amount, as many
    as it is given).  Any budget of at least one gives somebody at least one entry,
    so a query always moves on."""
    shares = dict.fromkeys(available, 0)
    remaining = budget
    open_ = [t for t in sorted(available) if available[t] is None or (available[t] or 0) > 0]
    while remaining > 0 and open_:
        each = max(1, remaining // len(open_))
        for topic in list(open_):
            cap = available[topic]
            room = each if cap is None else min(each, cap - shares[topic])
            give = min(room, remaining)
            shares[topic] += give
            remaining -= give
            if cap is not None and shares[topic] >= cap:
                open_.remove(topic)
            if remaining == 0:
                break
    return shares
