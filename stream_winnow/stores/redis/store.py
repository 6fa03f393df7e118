"""A weight store in Redis (single node or Cluster), shared by many worker processes.

One binary string per feature holds every table's values for that feature as
little-endian float32 (``[global tables | category 0: each per-category table |
category 1: ... ]``), so scoring a batch is one ``MGET`` and one ``np.frombuffer``:
on these machines that layout is about 20x faster than a hash per category. The
value of per-category table ``t`` at column ``c`` sits at float ``G + c*T + t``
(``G`` width-1 tables, ``T`` per-category tables): adding a category appends to
rows and never moves a value, and a row shorter than the layout reads as the
initial values of its missing tail.

Keys (several models live side by side in one Redis)::

    sw:{<model>:<shard>}:f:<feature id>   a feature's row (shard = feature id % shards)
    sw:{<model>:<shard>}:n                 rows stored in the shard
    sw:{<model>:<shard>}:w                 writes to the shard's rows (a row cache's validity token)
    sw:{<model>:<shard>}:wm                the shard's watermarks: input partition -> last offset applied
    sw:{<model>}:categories / :columns     category names in column order / name -> column
    sw:{<model>}:layout / :metadata        the tables' layout / the model's settings
    sw:{<model>}:version / :epoch          learning bumps the version; compact and imports the epoch
    sw:{<model>}:counter:<name>            bookkeeping counters (updates per category, NB's totals)
    sw:{<model>}:wm                        the model part's watermarks, and events seen per partition
    sw:{<model>}:seen:<partition>          the last ``seen_window`` event-id hashes of a partition (a ring)

Every key of a shard shares the hash tag ``{<model>:<shard>}`` (one Cluster slot),
so one Lua script updates a shard atomically; model-level keys share ``{<model>}``.

Learning writes a batch's ``RowDelta`` (``stores.delta``: a factor or an addend per changed
value, which commute) with one script call per shard and one on the model keys; each call
checks and moves that part's watermarks, so a redelivered batch is recognised part by part,
and bookkeeping does not grow with the number of events: ``shards + 1`` small hashes, and a
ring of ``seen_window`` x 8 bytes per input partition (800 KB at the default 100,000).

Values are stored as float32 and every read returns float64 arrays of the stored
float32 values (within 6e-8 relative of what ``MemoryStore`` holds per update).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import repeat
from operator import is_not
from typing import Any

import msgpack
import numpy as np
import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from stream_winnow import resp
from stream_winnow.errors import ConfigError, StoreError
from stream_winnow.stores.base import MODEL_PART, RowSnapshot, RowUpdate, StaleWatermark, TableSpec, Update, WeightStore
from stream_winnow.stores.delta import RowDelta, SourceRange, fold_updates, identity_of
from stream_winnow.stores.redis import scripts
from stream_winnow.stores.redis.keys import ModelKeys, feature_id_of, hash_tag_of

__all__ = ["RedisStore"]

RedisClient = redis.Redis | RedisCluster

# A shard script over a few hundred rows runs in about a millisecond; a 5 s silence means a stuck or
# unreachable server, and the worker should rather retry (StoreError) than wait.
_DEFAULT_SOCKET_TIMEOUT_S = 5.0
_DEFAULT_CONNECT_TIMEOUT_S = 2.0
# Events remembered per input partition to recognise a resent duplicate: 8 bytes each, 800 KB a partition.
_SEEN_WINDOW = 100_000
# Keys asked per SCAN call: large enough that a scan of a million keys takes ~1000 round trips.
_SCAN_COUNT = 1000
# Keys per DEL in drop_model.
_DELETE_BATCH = 1000
# A script error that means "this model name holds another model" rather than "Redis is unwell".
_LAYOUT_ERROR = "SWLAYOUT"
# Redis errors that retrying later can fix (the rest are bugs and propagate as they are).
_RETRIABLE_REPLIES = ("OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")

class RedisStore(WeightStore):
    """Tables of one model in Redis; ``from_url`` builds the client (single node or Cluster).

    ``categories()`` asks Redis each call unless ``categories_max_staleness_ms`` allows the
    local copy (which ``read`` and ``ensure_categories`` also refresh whenever they see more
    categories); ``known_categories()`` never asks.
    """

    def __init__(
        self,
        client: RedisClient,
        model: str,
        tables: Sequence[TableSpec],
        shards: int = 16,
        seen_window: int = _SEEN_WINDOW,
        *,
        categories_max_staleness_ms: int = 0,
    ) -> None:
        super().__init__(tables)
        self.keys = ModelKeys(model, shards)
        if seen_window < 1:
            raise ConfigError(f"seen_window must be >= 1; got {seen_window}")
        if categories_max_staleness_ms < 0:
            raise ConfigError(f"categories_max_staleness_ms must be >= 0; got {categories_max_staleness_ms}")
        if client.get_encoder().decode_responses:
            raise ConfigError("RedisStore needs a client with decode_responses=False (rows are binary)")
        self.client = client
        self.model = model
        self.shards = shards
        self.seen_window = seen_window
        self.categories_max_staleness_ms = categories_max_staleness_ms
        self.is_cluster = isinstance(client, RedisCluster)

        specs = list(self.tables.values())
        self._globals = [s for s in specs if not s.per_category]
        self._per_category = [s for s in specs if s.per_category]
        self._g, self._t = len(self._globals), len(self._per_category)
        self._slot = {s.name: i for i, s in enumerate(self._globals)}
        self._slot.update({s.name: i for i, s in enumerate(self._per_category)})
        self._layout = json.dumps([[s.name, s.initial, s.per_category] for s in specs])
        self._initial_rows: dict[int, np.ndarray] = {}
        # Per slot of a row's pattern (G globals, then T per-category tables), as lua/apply_delta.lua takes them.
        pattern = [*self._globals, *self._per_category]
        self._combine = [1 if spec.combine == "multiply" else 0 for spec in pattern]
        self._lows = [float(spec.bounds.low) for spec in pattern]
        self._highs = [float(spec.bounds.high) for spec in pattern]
        self._inits = [float(spec.initial) for spec in pattern]

        # What part_writes asks a single node, once a batch.
        self._counters_request = [
            [b"MGET", self.keys.version_key.encode(), self.keys.epoch_key.encode(), *self.keys.write_keys],
            [b"LLEN", self.keys.categories_key.encode()],
        ]

        self._scripts = scripts.register(client)

        self._categories: list[str] = []
        self._categories_tuple: tuple[str, ...] = ()
        self._column: dict[str, int] = {}
        self._categories_checked = float("-inf")

    @classmethod
    def from_url(
        cls,
        url: str,
        model: str,
        tables: Sequence[TableSpec],
        shards: int = 16,
        cluster: bool | None = None,
        *,
        seen_window: int = _SEEN_WINDOW,
        categories_max_staleness_ms: int = 0,
        **redis_kwargs: Any,
    ) -> RedisStore:
        """A store on ``url``; ``cluster=None`` asks the server (``INFO cluster``) whether it is a Cluster node.

        Socket timeouts default to 5 s (connect 2 s), so a dead server raises ``StoreError`` instead of hanging.
        """
        if redis_kwargs.get("decode_responses"):
            raise ConfigError("RedisStore needs decode_responses=False (rows are binary)")
        redis_kwargs.setdefault("socket_timeout", _DEFAULT_SOCKET_TIMEOUT_S)
        redis_kwargs.setdefault("socket_connect_timeout", _DEFAULT_CONNECT_TIMEOUT_S)
        with _store_errors("connecting"):
            if cluster is None:
                probe = redis.Redis.from_url(url, **redis_kwargs)
                try:
                    info = probe.info("cluster")
                finally:
                    probe.close()
                cluster = bool(int(info.get("cluster_enabled", 0)))
            client: RedisClient
            if cluster:
                client = RedisCluster.from_url(url, **redis_kwargs)
            else:
                client = redis.Redis.from_url(url, **redis_kwargs)
        return cls(client, model, tables, shards, seen_window, categories_max_staleness_ms=categories_max_staleness_ms)

    def __repr__(self) -> str:
        return (
            f"RedisStore(model={self.model!r}, tables={list(self.tables)}, shards={self.shards}, "
            f"server={self._server()!r}, cluster={self.is_cluster})"
        )

    def _server(self) -> str:
        """host:port of the (default) node; never credentials."""
        try:
            if isinstance(self.client, RedisCluster):
                node = self.client.get_default_node()
                return f"{node.host}:{node.port}"
            kwargs = self.client.connection_pool.connection_kwargs
            if "path" in kwargs:
                return f"unix:{kwargs['path']}"
            return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
        except Exception:  # a repr must not fail
            return "?"

    def close(self) -> None:
        self.client.close()

    # -- rows ------------------------------------------------------------------------------------------
    def _initial_row(self, n_categories: int) -> np.ndarray:
        row = self._initial_rows.get(n_categories)
        if row is None:
            per_category = np.tile([s.initial for s in self._per_category], n_categories)
            row = np.concatenate([[s.initial for s in self._globals], per_category]).astype(np.float64)
            self._initial_rows[n_categories] = row
        return row

    # -- categories ------------------------------------------------------------------------------------
    def categories(self) -> tuple[str, ...]:
        staleness_s = self.categories_max_staleness_ms / 1000.0
        if not staleness_s or time.monotonic() - self._categories_checked > staleness_s:
            self._refresh_now()  # the list only grows: fetch its new tail
        return self._categories_tuple

    def known_categories(self) -> tuple[str, ...]:
        """The categories this instance has seen, without asking Redis."""
        return self._categories_tuple

    def _extend_categories(self, tail: Sequence[bytes | str]) -> None:
        self._categories_checked = time.monotonic()
        if not tail:
            return
        for raw in tail:
            name = _text(raw)
            self._column[name] = len(self._categories)
            self._categories.append(name)
        self._categories_tuple = tuple(self._categories)

    def _reload_categories(self) -> None:
        with _store_errors("reading categories"):
            names = self.client.lrange(self.keys.categories_key, 0, -1)
        self._categories, self._column, self._categories_tuple = [], {}, ()
        self._extend_categories(names)

    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        column = self._column
        if all(name in column for name in names):  # columns never change: no round trip
            return np.array([column[n] for n in names], dtype=np.intp)
        keys = [self.keys.categories_key, self.keys.columns_key, self.keys.layout_key]
        with _store_errors("creating categories"):
            columns, tail = self._scripts.ensure_categories(keys, [self._layout, len(self._categories), *names])
        self._extend_categories(tail)
        result = np.array([int(c) for c in columns], dtype=np.intp)
        if any(self._column.get(n) != c for n, c in zip(names, result.tolist(), strict=True)):
            self._reload_categories()  # the list was rebuilt (drop_model elsewhere): start over
        return result

    # -- rows ------------------------------------------------------------------------------------------
    def _fetch(self, feature_ids: np.ndarray) -> list[bytes | None]:
        """The raw rows of ``feature_ids`` in one round trip; refreshes the categories if Redis has more."""
        return self._fetch_with_writes(feature_ids, writes=False)[0]

    def _fetch_with_writes(self, feature_ids: np.ndarray, writes: bool) -> tuple[list[bytes | None], dict[int, int]]:
        """``_fetch``, and with ``writes`` each shard's write counter read atomically with its rows."""
        ids = feature_ids.tolist()
        shards = (feature_ids % self.shards).tolist()
        keys = self.keys.row_keys(ids, shards)
        counters: dict[int, int] = {}
        with _store_errors("reading rows"):
            if isinstance(self.client, RedisCluster):
                rows: list[bytes | None] = [None] * len(keys)
                groups: dict[int, list[int]] = {}
                for i, s in enumerate(shards):
                    groups.setdefault(s, []).append(i)
                pipe = self.client.pipeline()
                for s, members in groups.items():  # one MGET per shard: its rows and counter read atomically
                    group_keys = [keys[i] for i in members] + ([self.keys.write_keys[s]] if writes else [])
                    pipe.execute_command("MGET", *group_keys, **self._route(group_keys[0]))
                pipe.llen(self.keys.categories_key)
                *replies, n_categories = pipe.execute()
                for (s, members), values in zip(groups.items(), replies, strict=True):
                    if writes:
                        *values, counter = values
                        counters[s] = int(counter or 0)
                    for i, value in zip(members, values, strict=True):
                        rows[i] = value
            else:
                present = sorted(set(shards)) if writes else []
                pipe = self.client.pipeline(transaction=False)
                pipe.execute_command("MGET", *keys, *(self.keys.write_keys[s] for s in present))
                pipe.llen(self.keys.categories_key)
                rows, n_categories = pipe.execute()
                if present:
                    counters = {s: int(c or 0) for s, c in zip(present, rows[len(keys) :], strict=True)}
                    rows = rows[: len(keys)]
        if n_categories > len(self._categories):
            self._refresh_now()
        return rows, counters

    def _refresh_now(self) -> None:
        with _store_errors("reading categories"):
            tail = self.client.lrange(self.keys.categories_key, len(self._categories), -1)
        self._extend_categories(tail)

    def _decode(self, rows: Sequence[bytes | None]) -> np.ndarray:
        """Rows (None: not stored) as a float64 block (len(rows), G + C*T) for the known categories C."""
        n_categories = len(self._categories)
        width = self._g + n_categories * self._t
        n = len(rows)
        if n and None not in rows and width and set(map(len, rows)) == {4 * width}:  # type: ignore[arg-type]
            # The hot case: every row stored, at the current width. One join, one conversion.
            packed = b"".join(rows)  # type: ignore[arg-type]
            return np.frombuffer(packed, dtype="<f4").reshape(n, width).astype(np.float64)
        block = np.empty((n, width))
        block[:] = self._initial_row(n_categories)
        present = np.flatnonzero(_stored(rows))
        if not len(present) or not width:
            return block
        values: list[bytes] = [rows[i] for i in present.tolist()]  # type: ignore[misc]
        if set(map(len, values)) == {4 * width}:
            block[present] = np.frombuffer(b"".join(values), dtype="<f4").reshape(len(values), width)
        else:  # rows written before categories were added (short) or after (long)
            for i, value in zip(present.tolist(), values, strict=True):
                stored = np.frombuffer(value, dtype="<f4", count=min(len(value) // 4, width))
                block[i, : len(stored)] = stored
        return block

    def _split(self, block: np.ndarray) -> dict[str, np.ndarray]:
        n_categories = (block.shape[1] - self._g) // self._t if self._t else 0
        body = block[:, self._g :].reshape(block.shape[0], n_categories, self._t)
        out: dict[str, np.ndarray] = {}
        for name, spec in self.tables.items():
            slot = self._slot[name]
            out[name] = body[:, :, slot] if spec.per_category else block[:, slot : slot + 1]
        return out

    def read(self, feature_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Values as float64 arrays (len(feature_ids), width) of the stored float32; one round trip."""
        ids = np.asarray(feature_ids, dtype=np.int64)
        if len(ids) == 0:
            return self._split(self._decode([]))
        unique, inverse = np.unique(ids, return_inverse=True)
        if len(unique) == len(ids):  # the usual case (one document's features): no gather afterwards
            return self._split(self._decode(self._fetch(ids)))
        return self._split(self._decode(self._fetch(unique))[inverse])

    def read_for_update(self, feature_ids: np.ndarray) -> RowSnapshot:
        """``read`` of unique ids, with each shard's write counter read atomically with its rows."""
        ids = np.asarray(feature_ids, dtype=np.int64)
        raw, writes = self._fetch_with_writes(ids, writes=True) if len(ids) else ([], {})
        return RowSnapshot(ids, self._split(self._decode(raw)), None, writes, _stored(raw))

    def snapshot_from(
        self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray], stored: np.ndarray, writes: Mapping[int, int]
    ) -> RowSnapshot:
        return RowSnapshot(np.asarray(feature_ids, dtype=np.int64), dict(values), None, dict(writes), stored)

    def part_of(self, feature_ids: np.ndarray) -> np.ndarray:
        return np.asarray(feature_ids, dtype=np.int64) % self.shards

    def part_writes(self) -> tuple[int, bytes | None, np.ndarray]:
        """(version, epoch, each shard's write counter): 18 small values, one round trip.

        Like ``row_state`` it tells whether categories were added (then they are read too).
        """
        return self.part_writes_later()()

    def part_writes_later(self) -> Callable[[], tuple[int, bytes | None, np.ndarray]]:
        """``part_writes`` with its request sent now and its reply read by the function returned.

        On a single node the request goes out at once (``resp.Pending``), so the reply arrives while the
        caller does other work; a Cluster's pipeline runs when the function is called.
        """
        if isinstance(self.client, RedisCluster):
            return self._cluster_part_writes
        with _store_errors("reading the write counters"):
            pending = resp.Pending(self.client, self._counters_request)

        def finish() -> tuple[int, bytes | None, np.ndarray]:
            with _store_errors("reading the write counters"):
                (version, epoch, *counters), n_categories = pending.replies()
            return self._part_writes_from(version, epoch, counters, n_categories)

        return finish

    def _cluster_part_writes(self) -> tuple[int, bytes | None, np.ndarray]:
        with _store_errors("reading the write counters"):
            pipe = self.client.pipeline()
            pipe.execute_command("MGET", self.keys.version_key, self.keys.epoch_key,
                                 **self._route(self.keys.version_key.encode()))  # fmt: skip
            for key in self.keys.write_keys:  # one slot per shard
                pipe.get(key)
            pipe.llen(self.keys.categories_key)
            (version, epoch), *counters, n_categories = pipe.execute()
        return self._part_writes_from(version, epoch, counters, n_categories)

    def _part_writes_from(
        self, version: Any, epoch: Any, counters: Sequence[Any], n_categories: int
    ) -> tuple[int, bytes | None, np.ndarray]:
        if n_categories > len(self._categories):
            self._refresh_now()
        writes = np.array([int(c or 0) for c in counters], dtype=np.int64)
        return int(version or 0), epoch, writes

    def packed_rows(self, values: Mapping[str, np.ndarray], n_categories: int) -> np.ndarray:
        """Rows in the stored layout, (rows, G + C*T) little-endian float32, from values per table."""
        n_rows = next(iter(values.values())).shape[0]
        block = np.empty((n_rows, self._g + n_categories * self._t), dtype="<f4")
        body = block[:, self._g :].reshape(n_rows, n_categories, self._t)
        for name, spec in self.tables.items():
            slot = self._slot[name]
            if spec.per_category:
                body[:, :, slot] = values[name]
            else:
                block[:, slot] = values[name][:, 0]
        return block

    # -- learning: commutative deltas, exactly once by offsets ------------------------------------------
    @property
    def n_parts(self) -> int:
        return self.shards

    def watermarks(self, sources: Sequence[str]) -> dict[str, np.ndarray]:
        if not sources:
            return {}
        fields = [source.encode() for source in sources]
        keys = [self.keys.watermark_key(part) for part in [*range(self.shards), MODEL_PART]]
        with _store_errors("reading watermarks"):
            replies = self._each_key([[b"HMGET", key, *fields] for key in keys])
        return {
            source: np.array([int(reply[i]) if reply[i] is not None else -1 for reply in replies], dtype=np.int64)
            for i, source in enumerate(sources)
        }

    def seen_events(self, source: str) -> np.ndarray:
        key = self.keys.seen_key(source)
        with _store_errors("reading seen events"):
            ring, seen = self._each_key([[b"GET", key], [b"HGET", self.keys.model_watermark_key, f"{source}#n".encode()]])
        n = min(int(seen or 0), len(ring or b"") // 8)
        return np.frombuffer(ring or b"", dtype="<u8")[:n].astype(np.uint64)

    def _each_key(self, commands: Sequence[list[bytes]]) -> list[Any]:
        """One command per key (``commands[i][1]``), in one round trip (a pipeline routed by key on a Cluster)."""
        if not isinstance(self.client, RedisCluster):
            return resp.execute(self.client, commands)
        pipe = self.client.pipeline()
        for name, *arguments in commands:
            pipe.execute_command(name.decode(), *arguments, **self._route(arguments[0]))
        return list(pipe.execute())

    def apply(self, updates: Sequence[Update]) -> bool:
        """Fold ``updates`` into one delta and apply it (no watermark: the library's and bulk tools' way)."""
        if not updates:
            return False
        columns = [u.columns for u in updates if isinstance(u, RowUpdate) and self.tables[u.table].per_category]
        widest = max((int(c.max()) + 1 for c in columns if len(c)), default=0)
        if widest > len(self._categories):
            self._refresh_now()
            if widest > len(self._categories):
                raise ConfigError(f"columns up to {widest - 1} name no category; the model has {len(self._categories)}")
        self.apply_delta(fold_updates([updates], list(self.tables.values()), len(self._categories)))
        return True

    def apply_delta(
        self,
        delta: RowDelta,
        sources: Sequence[SourceRange] = (),
        seen: Mapping[str, np.ndarray] | None = None,
        parts: Sequence[int] | None = None,
    ) -> dict[int, int]:
        """One script call per shard (all of them, so every watermark moves) and one for the model part.

        A single node runs them as one ``MULTI``/``EXEC``: a batch lands whole or not at all. A Cluster
        pipelines the shards' calls (each atomic on its node) and then makes the model part's call, so
        a crash in between leaves some parts ahead of others, which their watermarks tell apart.
        """
        wanted = set(range(self.shards)) | {MODEL_PART} if parts is None else set(parts)
        shard_calls = [(s, call) for s, call in self._delta_calls(delta, sources).items() if s in wanted]
        model_call = self._model_call(delta, sources, seen or {}) if MODEL_PART in wanted else None
        with _store_errors("applying a batch's delta"):
            if not isinstance(self.client, RedisCluster):
                calls = [call for _, call in shard_calls] + ([model_call] if model_call else [])
                per_call = [self._scripts.apply_delta] * len(shard_calls) + ([self._scripts.apply_model] if model_call else [])
                replies = self._run_scripts(per_call, calls, at_once=True)
            else:
                replies = self._run_scripts(self._scripts.apply_delta, [call for _, call in shard_calls])
                if model_call is not None:
                    replies += self._run_scripts(self._scripts.apply_model, [model_call])
        writes: dict[int, int] = {}
        stale: list[tuple[str, int, int]] = []
        parts_done = [s for s, _ in shard_calls] + ([MODEL_PART] if model_call else [])
        for part, reply in zip(parts_done, replies, strict=True):
            status, *rest = reply
            if int(status) == -1:
                stale.append((_text(rest[0]), part, int(rest[1])))
            elif part != MODEL_PART:
                writes[part] = int(rest[0])
        if stale:
            source, part, found = stale[0]
            expected = next(mark.expected[part] for mark in sources if mark.source == source)
            raise StaleWatermark(source, part, found, expected)
        return writes

    def _delta_calls(self, delta: RowDelta, sources: Sequence[SourceRange]) -> dict[int, tuple[list[bytes], list[Any]]]:
        """``lua/apply_delta.lua``'s (keys, args) for every shard: its rows' changed positions, and the watermarks."""
        n = len(delta)
        per_category = [delta.values[spec.name].shape[1] for spec in self._per_category]
        n_categories = per_category[0] if per_category else 0
        width = self._g + n_categories * self._t
        block = np.empty((n, width))
        changed = np.zeros((n, width), dtype=bool)
        body = block[:, self._g :].reshape(n, n_categories, self._t)
        changed_body = changed[:, self._g :].reshape(n, n_categories, self._t)
        for name, spec in self.tables.items():
            values = delta.values[name]
            slot = self._slot[name]
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
        shard_of = ids % self.shards
        touched = np.flatnonzero(ends - starts)
        by_shard: dict[int, tuple[list[bytes], list[bytes]]] = {s: ([], []) for s in range(self.shards)}
        id_list, shard_list, start_list, end_list = ids.tolist(), shard_of.tolist(), starts.tolist(), ends.tolist()
        for i in touched.tolist():
            keys, changes = by_shard[shard_list[i]]
            keys.append(self.keys.row_key(shard_list[i], id_list[i]))
            changes.append(packed[start_list[i] : end_list[i]])
        layout = [self._g, self._t, self._combine, self._lows, self._highs, self._inits]
        template = self._initial_row(n_categories).astype("<f4").tobytes()
        return {
            s: (
                [self.keys.count_keys[s], self.keys.write_keys[s], self.keys.watermark_key(s), *keys],
                [msgpack.packb([*layout, [[m.source, m.expected[s], m.last] for m in sources]]), template, *changes],
            )
            for s, (keys, changes) in by_shard.items()
        }

    def _model_call(
        self, delta: RowDelta, sources: Sequence[SourceRange], seen: Mapping[str, np.ndarray]
    ) -> tuple[list[bytes], list[Any]]:
        """``lua/apply_model.lua``'s (keys, args): counters, version, seen events and watermarks."""
        keys: list[bytes] = [self.keys.version_key.encode(), self.keys.model_watermark_key]
        counters = []
        for name, amounts in delta.counters.items():
            keys.append(self.keys.counter_key(name).encode())
            counters += [[len(keys), key, f"{amount:.17g}"] for key, amount in amounts.items()]
        marks, rings = [], []
        for mark in sources:
            hashes = seen.get(mark.source)
            ring_at = 0
            if hashes is not None and len(hashes):
                keys.append(self.keys.seen_key(mark.source))
                ring_at = len(keys)
                rings.append(np.asarray(hashes, dtype="<u8").tobytes())
            marks.append([mark.source, mark.expected[MODEL_PART], mark.last, ring_at])
        plan = msgpack.packb([int(delta.changed_events), counters, marks, self.seen_window])
        return keys, [plan, *rings]

    def _run_scripts(
        self, script: Script | Sequence[Script], calls: Sequence[tuple[Sequence[Any], Sequence[Any]]], *, at_once: bool = False
    ) -> list[Any]:
        """EVALSHA each (keys, args) in one round trip; loads a script Redis forgot and resends its calls.

        ``script``: one for all calls, or one per call. ``at_once`` (a single node): as one
        ``MULTI``/``EXEC``, so all of them run or none. A plain client's calls go as one packed
        request (``resp``): a learning batch of 4,000 Reuters events writes about 19,500 rows in 16
        calls, 39,000 arguments, which redis-py's pipeline encoded at 6.2 ms for 8,000 of them
        against 1.6 ms packed.
        """
        scripts = [script] * len(calls) if isinstance(script, Script) else list(script)
        results: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        packed = type(self.client) is redis.Redis
        encode = resp.encode
        for _ in range(2):
            if packed:
                commands = [
                    [b"EVALSHA", scripts[i].sha.encode(), b"%d" % len(calls[i][0]),
                     *map(encode, calls[i][0]), *map(encode, calls[i][1])]
                    for i in pending
                ]  # fmt: skip
                replies = resp.transaction(self.client, commands) if at_once else resp.replies(self.client, commands)
            else:
                pipe = self.client.pipeline(transaction=at_once) if not self.is_cluster else self.client.pipeline()
                for i in pending:
                    keys, args = calls[i]
                    pipe.execute_command("EVALSHA", scripts[i].sha, len(keys), *keys, *args, **self._route(keys[0]))
                replies = pipe.execute(raise_on_error=False)
            missing = []
            for i, reply in zip(pending, replies, strict=True):
                if isinstance(reply, NoScriptError) or (isinstance(reply, Exception) and str(reply).startswith("NOSCRIPT")):
                    missing.append(i)  # not run: safe to send again
                elif isinstance(reply, Exception):
                    raise reply
                else:
                    results[i] = reply
            if not missing:
                return results
            for forgotten in {id(scripts[i]): scripts[i] for i in missing}.values():
                forgotten.sha = self.client.script_load(forgotten.script)  # every primary on a Cluster
            pending = missing
        raise StoreError("Redis keeps forgetting the store's scripts (SCRIPT FLUSH in a loop?)")

    def _route(self, key: bytes) -> dict[str, Any]:
        """On a Cluster, the node of ``key`` (all keys of a command share its hash tag) for a pipelined command.

        Without it redis-py 8's cluster pipeline asks the server (COMMAND GETKEYS) which keys an EVALSHA
        has, one extra round trip per script call, and hashes every key of an MGET; a MOVED reply still
        reroutes by key.
        """
        if isinstance(self.client, RedisCluster):
            return {"target_nodes": self.client.get_node_from_key(key)}
        return {}

    def counters(self, name: str) -> dict[str, float]:
        with _store_errors("reading counters"):
            raw = self.client.hgetall(self.keys.counter_key(name))
        return {_text(key): float(value) for key, value in raw.items()}

    def delete(self, feature_ids: np.ndarray) -> int:
        ids = np.unique(np.asarray(feature_ids, dtype=np.int64))
        if not len(ids):
            return 0
        shards = (ids % self.shards).tolist()
        keys = self.keys.row_keys(ids.tolist(), shards)
        groups: dict[int, list[bytes]] = {}
        for s, key in zip(shards, keys, strict=True):
            groups.setdefault(s, []).append(key)
        calls: list[tuple[list[bytes], list[Any]]] = [
            ([self.keys.count_keys[s], self.keys.write_keys[s], *members], []) for s, members in groups.items()
        ]
        with _store_errors("deleting rows"):
            deleted = int(sum(self._run_scripts(self._scripts.delete, calls)))
            self.new_epoch(self.client)
        return deleted

    def _nodes(self) -> list[redis.Redis]:
        """A plain client per primary (the client itself on a single node)."""
        if isinstance(self.client, RedisCluster):
            return [self.client.get_redis_connection(node) for node in self.client.get_primaries()]
        return [self.client]

    def _scan(self, pattern: bytes) -> Iterator[bytes]:
        """Every key matching ``pattern`` on every primary (a key may come twice, as SCAN allows)."""
        for node in self._nodes():
            cursor = 0
            while True:
                with _store_errors("scanning keys"):
                    cursor, keys = node.scan(cursor, match=pattern, count=_SCAN_COUNT)
                for key in keys:
                    yield key if isinstance(key, bytes) else key.encode()
                if cursor == 0:
                    break

    def iter_rows(self, chunk_rows: int = 10_000) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Every stored row, chunk by chunk; one SCAN per primary covers all of the model's shards."""
        seen: set[int] = set()
        chunk: list[int] = []

        def emit(ids: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
            array = np.array(ids, dtype=np.int64)
            rows = self._fetch(array)
            stored = [i for i, row in enumerate(rows) if row is not None]  # deleted since the scan: skip
            if not stored:
                return None
            return array[stored], self._split(self._decode([rows[i] for i in stored]))

        for key in self._scan(self.keys.rows_pattern):
            fid = feature_id_of(key)
            if fid in seen:
                continue
            seen.add(fid)
            chunk.append(fid)
            if len(chunk) >= chunk_rows:
                out = emit(chunk)
                chunk = []
                if out is not None:
                    yield out
        if chunk:
            out = emit(chunk)
            if out is not None:
                yield out

    def n_features(self) -> int:
        with _store_errors("counting rows"):
            if isinstance(self.client, RedisCluster):
                counts = self.client.mget_nonatomic(self.keys.count_keys)
            else:
                counts = self.client.mget(self.keys.count_keys)
        return sum(int(c) for c in counts if c is not None)

    def new_epoch(self, client: Any) -> None:
        """Record (on ``client``, or a pipeline of it) that rows changed without a new version."""
        client.set(self.keys.epoch_key, uuid.uuid4().hex)

    def row_state(self) -> tuple[int, bytes | None]:
        """(version, epoch): equal in two calls only if no row changed in between.

        Learning bumps the version; deleting rows (compact) and bulk writes (import) set a new epoch.
        The same round trip tells whether categories were added (then they are read too), so
        ``known_categories()`` is current afterwards.
        """
        with _store_errors("reading the version"):
            pipe = self.client.pipeline(transaction=False) if not self.is_cluster else self.client.pipeline()
            pipe.execute_command("MGET", self.keys.version_key, self.keys.epoch_key, **self._route(self.keys.version_key.encode()))
            pipe.llen(self.keys.categories_key)
            (version, epoch), n_categories = pipe.execute()
        if n_categories > len(self._categories):
            self._refresh_now()
        return int(version or 0), epoch

    @property
    def version(self) -> int:
        with _store_errors("reading the version"):
            value = self.client.get(self.keys.version_key)
        return int(value) if value is not None else 0

    # -- model metadata --------------------------------------------------------------------------------
    def metadata(self) -> dict[str, str]:
        with _store_errors("reading metadata"):
            raw = self.client.hgetall(self.keys.metadata_key)
        return {_text(key): _text(value) for key, value in raw.items()}

    def set_metadata(self, values: Mapping[str, str]) -> None:
        if not values:
            return
        with _store_errors("writing metadata"):
            self.client.hset(self.keys.metadata_key, mapping={k: v for k, v in values.items()})

    # -- the model as a whole --------------------------------------------------------------------------
    def model_keys(self) -> list[bytes]:
        """Every key of this model (rows, counts, markers, categories, ...), e.g. for MEMORY USAGE."""
        keys: set[bytes] = set()
        for pattern in self.keys.model_patterns:
            keys.update(self._scan(pattern))
        return sorted(keys)

    def drop_model(self) -> int:
        """Delete every key of this model; returns how many were deleted. Other instances must be rebuilt."""
        groups: dict[bytes, list[bytes]] = {}
        for key in self.model_keys():
            groups.setdefault(hash_tag_of(key), []).append(key)
        deleted = 0
        with _store_errors("dropping the model"):
            pipe = self.client.pipeline(transaction=False) if not self.is_cluster else self.client.pipeline()
            for members in groups.values():
                for start in range(0, len(members), _DELETE_BATCH):
                    pipe.execute_command("UNLINK", *members[start : start + _DELETE_BATCH])
            if groups:
                deleted = sum(int(n) for n in pipe.execute())
        self._categories, self._column, self._categories_tuple = [], {}, ()
        self._categories_checked = float("-inf")
        return deleted


def _stored(rows: Sequence[bytes | None]) -> np.ndarray:
    """Whether each row of an ``MGET`` reply was stored (not None), in one pass at C speed."""
    return np.fromiter(map(is_not, rows, repeat(None)), dtype=bool, count=len(rows))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@contextmanager
def _store_errors(doing: str) -> Iterator[None]:
    """Turn "Redis is unreachable or unwell" into ``StoreError`` (retriable); a layout clash into ``ConfigError``."""
    try:
        yield
    except StoreError:
        raise
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.ClusterError,
        redis.exceptions.RedisClusterException,
    ) as exc:
        raise StoreError(f"Redis did not answer while {doing}: {exc}") from exc
    except (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError, redis.exceptions.TryAgainError) as exc:
        # redis-py drops these replies' codes from the message, so they are told apart by class.
        raise StoreError(f"Redis refused while {doing}: {type(exc).__name__}: {exc}") from exc
    except redis.exceptions.ResponseError as exc:
        message = str(exc)
        if message.startswith(_LAYOUT_ERROR) or f" {_LAYOUT_ERROR} " in message:
            raise ConfigError(f"this model name holds a model with other tables: {message}") from exc
        if message.startswith(_RETRIABLE_REPLIES):
            raise StoreError(f"Redis refused while {doing}: {message}") from exc
        raise
