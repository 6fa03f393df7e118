"""InFlight: which offsets are committed when, with deliveries and a consumer that only record calls.

The clients' own Delivery and commit are tested against a real broker in
``tests/integration/test_transport.py``; the worker's crash and restart in
``tests/integration/test_worker.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from stream_winnow.errors import ConfigError, TransportError
from workers.transport import Delivery, Record, TopicPartition
from workers.transport.in_flight import InFlight


class Sends(Delivery):
    """A delivery whose fate the test decides: pending, acknowledged, or failed."""

    def __init__(self, *, acknowledged: bool = False, failed: bool = False, acknowledge_on_wait: bool = True) -> None:
        self.acknowledged = acknowledged
        self.failed = failed
        self.acknowledge_on_wait = acknowledge_on_wait
        self.waits = 0

    def done(self) -> bool:
        if self.failed:
            raise TransportError("a message failed")
        return self.acknowledged

    def wait(self, timeout_ms: int = 30_000) -> bool:
        self.waits += 1
        if self.acknowledge_on_wait and not self.failed:
            self.acknowledged = True
        return self.done()


class Commits:
    """Records commits as (offsets, asynchronous)."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[TopicPartition, int], bool]] = []

    def commit(self, offsets: Mapping[TopicPartition, int], *, asynchronous: bool = False) -> None:
        self.calls.append((dict(offsets), asynchronous))


def records(partition: int, first: int, n: int, topic: str = "documents") -> list[Record]:
    return [Record(topic, partition, offset, b"") for offset in range(first, first + n)]


def in_flight(max_batches: int = 2) -> tuple[InFlight, Commits, list[Sequence[Record]]]:
    commits, redone = Commits(), []

    def redo(batch: Sequence[Record]) -> Delivery:
        redone.append(batch)
        return Sends(acknowledged=True)

    return InFlight(commits, max_batches, redo), commits, redone  # type: ignore[arg-type]


def test_offsets_are_committed_in_order_once_acknowledged() -> None:
    queue, commits, _ = in_flight()
    first, second = Sends(), Sends(acknowledged=True)
    queue.add(records(0, 0, 10), first)
    queue.add(records(0, 10, 5), second)
    assert queue.settle() == 0  # the second is acknowledged, but the first is not: nothing yet
    assert commits.calls == []
    first.acknowledged = True
    assert queue.settle() == 2
    assert commits.calls == [({("documents", 0): 15}, True)]  # both, as one asynchronous commit
    assert len(queue) == 0


def test_more_batches_than_allowed_wait_for_the_oldest() -> None:
    queue, commits, _ = in_flight(max_batches=2)
    batches = [Sends() for _ in range(3)]
    for i, sends in enumerate(batches):
        queue.add(records(i, 0, 4), sends)
    assert queue.settle() == 1  # three in flight, two allowed: the oldest was waited for
    assert [s.waits for s in batches] == [1, 0, 0]
    assert commits.calls == [({("documents", 0): 4}, True)]
    assert len(queue) == 2


def test_no_batches_in_flight_waits_for_every_one() -> None:
    queue, commits, _ = in_flight(max_batches=0)
    sends = Sends()
    queue.add(records(0, 0, 3), sends)
    assert queue.settle() == 1
    assert sends.waits == 1
    assert commits.calls == [({("documents", 0): 3}, True)]


def test_a_failed_batch_is_processed_again_before_anything_after_it_commits() -> None:
    queue, commits, redone = in_flight()
    failed_records = records(0, 0, 5)
    queue.add(failed_records, Sends(failed=True))
    queue.add(records(0, 5, 5), Sends(acknowledged=True))
    assert queue.settle() == 2
    assert redone == [failed_records]
    assert commits.calls == [({("documents", 0): 10}, True)]


def test_an_acknowledgement_that_times_out_keeps_the_batch_and_commits_what_came_before() -> None:
    queue, commits, _ = in_flight()
    queue.add(records(0, 0, 5), Sends(acknowledged=True))
    stuck = Sends(acknowledge_on_wait=False)
    queue.add(records(1, 0, 5), stuck)
    with pytest.raises(TransportError, match="not acknowledged"):
        queue.settle(wait=True, timeout_ms=10)
    assert commits.calls == [({("documents", 0): 5}, False)]
    assert len(queue) == 1
    stuck.acknowledged = True
    assert queue.settle(wait=True) == 1


def test_a_waiting_settle_commits_synchronously_and_confirms_the_asynchronous_commits() -> None:
    queue, commits, _ = in_flight()
    queue.add(records(0, 0, 5), Sends(acknowledged=True))
    queue.settle()
    assert not queue.settled  # committed asynchronously only: not confirmed
    queue.add(records(1, 0, 7), Sends())
    queue.settle(wait=True)
    assert commits.calls == [({("documents", 0): 5}, True), ({("documents", 0): 5, ("documents", 1): 7}, False)]
    assert queue.settled


def test_forgotten_partitions_are_not_committed() -> None:
    queue, commits, _ = in_flight()
    queue.add(records(0, 0, 5) + records(1, 0, 3), Sends())
    queue.forget({("documents", 1)})
    queue.settle(wait=True)
    assert commits.calls == [({("documents", 0): 5}, False)]


def test_a_negative_number_of_batches_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_batches"):
        InFlight(Commits(), -1, lambda batch: Sends())  # type: ignore[arg-type]


class Clock:
    """Monotonic seconds the test sets."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_asynchronous_commits_are_at_least_the_commit_interval_apart() -> None:
    commits, clock = Commits(), Clock()
    queue = InFlight(commits, 2, lambda batch: Sends(), commit_interval_ms=1000, clock=clock)  # type: ignore[arg-type]
    queue.add(records(0, 0, 5), Sends(acknowledged=True))
    assert queue.settle() == 1
    assert commits.calls == [({("documents", 0): 5}, True)]  # the first acknowledgement commits at once
    clock.now_s += 0.4
    queue.add(records(0, 5, 5), Sends(acknowledged=True))
    clock.now_s += 0.5
    queue.add(records(0, 10, 5), Sends(acknowledged=True))
    assert queue.settle() == 2  # acknowledged, but 0.9 s after the last commit: held
    assert len(commits.calls) == 1
    assert not queue.settled
    clock.now_s += 0.1
    assert queue.settle() == 0
    assert commits.calls[1:] == [({("documents", 0): 15}, True)]  # 1.0 s on: both batches at once


def test_a_waiting_settle_commits_at_once_whatever_the_interval() -> None:
    commits, clock, heard = Commits(), Clock(), []
    queue = InFlight(commits, 2, lambda batch: Sends(), commit_interval_ms=60_000, clock=clock,  # type: ignore[arg-type]
                     on_commit=heard.append)  # fmt: skip
    queue.add(records(0, 0, 5), Sends(acknowledged=True))
    queue.settle()
    queue.add(records(0, 5, 3), Sends())
    clock.now_s += 0.01
    queue.settle(wait=True)  # the topics went quiet, a rebalance or a stop
    assert commits.calls == [({("documents", 0): 5}, True), ({("documents", 0): 8}, False)]
    assert heard == [True, False]  # each request, asynchronous or not (the worker's metrics count them)
    assert queue.settled


def test_a_negative_commit_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="commit_interval_ms"):
        InFlight(Commits(), 2, lambda batch: Sends(), commit_interval_ms=-1)  # type: ignore[arg-type]
