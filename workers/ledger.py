"""Exactly-once learning by offsets: which labelled records of a batch are still to be applied, and where.

The weight store keeps, for every input partition and every part of the model (each shard of
rows, and the model-level part of counters and version), the highest offset it has applied
(its watermark), moved in the same atomic step as that part's delta. A worker owns a partition
while it is assigned, so after the first read it knows the watermarks it wrote itself; it reads
them again after a rebalance, a failed write, or a write refused as stale.

A labelled record at offset ``o`` of a partition is

- **done** where ``o <= min(watermarks)``: every part applied it (a redelivery): skipped;
- **fresh** where ``o > max(watermarks)``: no part applied it: learned with the batch;
- **partial** otherwise: some parts applied it and others not. Only a Redis Cluster, whose parts
  are written one call each, can be left so (a crash between calls; a single node writes a
  batch as one transaction). Such a record is learned again on its own against the weights as
  they are now, and written only to the parts still behind it.

A labelled event resent with the same ``event_id`` at a later offset (a producer's retry) is a
*duplicate*: the store keeps the hashes of the last ``seen_window`` events of each partition
(100,000 by default: 800 KB a partition), and a duplicate within that window is not learned.
Resends of one event land in one partition when producers key events by document id, as
``stream-winnow produce`` does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from stream_winnow.stores.base import WeightStore
from stream_winnow.stores.delta import SourceRange
from workers.transport.base import Record

__all__ = ["OffsetLedger", "Split", "event_hash", "source_of"]


def source_of(record: Record) -> str:
    """The watermark name of a record's partition: ``"labels:3"`` (topic names hold no colon)."""
    return f"{record.topic}:{record.partition}"


def event_hash(event_id: str) -> int:
    """An event id as the 64-bit hash the store remembers (BLAKE2b, 8 bytes).

    >>> event_hash("e-1") == event_hash("e-1") != event_hash("e-2")
    True
    """
    return int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=8).digest(), "little")


@dataclass
class Split:
    """A batch's labelled records sorted by what is still to be done (positions into the batch)."""

    fresh: list[int] = field(default_factory=list)
    # (position, the parts still behind it: shard numbers, and -1 for the model part)
    partial: list[tuple[int, list[int]]] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)


class OffsetLedger:
    """One worker's view of the store's watermarks and recently seen events, per input partition."""

    def __init__(self, store: WeightStore) -> None:
        self.store = store
        self._marks: dict[str, np.ndarray] = {}  # source -> each part's watermark, the model part last
        self._seen: dict[str, set[int]] = {}

    def forget(self, sources: Iterable[str] | None = None) -> None:
        """Drop what is known of ``sources`` (all by default): it is read from the store when next needed."""
        if sources is None:
            self._marks.clear()
            self._seen.clear()
            return
        for source in sources:
            self._marks.pop(source, None)
            self._seen.pop(source, None)

    def marks(self, sources: Sequence[str]) -> dict[str, np.ndarray]:
        """Each source's watermarks per part, read from the store for those not known (one round trip)."""
        unknown = [s for s in dict.fromkeys(sources) if s not in self._marks]
        if unknown:
            self._marks.update(self.store.watermarks(unknown))
        return {s: self._marks[s] for s in sources}

    def split(self, records: Sequence[Record], event_ids: Sequence[str]) -> Split:
        """Sort a batch's labelled records (in offset order per partition) into fresh, partial, done, duplicates."""
        sources = [source_of(r) for r in records]
        marks = self.marks(sources)
        out = Split()
        batch_seen: dict[str, set[int]] = {}
        for i, (record, source, event_id) in enumerate(zip(records, sources, event_ids, strict=True)):
            mark = marks[source]
            if record.offset <= mark.min():
                out.done.append(i)
                continue
            h = event_hash(event_id)
            mine = batch_seen.setdefault(source, set())
            if h in mine or h in self._seen_of(source):
                out.duplicates.append(i)
                continue
            mine.add(h)
            if record.offset > mark.max():
                out.fresh.append(i)
            else:
                behind = np.flatnonzero(mark < record.offset)
                n_parts = len(mark) - 1
                out.partial.append((i, [int(p) if p < n_parts else -1 for p in behind.tolist()]))
        return out

    def _seen_of(self, source: str) -> set[int]:
        seen = self._seen.get(source)
        if seen is None:
            seen = self._seen[source] = set(self.store.seen_events(source).tolist())
        return seen

    def ranges(self, records: Sequence[Record]) -> list[SourceRange]:
        """The ``SourceRange`` of each partition among ``records``: from the known watermarks to its last offset."""
        last: dict[str, int] = {}
        for record in records:
            source = source_of(record)
            last[source] = max(last.get(source, -1), record.offset)
        marks = self.marks(list(last))
        return [SourceRange(s, tuple(int(v) for v in marks[s].tolist()), offset) for s, offset in last.items()]

    def advanced(self, ranges: Sequence[SourceRange], parts: Sequence[int] | None, seen: dict[str, list[int]]) -> None:
        """Record a write the store accepted: ``parts`` (all by default) are at each range's last offset now."""
        for mark in ranges:
            known = self._marks.get(mark.source)
            if known is None:
                continue
            if parts is None:
                known[:] = mark.last
            else:
                known[[p if p >= 0 else len(known) - 1 for p in parts]] = mark.last
        limit = 2 * self.store.seen_window
        for source, hashes in seen.items():
            kept = self._seen.get(source)
            if kept is not None:
                kept.update(hashes)
                if len(kept) > limit:  # the store's ring forgot the oldest: so do we, by reading it again
                    del self._seen[source]
