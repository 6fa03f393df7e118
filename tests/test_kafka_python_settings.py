"""The kafka-python consumer's settings that bound its latency (no broker needed; the integration
tests in ``tests/integration/test_transport.py`` run consumers built from the same settings)."""

from __future__ import annotations

from workers.transport import KafkaSettings
from workers.transport.kafka_python import KafkaPythonConsumer


def test_an_idle_poll_sleeps_at_most_the_fetch_waits_order_not_kafka_pythons_100_ms() -> None:
    # kafka-python 3's poll() sleeps up to retry_backoff_ms whenever its fetcher has nothing
    # buffered and no fetch in flight, which happens mid-stream too.
    configs = KafkaPythonConsumer(KafkaSettings("127.0.0.1:9092"))._configs("group")
    assert configs["retry_backoff_ms"] <= configs["fetch_max_wait_ms"] == 10
