"""The transport on confluent-kafka (librdkafka): about 20x kafka-python's throughput; optional.

Install with ``pip install 'stream-winnow[fast]'``. Rebalance callbacks run inside
``consume()`` on the caller's thread, where a synchronous commit is allowed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from stream_winnow.errors import ConfigError, TransportError
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

try:
    import confluent_kafka
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigError(
        "the 'confluent' Kafka client needs confluent-kafka: pip install 'stream-winnow[fast]'"
    ) from exc

__all__ = ["ConfluentConsumer", "ConfluentProducer", "client_configs"]

log = logging.getLogger(__name__)

# librdkafka wants heartbeats well inside the session timeout; it defaults to 3 s.
_HEARTBEAT_MAX_MS = 3_000
# Longest wait for a broker answer in commit(), lag() and metadata calls.
_REQUEST_TIMEOUT_S = 10.0
# Queue full in send(): serve delivery reports for this long, then try again.
_QUEUE_FULL_POLL_S = 0.05
# Give up on a full queue after this, as kafka-python's max_block_ms does.
_MAX_BLOCK_S = 10.0
# Serve delivery reports every this many sends: poll(0) after each one costs about 40 % of the rate.
_POLL_EVERY_SENDS = 1_000
# Longest single wait for delivery reports in Delivery.wait(); short enough to notice the deadline.
_DELIVERY_POLL_S = 0.1


def client_configs(settings: KafkaSettings) -> dict[str, Any]:
    """The connection and security part of the librdkafka configuration."""
    configs: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": settings.client_id,
        "security.protocol": settings.security_protocol.lower(),
        # librdkafka logs broker errors itself; route them to our logger instead of stderr.
        "error_cb": _log_error,
    }
    if settings.sasl_mechanism is not None:
        configs["sasl.mechanism"] = settings.sasl_mechanism
        configs["sasl.username"] = settings.sasl_username
        configs["sasl.password"] = settings.sasl_password
    if settings.ssl_cafile is not None:
        configs["ssl.ca.location"] = settings.ssl_cafile
    return configs


def producer_configs(settings: KafkaSettings) -> dict[str, Any]:
    """The librdkafka configuration of a producer with ``settings``: batching, acknowledgements, partitioner."""
    s = settings
    return {
        **client_configs(s),
        "acks": s.acks,
        "enable.idempotence": s.enable_idempotence,
        "linger.ms": s.linger_ms,
        "batch.size": s.batch_size_bytes,
        "compression.type": s.compression,
        "message.timeout.ms": s.delivery_timeout_ms,
        # Kafka's default partition of a key (Java's, and kafka-python's): a document's decisions
        # land on the same partition whichever client produced them. librdkafka's default,
        # consistent_random, hashes keys with CRC32 instead.
        "partitioner": "murmur2_random",
    }


def _log_error(error: Any) -> None:
    log.warning("librdkafka: %s", error)


def _log_commit_failure(error: Any, partitions: list[Any]) -> None:
    failed = [(topic_partition(tp), str(tp.error)) for tp in partitions if tp.error is not None]
    if error is not None or failed:
        log.warning("commit failed (%s): %s; a later commit covers these offsets", error, failed)


class ConfluentConsumer(Consumer):
    """A group member on librdkafka: auto commit off, earliest offset when nothing is committed."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._consumer: confluent_kafka.Consumer | None = None
        self._committed: dict[TopicPartition, int] = {}  # what this consumer committed, per partition
        self._group_id: str | None = None

    def _configs(self, group_id: str) -> dict[str, Any]:
        s = self.settings
        return {
            **client_configs(s),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "fetch.wait.max.ms": s.fetch_max_wait_ms,
            "session.timeout.ms": s.session_timeout_ms,
            "heartbeat.interval.ms": min(_HEARTBEAT_MAX_MS, s.session_timeout_ms // 3),
            "max.poll.interval.ms": s.max_poll_interval_ms,
            # Reports every commit (served inside poll); only failures of asynchronous ones need it.
            "on_commit": _log_commit_failure,
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

        def call(callback: PartitionsCallback | None, partitions: list[Any]) -> None:
            if callback is None or (callback is on_revoke and not partitions):
                return
            try:
                callback({topic_partition(tp) for tp in partitions})
            except Exception:
                log.exception("rebalance callback %r failed", callback)

        # librdkafka assigns by itself after on_assign returns when the callback does not.
        kwargs: dict[str, Any] = {
            "on_assign": lambda _c, partitions: call(on_assign, partitions),
            "on_revoke": lambda _c, partitions: call(on_revoke, partitions),
            "on_lost": lambda _c, partitions: call(on_revoke, partitions),
        }
        try:
            if self._consumer is None:
                self._consumer = confluent_kafka.Consumer(self._configs(group_id))
                self._group_id = group_id
            self._consumer.subscribe(list(topics), **kwargs)
        except confluent_kafka.KafkaException as exc:
            raise TransportError(f"cannot subscribe to {list(topics)}: {exc}") from exc

    def _client(self) -> confluent_kafka.Consumer:
        if self._consumer is None:
            raise TransportError("subscribe() first")
        return self._consumer

    def poll_batch(self, max_records: int | None = None, timeout_ms: int = 1000) -> list[Record]:
        consumer = self._client()
        limit = max_records or self.settings.max_poll_records
        try:
            # Wait for the first record only, then take what is already fetched: consume(n, t) alone
            # would hold a half-empty batch for the whole timeout and add up to t to every latency.
            first = consumer.poll(timeout_ms / 1000)
            if first is None:
                return []
            messages = [first, *consumer.consume(limit - 1, 0)] if limit > 1 else [first]
        except (confluent_kafka.KafkaException, RuntimeError) as exc:
            raise TransportError(f"consume failed: {exc}") from exc
        records = []
        for m in messages:
            error = m.error()
            if error is not None:
                if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    continue
                raise TransportError(f"consume failed: {error}")
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            if topic is None or partition is None or offset is None:  # only on error messages
                continue
            ts_type, ts = m.timestamp()
            records.append(
                Record(
                    topic,
                    partition,
                    offset,
                    m.value() or b"",
                    m.key(),
                    ts if ts_type != confluent_kafka.TIMESTAMP_NOT_AVAILABLE else None,
                )
            )
        return records

    def commit(self, offsets: Mapping[TopicPartition, int], *, asynchronous: bool = False) -> None:
        if not offsets:
            return
        consumer = self._client()
        to_commit = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            if asynchronous:
                consumer.commit(offsets=to_commit, asynchronous=True)  # on_commit reports a failure
                result = None
            else:
                result = consumer.commit(offsets=to_commit, asynchronous=False)
        except (confluent_kafka.KafkaException, RuntimeError) as exc:
            raise TransportError(f"commit of {dict(offsets)} failed: {exc}") from exc
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise TransportError(f"commit failed for {[(topic_partition(tp), str(tp.error)) for tp in failed]}")
        self._committed.update(offsets)

    def assignment(self) -> set[TopicPartition]:
        if self._consumer is None:
            return set()
        return {topic_partition(tp) for tp in self._consumer.assignment()}

    def lag(self) -> dict[TopicPartition, int]:
        consumer = self._client()
        partitions = consumer.assignment()
        if not partitions:
            return {}
        try:
            # What this consumer committed and the high watermark of its last fetch are known locally;
            # the broker is asked only for the rest (about 50 ms a partition on Tansu: it stalled the loop).
            unknown = [tp for tp in partitions if topic_partition(tp) not in self._committed]
            for tp in consumer.committed(unknown, timeout=_REQUEST_TIMEOUT_S) if unknown else []:
                if tp.offset >= 0:  # OFFSET_INVALID: nothing committed
                    self._committed[topic_partition(tp)] = tp.offset
            lags: dict[TopicPartition, int] = {}
            for tp in partitions:
                start, end = consumer.get_watermark_offsets(tp, cached=True)
                done = self._committed.get(topic_partition(tp))
                if end < 0 or done is None:
                    # Tansu 0.6 answers ListOffsets(latest) with the last batch's base offset + 1;
                    # the high watermark of the last fetch (cached) is right, so take the larger.
                    start, listed = consumer.get_watermark_offsets(tp, timeout=_REQUEST_TIMEOUT_S, cached=False)
                    end = max(end, listed)
                lags[topic_partition(tp)] = max(0, end - (start if done is None else done))
        except (confluent_kafka.KafkaException, RuntimeError) as exc:
            raise TransportError(f"cannot read offsets: {exc}") from exc
        return lags

    def close(self) -> None:
        if self._consumer is None:
            return
        try:
            # Runs on_revoke first, which may still commit through this object.
            self._consumer.close()
        except (confluent_kafka.KafkaException, RuntimeError) as exc:
            log.warning("closing the consumer: %s", exc)
        finally:
            self._consumer = None


class _Sends(Delivery):
    """One checkpoint's messages: librdkafka reports each one to ``acknowledge`` (inside poll/flush)."""

    __slots__ = ("_owner", "remaining", "errors")

    def __init__(self, owner: ConfluentProducer) -> None:
        self._owner = owner
        self.remaining = 0
        self.errors: list[Any] = []

    def acknowledge(self, error: Any, message: Any) -> None:
        self.remaining -= 1
        if error is not None:
            self.errors.append(error)
            with self._owner._lock:
                self._owner._errors.append(error)

    def _check(self) -> bool:
        if self.errors:
            raise TransportError(f"{len(self.errors)} message(s) failed, first: {self.errors[0]}")
        return self.remaining <= 0

    def done(self) -> bool:
        if self.remaining > 0 and self._owner._producer is not None:
            self._owner._producer.poll(0)
        return self._check()

    def wait(self, timeout_ms: int = 30_000) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000
        while self.remaining > 0 and not self.errors:
            producer = self._owner._producer
            if producer is None:
                raise TransportError("producer is closed")
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            producer.poll(min(left, _DELIVERY_POLL_S))
        return self._check()


class ConfluentProducer(Producer):
    """An idempotent producer on librdkafka; ``flush`` reports every failed send since the last one."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._errors: list[Any] = []
        self._lock = threading.Lock()
        self._unpolled_sends = 0
        self._sends = _Sends(self)
        # librdkafka reports every message to the callback its send() named (its checkpoint's):
        # about 0.5 µs a message here, against the 8 ms a batch of a few hundred decisions waited
        # in flush() for its acknowledgements before checkpoints (py-spy of a worker at 12,000/s).
        try:
            self._producer: confluent_kafka.Producer | None = confluent_kafka.Producer(producer_configs(settings))
        except confluent_kafka.KafkaException as exc:
            raise TransportError(f"cannot create a producer for {settings.bootstrap_servers}: {exc}") from exc

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        producer = self._producer
        if producer is None:
            raise TransportError("producer is closed")
        sends = self._sends
        deadline = time.monotonic() + _MAX_BLOCK_S
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=sends.acknowledge)
                break
            except BufferError as exc:  # local queue full: let deliveries drain it
                if time.monotonic() > deadline:
                    raise TransportError(f"send queue still full after {_MAX_BLOCK_S} s") from exc
                producer.poll(_QUEUE_FULL_POLL_S)
            except confluent_kafka.KafkaException as exc:
                raise TransportError(f"cannot send to {topic!r}: {exc}") from exc
        sends.remaining += 1
        self._queued(producer, 1)

    def send_many(self, topic: str, values: Sequence[bytes], keys: Sequence[bytes]) -> None:
        """One ``produce_batch`` for the lot; what librdkafka could not queue goes through ``send`` after it.

        Batches of 170 decisions cost 3.9-4.4 µs a message one ``produce`` at a time and 3.0-3.2 in
        one call (``python -m benchmarks.send_cost --client confluent --repeats 8``, twice each,
        alternating). A message ``send`` refuses (too large, say) raises its ``TransportError``;
        the messages queued before it are in this checkpoint and will be acknowledged.
        """
        producer = self._producer
        if producer is None:
            raise TransportError("producer is closed")
        messages: list[dict[str, Any]] = [{"value": v, "key": k} for v, k in zip(values, keys, strict=True)]
        sends = self._sends
        try:
            queued = producer.produce_batch(topic, messages, on_delivery=sends.acknowledge)
            # The local queue filled up, or a message was refused: each marked with its "_error".
            refused = [m for m in messages if "_error" in m] if queued < len(messages) else []
        except BufferError:  # documented, though 2.16 marks a full queue per message instead: none queued
            queued, refused = 0, messages
        except confluent_kafka.KafkaException as exc:
            raise TransportError(f"cannot send to {topic!r}: {exc}") from exc
        sends.remaining += queued
        self._queued(producer, queued)
        for message in refused:
            self.send(topic, message["value"], message["key"])

    def _queued(self, producer: Any, n: int) -> None:
        """Count ``n`` more queued sends; every ``_POLL_EVERY_SENDS`` serve the delivery callbacks."""
        self._unpolled_sends += n
        if self._unpolled_sends >= _POLL_EVERY_SENDS:
            self._unpolled_sends = 0
            producer.poll(0)

    def checkpoint(self) -> Delivery:
        sends, self._sends = self._sends, _Sends(self)
        return sends

    def flush(self, timeout_ms: int = 30_000) -> None:
        producer = self._producer
        if producer is None:
            raise TransportError("producer is closed")
        remaining = producer.flush(timeout_ms / 1000)
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise TransportError(f"{len(errors)} message(s) failed, first: {errors[0]}")
        if remaining:
            raise TransportError(f"{remaining} message(s) not acknowledged within {timeout_ms} ms")

    def close(self, timeout_ms: int = 5_000) -> None:
        if self._producer is None:
            return
        producer, self._producer = self._producer, None
        remaining = producer.flush(timeout_ms / 1000)
        if remaining:
            log.warning("closing the producer with %d message(s) undelivered", remaining)
        if hasattr(producer, "close"):
            producer.close()
