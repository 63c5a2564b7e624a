"""Driver-side planning: which topic partitions, where their ranges start and end, and
how a large backlog is cut into ranges that executors read in parallel.

Everything here goes through the standard binary protocol (partition metadata,
GET_TOPICS_OF_NAMESPACE, GET_LAST_MESSAGE_ID, seeks by id and by publish time), so it
works against any Pulsar broker, with no admin URL.  A :class:`Probe` is a
non-durable subscription of one topic partition that answers "where is ...?".
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeVar

from pyspark.sql.datasource import InputPartition

from magnetar.client import Client, Consumer, Message
from magnetar.client.entry_reader import EntryReader
from magnetar.protocol.message_id import EARLIEST, MessageId
from magnetar.protocol.topic_name import (
    complete_topic_name,
    partition_index,
    partitioned_base,
    pattern_namespace,
)
from magnetar.spark.budget import allocate_parts, share_budget
from magnetar.spark.options import SourceConfig
from magnetar.spark.positions import (
    BEFORE_ALL,
    WHOLE_ENTRY,
    Key,
    cut_after_entries,
    entries_between,
    key_before,
    key_through,
    message_key,
    seek_id,
    split_in_ledger,
)


@dataclass(frozen=True)
class TopicRange(InputPartition):  # type: ignore[misc]
    """What one Spark task reads: the messages of ``topic`` (one topic partition) whose
    keys lie in ``(lo, hi]``.  Picklable: it travels to an executor."""

    topic: str
    lo: Key
    hi: Key

    @property
    def partition(self) -> int:
        return partition_index(self.topic)


def _key_of(msg: Message) -> Key:
    mid = msg.message_id
    return message_key(mid.ledger_id, mid.entry_id, mid.batch_index)


T = TypeVar("T")


class Probe:
    """A non-durable subscription of one topic partition, for the driver's questions."""

    def __init__(self, consumer: Consumer, timeout: float) -> None:
        self._consumer = consumer
        self._timeout = timeout

    @classmethod
    async def open(cls, client: Client, topic: str, timeout: float) -> Probe:
        consumer = await client.subscribe(
            topic, f"spark-probe-{uuid.uuid4().hex[:12]}", durable=False,
            initial_position="earliest", receiver_queue_size=16,
        )
        return cls(consumer, timeout)

    async def last_id(self) -> MessageId:
        return await self._consumer.get_last_message_id()

    async def first_after(self, lo: Key) -> Message:
        """The first message whose key is above ``lo``; one must exist."""
        if lo == BEFORE_ALL:
            await self._consumer.seek(EARLIEST)
        else:
            # The entry before lo's: a seek is exclusive of its entry when that is no
            # batch, and lo may stand for "all of entry lo[1]".
            await self._consumer.seek(MessageId(lo[0], lo[1] - 1, -1))
        while True:
            msg = await self._consumer.receive(self._timeout)
            if _key_of(msg) > lo:
                return msg

    async def first_at_time(self, publish_ms: int) -> Message:
        """The first message published at or after ``publish_ms``; one must exist."""
        await self._consumer.seek(publish_ms)
        return await self._consumer.receive(self._timeout)

    async def close(self) -> None:
        await self._consumer.close()


class Planner:
    """Plans ranges for one source; keeps a probe per topic partition until closed."""

    def __init__(self, client: Client, config: SourceConfig) -> None:
        self.client = client
        self.config = config
        self._probes: dict[str, Probe] = {}

    async def probe(self, topic: str) -> Probe:
        probe = self._probes.get(topic)
        if probe is None:
            probe = await Probe.open(self.client, topic, self.config.poll_timeout)
            self._probes[topic] = probe
        return probe

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._probes.values()),
                             return_exceptions=True)
        self._probes.clear()

    # ------------------------------------------------------------ topics

    async def partitions(self) -> list[str]:
        """The topic partitions selected by ``topic``/``topics``/``topicsPattern``."""
        selection = self.config.selection
        if selection.pattern is not None:
            return await self._matching(selection.pattern)
        lists = await asyncio.gather(
            *(self.client.get_topic_partitions(t) for t in selection.topics)
        )
        return [p for names in lists for p in names]

    async def _matching(self, pattern: str) -> list[str]:
        regex = re.compile(pattern)
        domain, namespace = pattern_namespace(pattern)
        # The client's lookup service speaks GET_TOPICS_OF_NAMESPACE, as its own
        # pattern consumers do; no admin URL needed.
        names = await self.client._lookup.get_topics_of_namespace(namespace, domain)
        return sorted(
            n for n in names if regex.fullmatch(n) or regex.fullmatch(partitioned_base(n))
        )

    # ------------------------------------------------------------ positions

    async def last_keys(self, topics: list[str]) -> dict[str, Key]:
        """Per topic partition, the key of its last message (``BEFORE_ALL`` if empty)."""
        async def one(topic: str) -> Key:
            last = await (await self.probe(topic)).last_id()
            return BEFORE_ALL if last.entry_id < 0 or last.ledger_id < 0 else key_through(last)

        keys = await asyncio.gather(*(one(t) for t in topics))
        return dict(zip(topics, keys, strict=True))

    async def start_keys(self, topics: list[str], last: dict[str, Key]) -> dict[str, Key]:
        """Per topic partition, the ``lo`` that ``startingOffsets``/``startingTime`` set."""
        config = self.config
        if isinstance(config.starting, dict):
            _check_named(config.starting, topics, "startingOffsets")
        out: dict[str, Key] = {}
        for topic in topics:
            times = config.starting_time
            if times is not None:
                at = times if isinstance(times, int) else _lookup(times, topic)
                out[topic] = (BEFORE_ALL if at is None
                              else await self._key_at_time(topic, at, last[topic]))
            elif config.starting == "earliest":
                out[topic] = BEFORE_ALL
            elif config.starting == "latest":
                out[topic] = last[topic]
            else:
                assert isinstance(config.starting, dict)
                mid = config.starting.get(topic)  # ids are per partition: no fallback
                out[topic] = BEFORE_ALL if mid is None else key_before(mid)
        return out

    def end_keys(self, topics: list[str], last: dict[str, Key]) -> dict[str, Key]:
        """Per topic partition, the ``hi`` of a batch query (never past the last message)."""
        ending = self.config.ending
        if isinstance(ending, dict):
            _check_named(ending, topics, "endingOffsets")
        out: dict[str, Key] = {}
        for topic in topics:
            mid = None if isinstance(ending, str) else ending.get(topic)
            if mid is None or mid.is_latest:
                out[topic] = last[topic]
            else:
                out[topic] = min(key_through(mid), last[topic])
        return out

    async def _key_at_time(self, topic: str, publish_ms: int, last: Key) -> Key:
        if last == BEFORE_ALL:
            return BEFORE_ALL
        probe = await self.probe(topic)
        newest = await probe.first_after((last[0], last[1], -1))
        if newest.publish_time < publish_ms:
            return last  # nothing published since
        found = (await probe.first_at_time(publish_ms)).message_id
        return (found.ledger_id, found.entry_id, -1)

    # ------------------------------------------------------------ ranges

    async def batch_ranges(self) -> list[TopicRange]:
        topics = await self.partitions()
        last = await self.last_keys(topics)
        lo = await self.start_keys(topics, last)
        hi = self.end_keys(topics, last)
        ranges = [TopicRange(t, lo[t], hi[t]) for t in topics if lo[t] < hi[t]]
        return await self.split(ranges)

    async def split(self, ranges: list[TopicRange]) -> list[TopicRange]:
        """Cut ranges so that there are about ``minPartitions`` of them: the larger a
        range's backlog, the more pieces.  In one ledger the cuts come from entry ids;
        across ledgers (whose entry ids a client cannot relate) from publish times, a
        seek by time finding the message at each cut."""
        want = self.config.min_partitions
        if not want or want <= len(ranges):
            return ranges
        starts = await asyncio.gather(*(self._first_key(r) for r in ranges))
        weights = [_estimate_entries(first, r.hi) for first, r in zip(starts, ranges, strict=True)]
        counts = allocate_parts(weights, want)
        pieces = await asyncio.gather(
            *(self._cut(r, first, n) for r, first, n in zip(ranges, starts, counts, strict=True))
        )
        return [p for group in pieces for p in group]

    async def _first_key(self, r: TopicRange) -> Key:
        """``r.lo`` moved up to just before the first message of ``r``."""
        if r.lo != BEFORE_ALL and r.lo[0] == r.hi[0]:
            return r.lo
        msg = await (await self.probe(r.topic)).first_after(r.lo)
        mid = msg.message_id
        return max(r.lo, (mid.ledger_id, mid.entry_id, -1))

    async def _cut(self, r: TopicRange, first: Key, parts: int) -> list[TopicRange]:
        if parts <= 1:
            return [r]
        if first[0] == r.hi[0]:
            cuts = split_in_ledger(first, r.hi, parts)
        else:
            cuts = await self._time_cuts(r, first, parts)
        bounds = [r.lo, *cuts, r.hi]
        return [TopicRange(r.topic, a, b) for a, b in pairwise(bounds)]

    async def _time_cuts(self, r: TopicRange, first: Key, parts: int) -> list[Key]:
        probe = await self.probe(r.topic)
        t0 = (await probe.first_after(first)).publish_time
        t1 = (await probe.first_after((r.hi[0], r.hi[1], -1))).publish_time
        cuts: set[Key] = set()
        for k in range(1, parts):
            at = t0 + (t1 - t0) * k // parts
            mid = (await probe.first_at_time(at)).message_id
            cut = (mid.ledger_id, mid.entry_id, -1)  # ends just before that entry
            if r.lo < cut < r.hi:
                cuts.add(cut)
        return sorted(cuts)

    # ------------------------------------------------------------ admission control

    async def entries_in_bytes(
        self, lo: dict[str, Key], hi: dict[str, Key], max_bytes: int
    ) -> int:
        """How many entries make about ``max_bytes`` (``maxBytesPerTrigger``, a soft
        limit as in pulsar-spark): the size of the first entry each partition with a
        backlog would read, decompressed, taken as its entries' size."""
        behind = [t for t in hi if lo.get(t, BEFORE_ALL) < hi[t]]
        if not behind:
            return 1
        sizes = await asyncio.gather(*(self._entry_size(t, lo.get(t, BEFORE_ALL))
                                       for t in behind))
        known = [s for s in sizes if s > 0]
        each = sum(known) / len(known) if known else 1
        return max(1, int(max_bytes // max(each, 1)))

    async def _entry_size(self, topic: str, lo: Key) -> int:
        reader = await EntryReader.create(
            self.client, topic, seek_id(lo, partition_index(topic)),
            start_message_id_inclusive=True, receiver_queue_size=2)
        try:
            while True:
                entry = await reader.read_next(self.config.poll_timeout)
                position = (entry.ledger_id, entry.entry_id)
                if position > lo[:2] or (position == lo[:2] and lo[2] != WHOLE_ENTRY):
                    return len(entry.payload)
        finally:
            await reader.close()

    async def capped_ends(
        self, lo: dict[str, Key], hi: dict[str, Key], max_entries: int
    ) -> dict[str, Key]:
        """``hi`` lowered so that about ``max_entries`` entries are read in all."""
        behind = [t for t in hi if lo.get(t, BEFORE_ALL) < hi[t]]
        firsts = await asyncio.gather(
            *(self._first_key(TopicRange(t, lo.get(t, BEFORE_ALL), hi[t])) for t in behind)
        )
        first = dict(zip(behind, firsts, strict=True))
        available = {t: entries_between(first[t], hi[t]) for t in behind}
        shares = share_budget(available, max_entries)
        out = dict(hi)
        for t in behind:
            have = available[t]
            if shares[t] <= 0:
                out[t] = lo.get(t, BEFORE_ALL)
            elif have is None or shares[t] < have:
                out[t] = min(hi[t], cut_after_entries(first[t], shares[t]))
        return out


def _lookup(table: Mapping[str, T], topic: str) -> T | None:
    """A per-topic time: by the partition's own name, else by its partitioned topic's."""
    if topic in table:
        return table[topic]
    return table.get(complete_topic_name(partitioned_base(topic)))


def _check_named(ids: Mapping[str, MessageId], topics: list[str], option: str) -> None:
    unknown = sorted(set(ids) - set(topics))
    if unknown:
        raise ValueError(
            f"{option} names {', '.join(unknown)}, which the query does not read "
            "(message ids are per topic partition: name each partition)"
        )


def _estimate_entries(first: Key, hi: Key) -> int:
    """A range's size in entries: exact within one ledger; across ledgers magnetar's
    entry ids continue from ledger to ledger (Pulsar's restart, where this undercounts)."""
    exact = entries_between(first, hi)
    if exact is not None:
        return exact
    return max(1, hi[1] - first[1] + 1)


__all__ = ["WHOLE_ENTRY", "Planner", "Probe", "TopicRange"]
