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
    sw:{<model>:<shard>}:w                 writes to the shard's rows (apply_rows' compare-and-set token)
    sw:{<model>:<shard>}:evs:<day>         events this shard applied, a set per day (expires after a week)
    sw:{<model>}:categories / :columns     category names in column order / name -> column
    sw:{<model>}:layout / :metadata        the tables' layout / the model's settings
    sw:{<model>}:version / :epoch          learning bumps the version; compact and imports the epoch
    sw:{<model>}:counter:<name> / :ev:<event id>

Every key of a shard shares the hash tag ``{<model>:<shard>}`` (one Cluster slot),
so one Lua script updates a shard atomically; model-level keys share ``{<model>}``.

``apply`` runs one script per shard touched (pipelined, one round trip) and then one
script on the model keys (counters, version). A shard script skips an event already in
the shard's marker sets and adds the ones it applies; the model-level script sets the
event's marker (``SET NX EX``), so an event redelivered after a crash between scripts
completes exactly once. ``apply_rows`` (a worker's learned batch written whole) marks
its events the same way. Keys ``sw:{<model>:<shard>}:ev:<event id>``, how earlier
versions marked shards, are still honoured until they expire.
An event applied in full (its model-level marker set) touches no shard, even when its
recomputed updates now reach other shards: on a single node every shard script checks
that marker, on a Cluster one ``EXISTS`` before the shard scripts does. An ``apply``
without an event id gets a fresh one (short TTL), which makes redis-py's automatic
retry of a timed-out pipeline harmless too.

Values are stored as float32 and every read returns float64 arrays of the stored
float32 values (within 6e-8 relative of what ``MemoryStore`` holds per update).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress, repeat
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
from stream_winnow.stores.base import CounterUpdate, LearnedEvent, RowSnapshot, TableSpec, Update, WeightStore

__all__ = ["RedisStore"]

RedisClient = redis.Redis | RedisCluster

# Model names become part of keys and hash tags: no braces (hash tags), no colons (key separator), no glob chars.
_MODEL_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
# A shard script over a few hundred rows runs in about a millisecond; a 5 s silence means a stuck or
# unreachable server, and the worker should rather retry (StoreError) than wait.
_DEFAULT_SOCKET_TIMEOUT_S = 5.0
_DEFAULT_CONNECT_TIMEOUT_S = 2.0
# Markers of an apply without an event id only guard redis-py's own retries of that call (seconds).
_AUTO_EVENT_TTL_S = 600
# Keys asked per SCAN call: large enough that a scan of a million keys takes ~1000 round trips.
_SCAN_COUNT = 1000
# Row keys remembered per store (about 100 bytes each): far more than a model's features, bounded anyway.
_ROW_KEY_CACHE = 2_000_000
# Keys per DEL in drop_model.
_DELETE_BATCH = 1000
# A script error that means "this model name holds another model" rather than "Redis is unwell".
_LAYOUT_ERROR = "SWLAYOUT"
# Redis errors that retrying later can fix (the rest are bugs and propagate as they are).
_RETRIABLE_REPLIES = ("OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")

# KEYS[1] shard row count, then feature rows, then events' markers, each named by its index in the plan.
# ARGV[1] msgpack {G, T, width, initial globals, initial per-category, events},
# ARGV[2] the initial row (packed float32, width floats) used to pad short rows.
# event = {index of its (legacy) marker key in this shard, index of its model-level marker (the guard,
# checked on a single node; 0: none), ops, marker TTL in s, event id}, in order; plan[7] the shard's
# write counter, plan[8] its marker sets (time buckets, the current one last), plan[9] their expiry.
# An event in one of the marker sets (or, on a single node, whose guard is set) is skipped whole;
# an applied one is added to the current set. Each row is read
# once and written once per call, however many events touch it: that is what makes a batch cheap.
# op = {key indices, float positions, multiply (per position, or empty), add (k*m row-major, or empty), low, high}
_APPLY_SHARD_LUA = """
local plan = cmsgpack.unpack(ARGV[1])
local G, T, width, init_g, init_t, events = plan[1], plan[2], plan[3], plan[4], plan[5], plan[6]
local writes, marker_sets, sets_expire = plan[7], plan[8], plan[9]
local tmpl = ARGV[2]
local tmpl_n = #tmpl / 4
local function initial(i)
  if i < G then return init_g[i + 1] end
  return init_t[(i - G) % T + 1]
end
local rows, order = {}, {}
local applied = 0
for _, event in ipairs(events) do
local skip = event[2] > 0 and redis.call('EXISTS', KEYS[event[2]]) == 1
-- A key marker is how versions before the marker sets recorded an event: still honoured.
if not skip and redis.call('EXISTS', KEYS[event[1]]) == 1 then skip = true end
for _, at in ipairs(marker_sets) do
  if not skip and redis.call('SISMEMBER', KEYS[at], event[5]) == 1 then skip = true end
end
if not skip then
  redis.call('SADD', KEYS[marker_sets[#marker_sets]], event[5])
  redis.call('EXPIREAT', KEYS[marker_sets[#marker_sets]], sets_expire)
end
if not skip then
applied = applied + 1
for _, op in ipairs(event[3]) do
  local ks, pos, mul, add, low, high = op[1], op[2], op[3], op[4], op[5], op[6]
  local m = #pos
  local hasmul, hasadd = #mul > 0, #add > 0
  for ki, k in ipairs(ks) do
    local r = rows[k]
    if r == nil then
      local s = redis.call('GET', KEYS[k])
      r = {s = s or '', created = not s, vals = {}, need = 0}
      r.n = #r.s / 4
      rows[k] = r
      order[#order + 1] = k
    end
    local s, n, vals = r.s, r.n, r.vals
    local base = (ki - 1) * m
    for j = 1, m do
      local p = pos[j]
      local v = vals[p]
      if v == nil then
        if p < n then v = struct.unpack('<f', s, p * 4 + 1) else v = initial(p) end
      end
      if hasmul then v = v * mul[j] end
      if hasadd then v = v + add[base + j] end
      if v < low then v = low elseif v > high then v = high end
      vals[p] = v
      if p >= r.need then r.need = p + 1 end
    end
  end
end
end
end
if applied == 0 then return -1 end
local function fill(parts, s, n, a, b)
  if a < n then
    local e = math.min(b, n)
    parts[#parts + 1] = string.sub(s, a * 4 + 1, e * 4)
    a = e
  end
  if a < b then
    local e = math.min(b, tmpl_n)
    if a < e then
      parts[#parts + 1] = string.sub(tmpl, a * 4 + 1, e * 4)
      a = e
    end
    for i = a, b - 1 do parts[#parts + 1] = struct.pack('<f', initial(i)) end
  end
end
local created = 0
for _, k in ipairs(order) do
  local r = rows[k]
  local total = math.max(r.n, width, r.need)
  local ps = {}
  for p in pairs(r.vals) do ps[#ps + 1] = p end
  table.sort(ps)
  local parts, at = {}, 0
  for _, p in ipairs(ps) do
    if p > at then fill(parts, r.s, r.n, at, p) end
    parts[#parts + 1] = struct.pack('<f', r.vals[p])
    at = p + 1
  end
  if at < total then fill(parts, r.s, r.n, at, total) end
  redis.call('SET', KEYS[k], table.concat(parts))
  if r.created then created = created + 1 end
end
if created > 0 then redis.call('INCRBY', KEYS[1], created) end
redis.call('INCR', KEYS[writes])
return created
"""

# KEYS[1] the event's model-level marker, KEYS[2] version, KEYS[3..] counter hashes.
# ARGV[1] marker TTL (s), ARGV[2] msgpack list, per counter hash, of {field, amount, field, amount, ...}.
_APPLY_META_LUA = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local plan = cmsgpack.unpack(ARGV[2])
-- An event that changed nothing is only marked (so a redelivery is recognised), not counted as a version.
if ARGV[3] == '1' then return -1 end
for i, amounts in ipairs(plan) do
  for j = 1, #amounts, 2 do redis.call('HINCRBYFLOAT', KEYS[i + 2], amounts[j], amounts[j + 1]) end
end
return redis.call('INCR', KEYS[2])
"""

# The meta step of many events in one call. KEYS[1] version, then markers and counter hashes by index.
# ARGV[1] msgpack list of events {marker index, TTL (s), '1' if it only marks, {{counter index, amounts}}}.
# Returns per event: 0 already applied, -1 only marked, else the new version (as if each had INCRed it).
# The fresh events' counter amounts are summed here and the version moved once: a batch of 2,000
# learned events is 2,000 markers and about 90 HINCRBYFLOATs, not 6,000 calls more.
_APPLY_METAS_LUA = """
local events = cmsgpack.unpack(ARGV[1])
local out, sums, order, fresh = {}, {}, {}, 0
for i, ev in ipairs(events) do
  if not redis.call('SET', KEYS[ev[1]], '1', 'NX', 'EX', ev[2]) then
    out[i] = 0
  elseif ev[3] == '1' then
    out[i] = -1
  else
    for _, entry in ipairs(ev[4]) do
      local at, amounts = entry[1], entry[2]
      local sum = sums[at]
      if not sum then
        sum = {}
        sums[at] = sum
        order[#order + 1] = at
      end
      for j = 1, #amounts, 2 do sum[amounts[j]] = (sum[amounts[j]] or 0) + tonumber(amounts[j + 1]) end
    end
    fresh = fresh + 1
    out[i] = fresh
  end
end
if fresh > 0 then
  local first = redis.call('INCRBY', KEYS[1], fresh) - fresh
  for i = 1, #out do
    if out[i] > 0 then out[i] = first + out[i] end
  end
  for _, at in ipairs(order) do
    for field, amount in pairs(sums[at]) do
      redis.call('HINCRBYFLOAT', KEYS[at], field, string.format('%.17g', amount))
    end
  end
end
return out
"""

# Write a batch's learned rows if no row of the shard was written since they were read.
# KEYS[1] shard row count, KEYS[2] its write counter, KEYS[3..n+2] rows, then g model-level markers of
# the suspects (a single node's: a batch written in one transaction marks its events there only), then
# the shard's marker sets (time buckets, the current one last), which must not hold any of the suspects.
# ARGV[1] the write counter as read, ARGV[2] n, ARGV[3] expiry (unix s) of the current set, ARGV[4] rows
# created (absent when read), ARGV[5] msgpack list of the events' ids (marked here), ARGV[6] msgpack list
# of the suspects (the ids attempted before: only they can be in a marker set), ARGV[7] g, then n new
# rows (one argument each: one argument of all rows cut with string.sub cost Redis 4.3 instead of 2.2 ms
# for 900 rows). Returns -1 (nothing written) if the shard was written or a suspect was applied, else
# rows created.
_WRITE_ROWS_LUA = """
local n, g = tonumber(ARGV[2]), tonumber(ARGV[7])
if tonumber(redis.call('GET', KEYS[2]) or '0') ~= tonumber(ARGV[1]) then return -1 end
for k = n + 3, n + 2 + g do
  if redis.call('EXISTS', KEYS[k]) == 1 then return -1 end
end
local ids = cmsgpack.unpack(ARGV[5])
local suspects = cmsgpack.unpack(ARGV[6])
-- Variadic calls in chunks (unpack is bounded by Lua's C stack).
for s = n + 3 + g, #KEYS do
  for first = 1, #suspects, 1000 do
    local last = math.min(first + 999, #suspects)
    for _, member in ipairs(redis.call('SMISMEMBER', KEYS[s], unpack(suspects, first, last))) do
      if member == 1 then return -1 end
    end
  end
end
-- MSET in chunks of 500 rows: one call a chunk, not a SET a row (19,520 rows in 16 scripts, a
-- learning batch of 4,000 Reuters events: 60 ms against 51, a throwaway timing).
local kv = {}
for first = 1, n, 500 do
  local j = 0
  for i = first, math.min(first + 499, n) do
    kv[j + 1] = KEYS[i + 2]
    kv[j + 2] = ARGV[i + 7]
    j = j + 2
  end
  redis.call('MSET', unpack(kv, 1, j))
end
for first = 1, #ids, 1000 do
  redis.call('SADD', KEYS[#KEYS], unpack(ids, first, math.min(first + 999, #ids)))
end
if #ids > 0 then redis.call('EXPIREAT', KEYS[#KEYS], ARGV[3]) end
local created = tonumber(ARGV[4])
if created > 0 then redis.call('INCRBY', KEYS[1], created) end
redis.call('INCR', KEYS[2])
return created
"""

# Record that events are being attempted: KEYS the events' model-level attempt markers, ARGV[1] their
# expiry (unix s). Returns per event 1 if it was attempted before (a suspect), else 0.
# Every path sets an event's attempt marker before any shard marks it (apply_rows, apply_many, apply),
# so an event never attempted is in no shard's marker set: apply_rows checks only the suspects there.
# Looking 4,000 fresh events up in a shard's 8 marker sets (a week's) took 5.8 ms a shard call with 7 of
# the sets empty and 18.1 ms with all 8 holding 50,000 events (timed from the client, a throwaway script):
# 16 such calls a batch; setting 4,000 attempt markers is one script.
_TRY_EVENTS_LUA = """
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('SET', KEYS[i], '1', 'NX', 'EXAT', ARGV[1]) and 0 or 1
end
return out
"""

# KEYS[1] category list, KEYS[2] name -> column hash, KEYS[3] layout.
# ARGV[1] layout, ARGV[2] categories the caller knows, ARGV[3..] names. Returns {columns, new tail of the list}.
_ENSURE_CATEGORIES_LUA = """
local layout = redis.call('GET', KEYS[3])
if not layout then
  redis.call('SET', KEYS[3], ARGV[1])
elseif layout ~= ARGV[1] then
  return redis.error_reply('SWLAYOUT model has tables ' .. layout)
end
local columns = {}
for i = 3, #ARGV do
  local c = redis.call('HGET', KEYS[2], ARGV[i])
  if c then
    c = tonumber(c)
  else
    c = redis.call('RPUSH', KEYS[1], ARGV[i]) - 1
    redis.call('HSET', KEYS[2], ARGV[i], c)
  end
  columns[#columns + 1] = c
end
return {columns, redis.call('LRANGE', KEYS[1], ARGV[2], -1)}
"""

# KEYS[1] shard row count, KEYS[2] its write counter, KEYS[3..] feature rows. Returns how many rows existed.
_DELETE_LUA = """
local n = 0
for i = 3, #KEYS do n = n + redis.call('DEL', KEYS[i]) end
if n > 0 then
  redis.call('DECRBY', KEYS[1], n)
  redis.call('INCR', KEYS[2])
end
return n
"""


def _last_occurrence(values: np.ndarray) -> np.ndarray:
    """Indices keeping the last occurrence of each value, in order (numpy's fancy assignment: last wins)."""
    if len(values) < 2:
        return np.arange(len(values))
    _, first_of_reversed = np.unique(values[::-1], return_index=True)
    if len(first_of_reversed) == len(values):
        return np.arange(len(values))
    return np.sort(len(values) - 1 - first_of_reversed)


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
        event_ttl_s: int = 7 * 24 * 3600,
        *,
        categories_max_staleness_ms: int = 0,
    ) -> None:
        super().__init__(tables)
        if not _MODEL_NAME.fullmatch(model):
            raise ConfigError(f"model name must match {_MODEL_NAME.pattern}; got {model!r}")
        if not 1 <= shards <= 16384:
            raise ConfigError(f"shards must be in 1..16384; got {shards}")
        if event_ttl_s < 1:
            raise ConfigError(f"event_ttl_s must be >= 1; got {event_ttl_s}")
        if categories_max_staleness_ms < 0:
            raise ConfigError(f"categories_max_staleness_ms must be >= 0; got {categories_max_staleness_ms}")
        if client.get_encoder().decode_responses:
            raise ConfigError("RedisStore needs a client with decode_responses=False (rows are binary)")
        self.client = client
        self.model = model
        self.shards = shards
        self.event_ttl_s = event_ttl_s
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

        self._shard_prefix = [f"sw:{{{model}:{s}}}:".encode() for s in range(shards)]
        self._count_keys = [prefix + b"n" for prefix in self._shard_prefix]
        # Per shard, a counter every row write bumps: apply_rows writes a shard only if it is as read.
        self._write_keys = [prefix + b"w" for prefix in self._shard_prefix]
        meta = f"sw:{{{model}}}:"
        self._meta_prefix = meta
        self._categories_key = meta + "categories"
        self._columns_key = meta + "columns"
        self._layout_key = meta + "layout"
        self._metadata_key = meta + "metadata"
        self._version_key = meta + "version"
        self._epoch_key = meta + "epoch"
        # What part_writes asks a single node, once a batch.
        self._counters_request = [
            [b"MGET", self._version_key.encode(), self._epoch_key.encode(), *self._write_keys],
            [b"LLEN", self._categories_key.encode()],
        ]

        self._apply_shard = client.register_script(_APPLY_SHARD_LUA)
        self._apply_meta = client.register_script(_APPLY_META_LUA)
        self._apply_metas = client.register_script(_APPLY_METAS_LUA)
        self._ensure = client.register_script(_ENSURE_CATEGORIES_LUA)
        self._delete = client.register_script(_DELETE_LUA)
        self._write_rows = client.register_script(_WRITE_ROWS_LUA)
        self._try_events = client.register_script(_TRY_EVENTS_LUA)

        self._row_keys_cache: dict[int, bytes] = {}
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
        event_ttl_s: int = 7 * 24 * 3600,
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
        return cls(client, model, tables, shards, event_ttl_s, categories_max_staleness_ms=categories_max_staleness_ms)

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

    # -- keys ------------------------------------------------------------------------------------------
    def _row_keys(self, feature_ids: Sequence[int], shards: Sequence[int]) -> list[bytes]:
        prefix = self._shard_prefix
        return [prefix[s] + b"f:%d" % f for f, s in zip(feature_ids, shards, strict=True)]

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
            names = self.client.lrange(self._categories_key, 0, -1)
        self._categories, self._column, self._categories_tuple = [], {}, ()
        self._extend_categories(names)

    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        column = self._column
        if all(name in column for name in names):  # columns never change: no round trip
            return np.array([column[n] for n in names], dtype=np.intp)
        keys = [self._categories_key, self._columns_key, self._layout_key]
        with _store_errors("creating categories"):
            columns, tail = self._ensure(keys, [self._layout, len(self._categories), *names])
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
        keys = self._row_keys(ids, shards)
        counters: dict[int, int] = {}
        with _store_errors("reading rows"):
            if isinstance(self.client, RedisCluster):
                rows: list[bytes | None] = [None] * len(keys)
                groups: dict[int, list[int]] = {}
                for i, s in enumerate(shards):
                    groups.setdefault(s, []).append(i)
                pipe = self.client.pipeline()
                for s, members in groups.items():  # one MGET per shard: atomic per shard, as apply_rows needs
                    group_keys = [keys[i] for i in members] + ([self._write_keys[s]] if writes else [])
                    pipe.execute_command("MGET", *group_keys, **self._route(group_keys[0]))
                pipe.llen(self._categories_key)
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
                pipe.execute_command("MGET", *keys, *(self._write_keys[s] for s in present))
                pipe.llen(self._categories_key)
                rows, n_categories = pipe.execute()
                if present:
                    counters = {s: int(c or 0) for s, c in zip(present, rows[len(keys) :], strict=True)}
                    rows = rows[: len(keys)]
        if n_categories > len(self._categories):
            self._refresh_now()
        return rows, counters

    def _refresh_now(self) -> None:
        with _store_errors("reading categories"):
            tail = self.client.lrange(self._categories_key, len(self._categories), -1)
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
        block = self._decode(raw)
        stored = _stored(raw)
        widest = max(map(len, compress(raw, stored)), default=0)  # type: ignore[arg-type]
        return RowSnapshot(ids, self._split(block), _RowsAsRead(block, widest), writes, stored)

    def snapshot_from(
        self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray], stored: np.ndarray, writes: Mapping[int, int]
    ) -> RowSnapshot:
        ids = np.asarray(feature_ids, dtype=np.int64)
        per_category = [values[spec.name].shape[1] for spec in self._per_category]
        block = self.packed_rows(values, per_category[0] if per_category else 0)
        widest = 4 * block.shape[1] if stored.any() else 0
        return RowSnapshot(ids, dict(values), _RowsAsRead(block, widest), dict(writes), stored)

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
            pipe.execute_command("MGET", self._version_key, self._epoch_key,
                                 **self._route(self._version_key.encode()))  # fmt: skip
            for key in self._write_keys:  # one slot per shard
                pipe.get(key)
            pipe.llen(self._categories_key)
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

    def apply_rows(
        self, snapshot: RowSnapshot, learned: Mapping[str, np.ndarray], events: Sequence[LearnedEvent]
    ) -> list[bool] | None:
        """Write the changed rows whole, per shard only if nothing wrote the shard since the snapshot.

        A batch of 500 mistakes on Reuters changes about 6,000 rows. Each shard's write counter, read
        atomically with its rows, is the compare-and-set token, so a shard's script is a counter check,
        one marker-set lookup and one SET per row; Lua float arithmetic per (event, row, category), the
        event-by-event way, cost about 130 us an event. Events that changed rows are added to the shard's
        marker set (a set per time bucket), so a redelivery after a crash between shards finds them
        there. None (a shard was written meanwhile, or holds one of the events) leaves the rest to
        ``apply_many``, whose per-event scripts skip the shards already written.

        On a single node, a batch none of whose events was attempted before (every batch but a
        redelivery's) goes as one transaction of plain commands instead (``_write_batch_at_once``):
        the same check, then the rows and the meta step together, all or nothing, without Lua
        copying the rows and without shard markers (a redelivery finds the model-level ones, which
        the shard scripts look up for their suspects on a single node).
        """
        token, writes, stored = snapshot.token, snapshot.writes, snapshot.stored
        if not isinstance(token, _RowsAsRead) or writes is None or stored is None:
            return None
        old = token.block  # the rows as read (float32 values, as float32 or float64)
        ids = snapshot.feature_ids
        n = len(ids)
        if len(old) != n or len(stored) != n:
            return None
        per_category = [learned[spec.name].shape[1] for spec in self._per_category]
        new = self.packed_rows(learned, per_category[0] if per_category else 0)
        width = new.shape[1]
        if token.widest_bytes > 4 * width:
            return None  # rows wider than what we learned on: categories we do not know yet
        if old.shape[1] != width:
            return None
        # old holds float32 values, so comparing with the float32 rows compares float32s.
        changed = np.flatnonzero((old != new).any(axis=1)) if n else np.zeros(0, dtype=np.int64)
        fresh_ids = [event.event_id for event in events if event.changed_rows]
        ttl = self.event_ttl_s
        if len(changed):
            # After the snapshot was read, before any shard is written: a worker racing us on the
            # same events either sees them as suspects or fails its compare-and-set on our writes.
            with _store_errors("marking events as attempted"):
                suspects = self._attempted(fresh_ids)
            changed_ids = ids[changed]
            parts = self._shard_rows(changed_ids, new[changed], ~stored[changed])
            with _store_errors("writing learned rows"):
                if not suspects and type(self.client) is redis.Redis and _distinct(events):
                    return self._write_batch_at_once(parts, writes, events)
                calls = self._write_rows_calls(parts, writes, fresh_ids, suspects)
                if any(reply == -1 for reply in self._run_scripts(self._write_rows, calls)):
                    return None
        if not events:
            return []
        with _store_errors("writing learned rows"):
            replies = self._run_scripts(self._apply_metas, [self._events_call(events, ttl)])[0]
        return [bool(reply) for reply in replies]

    def _shard_rows(self, ids: np.ndarray, rows: np.ndarray, absent: np.ndarray) -> list[_ShardRows]:
        """The changed rows ``rows`` (packed, one per id) grouped by shard: keys, row bytes, rows created."""
        row_bytes = rows.shape[1] * rows.itemsize
        shard_of = ids % self.shards
        order = np.argsort(shard_of, kind="stable")
        cuts = np.flatnonzero(np.diff(shard_of[order])) + 1
        id_list = ids.tolist()
        parts = []
        for members in np.split(order, cuts):
            s = int(shard_of[members[0]])
            packed = rows[members].tobytes()
            parts.append(_ShardRows(
                shard=s,
                keys=[self._row_key(s, id_list[i]) for i in members.tolist()],
                rows=[packed[i : i + row_bytes] for i in range(0, len(packed), row_bytes)],
                created=int(absent[members].sum()),
            ))  # fmt: skip
        return parts

    def _write_batch_at_once(
        self, parts: Sequence[_ShardRows], writes: Mapping[int, int], events: Sequence[LearnedEvent]
    ) -> list[bool] | None:
        """A single node's whole write of a batch none of whose events was attempted before: the rows,
        the events' model-level markers, their counters and the version, in one ``MULTI``/``EXEC`` of
        plain commands, if every written shard's write counter is as read (``WATCH``ed) and no event
        that changed rows is marked yet. Returns ``apply_rows``'s reply; None if nothing was written.

        Only the counters are watched: ``WATCH`` of a batch's 4,000 markers too cost Redis 55 ms a
        batch (the same command, on a variant that watched them), as Redis 7.0 looks each key up in
        the client's list of watched keys. They need not be. Any other
        worker with one of these events attempts it after us, so finds it a suspect and writes its
        rows after our snapshot: a shard we write, so EXEC fails. One that only marks it (its model
        had the event right) leaves the rows and counts to us; the event's reply is then False.

        The rows and the markers land together, so a redelivery finds the model-level marker and no
        shard needs one: the shards' marker sets are only for the scripts' way (a Cluster's shards, or
        a batch holding events attempted before), which can be cut short between shards. A batch of
        4,000 Reuters mistakes (19,520 rows of 768 bytes) cost Redis 128.3 ms of scripts as 16
        ``_WRITE_ROWS_LUA`` calls and the meta script, which copy every row into Lua and out again;
        this way, by command, 10.7 ms the attempt markers' script, 16.8 ``MSET``, 9.0 ``SET`` (the
        script's own among them) and 3.0 ``MGET`` (``python -m benchmarks.profile_worker learn
        --labels mistaken --batch 4000 --batches 10``, its SLOWLOG line). A lost connection leaves unknown whether EXEC ran: its ``StoreError`` sends the batch
        round again, and its events, attempted now, are suspects, which ``_WRITE_ROWS_LUA`` looks up
        by their model-level markers on a single node.
        """
        ttl = b"%d" % self.event_ttl_s
        write_keys = [self._write_keys[p.shard] for p in parts]
        expected = [writes.get(p.shard, 0) for p in parts]
        markers = [self._event_marker(e.event_id) for e in events]
        fresh = [i for i, e in enumerate(events) if e.changed_rows]
        fresh_markers = [markers[i] for i in fresh]
        # After the rows: each event's marker (its reply is the event's), the counters, the version.
        meta = [[b"SET", marker, b"1", b"NX", b"EX", ttl] for marker in markers]
        meta += self._counter_sums([events[i] for i in fresh])
        if fresh:
            meta.append([b"INCRBY", self._version_key.encode(), b"%d" % len(fresh)])

        def commands_for(values: Sequence[bytes | None]) -> list[list[bytes]] | None:
            counters, marked = values[: len(write_keys)], values[len(write_keys) :]
            if [int(c or 0) for c in counters] != expected or any(m is not None for m in marked):
                return None
            commands: list[list[bytes]] = []
            for part in parts:
                pairs: list[bytes] = [b""] * (2 * len(part.keys))
                pairs[0::2], pairs[1::2] = part.keys, part.rows
                commands.append([b"MSET", *pairs])
                if part.created:
                    commands.append([b"INCRBY", self._count_keys[part.shard], b"%d" % part.created])
                commands.append([b"INCR", self._write_keys[part.shard]])
            return commands + meta

        replies = resp.watched_transaction(self.client, write_keys, [b"MGET", *write_keys, *fresh_markers], commands_for)
        if replies is None:
            return None
        first = len(replies) - len(meta)
        return [reply is not None for reply in replies[first : first + len(markers)]]

    def _counter_sums(self, events: Sequence[LearnedEvent]) -> list[list[bytes]]:
        """``HINCRBYFLOAT`` of each counter field, summed over ``events`` in order as ``_APPLY_METAS_LUA``
        sums them (doubles, written with ``%.17g``), so either way leaves the same counters."""
        sums: dict[str, dict[str, float]] = {}
        for event in events:
            for name, amounts in _counter_amounts(event.counters).items():
                fields = sums.setdefault(name, {})
                for j in range(0, len(amounts), 2):
                    fields[amounts[j]] = fields.get(amounts[j], 0) + float(amounts[j + 1])
        prefix = self._meta_prefix + "counter:"
        return [
            [b"HINCRBYFLOAT", (prefix + name).encode(), field.encode(), b"%.17g" % total]
            for name, fields in sums.items()
            for field, total in fields.items()
        ]

    def _write_rows_calls(
        self, parts: Sequence[_ShardRows], writes: Mapping[int, int], event_ids: Sequence[str], suspects: Sequence[str]
    ) -> list[tuple[list[bytes], list[Any]]]:
        """``_WRITE_ROWS_LUA``'s (keys, args) per shard: a Cluster's write, or a batch with suspects to look for
        (or an event id twice)."""
        fresh, suspected = msgpack.packb(list(event_ids)), msgpack.packb(list(suspects))
        # A Cluster keeps model-level keys in another slot than a shard's; it never writes a batch at once.
        guards = [] if self.is_cluster else [self._event_marker(e) for e in suspects]
        calls = []
        for part in parts:
            expire_at, sets = self._marker_sets(part.shard)
            keys = [self._count_keys[part.shard], self._write_keys[part.shard], *part.keys, *guards, *sets]
            args = [writes.get(part.shard, 0), len(part.keys), expire_at, part.created, fresh, suspected, len(guards),
                    *part.rows]  # fmt: skip
            calls.append((keys, args))
        return calls

    def _events_call(self, events: Sequence[LearnedEvent], ttl: int) -> tuple[list[Any], list[Any]]:
        """``_metas_call`` of each event's ``_meta_call``, built in one pass over the batch.

        For a batch of 2,000 learned events the two steps cost 18 ms under cProfile; this one
        builds the same keys and plan without an intermediate key list per event.
        """
        keys: list[Any] = [self._version_key]
        at_of: dict[str, int] = {}  # counter name -> its 1-based index in keys
        marker = (self._meta_prefix + "ev:").encode()
        counter_prefix = self._meta_prefix + "counter:"
        plan = []
        # Events often share one counters tuple (the worker makes one per set of mistaken categories):
        # its entries are built once, keyed by the tuple's identity while the events hold it.
        entries_of: dict[int, list[list[Any]]] = {}
        for event in events:
            keys.append(marker + event.event_id.encode())
            marker_at = len(keys)
            entries = entries_of.get(id(event.counters))
            if entries is None:
                entries = []
                for name, amounts in _counter_amounts(event.counters).items():
                    at = at_of.get(name)
                    if at is None:
                        keys.append(counter_prefix + name)
                        at = at_of[name] = len(keys)
                    entries.append([at, amounts])
                entries_of[id(event.counters)] = entries
            plan.append([marker_at, ttl, "0" if event.changed_rows else "1", entries])
        return keys, [msgpack.packb(plan)]

    def _event_marker(self, event_id: str) -> bytes:
        """The key of an event's model-level marker: set once the event is applied, checked before applying it."""
        return (self._meta_prefix + "ev:" + event_id).encode()

    def _attempted(self, event_ids: Sequence[str]) -> list[str]:
        """Mark ``event_ids`` as attempted (model-level keys, living a bucket longer than the marker sets);
        returns those attempted before: only they can be in a shard's marker set.

        Every path that marks events in a shard calls this first, so an event never attempted is
        nowhere applied; a redelivery or a racing worker finds its events among the suspects.
        """
        if not event_ids:
            return []
        keys = [(self._meta_prefix + "try:" + e).encode() for e in event_ids]
        # A bucket longer than the sets: outlives those marked in this call even past a bucket's end.
        expire_at = self._marker_expiry(int(time.time())) + self._bucket_s()
        replies = self._run_scripts(self._try_events, [(keys, [expire_at])])[0]
        return [e for e, before in zip(event_ids, replies, strict=True) if before]

    def _marker_expiry(self, now: int) -> int:
        """Expiry (unix s) of the marker sets current at ``now``: what an event marked then is guarded for, at least its TTL."""
        bucket_s = self._bucket_s()
        return (now // bucket_s + 1) * bucket_s + self.event_ttl_s

    def _bucket_s(self) -> int:
        """How long one marker set collects events: a day for the default week's TTL."""
        return max(self.event_ttl_s // 7, 1)

    def _marker_sets(self, shard: int) -> tuple[int, list[bytes]]:
        """(expiry of the current set, unix s; the sets an event applied within its TTL may be in, current last).

        ``apply_rows`` marks events in one set per shard and day (for the default week's TTL), so a
        batch's markers are one SADD, not one key with a TTL per event and shard.
        """
        bucket_s = self._bucket_s()
        now = int(time.time())
        current = now // bucket_s
        oldest = (now - self.event_ttl_s) // bucket_s
        prefix = self._shard_prefix[shard]
        return self._marker_expiry(now), [prefix + b"evs:%d" % b for b in range(oldest, current + 1)]

    def _meta_call(
        self, event: str, ttl: int, counters: Mapping[str, list[str]], mark_only: bool
    ) -> tuple[list[Any], list[Any]]:
        """One event's meta step (marker, counters, version) as ``_metas_call`` takes it."""
        meta_keys: list[Any] = [self._event_marker(event), self._version_key]
        meta_keys += [self._meta_prefix + "counter:" + name for name in counters]
        return meta_keys, [ttl, list(counters.values()), "1" if mark_only else "0"]

    # -- updates ---------------------------------------------------------------------------------------
    def _plan(
        self, updates: Sequence[Update], event_id: str | None
    ) -> tuple[list[tuple[list[bytes], list[Any]]], tuple[list[Any], list[Any]]]:
        """The calls ``apply`` makes: (keys, args) per shard script, then the meta script's (keys, args)."""
        shards: dict[int, _ShardCall] = {}
        meta_call = self._accumulate(shards, updates, event_id)
        return self._shard_calls(shards), meta_call

    def _accumulate(
        self, shards: dict[int, _ShardCall], updates: Sequence[Update], event_id: str | None
    ) -> tuple[list[Any], list[Any]]:
        """Add one event's ops to the per-shard calls ``shards``; returns its meta script call (keys, args)."""
        ttl = self.event_ttl_s if event_id is not None else _AUTO_EVENT_TTL_S
        event = event_id if event_id is not None else f"auto:{uuid.uuid4().hex}"
        marker = b"ev:" + event.encode()
        meta_marker = self._event_marker(event)
        shard_ops: dict[int, list[list[Any]]] = {}
        counters: dict[str, list[str]] = {}
        row_key = self._row_key
        # BW's two tables update the same features: group them by shard once per ids array.
        grouped: tuple[Any, list[tuple[int, Any, list[int]]]] | None = None
        for update in updates:
            if isinstance(update, CounterUpdate):
                _add_amounts(counters, update)
                continue
            spec = self.tables.get(update.table)
            if spec is None:
                raise ConfigError(f"no table {update.table!r} in this store; tables are {list(self.tables)}")
            ids = np.asarray(update.feature_ids, dtype=np.int64)
            columns = np.asarray(update.columns, dtype=np.int64)
            multiply = None if update.multiply is None else np.asarray(update.multiply, dtype=np.float64)
            add = None if update.add is None else np.asarray(update.add, dtype=np.float64)
            keep_ids, keep_columns = _last_occurrence(ids), _last_occurrence(columns)
            if len(keep_ids) != len(ids):
                ids = ids[keep_ids]
                add = None if add is None else add[keep_ids]
            if len(keep_columns) != len(columns):
                columns = columns[keep_columns]
                multiply = None if multiply is None else multiply[keep_columns]
                add = None if add is None else add[:, keep_columns]
            if spec.per_category:
                if len(columns) and (columns.min() < 0 or columns.max() >= len(self._categories)):
                    self._refresh_now()
                    if columns.min() < 0 or columns.max() >= len(self._categories):
                        raise ConfigError(f"columns {columns.tolist()} of table {spec.name!r} name no category")
                positions = (self._g + columns * self._t + self._slot[spec.name]).tolist()
            else:
                if len(columns) and (columns != 0).any():
                    raise ConfigError(f"table {spec.name!r} has one column (0); got columns {columns.tolist()}")
                positions = [self._slot[spec.name]] if len(columns) else []
            mul_list = [] if multiply is None else multiply.tolist()
            low, high = float(spec.bounds.low), float(spec.bounds.high)
            if grouped is None or grouped[0] is not update.feature_ids or len(keep_ids) != len(update.feature_ids):
                shard_of = ids % self.shards
                order = np.argsort(shard_of, kind="stable")
                cuts = np.flatnonzero(np.diff(shard_of[order])) + 1
                id_list = ids.tolist()
                groups = []
                for members in np.split(order, cuts) if len(order) else []:
                    s = int(shard_of[members[0]])
                    call = shards.get(s)
                    if call is None:
                        call = shards[s] = _ShardCall()
                    rows = call.rows
                    indices = [rows.setdefault(row_key(s, id_list[i]), len(rows) + 2) for i in members.tolist()]
                    groups.append((s, members, indices))
                grouped = (update.feature_ids, groups)
            for s, members, indices in grouped[1]:
                add_list = [] if add is None else add[members].ravel().tolist()
                shard_ops.setdefault(s, []).append([indices, positions, mul_list, add_list, low, high])
        # On a single node each shard script also checks the model-level marker (an event fully applied
        # before, with other updates, must not touch new shards); a Cluster checks it beforehand instead.
        guarded = not self.is_cluster and event_id is not None
        for s, ops in shard_ops.items():
            shard_marker = self._shard_prefix[s] + marker
            shards[s].events.append((shard_marker, meta_marker if guarded else None, ops, ttl))
        # An apply with no updates at all only marks the event.
        return self._meta_call(event, ttl, counters, not updates)

    def _row_key(self, shard: int, feature_id: int) -> bytes:
        key = self._row_keys_cache.get(feature_id)
        if key is None:
            if len(self._row_keys_cache) > _ROW_KEY_CACHE:
                self._row_keys_cache.clear()
            key = self._row_keys_cache[feature_id] = self._shard_prefix[shard] + b"f:%d" % feature_id
        return key

    def _shard_calls(self, shards: dict[int, _ShardCall]) -> list[tuple[list[bytes], list[Any]]]:
        """(keys, args) of one script call per shard: KEYS = [row count, rows..., markers...]."""
        n_categories = len(self._categories)
        width = self._g + n_categories * self._t
        template = self._initial_row(n_categories).astype("<f4").tobytes()
        initial_g = [float(s.initial) for s in self._globals]
        initial_t = [float(s.initial) for s in self._per_category]
        sets_expire, marker_sets = {}, {}
        for s in shards:
            sets_expire[s], marker_sets[s] = self._marker_sets(s)
        calls = []
        for s, call in shards.items():
            keys: list[bytes] = [self._count_keys[s], *call.rows]
            events = []
            for shard_marker, guard, ops, ttl in call.events:
                keys.append(shard_marker)
                marker_at = len(keys)
                guard_at = 0
                if guard is not None:
                    keys.append(guard)
                    guard_at = len(keys)
                event_id = shard_marker[len(self._shard_prefix[s]) + 3 :].decode()  # cmsgpack reads no bin
                events.append([marker_at, guard_at, ops, ttl, event_id])
            keys.append(self._write_keys[s])
            writes_at = len(keys)
            sets_at = list(range(len(keys) + 1, len(keys) + 1 + len(marker_sets[s])))
            keys += marker_sets[s]
            plan = msgpack.packb(
                [self._g, self._t, width, initial_g, initial_t, events, writes_at, sets_at, sets_expire[s]]
            )
            calls.append((keys, [plan, template]))
        return calls

    def _run_scripts(self, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """EVALSHA each (keys, args) in one round trip; loads the script and resends on NOSCRIPT.

        A plain client's calls go as one packed request (``resp``): a learning batch of 4,000 Reuters
        events writes about 19,500 rows in 16 calls, 39,000 arguments, which redis-py's pipeline
        encoded at 6.2 ms for 8,000 of them against 1.6 ms packed (a throwaway timing).
        """
        results: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        packed = type(self.client) is redis.Redis
        for _ in range(2):
            if packed:
                sha = script.sha.encode()
                encode = resp.encode
                replies = resp.replies(self.client, [
                    [b"EVALSHA", sha, b"%d" % len(calls[i][0]), *map(encode, calls[i][0]), *map(encode, calls[i][1])]
                    for i in pending
                ])  # fmt: skip
            else:
                pipe = self.client.pipeline(transaction=False) if not self.is_cluster else self.client.pipeline()
                for i in pending:
                    keys, args = calls[i]
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args, **self._route(keys[0]))
                replies = pipe.execute(raise_on_error=False)
            missing = []
            for i, reply in zip(pending, replies, strict=True):
                if isinstance(reply, NoScriptError):
                    missing.append(i)  # not run: safe to send again
                elif isinstance(reply, Exception):
                    raise reply
                else:
                    results[i] = reply
            if not missing:
                return results
            script.sha = self.client.script_load(script.script)  # every primary on a Cluster
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

    def _exists(self, key: bytes) -> bool:
        # RedisCluster.exists splits its keys by slot through a pipeline: one plain command is cheaper.
        return bool(self.client.execute_command("EXISTS", key))

    def applied_events(self, event_ids: Sequence[str]) -> list[bool]:
        if not event_ids:
            return []
        keys = [self._event_marker(e) for e in event_ids]
        with _store_errors("checking applied events"):
            # All markers share the model's hash tag: one MGET, on one node of a Cluster too.
            values = self.client.execute_command("MGET", *keys, **self._route(keys[0]))
        return [value is not None for value in values]

    def apply_many(self, batch: Sequence[tuple[Sequence[Update], str | None]]) -> list[bool]:
        """Every (updates, event_id) of a worker's batch in two round trips: all shard scripts, then all metas.

        Scripts for one shard run in the batch's order, so the result equals applying one by one.
        """
        if not batch:
            return []
        skip = [False] * len(batch)
        if self.is_cluster:
            ids = [(i, e) for i, (_, e) in enumerate(batch) if e is not None]
            for (i, _), done in zip(ids, self.applied_events([e for _, e in ids]), strict=True):
                skip[i] = done
        shards: dict[int, _ShardCall] = {}
        metas = [self._accumulate(shards, updates, event_id)
                 for (updates, event_id), s in zip(batch, skip, strict=True) if not s]  # fmt: skip
        with _store_errors("applying updates"):
            shard_calls = self._shard_calls(shards)
            if shard_calls:
                self._attempted([e for (_, e), s in zip(batch, skip, strict=True) if e is not None and not s])
                self._run_scripts(self._apply_shard, shard_calls)
            replies = iter(self._run_scripts(self._apply_metas, [_metas_call(self._version_key, metas)])[0]
                           if metas else [])  # fmt: skip
        return [False if s else bool(next(replies)) for s in skip]

    def apply(self, updates: Sequence[Update], event_id: str | None = None) -> bool:
        """Apply ``updates`` atomically per shard and exactly once per ``event_id``; False if already applied."""
        shard_calls, (meta_keys, meta_args) = self._plan(updates, event_id)
        with _store_errors("applying updates"):
            if self.is_cluster and event_id is not None and shard_calls and self._exists(meta_keys[0]):
                return False  # applied in full before (its updates may differ now: skip every shard)
            if shard_calls:
                if event_id is not None:
                    self._attempted([event_id])
                self._run_scripts(self._apply_shard, shard_calls)
            # Only after every shard answered: the model-level marker means "all of it is in".
            ttl, amounts, mark_only = meta_args
            version = self._apply_meta(meta_keys, [ttl, msgpack.packb(amounts), mark_only])
        return bool(version)

    def counters(self, name: str) -> dict[str, float]:
        with _store_errors("reading counters"):
            raw = self.client.hgetall(self._meta_prefix + "counter:" + name)
        return {_text(key): float(value) for key, value in raw.items()}

    def delete(self, feature_ids: np.ndarray) -> int:
        ids = np.unique(np.asarray(feature_ids, dtype=np.int64))
        if not len(ids):
            return 0
        shards = (ids % self.shards).tolist()
        keys = self._row_keys(ids.tolist(), shards)
        groups: dict[int, list[bytes]] = {}
        for s, key in zip(shards, keys, strict=True):
            groups.setdefault(s, []).append(key)
        calls: list[tuple[list[bytes], list[Any]]] = [
            ([self._count_keys[s], self._write_keys[s], *members], []) for s, members in groups.items()
        ]
        with _store_errors("deleting rows"):
            deleted = int(sum(self._run_scripts(self._delete, calls)))
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

        for key in self._scan(f"sw:{{{self.model}:*}}:f:*".encode()):
            fid = int(key.rsplit(b":", 1)[1])
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
                counts = self.client.mget_nonatomic(self._count_keys)
            else:
                counts = self.client.mget(self._count_keys)
        return sum(int(c) for c in counts if c is not None)

    def new_epoch(self, client: Any) -> None:
        """Record (on ``client``, or a pipeline of it) that rows changed without a new version."""
        client.set(self._epoch_key, uuid.uuid4().hex)

    def row_state(self) -> tuple[int, bytes | None]:
        """(version, epoch): equal in two calls only if no row changed in between.

        Learning bumps the version; deleting rows (compact) and bulk writes (import) set a new epoch.
        The same round trip tells whether categories were added (then they are read too), so
        ``known_categories()`` is current afterwards.
        """
        with _store_errors("reading the version"):
            pipe = self.client.pipeline(transaction=False) if not self.is_cluster else self.client.pipeline()
            pipe.execute_command("MGET", self._version_key, self._epoch_key, **self._route(self._version_key.encode()))
            pipe.llen(self._categories_key)
            (version, epoch), n_categories = pipe.execute()
        if n_categories > len(self._categories):
            self._refresh_now()
        return int(version or 0), epoch

    @property
    def version(self) -> int:
        with _store_errors("reading the version"):
            value = self.client.get(self._version_key)
        return int(value) if value is not None else 0

    # -- model metadata --------------------------------------------------------------------------------
    def metadata(self) -> dict[str, str]:
        with _store_errors("reading metadata"):
            raw = self.client.hgetall(self._metadata_key)
        return {_text(key): _text(value) for key, value in raw.items()}

    def set_metadata(self, values: Mapping[str, str]) -> None:
        if not values:
            return
        with _store_errors("writing metadata"):
            self.client.hset(self._metadata_key, mapping={k: v for k, v in values.items()})

    # -- the model as a whole --------------------------------------------------------------------------
    def model_keys(self) -> list[bytes]:
        """Every key of this model (rows, counts, markers, categories, ...), e.g. for MEMORY USAGE."""
        keys: set[bytes] = set()
        for pattern in (f"sw:{{{self.model}}}:*", f"sw:{{{self.model}:*}}:*"):
            keys.update(self._scan(pattern.encode()))
        return sorted(keys)

    def drop_model(self) -> int:
        """Delete every key of this model; returns how many were deleted. Other instances must be rebuilt."""
        groups: dict[bytes, list[bytes]] = {}
        for key in self.model_keys():
            groups.setdefault(key[key.index(b"{") : key.index(b"}") + 1], []).append(key)
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


def _distinct(events: Sequence[LearnedEvent]) -> bool:
    """No event id twice: the one-transaction write counts every event that changed rows once."""
    return len({e.event_id for e in events}) == len(events)


def _stored(rows: Sequence[bytes | None]) -> np.ndarray:
    """Whether each row of an ``MGET`` reply was stored (not None), in one pass at C speed."""
    return np.fromiter(map(is_not, rows, repeat(None)), dtype=bool, count=len(rows))


def _add_amounts(counters: dict[str, list[str]], update: CounterUpdate) -> None:
    amounts = counters.setdefault(update.name, [])
    for key, amount in update.amounts.items():
        amounts += [key, repr(float(amount))]


def _counter_amounts(updates: Sequence[CounterUpdate]) -> dict[str, list[str]]:
    """Counter updates as the meta script takes them: per counter, [key, amount, key, amount, ...]."""
    counters: dict[str, list[str]] = {}
    for update in updates:
        _add_amounts(counters, update)
    return counters


def _metas_call(version_key: str, metas: Sequence[tuple[list[Any], list[Any]]]) -> tuple[list[Any], list[Any]]:
    """Many events' meta calls (as ``_accumulate`` returns them) as one call of ``_APPLY_METAS_LUA``."""
    keys: list[Any] = [version_key]
    index: dict[Any, int] = {}
    events = []
    for meta_keys, (ttl, counters, mark_only) in metas:
        keys.append(meta_keys[0])
        marker_at = len(keys)
        entries = []
        for counter_key, amounts in zip(meta_keys[2:], counters, strict=True):
            at = index.get(counter_key)
            if at is None:
                keys.append(counter_key)
                at = index[counter_key] = len(keys)
            entries.append([at, amounts])
        events.append([marker_at, ttl, mark_only, entries])
    return keys, [msgpack.packb(events)]


@dataclass(frozen=True, slots=True)
class _RowsAsRead:
    """``RowSnapshot.token`` of a RedisStore: the rows as read, packed, and the widest stored row's bytes."""

    block: np.ndarray
    widest_bytes: int


@dataclass(frozen=True, slots=True)
class _ShardRows:
    """One shard's part of a row write: its changed rows' keys and packed rows, and how many were absent."""

    shard: int
    keys: list[bytes]
    rows: list[bytes]
    created: int


@dataclass
class _ShardCall:
    """One shard's script call being built: its rows (key -> 1-based KEYS index) and its events in order."""

    rows: dict[bytes, int] = field(default_factory=dict)
    events: list[tuple[bytes, bytes | None, list[Any], int]] = field(default_factory=list)


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
