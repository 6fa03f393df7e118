"""Writing to a model: a batch's delta, exactly once by watermarks, and deleting rows.

Learning writes a batch's ``RowDelta`` (``stores.delta``: a factor or an addend per changed
value, which commute) with one script call per shard and one on the model keys; each call
checks and moves that part's watermarks, so a redelivered batch is recognised part by part,
and bookkeeping does not grow with the number of events: ``shards + 1`` small hashes, and a
ring of ``seen_window`` x 8 bytes per input partition (800 KB at the default 100,000).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import numpy as np
from redis.cluster import RedisCluster

from stream_winnow.stores.base import MODEL_PART, StaleWatermark
from stream_winnow.stores.delta import RowDelta, SourceRange, identity_of
from stream_winnow.stores.redis import scripts
from stream_winnow.stores.redis.cluster import RedisClient
from stream_winnow.stores.redis.errors import store_errors
from stream_winnow.stores.redis.keys import CHANGE_LOG_WRITES, ModelKeys
from stream_winnow.stores.redis.reads import text
from stream_winnow.stores.redis.rows import RowLayout
from stream_winnow.stores.redis.scripts import StoreScripts

__all__ = ["apply_delta", "delete_rows", "delta_calls", "model_call", "new_epoch"]

#: A script call: (keys, args).
Call = tuple[list[bytes], list[Any]]


def apply_delta(
    client: RedisClient,
    store_scripts: StoreScripts,
    keys: ModelKeys,
    layout: RowLayout,
    seen_window: int,
    delta: RowDelta,
    sources: Sequence[SourceRange],
    seen: Mapping[str, np.ndarray],
    parts: Sequence[int] | None,
) -> dict[int, int]:
    """``delta`` applied to ``parts`` (None: every shard and the model part); each shard's write counter after.

    A single node runs the calls as one ``MULTI``/``EXEC``: a batch lands whole or not at all. A Cluster
    pipelines the shards' calls (each atomic on its node) and then makes the model part's call, so
    a crash in between leaves some parts ahead of others, which their watermarks tell apart.
    Raises ``StaleWatermark`` if a part's watermark of a source is not where ``sources`` expects it.
    """
    wanted = set(range(keys.shards)) | {MODEL_PART} if parts is None else set(parts)
    shard_calls = [(s, call) for s, call in delta_calls(keys, layout, delta, sources).items() if s in wanted]
    model = model_call(keys, seen_window, delta, sources, seen) if MODEL_PART in wanted else None
    with store_errors("applying a batch's delta"):
        if not isinstance(client, RedisCluster):
            calls = [call for _, call in shard_calls] + ([model] if model else [])
            per_call = [store_scripts.apply_delta] * len(shard_calls) + ([store_scripts.apply_model] if model else [])
            replies = scripts.run(client, per_call, calls, at_once=True)
        else:
            replies = scripts.run(client, store_scripts.apply_delta, [call for _, call in shard_calls])
            if model is not None:
                replies += scripts.run(client, store_scripts.apply_model, [model])
    writes: dict[int, int] = {}
    stale: list[tuple[str, int, int]] = []
    parts_done = [s for s, _ in shard_calls] + ([MODEL_PART] if model else [])
    for part, reply in zip(parts_done, replies, strict=True):
        status, *rest = reply
        if int(status) == -1:
            stale.append((text(rest[0]), part, int(rest[1])))
        elif part != MODEL_PART:
            writes[part] = int(rest[0])
    if stale:
        source, part, found = stale[0]
        expected = next(mark.expected[part] for mark in sources if mark.source == source)
        raise StaleWatermark(source, part, found, expected)
    return writes


def delta_calls(keys: ModelKeys, layout: RowLayout, delta: RowDelta, sources: Sequence[SourceRange]) -> dict[int, Call]:
    """``lua/apply_delta.lua``'s (keys, args) for every shard: its rows' changed positions, and the watermarks."""
    g, t = layout.g, layout.t
    n = len(delta)
    per_category = [delta.values[spec.name].shape[1] for spec in layout.per_category]
    n_categories = per_category[0] if per_category else 0
    width = g + n_categories * t
    block = np.empty((n, width))
    changed = np.zeros((n, width), dtype=bool)
    body = block[:, g:].reshape(n, n_categories, t)
    changed_body = changed[:, g:].reshape(n, n_categories, t)
    for name, spec in layout.tables.items():
        values = delta.values[name]
        slot = layout.slot[name]
        moved = values != identity_of(spec)
        if spec.per_category:
            body[:, :, slot], changed_body[:, :, slot] = values, moved
        else:
            block[:, slot], changed[:, slot] = values[:, 0], moved[:, 0]
    rows, positions = np.nonzero(changed)  # row-major: each row's positions ascending
    pairs = np.empty(len(rows), dtype=[("p", "<u4"), ("d", "<f8")])
    pairs["p"], pairs["d"] = positions, block[rows, positions]
    packed = pairs.tobytes()
    ends = np.cumsum(np.bincount(rows, minlength=n)) * 12
    starts = np.concatenate([[0], ends[:-1]]) if n else ends
    ids = delta.feature_ids
    shard_of = ids % keys.shards
    touched = np.flatnonzero(ends - starts)
    by_shard: dict[int, tuple[list[bytes], list[bytes]]] = {s: ([], []) for s in range(keys.shards)}
    id_list, shard_list, start_list, end_list = ids.tolist(), shard_of.tolist(), starts.tolist(), ends.tolist()
    for i in touched.tolist():
        row_keys, changes = by_shard[shard_list[i]]
        row_keys.append(keys.row_key(shard_list[i], id_list[i]))
        changes.append(packed[start_list[i] : end_list[i]])
    touched_ids, touched_shards = ids[touched].astype("<i8"), shard_of[touched]
    pattern = [g, t, layout.combine, layout.lows, layout.highs, layout.inits]
    template = layout.initial_row(n_categories).astype("<f4").tobytes()
    return {
        s: (
            [keys.count_keys[s], keys.write_keys[s], keys.watermark_key(s), keys.change_keys[s], *row_keys],
            [
                msgpack.packb([*pattern, [[m.source, m.expected[s], m.last] for m in sources], CHANGE_LOG_WRITES]),
                template,
                touched_ids[touched_shards == s].tobytes(),  # the change log's entry: in row_keys' order
                *changes,
            ],
        )
        for s, (row_keys, changes) in by_shard.items()
    }


def model_call(
    keys: ModelKeys, seen_window: int, delta: RowDelta, sources: Sequence[SourceRange], seen: Mapping[str, np.ndarray]
) -> Call:
    """``lua/apply_model.lua``'s (keys, args): counters, version, seen events and watermarks."""
    call_keys: list[bytes] = [keys.version_key.encode(), keys.model_watermark_key]
    counters = []
    for name, amounts in delta.counters.items():
        call_keys.append(keys.counter_key(name).encode())
        counters += [[len(call_keys), key, f"{amount:.17g}"] for key, amount in amounts.items()]
    marks, rings = [], []
    for mark in sources:
        hashes = seen.get(mark.source)
        ring_at = 0
        if hashes is not None and len(hashes):
            call_keys.append(keys.seen_key(mark.source))
            ring_at = len(call_keys)
            rings.append(np.asarray(hashes, dtype="<u8").tobytes())
        marks.append([mark.source, mark.expected[MODEL_PART], mark.last, ring_at])
    plan = msgpack.packb([int(delta.changed_events), counters, marks, seen_window])
    return call_keys, [plan, *rings]


def delete_rows(client: RedisClient, store_scripts: StoreScripts, keys: ModelKeys, feature_ids: np.ndarray) -> int:
    """Delete the rows of ``feature_ids`` (unique), one script call per shard; returns how many existed.

    Row caches must then drop what they hold: the caller sets a new epoch (``new_epoch``) to tell them.
    """
    shards = (feature_ids % keys.shards).tolist()
    row_keys = keys.row_keys(feature_ids.tolist(), shards)
    groups: dict[int, tuple[list[bytes], list[int]]] = {}
    for s, key, fid in zip(shards, row_keys, feature_ids.tolist(), strict=True):
        members, ids = groups.setdefault(s, ([], []))
        members.append(key)
        ids.append(fid)
    calls: list[Call] = [
        (
            [keys.count_keys[s], keys.write_keys[s], keys.change_keys[s], *members],
            [CHANGE_LOG_WRITES, np.array(ids, dtype="<i8").tobytes()],
        )
        for s, (members, ids) in groups.items()
    ]
    return int(sum(scripts.run(client, store_scripts.delete, calls)))


def new_epoch(client: Any, keys: ModelKeys) -> None:
    """Record (on ``client``, or a pipeline of it) that rows changed without a new version."""
    client.set(keys.epoch_key, uuid.uuid4().hex)
