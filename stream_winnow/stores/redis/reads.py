"""Reading a model's rows and bookkeeping from Redis, each in one round trip.

The functions here return what Redis holds, undecoded where the caller decodes (rows, see
``rows.RowLayout``), with the length of the category list read in the same round trip so the
store can tell whether categories were added meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from redis.cluster import RedisCluster

from stream_winnow.stores.base import MODEL_PART, ChangeLog
from stream_winnow.stores.redis.cluster import RedisClient, each_key, pipeline, route
from stream_winnow.stores.redis.errors import store_errors
from stream_winnow.stores.redis.keys import CHANGE_LOG_WRITES, ModelKeys
from stream_winnow.wire import resp

__all__ = ["change_logs", "counters_request", "fetch_rows", "row_state", "seen_events", "text", "watermarks", "write_counters_later"]

#: Change-log entries read beyond the writes a cache is behind by.
CHANGE_LOG_SLACK = 4

#: (version, epoch, each shard's write counter, length of the category list), as Redis replied.
WriteCounters = tuple[Any, Any, Sequence[Any], int]


def text(value: bytes | str) -> str:
    """A reply's string (a client with ``decode_responses=False`` gives bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def fetch_rows(
    client: RedisClient, keys: ModelKeys, feature_ids: np.ndarray, *, writes: bool
) -> tuple[list[bytes | None], dict[int, int], int]:
    """(raw rows of ``feature_ids``, each shard's write counter if ``writes``, categories): one round trip.

    With ``writes`` each shard's write counter is read atomically with its rows (one ``MGET`` per
    shard on a Cluster, one ``MGET`` of everything on a single node).
    """
    ids = feature_ids.tolist()
    shards = (feature_ids % keys.shards).tolist()
    row_keys = keys.row_keys(ids, shards)
    counters: dict[int, int] = {}
    with store_errors("reading rows"):
        if isinstance(client, RedisCluster):
            rows: list[bytes | None] = [None] * len(row_keys)
            groups: dict[int, list[int]] = {}
            for i, s in enumerate(shards):
                groups.setdefault(s, []).append(i)
            pipe = client.pipeline()
            for s, members in groups.items():  # one MGET per shard: its rows and counter read atomically
                group_keys = [row_keys[i] for i in members] + ([keys.write_keys[s]] if writes else [])
                pipe.execute_command("MGET", *group_keys, **route(client, group_keys[0]))
            pipe.llen(keys.categories_key)
            *replies, n_categories = pipe.execute()
            for (s, members), values in zip(groups.items(), replies, strict=True):
                if writes:
                    *values, counter = values
                    counters[s] = int(counter or 0)
                for i, value in zip(members, values, strict=True):
                    rows[i] = value
        else:
            present = sorted(set(shards)) if writes else []
            pipe = client.pipeline(transaction=False)
            pipe.execute_command("MGET", *row_keys, *(keys.write_keys[s] for s in present))
            pipe.llen(keys.categories_key)
            rows, n_categories = pipe.execute()
            if present:
                counters = {s: int(c or 0) for s, c in zip(present, rows[len(row_keys) :], strict=True)}
                rows = rows[: len(row_keys)]
    return rows, counters, n_categories


def change_logs(client: RedisClient, keys: ModelKeys, behind: Mapping[int, int]) -> dict[int, ChangeLog]:
    """Per shard of ``behind`` (shard -> writes wanted), the tail of its change log: one round trip.

    An entry is (int64 write counter, the int64 feature ids that write changed). Only the unbroken run
    of writes at the log's end counts, so a write that left no entry proves nothing before it.
    """
    shards = list(behind)
    # A few writes more than wanted: others may have written since the caller read the counters.
    wanted = {s: min(behind[s] + CHANGE_LOG_SLACK, CHANGE_LOG_WRITES) for s in shards}
    commands = [[b"LRANGE", keys.change_keys[s], b"%d" % -wanted[s], b"-1"] for s in shards]
    with store_errors("reading change logs"):
        replies = each_key(client, commands) if shards else []
    logs: dict[int, ChangeLog] = {}
    for s, entries in zip(shards, replies, strict=True):
        entries = entries or []
        counters = [int.from_bytes(entry[:8], "little", signed=True) for entry in entries]
        start = len(counters) - 1
        while start > 0 and counters[start - 1] == counters[start] - 1:
            start -= 1
        run = entries[max(start, 0) :]
        if not run:
            logs[s] = ChangeLog(1, 0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            continue
        ids = [np.frombuffer(entry, dtype="<i8", offset=8) for entry in run]
        writes = np.repeat(np.array(counters[start:], dtype=np.int64), [len(part) for part in ids])
        logs[s] = ChangeLog(counters[start], counters[-1], np.concatenate(ids).astype(np.int64), writes)
    return logs


def counters_request(keys: ModelKeys) -> list[list[bytes]]:
    """What ``write_counters_later`` asks a single node, once a batch: 16 shards make 18 small values."""
    return [
        [b"MGET", keys.version_key.encode(), keys.epoch_key.encode(), *keys.write_keys],
        [b"LLEN", keys.categories_key.encode()],
    ]


def write_counters_later(
    client: RedisClient, keys: ModelKeys, request: Sequence[list[bytes]]
) -> Callable[[], WriteCounters]:
    """Version, epoch, the shards' write counters and the categories' count, read by the function returned.

    On a single node ``request`` (``counters_request``) goes out at once (``resp.Pending``), so the
    reply arrives while the caller does other work; a Cluster's pipeline runs when the function is called.
    """
    if isinstance(client, RedisCluster):
        cluster = client

        def ask_cluster() -> WriteCounters:
            with store_errors("reading the write counters"):
                pipe = cluster.pipeline()
                pipe.execute_command("MGET", keys.version_key, keys.epoch_key,
                                     **route(cluster, keys.version_key.encode()))  # fmt: skip
                for key in keys.write_keys:  # one slot per shard
                    pipe.get(key)
                pipe.llen(keys.categories_key)
                (version, epoch), *counters, n_categories = pipe.execute()
            return version, epoch, counters, n_categories

        return ask_cluster
    with store_errors("reading the write counters"):
        pending = resp.Pending(client, request)

    def finish() -> WriteCounters:
        with store_errors("reading the write counters"):
            (version, epoch, *counters), n_categories = pending.replies()
        return version, epoch, counters, n_categories

    return finish


def row_state(client: RedisClient, keys: ModelKeys) -> tuple[Any, Any, int]:
    """(version, epoch, length of the category list) as Redis replied, in one round trip."""
    with store_errors("reading the version"):
        pipe = pipeline(client)
        pipe.execute_command("MGET", keys.version_key, keys.epoch_key, **route(client, keys.version_key.encode()))
        pipe.llen(keys.categories_key)
        (version, epoch), n_categories = pipe.execute()
    return version, epoch, n_categories


def watermarks(client: RedisClient, keys: ModelKeys, sources: Sequence[str]) -> dict[str, np.ndarray]:
    """Per source, its watermark in every part (the shards, then ``MODEL_PART``); -1 where none is set."""
    if not sources:
        return {}
    fields = [source.encode() for source in sources]
    hashes = [keys.watermark_key(part) for part in [*range(keys.shards), MODEL_PART]]
    with store_errors("reading watermarks"):
        replies = each_key(client, [[b"HMGET", key, *fields] for key in hashes])
    return {
        source: np.array([int(reply[i]) if reply[i] is not None else -1 for reply in replies], dtype=np.int64)
        for i, source in enumerate(sources)
    }


def seen_events(client: RedisClient, keys: ModelKeys, source: str) -> np.ndarray:
    """The hashes of the events last seen from ``source`` (up to the ring's capacity), in the ring's slot order."""
    key = keys.seen_key(source)
    with store_errors("reading seen events"):
        ring, seen = each_key(client, [[b"GET", key], [b"HGET", keys.model_watermark_key, f"{source}#n".encode()]])
    n = min(int(seen or 0), len(ring or b"") // 8)
    return np.frombuffer(ring or b"", dtype="<u8")[:n].astype(np.uint64)
