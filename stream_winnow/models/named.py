"""Named models in Redis: open one (creating it on first use) as a learner bound to a ``RedisStore``.

A model records its learner and settings (``learners.registry.describe``) and its
shard count in its metadata, so every worker that opens it scores and learns
alike whatever its own flags say; the flags only choose the learner of a model
that does not exist yet.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.cluster import RedisCluster

from stream_winnow.errors import ConfigError, StoreError
from stream_winnow.learners.base import Learner
from stream_winnow.learners.registry import build_learner, describe, from_metadata, without_domain
from stream_winnow.stores.redis import RedisStore
from stream_winnow.text.features import FeatureConfig

log = logging.getLogger(__name__)

RedisClient = redis.Redis | RedisCluster

# A dead Redis raises StoreError after this instead of hanging a worker.
SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0


def connect(url: str, cluster: bool | None = None) -> RedisClient:
    """A client for ``url``; ``cluster=None`` asks the server whether it is a Cluster node."""
    options: dict[str, Any] = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S}
    try:
        if cluster is None:
            probe = redis.Redis.from_url(url, **options)
            try:
                cluster = bool(int(probe.info("cluster").get("cluster_enabled", 0)))
            finally:
                probe.close()
        if cluster:
            return RedisCluster.from_url(url, **options)
        return redis.Redis.from_url(url, **options)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        raise StoreError(f"cannot reach Redis: {error}") from error


def open_learner(
    client: RedisClient,
    model: str,
    *,
    learner: str = "balanced-winnow",
    shards: int = 16,
    mode: str = "any-of",
    features: FeatureConfig | None = None,
    create: bool = True,
    **settings: Any,
) -> Learner:
    """The learner of ``model``, bound to its store; creates the model from the arguments when absent."""
    probe = build_learner(learner, mode=mode, features=features, **settings)
    store = RedisStore(client, model, probe.table_specs(), shards)
    metadata = store.metadata()
    if "learner" not in metadata:
        if not create:
            raise ConfigError(f"model {model!r} does not exist in Redis; create it with `stream-winnow train`")
        created = build_learner(learner, mode=mode, features=features, store=store, **settings)
        store.set_metadata({**describe(created), "shards": str(shards)})
        log.info("created model %s: %s", model, created)
        return created
    stored_shards = int(metadata.get("shards", shards))
    if metadata["learner"] != learner:
        log.info("model %s exists with learner %s; using it", model, metadata["learner"])
    # The model's own rule and features name its tables (idf adds one), whatever was asked for.
    tables = from_metadata(without_domain(metadata)).table_specs()
    if tables != probe.table_specs() or stored_shards != shards:
        store = RedisStore(client, model, tables, stored_shards)
    return from_metadata(metadata, store)
