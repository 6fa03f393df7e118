"""Single node or Cluster: which node a command goes to, and commands spread over every primary.

On a single node every helper here talks to the one client; on a Cluster each command is sent to
the node of its first key (all keys of one command share a hash tag, see ``keys``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster

from stream_winnow.stores.redis.errors import store_errors
from stream_winnow.wire import resp

__all__ = ["RedisClient", "each_key", "nodes", "pipeline", "route", "scan"]

RedisClient = redis.Redis | RedisCluster

# Keys asked per SCAN call: large enough that a scan of a million keys takes ~1000 round trips.
SCAN_COUNT = 1000


def route(client: RedisClient, key: bytes) -> dict[str, Any]:
    """On a Cluster, the node of ``key`` (all keys of a command share its hash tag) for a pipelined command.

    Without it redis-py 8's cluster pipeline asks the server (COMMAND GETKEYS) which keys an EVALSHA
    has, one extra round trip per script call, and hashes every key of an MGET; a MOVED reply still
    reroutes by key.
    """
    if isinstance(client, RedisCluster):
        return {"target_nodes": client.get_node_from_key(key)}
    return {}


def pipeline(client: RedisClient, transaction: bool = False) -> Pipeline | ClusterPipeline:
    """A pipeline of ``client``; ``transaction`` (``MULTI``/``EXEC``) only on a single node, a Cluster has none."""
    if isinstance(client, RedisCluster):
        return client.pipeline()
    return client.pipeline(transaction=transaction)


def each_key(client: RedisClient, commands: Sequence[list[bytes]]) -> list[Any]:
    """One command per key (``commands[i][1]``), in one round trip (a pipeline routed by key on a Cluster)."""
    if not isinstance(client, RedisCluster):
        return resp.execute(client, commands)
    pipe = client.pipeline()
    for name, *arguments in commands:
        pipe.execute_command(name.decode(), *arguments, **route(client, arguments[0]))
    return list(pipe.execute())


def nodes(client: RedisClient) -> list[redis.Redis]:
    """A plain client per primary (the client itself on a single node)."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def scan(client: RedisClient, pattern: bytes) -> Iterator[bytes]:
    """Every key matching ``pattern`` on every primary (a key may come twice, as SCAN allows)."""
    for node in nodes(client):
        cursor = 0
        while True:
            with store_errors("scanning keys"):
                cursor, keys = node.scan(cursor, match=pattern, count=SCAN_COUNT)
            for key in keys:
                yield key if isinstance(key, bytes) else key.encode()
            if cursor == 0:
                break
