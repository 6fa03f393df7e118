"""The load: the document stream a run sends, pre-loading it into a topic, and the latency phase's lean producer."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from benchmarks.service.config import BenchConfig, _helper_client, _settings
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import TransportError


def repeat_stream(docs: Sequence[LabelledDocument], n: int) -> list[LabelledDocument]:
    """``docs`` in order, repeated until there are at least ``n``; copies get ids ``<id>~<round>``.

    >>> base = [LabelledDocument("a", ("x",), ("c",)), LabelledDocument("b", ("y",), ("c",))]
    >>> [d.id for d in repeat_stream(base, 5)]
    ['a', 'b', 'a~1', 'b~1', 'a~2', 'b~2']
    """
    out = list(docs)
    rounds = 1
    while len(out) < n:
        out += [replace(d, id=f"{d.id}~{rounds}") for d in docs]
        rounds += 1
    return out


def load_stream(config: BenchConfig) -> tuple[list[LabelledDocument], list[LabelledDocument], str]:
    """(training documents, the whole stream in order, a description)."""
    if config.synthetic is not None:
        from stream_winnow.datasets.synthetic import synthetic_stream

        stream = synthetic_stream(config.synthetic)
        return stream[: len(stream) * 7 // 10], stream, f"synthetic ({len(stream):,} documents)"
    if config.source is None:
        raise SystemExit("give --source (Reuters-21578 .tar.gz) or --synthetic N")
    from stream_winnow.datasets import read_modapte

    split = read_modapte(config.source)
    return (
        split.train,
        split.train + split.test,
        f"Reuters-21578 ModApte, {len(split.categories)} categories, {len(split.train):,} + {len(split.test):,} docs",
    )


def preload(bootstrap: str, topic: str, values: Sequence[tuple[bytes, bytes]], compression: str = "none") -> float:
    """Produce (key, value) pairs into ``topic`` in batches of codec ``compression``, and wait for the acks;
    returns the seconds taken."""
    from workers.transport import make_producer

    producer = make_producer(_settings(bootstrap, "bench-preload", compression=compression),
                             _helper_client())  # type: ignore[arg-type]
    started = time.perf_counter()
    try:
        for key, value in values:
            producer.send(topic, value, key=key)
        producer.flush(120_000)
    finally:
        producer.close()
    return time.perf_counter() - started


class _LoadProducer:
    """The latency phase's producer of documents, lean so that it takes little of the CPU it shares with the worker.

    With confluent-kafka, ``sender`` is librdkafka's own ``produce`` and librdkafka reports only
    failed sends (``delivery.report.only.error``): no Python call a document beyond the send. The
    transport's producer, which the worker needs to know when each batch is acknowledged, makes one
    per document. At 19,300 documents/s the load generator's thread took 16-19 % of a core with that
    one and 12-13 % with this (the harness, collector included, 12.5-12.7 → 11.4-11.6 µs of CPU a
    document; ``--phases latency --latency-rate 19300 --no-peers``). With kafka-python, the
    transport's producer is used.
    """

    def __init__(self, settings: Any) -> None:
        self._errors: list[Any] = []
        self._raw: Any = None
        self._producer: Any = None
        if _helper_client() == "confluent":
            import confluent_kafka

            from workers.transport.confluent import producer_configs

            self._raw = confluent_kafka.Producer({
                **producer_configs(settings),
                "delivery.report.only.error": True, "on_delivery": lambda error, _message: self._errors.append(error),
            })  # fmt: skip
        else:
            from workers.transport import make_producer

            self._producer = make_producer(settings, "kafka-python")

    def sender(self, topic: str) -> Callable[[bytes, bytes], None]:
        """``send(value, key)`` to ``topic``."""
        if self._raw is not None:
            return partial(self._raw.produce, topic)
        return lambda value, key: self._producer.send(topic, value, key=key)

    def poll(self) -> None:
        """Serve librdkafka's reports of failed sends (a no-op with kafka-python)."""
        if self._raw is not None:
            self._raw.poll(0)

    def flush(self) -> None:
        """Wait until every document is acknowledged; raise ``TransportError`` if any send failed."""
        if self._raw is None:
            self._producer.flush()
            return
        left = self._raw.flush(60.0)
        if self._errors or left:
            raise TransportError(f"{len(self._errors)} load message(s) failed ({left} unacknowledged): "
                                 f"{self._errors[:1]}")  # fmt: skip

    def close(self) -> None:
        """Release the client now: librdkafka's producer and its failure callback refer to each other, so
        without this it lived on until a garbage collection, reconnecting to a broker already stopped."""
        if self._producer is not None:
            self._producer.close()
        self._raw = None
