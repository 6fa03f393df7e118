"""The collector: a consumer in this process that counts what a phase puts out and records when each message arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import msgpack

from benchmarks.service.config import _helper_client
from stream_winnow.errors import TransportError

_COLLECT_POLL_S = 0.05


class Collector(threading.Thread):
    """Reads output topics from the beginning (assigned, no group) and records each arrival.

    ``on_message(key, now_s)`` runs on this thread for every message of ``topics[0]``.
    """

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        *,
        latency: bool = False,
        on_message: Callable[[bytes | None, float], None] | None = None,
        partitions: int,
    ) -> None:
        super().__init__(daemon=True, name="bench-collector")
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.partitions = partitions
        self.latency = latency
        self.on_message = on_message
        self.counts = dict.fromkeys(self.topics, 0)
        self.first_s: float | None = None
        self.last_s: float | None = None
        # (arrival time in s, the decision's bytes): its ts is read after the run, off the measured path.
        self._arrivals: list[tuple[float, bytes]] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._ready = threading.Event()
        self._changed = threading.Condition()

    def run(self) -> None:
        try:
            if _helper_client() == "confluent":
                self._run_confluent()
            else:
                self._run_kafka_python()
        except BaseException as error:  # noqa: BLE001 - reported to the waiting thread
            self.error = error
            self._ready.set()
            with self._changed:
                self._changed.notify_all()

    def _record(self, batch: list[tuple[str, bytes | None, bytes]]) -> None:
        now = time.time()
        main = self.topics[0]
        n_main = 0
        for topic, key, value in batch:
            self.counts[topic] += 1
            if topic != main:
                continue
            n_main += 1
            if self.latency:
                self._arrivals.append((now, value))
            if self.on_message is not None:
                self.on_message(key, now)
        if n_main:
            if self.first_s is None:
                self.first_s = now
            self.last_s = now
        with self._changed:
            self._changed.notify_all()

    def _run_confluent(self) -> None:
        import confluent_kafka

        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": "bench-collector", "enable.auto.commit": False,
            "fetch.wait.max.ms": 10, "enable.partition.eof": False,
        })  # fmt: skip
        try:
            consumer.assign([
                confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
                for t in self.topics for p in range(self.partitions)
            ])  # fmt: skip
            self._ready.set()
            while not self._halt.is_set():
                # Wait for the first message only, then take what is already fetched: consume(n, t)
                # holds a batch that is not full for the whole t, which added up to 50 ms to every
                # latency measured here (p50 32 ms, p99 59 ms at 5,000 msg/s, against 7 and 13 ms).
                first = consumer.poll(_COLLECT_POLL_S)
                if first is None:
                    continue
                messages = [first, *consumer.consume(10_000, 0)]
                batch = [(m.topic(), m.key(), m.value()) for m in messages if m.error() is None]
                if batch:
                    self._record(batch)  # type: ignore[arg-type]
        finally:
            consumer.close()

    def _run_kafka_python(self) -> None:
        import kafka

        consumer = kafka.KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=10,
        )  # fmt: skip
        try:
            consumer.assign([kafka.TopicPartition(t, p) for t in self.topics for p in range(self.partitions)])
            self._ready.set()
            while not self._halt.is_set():
                polled = consumer.poll(timeout_ms=int(_COLLECT_POLL_S * 1000), max_records=10_000)
                batch = [(r.topic, r.key, r.value) for records in polled.values() for r in records]
                if batch:
                    self._record(batch)
        finally:
            consumer.close()

    def timestamps_ms(self, since_ms: int = 0) -> list[tuple[int, int | None, float]]:
        """Per message of ``topics[0]`` with a ``ts`` of at least ``since_ms``: its ``ts``, its
        ``decided_ts`` (None where it has none: the bare pipe's) and its arrival here, in ms."""
        out = []
        for now, value in self._arrivals:
            message = msgpack.unpackb(value)
            ts = message.get("ts")
            if ts is not None and ts >= since_ms:
                out.append((ts, message.get("decided_ts"), now * 1000))
        return out

    def arrivals(self, start: int = 0) -> list[tuple[float, bytes]]:
        """(arrival time in s, bytes) of the messages of ``topics[0]`` from the ``start``-th on (``latency=True``)."""
        return self._arrivals[start:]

    def values(self) -> list[bytes]:
        """The messages of ``topics[0]`` in arrival order (kept only with ``latency=True``)."""
        return [value for _, value in self._arrivals]

    def start_and_wait(self) -> Collector:
        self.start()
        self._ready.wait(30)
        return self

    def wait_for(self, n: int, timeout_s: float, check: Callable[[], None] | None = None) -> None:
        """Until ``n`` messages of ``topics[0]`` arrived; raises TransportError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        main = self.topics[0]
        with self._changed:
            while self.counts[main] < n:
                if self.error is not None:
                    raise TransportError(f"the collector failed: {self.error!r}")
                if time.monotonic() > deadline:
                    raise TransportError(f"only {self.counts[main]:,} of {n:,} messages on {main} in {timeout_s:.0f} s")
                self._changed.wait(0.2)
                if check is not None:
                    check()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def span_s(self) -> float:
        if self.first_s is None or self.last_s is None:
            return float("nan")
        return self.last_s - self.first_s
