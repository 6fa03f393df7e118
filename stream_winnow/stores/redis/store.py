"""A weight store in Redis (single node or Cluster), shared by many worker processes.

``RedisStore`` keeps the model's state that lives in the process (its categories) and puts
together the package's parts: where each key is (``keys``), what a row holds (``rows``), the
Lua scripts (``scripts``, ``lua/``), reading (``reads``) and writing (``writes``) in one round
trip, routing on a Cluster (``cluster``) and Redis failures as the store's errors (``errors``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import redis
from redis.cluster import RedisCluster

from stream_winnow.errors import ConfigError
from stream_winnow.stores.base import SEEN_WINDOW, ChangeLog, RowSnapshot, RowUpdate, TableSpec, Update, WeightStore
from stream_winnow.stores.delta import RowDelta, SourceRange, fold_updates
from stream_winnow.stores.redis import reads, scripts, writes
from stream_winnow.stores.redis.cluster import RedisClient, pipeline, scan
from stream_winnow.stores.redis.errors import store_errors
from stream_winnow.stores.redis.keys import ModelKeys, feature_id_of, hash_tag_of
from stream_winnow.stores.redis.reads import text
from stream_winnow.stores.redis.rows import RowLayout, stored

__all__ = ["RedisStore"]

# A shard script over a few hundred rows runs in about a millisecond; a 5 s silence means a stuck or
# unreachable server, and the worker should rather retry (StoreError) than wait.
_DEFAULT_SOCKET_TIMEOUT_S = 5.0
_DEFAULT_CONNECT_TIMEOUT_S = 2.0
# Keys per DEL in drop_model.
_DELETE_BATCH = 1000


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
        seen_window: int = SEEN_WINDOW,
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

        self._row_layout = RowLayout(self.tables)
        # What part_writes asks a single node, once a batch.
        self._counters_request = reads.counters_request(self.keys)
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
        seen_window: int = SEEN_WINDOW,
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
        with store_errors("connecting"):
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
            name = text(raw)
            self._column[name] = len(self._categories)
            self._categories.append(name)
        self._categories_tuple = tuple(self._categories)

    def _reload_categories(self) -> None:
        with store_errors("reading categories"):
            names = self.client.lrange(self.keys.categories_key, 0, -1)
        self._categories, self._column, self._categories_tuple = [], {}, ()
        self._extend_categories(names)

    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        column = self._column
        if all(name in column for name in names):  # columns never change: no round trip
            return np.array([column[n] for n in names], dtype=np.intp)
        keys = [self.keys.categories_key, self.keys.columns_key, self.keys.layout_key]
        with store_errors("creating categories"):
            columns, tail = self._scripts.ensure_categories(keys, [self._row_layout.json, len(self._categories), *names])
        self._extend_categories(tail)
        result = np.array([int(c) for c in columns], dtype=np.intp)
        if any(self._column.get(n) != c for n, c in zip(names, result.tolist(), strict=True)):
            self._reload_categories()  # the list was rebuilt (drop_model elsewhere): start over
        return result

    def _refresh_now(self) -> None:
        with store_errors("reading categories"):
            tail = self.client.lrange(self.keys.categories_key, len(self._categories), -1)
        self._extend_categories(tail)

    def _refresh_if_more(self, n_categories: int) -> None:
        """Read the new categories if Redis's list (``n_categories`` long) has more than this instance knows."""
        if n_categories > len(self._categories):
            self._refresh_now()

    # -- rows ------------------------------------------------------------------------------------------
    def _fetch(self, feature_ids: np.ndarray) -> list[bytes | None]:
        """The raw rows of ``feature_ids`` in one round trip; refreshes the categories if Redis has more."""
        return self._fetch_with_writes(feature_ids, writes=False)[0]

    def _fetch_with_writes(self, feature_ids: np.ndarray, writes: bool) -> tuple[list[bytes | None], dict[int, int]]:
        """``_fetch``, and with ``writes`` each shard's write counter read atomically with its rows."""
        rows, counters, n_categories = reads.fetch_rows(self.client, self.keys, feature_ids, writes=writes)
        self._refresh_if_more(n_categories)
        return rows, counters

    def _decode(self, rows: Sequence[bytes | None]) -> np.ndarray:
        """Rows (None: not stored) as a float64 block (len(rows), G + C*T) for the known categories C."""
        return self._row_layout.decode(rows, len(self._categories))

    def _split(self, block: np.ndarray) -> dict[str, np.ndarray]:
        return self._row_layout.split(block)

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
        return RowSnapshot(ids, self._split(self._decode(raw)), None, writes, stored(raw))

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

    def part_changes(self, behind: Mapping[int, int]) -> dict[int, ChangeLog]:
        """The tails of the shards' change logs (``reads.change_logs``), one round trip."""
        return reads.change_logs(self.client, self.keys, behind)

    def part_writes_later(self) -> Callable[[], tuple[int, bytes | None, np.ndarray]]:
        """``part_writes`` with its request sent now and its reply read by the function returned.

        On a single node the request goes out at once (``resp.Pending``), so the reply arrives while the
        caller does other work; a Cluster's pipeline runs when the function is called.
        """
        replies = reads.write_counters_later(self.client, self.keys, self._counters_request)

        def finish() -> tuple[int, bytes | None, np.ndarray]:
            version, epoch, counters, n_categories = replies()
            self._refresh_if_more(n_categories)
            writes = np.array([int(c or 0) for c in counters], dtype=np.int64)
            return int(version or 0), epoch, writes

        return finish

    def packed_rows(self, values: Mapping[str, np.ndarray], n_categories: int) -> np.ndarray:
        """Rows in the stored layout, (rows, G + C*T) little-endian float32, from values per table."""
        return self._row_layout.packed(values, n_categories)

    # -- learning: commutative deltas, exactly once by offsets ------------------------------------------
    @property
    def n_parts(self) -> int:
        return self.shards

    def watermarks(self, sources: Sequence[str]) -> dict[str, np.ndarray]:
        return reads.watermarks(self.client, self.keys, sources)

    def seen_events(self, source: str) -> np.ndarray:
        return reads.seen_events(self.client, self.keys, source)

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
        return writes.apply_delta(
            self.client, self._scripts, self.keys, self._row_layout, self.seen_window, delta, sources, seen or {}, parts
        )

    def counters(self, name: str) -> dict[str, float]:
        with store_errors("reading counters"):
            raw = self.client.hgetall(self.keys.counter_key(name))
        return {text(key): float(value) for key, value in raw.items()}

    def delete(self, feature_ids: np.ndarray) -> int:
        ids = np.unique(np.asarray(feature_ids, dtype=np.int64))
        if not len(ids):
            return 0
        with store_errors("deleting rows"):
            deleted = writes.delete_rows(self.client, self._scripts, self.keys, ids)
            self.new_epoch(self.client)
        return deleted

    def iter_rows(self, chunk_rows: int = 10_000) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Every stored row, chunk by chunk; one SCAN per primary covers all of the model's shards."""
        seen: set[int] = set()
        chunk: list[int] = []

        def emit(ids: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
            array = np.array(ids, dtype=np.int64)
            rows = self._fetch(array)
            present = [i for i, row in enumerate(rows) if row is not None]  # deleted since the scan: skip
            if not present:
                return None
            return array[present], self._split(self._decode([rows[i] for i in present]))

        for key in scan(self.client, self.keys.rows_pattern):
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
        with store_errors("counting rows"):
            if isinstance(self.client, RedisCluster):
                counts = self.client.mget_nonatomic(self.keys.count_keys)
            else:
                counts = self.client.mget(self.keys.count_keys)
        return sum(int(c) for c in counts if c is not None)

    def new_epoch(self, client: Any) -> None:
        """Record (on ``client``, or a pipeline of it) that rows changed without a new version."""
        writes.new_epoch(client, self.keys)

    def row_state(self) -> tuple[int, bytes | None]:
        """(version, epoch): equal in two calls only if no row changed in between.

        Learning bumps the version; deleting rows (compact) and bulk writes (import) set a new epoch.
        The same round trip tells whether categories were added (then they are read too), so
        ``known_categories()`` is current afterwards.
        """
        version, epoch, n_categories = reads.row_state(self.client, self.keys)
        self._refresh_if_more(n_categories)
        return int(version or 0), epoch

    @property
    def version(self) -> int:
        with store_errors("reading the version"):
            value = self.client.get(self.keys.version_key)
        return int(value) if value is not None else 0

    # -- model metadata --------------------------------------------------------------------------------
    def metadata(self) -> dict[str, str]:
        with store_errors("reading metadata"):
            raw = self.client.hgetall(self.keys.metadata_key)
        return {text(key): text(value) for key, value in raw.items()}

    def set_metadata(self, values: Mapping[str, str]) -> None:
        if not values:
            return
        with store_errors("writing metadata"):
            self.client.hset(self.keys.metadata_key, mapping={k: v for k, v in values.items()})

    def domain_model(self) -> bytes | None:
        with store_errors("reading the domain model"):
            value = self.client.get(self.keys.domain_key)
        return None if value is None else value if isinstance(value, bytes) else value.encode()

    def set_domain_model(self, data: bytes) -> None:
        with store_errors("writing the domain model"):
            self.client.set(self.keys.domain_key, data)

    # -- the model as a whole --------------------------------------------------------------------------
    def model_keys(self) -> list[bytes]:
        """Every key of this model (rows, counts, markers, categories, ...), e.g. for MEMORY USAGE."""
        keys: set[bytes] = set()
        for pattern in self.keys.model_patterns:
            keys.update(scan(self.client, pattern))
        return sorted(keys)

    def drop_model(self) -> int:
        """Delete every key of this model; returns how many were deleted. Other instances must be rebuilt."""
        groups: dict[bytes, list[bytes]] = {}
        for key in self.model_keys():
            groups.setdefault(hash_tag_of(key), []).append(key)
        deleted = 0
        with store_errors("dropping the model"):
            pipe = pipeline(self.client)
            for members in groups.values():
                for start in range(0, len(members), _DELETE_BATCH):
                    pipe.execute_command("UNLINK", *members[start : start + _DELETE_BATCH])
            if groups:
                deleted = sum(int(n) for n in pipe.execute())
        self._categories, self._column, self._categories_tuple = [], {}, ()
        self._categories_checked = float("-inf")
        return deleted
