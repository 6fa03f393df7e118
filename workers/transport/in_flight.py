"""Batches in flight: processed, their outputs sent, their input offsets committed once acknowledged.

Waiting for the broker's acknowledgements before taking the next batch was the largest part
of a worker's loop: 38 % of its time at 12,000 documents/s, and the commit another 10 %
(py-spy, ``benchmarks.service --phases latency``). So the loop goes on with the next
batch while the broker acknowledges, and commits each batch's offsets, oldest first, once
all its outputs are acknowledged::

    in_flight = InFlight(consumer, max_batches=2, redo=process_again)
    while running:
        records = consumer.poll_batch(1000, 500)
        if records:
            in_flight.add(records, process(records))   # process() returns producer.checkpoint()
        in_flight.settle(wait=not records)              # commit what is acknowledged

Offsets are never committed ahead of their outputs, so delivery is at least once; a
crash repeats the last ``max_batches + 1`` batches, and any whose
asynchronous commit had not reached the broker yet. A batch whose outputs
failed is handed to ``redo`` (processed and sent again) before anything after it commits.

While the stream flows, acknowledged offsets are committed at most once every
``commit_interval_ms`` (0: after every batch), as Kafka's own consumers do with
``auto.commit.interval.ms``: committing after every batch sent 83-86 commit requests a second
at 24,574 documents/s, 100 ms (the worker's default: see ``WorkerConfig``) 9.3-9.4, each a
write the group coordinator keeps.
A crash then also repeats up to that interval of input. When the topics go quiet, on a
rebalance and at stop, ``settle(wait=True)`` commits everything at once, whatever the interval.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from stream_winnow.errors import ConfigError, TransportError
from workers.transport.base import Consumer, Delivery, Record, TopicPartition, next_offsets

__all__ = ["InFlight"]

log = logging.getLogger(__name__)


@dataclass
class _Batch:
    records: Sequence[Record]
    offsets: dict[TopicPartition, int]
    delivery: Delivery


class InFlight:
    """Processed batches waiting for their outputs' acknowledgement, committed in order.

    ``max_batches`` is how many may wait while the next batch is taken: 0 waits for every
    batch before the next, 2 lets acknowledgements (about 8 ms a batch on
    Tansu) overlap the next batches' work. ``redo(records)`` processes a batch again after
    its outputs failed and returns the new sends' ``Delivery``. Asynchronous commits are at
    least ``commit_interval_ms`` apart on ``clock`` (seconds, monotonic); ``on_commit(asynchronous)``
    hears of each commit request (the worker counts them in its metrics).
    """

    def __init__(
        self, consumer: Consumer, max_batches: int, redo: Callable[[Sequence[Record]], Delivery],
        *, commit_interval_ms: int = 0, clock: Callable[[], float] = time.monotonic,
        on_commit: Callable[[bool], None] = lambda asynchronous: None,
    ) -> None:  # fmt: skip
        if max_batches < 0:
            raise ConfigError(f"max_batches must be >= 0; got {max_batches}")
        if commit_interval_ms < 0:
            raise ConfigError(f"commit_interval_ms must be >= 0; got {commit_interval_ms}")
        self.consumer = consumer
        self.max_batches = max_batches
        self.commit_interval_s = commit_interval_ms / 1000
        self._clock = clock
        self._last_commit_s = -float("inf")
        self._on_commit = on_commit
        self._redo = redo
        self._batches: deque[_Batch] = deque()
        # Acknowledged offsets not yet committed (a commit failed): committed with the next ones.
        self._acknowledged: dict[TopicPartition, int] = {}
        # Committed asynchronously, not yet confirmed: committed again by the next synchronous settle.
        self._unconfirmed: dict[TopicPartition, int] = {}

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def settled(self) -> bool:
        """Nothing in flight and every offset committed synchronously."""
        return not (self._batches or self._acknowledged or self._unconfirmed)

    def add(self, records: Sequence[Record], delivery: Delivery) -> None:
        """A batch is processed and its outputs sent: ``delivery`` tells when they are stored."""
        self._batches.append(_Batch(records, next_offsets(records), delivery))

    def settle(self, *, wait: bool = False, timeout_ms: int = 30_000) -> int:
        """Commit the input offsets of the oldest batches whose outputs are all acknowledged.

        Waits for the oldest while more than ``max_batches`` are in flight, and for all with
        ``wait``. Returns how many batches were acknowledged. The commit is asynchronous (a failed
        one is covered by the next) and waits for ``commit_interval_ms`` since the last, except
        with ``wait``, which commits at once and which the worker uses when the topics are
        quiet, on a rebalance and at stop. Raises ``TransportError`` when a synchronous
        commit fails (the offsets stay, for the next call) or an acknowledgement takes longer
        than ``timeout_ms`` (the batch stays; the client fails its messages after its own
        delivery timeout, and then the batch is processed again).
        """
        settled = 0
        while self._batches:
            batch = self._batches[0]
            must_wait = wait or len(self._batches) > self.max_batches
            try:
                acknowledged = batch.delivery.wait(timeout_ms) if must_wait else batch.delivery.done()
            except TransportError as error:
                first = batch.records[0]
                log.warning(
                    "outputs of the batch of %d from %s[%d]@%d failed (%s); processing it again",
                    len(batch.records), first.topic, first.partition, first.offset, error,
                    extra={"topic": first.topic, "partition": first.partition, "offset": first.offset},
                )  # fmt: skip
                batch.delivery = self._redo(batch.records)
                continue
            if not acknowledged:
                if must_wait:
                    self._commit(asynchronous=False)
                    raise TransportError(f"the outputs of a batch were not acknowledged within {timeout_ms} ms")
                break
            self._batches.popleft()
            for tp, offset in batch.offsets.items():
                if offset > self._acknowledged.get(tp, -1):
                    self._acknowledged[tp] = offset
            settled += 1
        self._commit(asynchronous=not wait)
        return settled

    def _commit(self, *, asynchronous: bool) -> None:
        """Commit the acknowledged offsets; asynchronously in the loop, whose next commits cover a failed one."""
        if asynchronous:
            now_s = self._clock()
            if self._acknowledged and now_s - self._last_commit_s >= self.commit_interval_s:
                self._last_commit_s = now_s
                self.consumer.commit(self._acknowledged, asynchronous=True)
                self._on_commit(True)
                self._unconfirmed.update(self._acknowledged)
                self._acknowledged = {}
            return
        offsets = {**self._unconfirmed, **self._acknowledged}
        if offsets:
            self.consumer.commit(offsets)
            self._last_commit_s = self._clock()
            self._on_commit(False)
        self._acknowledged, self._unconfirmed = {}, {}

    def forget(self, partitions: Collection[TopicPartition]) -> None:
        """Commit nothing more for ``partitions`` (a rebalance took them): their new owner reads them again."""
        self._acknowledged = {tp: o for tp, o in self._acknowledged.items() if tp not in partitions}
        self._unconfirmed = {tp: o for tp, o in self._unconfirmed.items() if tp not in partitions}
        for batch in self._batches:
            batch.offsets = {tp: o for tp, o in batch.offsets.items() if tp not in partitions}
