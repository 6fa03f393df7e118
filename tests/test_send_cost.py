"""Smoke test of ``benchmarks.send_cost``: both ways of sending deliver every message (timing is never asserted)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from benchmarks.send_cost import sending_us
from workers.transport import KafkaSettings, make_consumer, make_producer

pytestmark = [pytest.mark.integration]


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_both_ways_of_sending_deliver_every_message(
    client: str, kafka_settings: Callable[..., KafkaSettings], topic_factory: Callable[..., str], group_id: str
) -> None:
    settings = kafka_settings()
    topic = topic_factory(partitions=4)
    keys = [f"doc-{i}".encode() for i in range(40)]
    with make_producer(settings, client) as producer:  # type: ignore[arg-type]
        costs = [sending_us(producer, topic, keys, batch=10, bulk=bulk) for bulk in (False, True)]
    assert all(math.isfinite(c) and c > 0 for c in costs)
    with make_consumer(settings, client) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic], group_id)
        records = []
        for _ in range(100):
            records += consumer.poll_batch(max_records=100, timeout_ms=200)
            if len(records) >= 2 * len(keys):
                break
    assert sorted(r.key for r in records) == sorted(keys * 2)
