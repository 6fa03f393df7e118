"""The small Kafka interface a worker needs, independent of the client library behind it.

A worker reads batches, produces decisions, and commits a batch's input offsets only once
the broker has acknowledged every output of it (at-least-once)::

    consumer.subscribe(["documents"], "scorers", on_revoke=commit_what_is_done)
    records = consumer.poll_batch(max_records=500, timeout_ms=1000)
    for record in records:
        producer.send("decisions", score(record.value), key=record.key)
    delivery = producer.checkpoint()   # these sends, acknowledged or not yet
    ...                                # the next batch, while the broker acknowledges
    if delivery.wait(timeout_ms=30_000):      # raises TransportError if any failed
        consumer.commit(next_offsets(records))

``flush`` waits for everything sent so far instead.

Two implementations: kafka-python (pure Python, the default) and confluent-kafka
(librdkafka, about 3.7x the throughput here with ``crc32c``, optional). Every client error surfaces as
``TransportError``; a setting a client cannot honour as ``ConfigError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NamedTuple, Self, get_args

from stream_winnow.errors import ConfigError

__all__ = [
    "COMPRESSIONS",
    "Client",
    "Compression",
    "Consumer",
    "Delivery",
    "KafkaSettings",
    "PartitionsCallback",
    "Producer",
    "Record",
    "SecurityProtocol",
    "TopicPartition",
    "next_offsets",
]

Client = Literal["kafka-python", "confluent"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
# Kafka's batch codecs; both clients write and read all four (kafka-python through lz4, zstandard and
# python-snappy, which are dependencies so that a worker reads whatever its producers chose).
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
COMPRESSIONS: tuple[Compression, ...] = get_args(Compression)

#: (topic, partition)
TopicPartition = tuple[str, int]
#: Called with the partitions gained (``on_assign``) or given up (``on_revoke``) in a rebalance.
PartitionsCallback = Callable[[set[TopicPartition]], None]


class Record(NamedTuple):
    """One message read from a topic; ``value`` and ``key`` are the raw bytes.

    A named tuple: a consumer builds one per message, and a frozen dataclass took 1.0 µs to
    build against 0.26 µs (its ``__init__`` sets each field through ``object.__setattr__``).
    """

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
    timestamp_ms: int | None = None


def topic_partition(tp: Any) -> TopicPartition:
    """(topic, partition) of a client library's TopicPartition object."""
    return (tp.topic, tp.partition)


def next_offsets(records: Iterable[Record]) -> dict[TopicPartition, int]:
    """The offsets to commit after processing ``records``: last offset + 1 per partition.

    >>> next_offsets([Record("t", 0, 5, b""), Record("t", 0, 6, b""), Record("t", 1, 2, b"")])
    {('t', 0): 7, ('t', 1): 3}
    """
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        tp = (record.topic, record.partition)
        if record.offset + 1 > offsets.get(tp, -1):
            offsets[tp] = record.offset + 1
    return offsets


@dataclass(frozen=True)
class KafkaSettings:
    """How to reach the brokers and how to batch; one object for both clients.

    >>> KafkaSettings("b:9092", security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
    ...               sasl_username="u", sasl_password="secret")  # doctest: +ELLIPSIS
    KafkaSettings(bootstrap_servers='b:9092', security_protocol='SASL_SSL', ..., sasl_username='u', ssl_cafile=None, ...)
    """

    bootstrap_servers: str
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    client_id: str = "stream-winnow"

    # Consumer.
    # Default size of one poll_batch: large enough to amortise one Redis pipeline per batch,
    # small enough that a batch is scored well within max_poll_interval_ms.
    max_poll_records: int = 1000
    # How long the broker holds a fetch waiting for data: bounds the latency added when a
    # topic is quiet (the client default of 500 ms is tuned for throughput only). Tansu holds
    # every fetch that finds nothing new for the whole wait even as data arrives: at 10,000
    # documents/s a worker's p99 was 217 ms with 100 here and 116 ms with 10 (benchmarks.service
    # --phases latency --latency-rate 10000). Apache Kafka
    # answers as soon as data is there, so the wait only costs idle fetches (100 a second).
    fetch_max_wait_ms: int = 10
    # A worker that dies loses its partitions to the others within this time; heartbeats
    # go every session_timeout_ms / 3 so two can be lost without a rebalance.
    session_timeout_ms: int = 10_000
    # Longest gap between two polls before the group evicts the worker; one batch includes
    # Redis retries and a producer flush, both bounded far below this.
    max_poll_interval_ms: int = 120_000

    # Producer.
    # Waiting a few ms lets batches fill under load; small next to a Redis round trip per batch.
    linger_ms: int = 5
    # Large batches matter most for throughput; 256 KiB holds about 400 decisions of 600 bytes.
    batch_size_bytes: int = 262_144
    # A decision is acknowledged only once every in-sync replica has it, so committing the
    # input offset after flush() cannot lose it when a broker fails.
    acks: Literal["all", 1, 0] = "all"
    # Retries cannot duplicate or reorder messages; needs acks="all".
    enable_idempotence: bool = True
    # flush() gives up (TransportError) after this, so a dead broker stops a worker within
    # 30 s instead of the clients' default two minutes.
    delivery_timeout_ms: int = 30_000
    # Codec of the record batches this client produces (consumers read any codec whatever this says).
    compression: Compression = "none"

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers is empty")
        if self.security_protocol.startswith("SASL_"):
            if self.sasl_mechanism is None or self.sasl_username is None or self.sasl_password is None:
                raise ConfigError(
                    f"security_protocol {self.security_protocol} needs sasl_mechanism, "
                    "sasl_username and sasl_password"
                )
        if self.enable_idempotence and self.acks != "all":
            raise ConfigError("enable_idempotence needs acks='all'")
        for name in ("max_poll_records", "session_timeout_ms", "max_poll_interval_ms", "batch_size_bytes",
                     "delivery_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("fetch_max_wait_ms", "linger_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.compression not in COMPRESSIONS:
            raise ConfigError(f"compression must be one of {', '.join(COMPRESSIONS)}; got {self.compression!r}")


class _ClosedOnExit(ABC):
    """``with client:`` closes the client at the end of the block."""

    @abstractmethod
    def close(self) -> None:
        """Release the client. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Consumer(_ClosedOnExit):
    """Reads batches from topics as a member of a consumer group; offsets are committed by hand."""

    @abstractmethod
    def subscribe(
        self,
        topics: Sequence[str],
        group_id: str,
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """Join ``group_id`` and read ``topics`` from the committed offsets (earliest when none).

        The callbacks run on the thread that calls ``poll_batch`` or ``close`` (kafka-python:
        a helper thread, while poll_batch waits), during the rebalance, before any other member
        gets the partitions: ``on_revoke`` may flush the producer and ``commit`` the work done
        on the revoked partitions. Partitions lost without a clean rebalance are passed to
        ``on_revoke`` too; committing them raises ``TransportError``.
        """

    @abstractmethod
    def poll_batch(self, max_records: int | None = None, timeout_ms: int = 1000) -> list[Record]:
        """Up to ``max_records`` (default ``settings.max_poll_records``) records, waiting at most
        ``timeout_ms`` for the first; empty when nothing arrived in time."""

    @abstractmethod
    def commit(self, offsets: Mapping[TopicPartition, int], *, asynchronous: bool = False) -> None:
        """Commit the next offset to read per partition (last processed + 1).

        Synchronous by default: raises ``TransportError`` if the broker refuses or does not
        answer (e.g. the partition was reassigned meanwhile). With ``asynchronous`` it returns
        at once and a failure is only logged: the offsets stay uncommitted until a later commit
        covers them, so at worst their records are read again (at-least-once holds).
        """

    @abstractmethod
    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns now."""

    @abstractmethod
    def lag(self) -> dict[TopicPartition, int]:
        """Per owned partition: log end offset minus the committed offset, i.e. what a member
        taking over now would (re)read; the log start offset stands in where nothing is
        committed yet. A few broker round trips: for metrics, not for every batch."""

    @abstractmethod
    def close(self) -> None:
        """Leave the group (its partitions go to the others at once) and release sockets. Idempotent."""


class Delivery(ABC):
    """The broker's acknowledgement of a group of sends: those between two ``Producer.checkpoint`` calls."""

    @abstractmethod
    def done(self) -> bool:
        """True once every message of the group is acknowledged; does not block.

        Raises ``TransportError`` if any of them failed: the caller must then not commit the input
        they came from, and sends them again.
        """

    @abstractmethod
    def wait(self, timeout_ms: int = 30_000) -> bool:
        """Block until ``done`` (True) or for at most ``timeout_ms`` (False: some are still
        unacknowledged); raises ``TransportError`` if any failed, as ``done`` does."""


class Producer(_ClosedOnExit):
    """Sends messages; a ``Delivery`` (or ``flush``) is the point where they are known to be stored."""

    @abstractmethod
    def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        """Queue one message; returns at once unless the client's buffer is full.

        Raises ``TransportError`` if the message cannot even be queued (unknown topic after
        the metadata wait, message too large, producer closed).
        """

    def send_many(self, topic: str, values: Sequence[bytes], keys: Sequence[bytes]) -> None:
        """Queue ``values[i]`` keyed ``keys[i]``, in order, as ``send`` would; a client may do it cheaper in bulk."""
        for value, key in zip(values, keys, strict=True):
            self.send(topic, value, key=key)

    @abstractmethod
    def checkpoint(self) -> Delivery:
        """Every message sent since the previous checkpoint, as one ``Delivery`` to wait for later."""

    @abstractmethod
    def flush(self, timeout_ms: int = 30_000) -> None:
        """Block until every message sent so far is acknowledged by the broker.

        Raises ``TransportError`` if any failed since the last flush or some are still
        unacknowledged after ``timeout_ms``; the caller must then not commit its input.
        """

    @abstractmethod
    def close(self, timeout_ms: int = 5_000) -> None:
        """Try to deliver what is queued for up to ``timeout_ms``, then release the client. Idempotent."""
