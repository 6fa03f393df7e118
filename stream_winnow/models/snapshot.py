"""Model snapshots: a whole model (settings, categories, counters, every stored row) in one file.

A snapshot holds the model's metadata (learner and settings), its categories in
column order, its table specs, its counters and version, and every stored row:
feature ids (int64, sorted) and, per table, a (rows x width) block of values.
Values are written as float32 when that is exact (a model read from Redis, which
stores float32) and as float64 otherwise, so MemoryStore -> file -> MemoryStore
and RedisStore -> file -> RedisStore give back identical models.

Two formats, chosen by the file's suffix (or ``format``):

- ``.msgpack``: one map; arrays are raw little-endian buffers with dtype and shape
  (never pickle).
- ``.npz``: ``np.savez_compressed``; the header (metadata, categories, tables,
  counters, version) is a JSON string array, so loading needs no pickle.

Offset watermarks and seen events (exactly-once guards) are not part of a snapshot.

>>> from stream_winnow.learners.balanced_winnow import BalancedWinnow
>>> source = BalancedWinnow()
>>> _ = source.learn_one(["cocoa", "bahia"], ["cocoa"])
>>> target = BalancedWinnow()
>>> copy_model(source.store, target.store)
>>> target.store.categories(), target.store.n_features(), target.store.version
(('cocoa',), 2, 1)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, get_args

import msgpack
import numpy as np

from stream_winnow.errors import ConfigError, DataError
from stream_winnow.learners.base import UPDATES_COUNTER
from stream_winnow.learners.naive_bayes import DOCS_COUNTER, TOKENS_COUNTER
from stream_winnow.stores.base import Bounds, Combine, CounterUpdate, RowUpdate, TableSpec, WeightStore
from stream_winnow.stores.memory import MemoryStore
from stream_winnow.stores.redis import RedisStore
from stream_winnow.stores.redis.cluster import pipeline, scan

__all__ = [
    "SNAPSHOT_FORMATS",
    "Snapshot",
    "SnapshotFormat",
    "copy_model",
    "export_model",
    "import_model",
    "read_snapshot",
    "restore_snapshot",
    "take_snapshot",
    "write_snapshot",
]

SnapshotFormat = Literal["msgpack", "npz"]
SNAPSHOT_FORMATS: tuple[str, ...] = get_args(SnapshotFormat)

_MAGIC = "stream-winnow-snapshot"
_FORMAT_VERSION = 1
# Counters every learner may keep; a store that cannot list its counters is asked for these.
_KNOWN_COUNTERS = (UPDATES_COUNTER, DOCS_COUNTER, TOKENS_COUNTER)
# Rows per Redis pipeline round trip on import: ~2 MB of 90-category Balanced Winnow rows per trip.
_REDIS_CHUNK_ROWS = 2_000
# Keys per MSET (one shard's rows at a time; a Cluster needs every key of a command in one slot).
_REDIS_MSET_KEYS = 500


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A whole model, detached from any store."""

    metadata: dict[str, str]
    categories: tuple[str, ...]
    tables: tuple[TableSpec, ...]
    counters: dict[str, dict[str, float]]
    version: int
    feature_ids: np.ndarray  # int64, sorted, unique
    values: dict[str, np.ndarray]  # table -> (rows, width)
    domain: bytes | None = None  # the domain model the weights were learned with (DomainModel.to_bytes)

    @property
    def n_features(self) -> int:
        return int(self.feature_ids.shape[0])


# -- taking and restoring --------------------------------------------------------------------------------
def _counter_names(store: WeightStore) -> list[str]:
    """Counter names the store holds (MemoryStore and RedisStore can list them; others: the known ones)."""
    names = set(_KNOWN_COUNTERS)
    if isinstance(store, MemoryStore):
        names.update(store._counters)
    elif isinstance(store, RedisStore):
        prefix = store.keys.counter_key("").encode()
        names.update(key[len(prefix) :].decode() for key in scan(store.client, prefix + b"*"))
    return sorted(names)


def take_snapshot(store: WeightStore, chunk_rows: int = 10_000) -> Snapshot:
    """Everything ``store`` holds, rows sorted by feature id (so equal models give equal files)."""
    categories = store.categories()
    widths = {name: (len(categories) if spec.per_category else 1) for name, spec in store.tables.items()}
    id_chunks: list[np.ndarray] = []
    value_chunks: dict[str, list[np.ndarray]] = {name: [] for name in store.tables}
    for ids, values in store.iter_rows(chunk_rows):
        id_chunks.append(np.asarray(ids, dtype=np.int64))
        for name in store.tables:
            value_chunks[name].append(np.asarray(values[name], dtype=np.float64)[:, : widths[name]])
    ids = np.concatenate(id_chunks) if id_chunks else np.zeros(0, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    merged = {
        name: (np.concatenate(chunks) if chunks else np.zeros((0, widths[name])))[order]
        for name, chunks in value_chunks.items()
    }
    counters = {name: amounts for name in _counter_names(store) if (amounts := store.counters(name))}
    return Snapshot(
        metadata=store.metadata(),
        categories=tuple(categories),
        tables=tuple(store.tables.values()),
        counters=counters,
        version=store.version,
        feature_ids=ids[order],
        values=merged,
        domain=store.domain_model(),
    )


def is_empty(store: WeightStore) -> bool:
    """True when the store holds no model: no settings, categories, rows or applied updates."""
    return not (store.metadata() or store.categories() or store.n_features() or store.version)


def _clear(store: WeightStore) -> None:
    if isinstance(store, RedisStore):
        store.drop_model()
    elif isinstance(store, MemoryStore):
        MemoryStore.__init__(store, list(store.tables.values()))  # back to a fresh store, same tables
    else:
        raise ConfigError(f"cannot empty a {type(store).__name__}; import into an empty store")


def restore_snapshot(snapshot: Snapshot, store: WeightStore, *, replace: bool = False) -> None:
    """Write ``snapshot`` into ``store``; a non-empty store is refused unless ``replace`` (which empties it first)."""
    expected = {t.name: t for t in snapshot.tables}
    if expected != store.tables:
        raise ConfigError(
            f"the snapshot's tables {list(expected)} differ from the store's {list(store.tables)} "
            "(another learner, or other bounds)"
        )
    if not is_empty(store):
        if not replace:
            raise ConfigError("the target model is not empty; replace it explicitly (replace=True / --replace)")
        _clear(store)
    columns = store.ensure_categories(list(snapshot.categories))
    if columns.tolist() != list(range(len(snapshot.categories))):
        raise ConfigError("the target's categories changed while importing (another writer?)")
    if snapshot.metadata:
        store.set_metadata(snapshot.metadata)
    if snapshot.domain is not None:
        store.set_domain_model(snapshot.domain)
    if isinstance(store, RedisStore):
        _write_redis(store, snapshot)
    elif isinstance(store, MemoryStore):
        _write_memory(store, snapshot)
    else:
        _write_generic(store, snapshot)


def _write_memory(store: MemoryStore, snapshot: Snapshot) -> None:
    if snapshot.n_features:
        rows = store.allocate_rows(snapshot.feature_ids)
        array, offsets = store.packed()
        for name, values in snapshot.values.items():
            start = offsets[name]
            array[rows, start : start + values.shape[1]] = values
    for name, amounts in snapshot.counters.items():
        store._counters[name] = dict(amounts)
    store._version = snapshot.version


def _write_generic(store: WeightStore, snapshot: Snapshot) -> None:
    """Any store: ``w <- w * 0 + value`` per table (one apply); the version cannot be set, only bumped."""
    updates: list[RowUpdate | CounterUpdate] = []
    for name, values in snapshot.values.items():
        if snapshot.n_features and values.shape[1]:
            width = values.shape[1]
            updates.append(RowUpdate(name, snapshot.feature_ids, np.arange(width), np.zeros(width), values))
    updates += [CounterUpdate(name, amounts) for name, amounts in snapshot.counters.items()]
    if updates:
        store.apply(updates)


def _write_redis(store: RedisStore, snapshot: Snapshot) -> None:
    """Bulk write: MSETs of packed rows per shard, pipelined in chunks; then counts, counters, version."""
    client = store.client
    n_categories = len(snapshot.categories)
    created = np.zeros(store.shards, dtype=np.int64)
    for start in range(0, snapshot.n_features, _REDIS_CHUNK_ROWS):
        ids = snapshot.feature_ids[start : start + _REDIS_CHUNK_ROWS]
        block = store.packed_rows({k: v[start : start + _REDIS_CHUNK_ROWS] for k, v in snapshot.values.items()},
                                  n_categories)  # fmt: skip
        shards = ids % store.shards
        keys = store.keys.row_keys(ids.tolist(), shards.tolist())
        groups: dict[int, list[int]] = {}
        for i, s in enumerate(shards.tolist()):
            groups.setdefault(s, []).append(i)
        pipe = pipeline(client)
        for s, members in groups.items():
            created[s] += len(members)
            for first in range(0, len(members), _REDIS_MSET_KEYS):
                pairs: list[bytes] = []
                for i in members[first : first + _REDIS_MSET_KEYS]:
                    pairs += [keys[i], block[i].tobytes()]
                pipe.execute_command("MSET", *pairs)
        pipe.execute()
    pipe = pipeline(client)
    for s in np.flatnonzero(created).tolist():
        pipe.incrby(store.keys.count_keys[s], int(created[s]))
        pipe.incr(store.keys.write_keys[s])  # rows written outside the scripts: row caches must see it
    for name, amounts in snapshot.counters.items():
        if not amounts:
            continue
        # repr of a float64 parses back to the same float64: counters round-trip exactly.
        pipe.hset(store.keys.counter_key(name), mapping={k: repr(float(v)) for k, v in amounts.items()})
    pipe.set(store.keys.version_key, snapshot.version)
    store.new_epoch(pipe)
    pipe.execute()


def copy_model(source: WeightStore, target: WeightStore, *, replace: bool = False) -> None:
    """Copy every part of ``source``'s model into ``target`` (e.g. a trained MemoryStore into Redis)."""
    restore_snapshot(take_snapshot(source), target, replace=replace)


# -- files -----------------------------------------------------------------------------------------------
def snapshot_format(path: str | Path, format: SnapshotFormat | None = None) -> SnapshotFormat:
    """``format`` if given, else the one the suffix names (.msgpack, .npz)."""
    if format is not None:
        if format not in SNAPSHOT_FORMATS:
            raise ConfigError(f"snapshot format must be one of {', '.join(SNAPSHOT_FORMATS)}; got {format!r}")
        return format
    suffix = Path(path).suffix.lower()
    if suffix == ".msgpack":
        return "msgpack"
    if suffix == ".npz":
        return "npz"
    raise ConfigError(
        f"cannot tell the snapshot format from {str(path)!r}: name it *.msgpack or *.npz (or give format)"
    )


def _header(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "format": _MAGIC,
        "format_version": _FORMAT_VERSION,
        "metadata": dict(snapshot.metadata),
        "categories": list(snapshot.categories),
        "tables": [
            {
                "name": t.name,
                "initial": t.initial,
                "per_category": t.per_category,
                "combine": t.combine,
                "low": t.bounds.low,
                "high": t.bounds.high,
            }
            for t in snapshot.tables
        ],  # fmt: skip
        "counters": snapshot.counters,
        "version": snapshot.version,
    }


def _compact(values: np.ndarray) -> np.ndarray:
    """float32 when that holds every value exactly (rows read from Redis), else float64."""
    narrow = values.astype("<f4")
    return narrow if np.array_equal(narrow.astype(np.float64), values) else values.astype("<f8")


def _encode_array(array: np.ndarray) -> dict[str, Any]:
    array = np.ascontiguousarray(array)
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}


def _decode_array(raw: Any, what: str) -> np.ndarray:
    try:
        dtype = np.dtype(raw["dtype"])
        if dtype.kind not in "if" or dtype.hasobject:
            raise DataError(f"snapshot {what}: dtype {dtype} is not numeric")
        return np.frombuffer(raw["data"], dtype=dtype).reshape(raw["shape"]).astype(dtype.newbyteorder("="))
    except (KeyError, TypeError, ValueError) as error:
        raise DataError(f"snapshot {what} is malformed: {error}") from None


def write_snapshot(snapshot: Snapshot, path: str | Path, format: SnapshotFormat | None = None) -> Path:
    """Write ``snapshot`` to ``path`` atomically (a temporary file renamed into place)."""
    path = Path(path)
    chosen = snapshot_format(path, format)
    header = _header(snapshot)
    values = {t.name: _compact(snapshot.values[t.name]) for t in snapshot.tables}
    descriptor, temporary = tempfile.mkstemp(prefix=".snapshot-", dir=path.parent or ".")
    try:
        with os.fdopen(descriptor, "wb") as out:
            if chosen == "msgpack":
                header["feature_ids"] = _encode_array(snapshot.feature_ids.astype("<i8"))
                header["values"] = {name: _encode_array(v) for name, v in values.items()}
                header["domain"] = snapshot.domain
                out.write(msgpack.packb(header, use_bin_type=True))
            else:
                _write_npz(out, header, snapshot.feature_ids, [values[t.name] for t in snapshot.tables], snapshot.domain)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it 0600; give it an ordinary file's mode
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_npz(
    out: IO[bytes], header: dict[str, Any], ids: np.ndarray, values: Sequence[np.ndarray], domain: bytes | None
) -> None:
    arrays: dict[str, Any] = {f"values_{i}": v for i, v in enumerate(values)}  # table i of header["tables"]
    if domain is not None:
        arrays["domain"] = np.frombuffer(domain, dtype=np.uint8)
    arrays["header"] = np.array([json.dumps(header)])
    arrays["feature_ids"] = ids.astype("<i8")
    np.savez_compressed(out, **arrays)


def read_snapshot(path: str | Path) -> Snapshot:
    """Read a snapshot file (format told by its content: a zip is npz, anything else msgpack)."""
    path = Path(path)
    with open(path, "rb") as source:
        magic = source.read(4)
    try:
        if magic.startswith(b"PK"):
            with np.load(path, allow_pickle=False) as archive:
                header = _check_header(json.loads(str(archive["header"][0])), str(path))
                n_tables = len(header.get("tables", []))
                ids = archive["feature_ids"]
                arrays = [archive[f"values_{i}"] for i in range(n_tables)]
                domain = archive["domain"].tobytes() if "domain" in archive.files else None
        else:
            header = _check_header(msgpack.unpackb(path.read_bytes(), raw=False), str(path))
            ids = _decode_array(header.get("feature_ids"), "feature_ids")
            raw_values = header.get("values") or {}
            arrays = [_decode_array(raw_values.get(t["name"]), f"values of {t['name']!r}") for t in header["tables"]]
            domain = header.get("domain")
            if domain is not None and not isinstance(domain, bytes):
                raise DataError(f"{path}: the snapshot's domain model must be bytes")
    except DataError:
        raise
    except (KeyError, TypeError, ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise DataError(f"{path}: not a readable stream-winnow snapshot ({type(error).__name__}: {error})") from None
    return _build(header, ids, arrays, str(path), domain)


def _check_header(header: Any, where: str) -> dict[str, Any]:
    if not isinstance(header, dict) or header.get("format") != _MAGIC:
        raise DataError(f"{where}: not a stream-winnow snapshot")
    if header.get("format_version") != _FORMAT_VERSION:
        raise DataError(
            f"{where}: snapshot format version {header.get('format_version')!r}; this reads {_FORMAT_VERSION}"
        )
    return header


def _combine(value: Any) -> Combine:
    if value not in ("multiply", "add"):
        raise ValueError(f"combine must be 'multiply' or 'add', got {value!r}")
    return "multiply" if value == "multiply" else "add"


def _build(
    header: dict[str, Any], ids: np.ndarray, arrays: Sequence[np.ndarray], where: str, domain: bytes | None = None
) -> Snapshot:
    try:
        tables = tuple(
            TableSpec(
                t["name"], float(t["initial"]), bool(t["per_category"]), Bounds(float(t["low"]), float(t["high"])),
                _combine(t["combine"]),
            )
            for t in header["tables"]
        )
        categories = tuple(str(c) for c in header["categories"])
        counters = {str(n): {str(k): float(v) for k, v in a.items()} for n, a in header["counters"].items()}
        metadata = {str(k): str(v) for k, v in header["metadata"].items()}
        version = int(header["version"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise DataError(f"{where}: snapshot header is malformed ({error!r})") from None
    ids = np.asarray(ids, dtype=np.int64)
    values: dict[str, np.ndarray] = {}
    for spec, array in zip(tables, arrays, strict=True):
        width = len(categories) if spec.per_category else 1
        if array.shape != (len(ids), width):
            raise DataError(f"{where}: table {spec.name!r} has shape {array.shape}; expected {(len(ids), width)}")
        values[spec.name] = array.astype(np.float64)
    if ids.ndim != 1 or len(np.unique(ids)) != len(ids):
        raise DataError(f"{where}: feature ids must be one unique id per row")
    return Snapshot(metadata, categories, tables, counters, version, ids, values, domain)


def export_model(store: WeightStore, path: str | Path, format: SnapshotFormat | None = None) -> Snapshot:
    """Write the model in ``store`` to ``path`` (format from the suffix unless given); returns what was written."""
    snapshot_format(path, format)  # refuse a bad name before reading a large model
    snapshot = take_snapshot(store)
    write_snapshot(snapshot, path, format)
    return snapshot


def import_model(path: str | Path, store: WeightStore, *, replace: bool = False) -> Snapshot:
    """Load the snapshot at ``path`` into ``store`` (refused if it holds a model, unless ``replace``)."""
    snapshot = read_snapshot(path)
    restore_snapshot(snapshot, store, replace=replace)
    return snapshot
