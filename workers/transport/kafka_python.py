"""The transport on kafka-python (pure Python; the default client).

kafka-python 3 runs its network I/O and the group protocol on its own IO thread, and
calls rebalance listeners there: a listener that blocks on a consumer call (e.g. a
synchronous commit) would dead-lock that thread. So the ``on_assign``/``on_revoke``
callbacks run on a short-lived helper thread while an async listener waits for them
without blocking the IO thread; the caller's ``poll_batch`` stays blocked meanwhile, so
the worker's own state is never touched from two threads at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kafka
from kafka.errors import KafkaError
from kafka.future import Future as KafkaFuture
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition

from stream_winnow.errors import TransportError
from workers.transport.base import (
    Consumer,
    Delivery,
    KafkaSettings,
    PartitionsCallback,
    Producer,
    Record,
    TopicPartition,
    topic_partition,
)
from workers.transport.partitioner import partitions

try:  # kafka-python >= 3: listeners run on the IO thread
    from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
except ImportError:  # kafka-python 2.x: listeners run inside poll() on the caller's thread
    AsyncConsumerRebalanceListener = None

__all__ = ["KafkaPythonConsumer", "KafkaPythonProducer", "client_configs"]

log = logging.getLogger(__name__)

# kafka-python wants heartbeats well inside the session timeout; it defaults to 3 s.
_HEARTBEAT_MAX_MS = 3_000
# Longest single request; must leave delivery_timeout_ms >= linger_ms + request_timeout_ms.
_REQUEST_TIMEOUT_MAX_MS = 30_000
# send() waits this long for topic metadata or buffer space before raising, so a typo in a
# topic name fails in seconds rather than after kafka-python's 60 s default.
_MAX_BLOCK_MS = 10_000
# kafka-python 3's poll() sleeps up to retry_backoff_ms (100 by default) whenever its fetcher finds
# nothing buffered and no fetch in flight, and that happens under a steady stream too, where it
# can push a paced worker's p99 past 100 ms. The consumer's retry backoff is therefore the fetch
# wait's order, 10 ms: an idle poll costs at most that, and a failed request is retried that much
# sooner (benchmarks.service --client kafka-python --phases latency shows the difference).
_CONSUMER_RETRY_BACKOFF_MS = 10


def client_configs(settings: KafkaSettings) -> dict[str, Any]:
    """The connection and security part of the kafka-python configuration (shared by all clients)."""
    configs: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in settings.bootstrap_servers.split(",") if s.strip()],
        "client_id": settings.client_id,
        "security_protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism is not None:
        configs["sasl_mechanism"] = settings.sasl_mechanism
        configs["sasl_plain_username"] = settings.sasl_username
        configs["sasl_plain_password"] = settings.sasl_password
    if settings.ssl_cafile is not None:
        configs["ssl_cafile"] = settings.ssl_cafile
    return configs


def _log_commit_failure(offsets: Any, response: Any) -> None:
    if isinstance(response, BaseException):
        log.warning("commit of %s failed: %r; a later commit covers these offsets", offsets, response)


class _Listener:
    """Bridges kafka-python's rebalance listener to the two plain callbacks."""

    def __init__(
        self,
        consumer: kafka.KafkaConsumer,
        on_assign: PartitionsCallback | None,
        on_revoke: PartitionsCallback | None,
    ) -> None:
        self._consumer = consumer
        self._on_assign = on_assign
        self._on_revoke = on_revoke

    def call(self, callback: PartitionsCallback | None, partitions: Any) -> None:
        if callback is None or (callback is self._on_revoke and not partitions):
            return  # kafka-python "revokes" an empty set before the first join
        try:
            callback({topic_partition(tp) for tp in partitions})
        except Exception:
            # kafka-python would log and swallow it too; the group must go on rebalancing.
            log.exception("rebalance callback %r failed", callback)

    async def call_off_io_thread(self, callback: PartitionsCallback | None, partitions: Any) -> None:
        """Run ``callback`` on a helper thread; awaiting it keeps the IO thread (heartbeats, commits) going."""
        if callback is None or (callback is self._on_revoke and not partitions):
            return
        net = self._consumer._net  # kafka-python 3's event loop; no public handle exists
        done = KafkaFuture()

        def run() -> None:
            try:
                self.call(callback, partitions)
            finally:
                # Resolve the future on the IO thread: Future callbacks are not thread-safe there.
                net.call_soon_threadsafe(lambda: done.success(None))

        threading.Thread(target=run, name="stream-winnow-rebalance", daemon=True).start()
        await done


def _make_listener(
    consumer: kafka.KafkaConsumer,
    on_assign: PartitionsCallback | None,
    on_revoke: PartitionsCallback | None,
) -> Any:
    bridge = _Listener(consumer, on_assign, on_revoke)
    if AsyncConsumerRebalanceListener is not None and hasattr(consumer, "_net"):

        class AsyncListener(AsyncConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: Any) -> None:
                await bridge.call_off_io_thread(on_revoke, revoked)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                await bridge.call_off_io_thread(on_assign, assigned)

        return AsyncListener()

    class SyncListener(kafka.ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            bridge.call(on_revoke, revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            bridge.call(on_assign, assigned)

    return SyncListener()


class KafkaPythonConsumer(Consumer):
    """A group member on kafka-python: auto commit off, earliest offset when nothing is committed."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._consumer: kafka.KafkaConsumer | None = None
        self._group_id: str | None = None

    def _configs(self, group_id: str) -> dict[str, Any]:
        s = self.settings
        return {
            **client_configs(s),
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "allow_auto_create_topics": False,
            "max_poll_records": s.max_poll_records,
            "fetch_max_wait_ms": s.fetch_max_wait_ms,
            "retry_backoff_ms": _CONSUMER_RETRY_BACKOFF_MS,
            "session_timeout_ms": s.session_timeout_ms,
            "heartbeat_interval_ms": min(_HEARTBEAT_MAX_MS, s.session_timeout_ms // 3),
            "max_poll_interval_ms": s.max_poll_interval_ms,
        }

    def subscribe(
        self,
        topics: Sequence[str],
        group_id: str,
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        if self._consumer is not None and group_id != self._group_id:
            raise TransportError(f"already in group {self._group_id!r}; use a new consumer for {group_id!r}")
        try:
            if self._consumer is None:
                self._consumer = kafka.KafkaConsumer(**self._configs(group_id))
                self._group_id = group_id
            listener = _make_listener(self._consumer, on_assign, on_revoke)
            self._consumer.subscribe(topics=list(topics), listener=listener)
        except KafkaError as exc:
            raise TransportError(f"cannot subscribe to {list(topics)}: {exc!r}") from exc

    def _client(self) -> kafka.KafkaConsumer:
        if self._consumer is None:
            raise TransportError("subscribe() first")
        return self._consumer

    def poll_batch(self, max_records: int | None = None, timeout_ms: int = 1000) -> list[Record]:
        consumer = self._client()
        try:
            batches = consumer.poll(timeout_ms=timeout_ms, max_records=max_records or self.settings.max_poll_records)
        except KafkaError as exc:
            raise TransportError(f"poll failed: {exc!r}") from exc
        return [
            Record(m.topic, m.partition, m.offset, m.value, m.key, m.timestamp if m.timestamp >= 0 else None)
            for messages in batches.values()
            for m in messages
        ]

    def commit(self, offsets: Mapping[TopicPartition, int], *, asynchronous: bool = False) -> None:
        if not offsets:
            return
        consumer = self._client()
        to_commit = {
            KafkaTopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)
            for (topic, partition), offset in offsets.items()
        }
        try:
            if asynchronous:
                consumer.commit_async(to_commit, callback=_log_commit_failure)
            else:
                consumer.commit(to_commit)
        except (KafkaError, RuntimeError) as exc:
            raise TransportError(f"commit of {dict(offsets)} failed: {exc!r}") from exc

    def assignment(self) -> set[TopicPartition]:
        if self._consumer is None:
            return set()
        return {topic_partition(tp) for tp in self._consumer.assignment()}

    def lag(self) -> dict[TopicPartition, int]:
        consumer = self._client()
        partitions = list(consumer.assignment())
        if not partitions:
            return {}
        try:
            ends = consumer.end_offsets(partitions)
            starts = consumer.beginning_offsets(partitions)
            lags: dict[TopicPartition, int] = {}
            for tp in partitions:
                # Tansu 0.6 answers ListOffsets(latest) with the last batch's base offset + 1;
                # the high watermark of the last fetch is right, so take the larger.
                end = max(ends[tp], consumer.highwater(tp) or 0)
                done = consumer.committed(tp)
                lags[topic_partition(tp)] = max(0, end - (starts[tp] if done is None else done))
        except KafkaError as exc:
            raise TransportError(f"cannot read offsets: {exc!r}") from exc
        return lags

    def close(self) -> None:
        if self._consumer is None:
            return
        try:
            # Runs on_revoke first, which may still commit through this object.
            self._consumer.close(autocommit=False)
        except KafkaError as exc:
            log.warning("closing the consumer: %r", exc)
        finally:
            self._consumer = None


class _Sends(Delivery):
    """One checkpoint's messages, as the futures kafka-python returned for them."""

    __slots__ = ("futures", "_checked")

    def __init__(self) -> None:
        self.futures: list[Any] = []
        self._checked = 0  # futures before this one are known to be acknowledged

    def done(self) -> bool:
        futures = self.futures
        while self._checked < len(futures):
            future = futures[self._checked]
            if not future.is_done:
                return False
            if future.failed():
                raise TransportError(f"a message failed: {future.exception!r}") from future.exception
            self._checked += 1
        return True

    def wait(self, timeout_ms: int = 30_000) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000
        while not self.done():
            future = self.futures[self._checked]
            try:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
            except KafkaError:
                # A record that expired fails with KafkaTimeoutError too: done() raises that one.
                if not future.is_done:
                    return False
        return True


class KafkaPythonProducer(Producer):
    """An idempotent producer on kafka-python; ``flush`` reports every failed send since the last one."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        s = settings
        request_timeout_ms = max(1_000, min(_REQUEST_TIMEOUT_MAX_MS, s.delivery_timeout_ms - s.linger_ms))
        try:
            self._producer: kafka.KafkaProducer | None = kafka.KafkaProducer(
                **client_configs(s),
                acks=s.acks,
                enable_idempotence=s.enable_idempotence,
                linger_ms=s.linger_ms,
                batch_size=s.batch_size_bytes,
                compression_type=None if s.compression == "none" else s.compression,
                delivery_timeout_ms=max(s.delivery_timeout_ms, request_timeout_ms + s.linger_ms),
                request_timeout_ms=request_timeout_ms,
                max_block_ms=min(_MAX_BLOCK_MS, s.delivery_timeout_ms),
                allow_auto_create_topics=False,
            )
        except KafkaError as exc:
            raise TransportError(f"cannot create a producer for {s.bootstrap_servers}: {exc!r}; is the broker "
                                 "running there? (`stream-winnow up` starts one on this machine)") from exc
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._sends = _Sends()
        partitions([b""], 1)  # load send_many's compiled code now, not in the first batch

    def _on_error(self, exc: BaseException) -> None:
        with self._lock:
            self._errors.append(exc)

    def _client(self) -> kafka.KafkaProducer:
        if self._producer is None:
            raise TransportError("producer is closed")
        return self._producer

    def _queue(self, producer: kafka.KafkaProducer, topic: str, value: bytes, key: bytes | None,
               partition: int | None = None) -> None:  # fmt: skip
        """One ``KafkaProducer.send``, its failure reported to ``flush`` and its future to the next checkpoint."""
        try:
            future = producer.send(topic, value=value, key=key, partition=partition)
        except KafkaError as exc:
            raise TransportError(f"cannot send to {topic!r}: {exc!r}") from exc
        future.add_errback(self._on_error)
        self._sends.futures.append(future)

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self._queue(self._client(), topic, value, key)

    def send_many(self, topic: str, values: Sequence[bytes], keys: Sequence[bytes]) -> None:
        """``send`` for each, with the partitions chosen in one compiled pass (:mod:`.partitioner`).

        The same partitions kafka-python's default partitioner would choose, for about three
        quarters of the cost a message.
        """
        producer = self._client()
        if len(values) != len(keys):
            raise ValueError(f"{len(values)} values but {len(keys)} keys")
        if not values:
            return
        try:
            ids = sorted(producer.partitions_for(topic))
        except KafkaError as exc:
            raise TransportError(f"cannot send to {topic!r}: {exc!r}") from exc
        for value, key, index in zip(values, keys, partitions(keys, len(ids)), strict=True):
            self._queue(producer, topic, value, key, ids[index])

    def checkpoint(self) -> Delivery:
        sends, self._sends = self._sends, _Sends()
        return sends

    def flush(self, timeout_ms: int = 30_000) -> None:
        producer = self._client()
        try:
            producer.flush(timeout=timeout_ms / 1000)
        except KafkaError as exc:
            raise TransportError(f"messages not acknowledged within {timeout_ms} ms: {exc!r}") from exc
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise TransportError(f"{len(errors)} message(s) failed, first: {errors[0]!r}") from errors[0]

    def close(self, timeout_ms: int = 5_000) -> None:
        if self._producer is None:
            return
        producer, self._producer = self._producer, None
        try:
            producer.close(timeout=timeout_ms / 1000)
        except KafkaError as exc:
            log.warning("closing the producer: %r", exc)
