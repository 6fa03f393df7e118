"""The transport interface against a real broker, with each client library."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import pytest
from kafka import KafkaAdminClient

from stream_winnow.errors import ConfigError, TransportError
from workers.embedded import create_topics, start_broker
from workers.transport import (
    COMPRESSIONS,
    Consumer,
    KafkaSettings,
    Record,
    TopicPartition,
    make_consumer,
    make_producer,
    next_offsets,
)
from workers.transport.partitioner import partitions

pytestmark = pytest.mark.timeout(60)

CLIENTS = ["kafka-python", "confluent"]
# A first group join on Tansu takes about session_timeout_ms / 2 (3 s here); allow slow machines.
JOIN_TIMEOUT_S = 20.0

SettingsFactory = Callable[..., KafkaSettings]


def produce(settings: KafkaSettings, client: str, topic: str, n: int) -> set[bytes]:
    values = {b"value-%06d" % i for i in range(n)}
    with make_producer(settings, client) as producer:  # type: ignore[arg-type]
        for value in sorted(values):
            producer.send(topic, value, key=value[-3:])
        producer.flush(timeout_ms=20_000)
    return values


def consume(consumer: Consumer, n: int, timeout_s: float = JOIN_TIMEOUT_S) -> list[Record]:
    """Poll until ``n`` records arrived (or the time is up), then poll once more to catch extras."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < n and time.monotonic() < deadline:
        records += consumer.poll_batch(max_records=300, timeout_ms=200)
    records += consumer.poll_batch(max_records=300, timeout_ms=300)
    return records


def read_back(settings: KafkaSettings, client: str, topic: str, group_id: str, n: int) -> list[Record]:
    """Join ``group_id`` on ``topic`` with a new consumer and ``consume`` ``n`` records."""
    with make_consumer(settings, client) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic], group_id)
        return consume(consumer, n)


def held_offsets(settings: KafkaSettings, group_id: str) -> dict[TopicPartition, int]:
    """The offsets the broker holds for ``group_id``, read without joining the group."""
    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    try:
        held = admin.list_group_offsets({group_id: None})[group_id]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in held.items()}


def test_settings_hide_the_password() -> None:
    settings = KafkaSettings(
        "b:9092", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="worker", sasl_password="hunter2-secret",
    )
    assert "hunter2" not in repr(settings)
    assert "worker" in repr(settings)


def test_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ConfigError):
        KafkaSettings("b:9092", security_protocol="SASL_PLAINTEXT")  # no credentials
    with pytest.raises(ConfigError):
        KafkaSettings("b:9092", acks=1)  # idempotence needs acks=all
    with pytest.raises(ConfigError):
        KafkaSettings("")


def test_unknown_client_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown Kafka client"):
        make_consumer(KafkaSettings("b:9092"), "librdkafka")  # type: ignore[arg-type]


def test_missing_confluent_kafka_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # makes the import fail
    monkeypatch.delitem(sys.modules, "workers.transport.confluent", raising=False)
    with pytest.raises(ConfigError, match="stream-winnow\\[fast\\]"):
        make_producer(KafkaSettings("b:9092"), "confluent")


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_1000_messages_are_consumed_exactly_once(
    client: str, kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    settings = kafka_settings()
    topic = topic_factory(partitions=4)
    sent = produce(settings, client, topic, 1000)

    assigned: list[set[TopicPartition]] = []
    with make_consumer(settings, client) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic], group_id, on_assign=assigned.append)
        records = consume(consumer, 1000)
        assert len(records) == 1000
        assert {r.value for r in records} == sent
        assert {r.partition for r in records} == {0, 1, 2, 3}
        for partition in range(4):  # each partition read in order, from offset 0, without gaps
            offsets = [r.offset for r in records if r.partition == partition]
            assert offsets == list(range(len(offsets)))
        record = records[0]
        assert record.topic == topic
        assert record.key == record.value[-3:]
        assert isinstance(record.timestamp_ms, int) and record.timestamp_ms > 1_600_000_000_000

        assert assigned == [{(topic, p) for p in range(4)}]
        assert consumer.assignment() == {(topic, p) for p in range(4)}
        assert sum(consumer.lag().values()) == 1000  # nothing committed yet
        consumer.commit(next_offsets(records))
        assert consumer.lag() == {(topic, p): 0 for p in range(4)}


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("bulk", [True, False], ids=["send_many", "send"])
def test_a_key_goes_to_the_partition_kafkas_default_partitioner_gives_it(
    client: str, bulk: bool, kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    """Both clients, one message or a batch at a time, agree with Java's murmur2 partitioner."""
    settings = kafka_settings()
    topic = topic_factory(partitions=4)
    keys = [f"doc-{i}".encode() for i in range(200)]
    values = [b"decision-" + key for key in keys]
    with make_producer(settings, client) as producer:  # type: ignore[arg-type]
        if bulk:
            producer.send_many(topic, values, keys)
        else:
            for value, key in zip(values, keys, strict=True):
                producer.send(topic, value, key=key)
        producer.flush(timeout_ms=20_000)
    records = read_back(settings, client, topic, group_id, len(keys))
    assert len(records) == len(keys)
    assert {r.key: r.partition for r in records} == dict(zip(keys, partitions(keys, 4), strict=True))
    assert {r.partition for r in records} == {0, 1, 2, 3}
    for partition in range(4):  # in the order sent, within each partition
        sent = [v for v, p in zip(values, partitions(keys, 4), strict=True) if p == partition]
        assert [r.value for r in sorted(records, key=lambda r: r.offset) if r.partition == partition] == sent


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_a_new_member_resumes_after_the_committed_offsets(
    client: str, kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    settings = kafka_settings()
    topic = topic_factory(partitions=4)
    produce(settings, client, topic, 200)

    with make_consumer(settings, client) as first:  # type: ignore[arg-type]
        first.subscribe([topic], group_id)
        records = consume(first, 200)
        assert len(records) == 200
        ends = next_offsets(records)
        committed = {tp: min(10, end) for tp, end in ends.items()}
        first.commit(committed)
        assert first.lag() == {tp: ends[tp] - committed[tp] for tp in ends}

    expected = {(r.partition, r.offset) for r in records if r.offset >= committed[(r.topic, r.partition)]}
    with make_consumer(settings, client) as second:  # type: ignore[arg-type]
        second.subscribe([topic], group_id)
        resumed = consume(second, len(expected))
    assert sorted((r.partition, r.offset) for r in resumed) == sorted(expected)


@pytest.mark.integration
def test_two_members_split_four_partitions_and_commit_on_revoke(
    kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    # kafka-python only: two confluent-kafka consumers polled from two threads of one process
    # stall in the rebalance on Tansu (separate processes work); a worker runs one per process.
    client = "kafka-python"
    settings = kafka_settings()
    topic = topic_factory(partitions=4)
    produce(settings, client, topic, 100)
    all_partitions = {(topic, p) for p in range(4)}

    first = make_consumer(settings, client)
    done: dict[TopicPartition, int] = {}
    revoked: list[set[TopicPartition]] = []

    def commit_on_revoke(partitions: set[TopicPartition]) -> None:
        # What a worker does: commit the work done on the partitions it gives up.
        first.commit({tp: offset for tp, offset in done.items() if tp in partitions})
        revoked.append(partitions)

    first.subscribe([topic], group_id, on_revoke=commit_on_revoke)
    records = consume(first, 100)
    assert len(records) == 100
    done.update(next_offsets(records))
    assert first.assignment() == all_partitions

    second = make_consumer(settings, client)
    second.subscribe([topic], group_id)
    stop = threading.Event()

    def poll_second() -> None:
        while not stop.is_set():
            second.poll_batch(timeout_ms=100)

    thread = threading.Thread(target=poll_second, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while time.monotonic() < deadline:
            extra = first.poll_batch(timeout_ms=100)
            assert extra == []  # everything was read and committed before the handover
            if len(first.assignment()) == 2 and len(second.assignment()) == 2:
                break
        assert len(first.assignment()) == 2 and len(second.assignment()) == 2
        assert first.assignment() | second.assignment() == all_partitions
        assert revoked == [all_partitions]  # on_revoke ran once, with what it had, and committed
    finally:
        stop.set()
        thread.join(10)
        second.close()
        first.close()

    # The commits made inside on_revoke are what the group now holds (read without joining it).
    assert held_offsets(settings, group_id) == done


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_an_oversized_message_fails_in_send(
    client: str, kafka_settings: SettingsFactory, topic_factory: Callable[..., str]
) -> None:
    # (A missing topic does not fail on Tansu 0.6: a Produce request creates it.)
    topic = topic_factory(partitions=1)
    with make_producer(kafka_settings(), client) as producer:  # type: ignore[arg-type]
        with pytest.raises(TransportError):
            producer.send(topic, b"x" * 2_000_000)  # over the clients' 1 MB request limit
        producer.send(topic, b"fine")
        producer.flush(timeout_ms=10_000)


@pytest.mark.integration
def test_a_batch_larger_than_librdkafkas_queue_is_all_delivered_once(
    kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """produce_batch queues what fits (20 here) and marks the rest; send_many sends those one by one after it."""
    import confluent_kafka

    class SmallQueue(confluent_kafka.Producer):  # type: ignore[misc]
        def __init__(self, configs: dict[str, object]) -> None:
            super().__init__({**configs, "queue.buffering.max.messages": 20})

    monkeypatch.setattr(confluent_kafka, "Producer", SmallQueue)
    settings = kafka_settings()
    topic = topic_factory(partitions=1)
    values = [b"m%d" % i for i in range(300)]
    with make_producer(settings, "confluent") as producer:
        producer.send_many(topic, values, [b"k"] * len(values))
        delivery = producer.checkpoint()
        assert delivery.wait(timeout_ms=20_000)
    monkeypatch.undo()
    records = read_back(settings, "confluent", topic, group_id, len(values))
    assert sorted(r.value for r in records) == sorted(values)


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_an_oversized_message_in_a_batch_fails_in_send_many_and_the_rest_is_delivered(
    client: str, kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    settings = kafka_settings()
    topic = topic_factory(partitions=1)
    with make_producer(settings, client) as producer:  # type: ignore[arg-type]
        with pytest.raises(TransportError):
            producer.send_many(topic, [b"before", b"x" * 2_000_000, b"after"], [b"a", b"b", b"c"])
        delivery = producer.checkpoint()
        producer.send_many(topic, [b"fine"], [b"d"])
        producer.flush(timeout_ms=10_000)
        assert delivery.done()
    delivered = {r.value for r in read_back(settings, client, topic, group_id, 2)}
    assert b"before" in delivered and b"fine" in delivered and b"x" * 2_000_000 not in delivered


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_flush_raises_when_the_broker_is_gone(client: str) -> None:
    with start_broker() as broker:
        create_topics(broker.bootstrap_servers, {"decisions": 1})
        settings = KafkaSettings(broker.bootstrap_servers, delivery_timeout_ms=2_000)
        producer = make_producer(settings, client)  # type: ignore[arg-type]
        producer.send("decisions", b"first")
        producer.flush(timeout_ms=10_000)  # acknowledged: no error
    try:
        producer.send("decisions", b"second")  # queued: the topic's metadata is known
        with pytest.raises(TransportError):
            producer.flush(timeout_ms=5_000)
        producer.flush(timeout_ms=1_000)  # errors are reported once; nothing is pending now
    finally:
        producer.close(timeout_ms=500)


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_a_checkpoint_is_done_once_its_sends_are_acknowledged(
    client: str, kafka_settings: SettingsFactory, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=4)
    with make_producer(kafka_settings(), client) as producer:  # type: ignore[arg-type]
        for i in range(300):
            producer.send(topic, b"first-%d" % i, key=b"%d" % i)
        first = producer.checkpoint()
        for i in range(200):
            producer.send(topic, b"second-%d" % i, key=b"%d" % i)
        second = producer.checkpoint()
        assert producer.checkpoint().done()  # nothing sent since: done at once
        assert first.wait(timeout_ms=20_000)
        assert first.done()
        assert second.wait(timeout_ms=20_000)
    assert len(read_back(kafka_settings(), client, topic, f"check-{topic}", 500)) == 500


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_a_checkpoint_whose_sends_failed_raises_and_a_later_one_is_apart(client: str) -> None:
    with start_broker() as broker:
        create_topics(broker.bootstrap_servers, {"decisions": 1})
        settings = KafkaSettings(broker.bootstrap_servers, delivery_timeout_ms=2_000)
        producer = make_producer(settings, client)  # type: ignore[arg-type]
        producer.send("decisions", b"first")
        assert producer.checkpoint().wait(timeout_ms=10_000)
    try:
        producer.send("decisions", b"second")  # queued: the topic's metadata is known
        failed = producer.checkpoint()
        assert not failed.wait(timeout_ms=200)  # not acknowledged yet, not failed yet either
        with pytest.raises(TransportError):
            failed.wait(timeout_ms=10_000)  # the client gives up after delivery_timeout_ms
        with pytest.raises(TransportError):
            failed.done()  # and keeps saying so
        assert producer.checkpoint().done()  # nothing of the failure leaks into the next checkpoint
    finally:
        producer.close(timeout_ms=500)


@pytest.mark.integration
@pytest.mark.parametrize("client", CLIENTS)
def test_an_asynchronous_commit_is_held_by_the_group(
    client: str, kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    settings = kafka_settings()
    topic = topic_factory(partitions=2)
    produce(settings, client, topic, 40)
    with make_consumer(settings, client) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic], group_id)
        records = consume(consumer, 40)
        done = next_offsets(records)
        consumer.commit(done, asynchronous=True)
        deadline = time.monotonic() + 10
        while held_offsets(settings, group_id) != done and time.monotonic() < deadline:
            consumer.poll_batch(timeout_ms=100)  # serves the commit's answer
        assert held_offsets(settings, group_id) == done


@pytest.mark.integration
def test_every_codec_written_by_either_client_is_read_by_both(
    kafka_settings: SettingsFactory, topic_factory: Callable[..., str], group_id: str
) -> None:
    topic = topic_factory(partitions=1)
    sent: set[bytes] = set()
    for codec in COMPRESSIONS:
        for client in CLIENTS:
            values = [b"%s %s %03d " % (codec.encode(), client.encode(), i) + b"token " * 40 for i in range(50)]
            with make_producer(kafka_settings(compression=codec), client) as producer:  # type: ignore[arg-type]
                producer.send_many(topic, values, [v[:12] for v in values])
                producer.flush(timeout_ms=20_000)
            sent.update(values)
    for client in CLIENTS:
        records = read_back(kafka_settings(), client, topic, f"{group_id}-{client}", len(sent))
        assert sorted(r.value for r in records) == sorted(sent)


def test_an_unknown_codec_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="compression must be one of none, gzip, snappy, lz4, zstd"):
        KafkaSettings("b:9092", compression="brotli")  # type: ignore[arg-type]
