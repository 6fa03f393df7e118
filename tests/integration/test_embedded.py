"""The embedded services: Tansu broker, redis-server, and a local Redis Cluster."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from stream_winnow.errors import TransportError
from workers.embedded import create_topics, free_port, start_broker, start_redis

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_broker_accepts_produce_and_consume(kafka_bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(10):
        producer.send(topic, value=b"m%d" % i, partition=i % 2)
    producer.flush(10)
    producer.close()

    # Manual assignment: no group join, so no wait.
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    values: list[bytes] = []
    for _ in range(50):
        for messages in consumer.poll(timeout_ms=200).values():
            values += [m.value for m in messages]
        if len(values) == 10:
            break
    consumer.close()
    assert sorted(values) == sorted(b"m%d" % i for i in range(10))


def test_create_topics_is_idempotent(kafka_bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    create_topics(kafka_bootstrap, {topic: 3})  # exists already: fine
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()


def test_broker_stops_and_restarts_empty() -> None:
    with start_broker() as broker:
        create_topics(broker.bootstrap_servers, {"kept-in-memory": 1})
        host, port = broker.host, broker.port
    with socket.socket() as sock:  # stopped: the port is free again
        sock.bind((host, port))
    with pytest.raises(TransportError, match="did not start"):
        with socket.socket() as blocker:
            blocker.bind(("127.0.0.1", 0))
            blocker.listen()
            start_broker(port=blocker.getsockname()[1])


def test_redis_fixture_gives_an_empty_database(redis_db: Any) -> None:
    assert redis_db.dbsize() == 0
    redis_db.set("k", b"v")
    assert redis_db.get("k") == b"v"
    assert redis_db.config_get("save")["save"] == ""
    assert redis_db.config_get("appendonly")["appendonly"] == "no"


def test_redis_with_password_hides_it_in_repr() -> None:
    password = "s3cret/p@ss"
    with start_redis(password=password) as server:
        assert password not in repr(server)
        assert "s3cret" not in repr(server)
        assert "***" in repr(server)
        assert redis.Redis.from_url(server.url).ping()
        with pytest.raises(redis.AuthenticationError):
            no_retry = Retry(NoBackoff(), 0)  # redis-py retries auth errors for about 4 s by default
            redis.Redis(host=server.host, port=server.port, retry=no_retry).ping()


def test_cluster_is_ok_and_hash_tags_decide_the_node(redis_cluster_url: str) -> None:
    cluster = RedisCluster.from_url(redis_cluster_url)
    try:
        for node in cluster.get_primaries():
            info = cluster.cluster_info(target_nodes=node)
            assert info["cluster_state"] == "ok"
        assert len(cluster.get_primaries()) == 3

        def node_of(key: str) -> str:
            return str(cluster.get_node_from_key(key).name)

        # Keys sharing a {tag} hash to one slot, so one node.
        same = [f"{{doc:42}}:w:{i}" for i in range(20)]
        assert len({cluster.keyslot(k) for k in same}) == 1
        assert len({node_of(k) for k in same}) == 1
        for key in same:
            cluster.set(key, b"1")
        assert cluster.mget_nonatomic(same) == [b"1"] * 20
        # Different tags spread over all three nodes.
        spread = [f"{{tag{i}}}:w" for i in range(60)]
        assert len({node_of(k) for k in spread}) == 3
        cluster.delete(*same)
    finally:
        cluster.close()
