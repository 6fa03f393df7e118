"""A weight store in this process's memory: one numpy array, one row per feature.

A row packs every table side by side (``[positive x C | negative x C | keep]``
for Balanced Winnow), the layout the Redis store uses too, so reading a
document's features is one gather. Rows are allocated on first update only
(reads of unseen features hit row 0, a read-only row of initial values), so the
store holds just the features that mattered. Capacity doubles as rows and
category columns are added; at 90 categories a Balanced Winnow feature costs
(2 x 90 + 1) x 8 = 1,448 bytes here (float64).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from stream_winnow.stores.base import MODEL_PART, CounterUpdate, StaleWatermark, TableSpec, Update, WeightStore
from stream_winnow.stores.delta import RowDelta, SourceRange
from stream_winnow.text.hash_table import HashTable

# Initial capacities; both double on demand.
_INITIAL_ROWS = 4096
_INITIAL_CATEGORIES = 16


# Below this many ids a lookup uses the dict directly (building and probing the table costs more).
_TABLE_MIN_IDS = 64


class MemoryStore(WeightStore):
    """In-process store for the library, tests and the in-process benchmarks."""

    def __init__(
        self, tables: Sequence[TableSpec], rows: int = _INITIAL_ROWS, categories: int = _INITIAL_CATEGORIES
    ) -> None:
        """``rows`` and ``categories``: initial capacities (both grow on demand)."""
        super().__init__(tables)
        self._categories: list[str] = []
        self._column: dict[str, int] = {}
        self._row: dict[int, int] = {}
        self._table: HashTable | None = None  # mirrors _row for large lookups
        self._row_ids: list[int] = [0]  # row -> feature id; row 0 is the initial-values row
        self._free_rows: list[int] = []
        self._capacity_categories = 0
        self._offsets: dict[str, int] = {}
        self._array = np.zeros((0, 0))
        self._layout(max(rows, 1), max(categories, 1))
        self._watermarks: dict[str, int] = {}
        self._seen: dict[str, list[int]] = {}
        self._version = 0
        self._metadata: dict[str, str] = {}
        self._domain: bytes | None = None
        self._counters: dict[str, dict[str, float]] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(tables={list(self.tables)}, categories={len(self._categories)}, features={len(self._row)})"

    def _layout(self, rows: int, categories: int) -> None:
        """(Re)build the packed array for ``rows`` rows and room for ``categories`` categories."""
        offsets: dict[str, int] = {}
        width = 0
        for name, spec in self.tables.items():
            offsets[name] = width
            width += categories if spec.per_category else 1
        array = np.empty((rows, width))
        for name, spec in self.tables.items():
            start = offsets[name]
            array[:, start : start + (categories if spec.per_category else 1)] = spec.initial
        if self._array.size:
            used_rows = min(self._array.shape[0], rows)
            for name, spec in self.tables.items():
                n = min(len(self._categories), self._capacity_categories) if spec.per_category else 1
                old, new = self._offsets[name], offsets[name]
                array[:used_rows, new : new + n] = self._array[:used_rows, old : old + n]
        self._array, self._offsets, self._capacity_categories = array, offsets, categories

    # -- categories -----------------------------------------------------------------------------------
    def categories(self) -> tuple[str, ...]:
        return tuple(self._categories)

    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        column = self._column
        for name in names:
            if name not in column:
                column[name] = len(self._categories)
                self._categories.append(name)
        if len(self._categories) > self._capacity_categories:
            self._layout(self._array.shape[0], max(len(self._categories), 2 * self._capacity_categories))
        return np.array([column[n] for n in names], dtype=np.intp)

    # -- rows -----------------------------------------------------------------------------------------
    def rows_of(self, feature_ids: np.ndarray) -> np.ndarray:
        """Row index per feature; 0 (the initial-values row) for features not stored.

        Many ids at once go through a compiled hash table mirroring ``_row`` (see ``text.hash_table``);
        a key the table cannot hold (0) uses the dict.
        """
        if len(feature_ids) < _TABLE_MIN_IDS:
            get = self._row.get
            return np.array([get(f, 0) for f in feature_ids.tolist()], dtype=np.intp)
        table = self._table
        if table is None:
            table = self._table = HashTable(2 * len(self._row))
            if self._row:
                table.insert(np.fromiter(self._row.keys(), dtype=np.int64, count=len(self._row)).view(np.uint64),
                             np.fromiter(self._row.values(), dtype=np.int64, count=len(self._row)))  # fmt: skip
        rows, missing = table.lookup(np.ascontiguousarray(feature_ids, dtype=np.int64).view(np.uint64))
        if missing:
            absent = np.flatnonzero(rows < 0)
            get = self._row.get
            rows[absent] = [get(f, 0) for f in feature_ids[absent].tolist()]
        return rows.astype(np.intp, copy=False)

    def read(self, feature_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self._tables_of(self._array[self.rows_of(feature_ids)])

    def capacity(self) -> int:
        """Rows allocated (``read_rows`` has this many); doubles as features are added."""
        return int(self._array.shape[0])

    def read_rows(self) -> dict[str, np.ndarray]:
        """Every row by its index (``rows_of``), row 0 the initial values, per table: views, not copies."""
        return self._tables_of(self._array)

    def _tables_of(self, block: np.ndarray) -> dict[str, np.ndarray]:
        """Per table, its columns of packed rows ``block``."""
        n = len(self._categories)
        return {
            name: block[:, start : start + (n if self.tables[name].per_category else 1)]
            for name, start in self._offsets.items()
        }

    def _allocate(self, feature_ids: np.ndarray) -> np.ndarray:
        rows = self.rows_of(feature_ids)
        missing = np.flatnonzero(rows == 0)
        if len(missing) > 64 and not self._free_rows and len(np.unique(feature_ids[missing])) == len(missing):
            # Many new, distinct features (a bulk load): number them in one go.
            first = len(self._row_ids)
            new_ids = feature_ids[missing].tolist()
            new_rows = range(first, first + len(new_ids))
            self._row.update(zip(new_ids, new_rows, strict=True))
            self._row_ids.extend(new_ids)
            if self._table is not None:
                self._table.insert(feature_ids[missing].astype(np.int64).view(np.uint64),
                                   np.arange(first, first + len(new_ids), dtype=np.int64))  # fmt: skip
            rows[missing] = np.arange(first, first + len(new_ids))
            if len(self._row_ids) > self._array.shape[0]:
                self._layout(max(len(self._row_ids), 2 * self._array.shape[0]), self._capacity_categories)
            return rows
        if len(missing):
            added: list[tuple[int, int]] = []
            for i in missing.tolist():
                fid = int(feature_ids[i])
                row = self._row.get(fid)  # the same id twice in one update
                if row is None:
                    row = self._free_rows.pop() if self._free_rows else len(self._row_ids)
                    if row == len(self._row_ids):
                        self._row_ids.append(fid)
                    else:
                        self._row_ids[row] = fid
                    self._row[fid] = row
                    added.append((fid, row))
                rows[i] = row
            if added and self._table is not None:
                pairs = np.array(added, dtype=np.int64)
                self._table.insert(np.ascontiguousarray(pairs[:, 0]).view(np.uint64), np.ascontiguousarray(pairs[:, 1]))
            if len(self._row_ids) > self._array.shape[0]:
                self._layout(max(len(self._row_ids), 2 * self._array.shape[0]), self._capacity_categories)
        return rows

    def apply(self, updates: Sequence[Update]) -> bool:
        rows_for: tuple[np.ndarray, np.ndarray] | None = None
        for update in updates:
            if isinstance(update, CounterUpdate):
                counter = self._counters.setdefault(update.name, {})
                for key, amount in update.amounts.items():
                    counter[key] = counter.get(key, 0.0) + amount
                continue
            spec = self.tables[update.table]
            if rows_for is None or rows_for[0] is not update.feature_ids:
                rows_for = (update.feature_ids, self._allocate(update.feature_ids))
            index = np.ix_(rows_for[1], update.columns + self._offsets[update.table])
            block = self._array[index]
            if update.multiply is not None:
                block *= update.multiply
            if update.add is not None:
                block += update.add
            np.clip(block, spec.bounds.low, spec.bounds.high, out=block)
            self._array[index] = block
        if updates:
            self._version += 1
        return bool(updates)

    # -- exactly-once by offsets: one part, so a write is all or nothing --------------------------------
    def watermarks(self, sources: Sequence[str]) -> dict[str, np.ndarray]:
        return {s: np.full(2, self._watermarks.get(s, -1), dtype=np.int64) for s in sources}

    def seen_events(self, source: str) -> np.ndarray:
        return np.array(self._seen.get(source, []), dtype=np.uint64)

    def apply_delta(
        self,
        delta: RowDelta,
        sources: Sequence[SourceRange] = (),
        seen: Mapping[str, np.ndarray] | None = None,
        parts: Sequence[int] | None = None,
    ) -> dict[int, int]:
        for mark in sources:
            found = self._watermarks.get(mark.source, -1)
            if found != mark.expected[MODEL_PART]:
                raise StaleWatermark(mark.source, MODEL_PART, found, mark.expected[MODEL_PART])
        if len(delta):
            rows = self._allocate(delta.feature_ids)
            for name, values in delta.values.items():
                spec = self.tables[name]
                start = self._offsets[name]
                block = self._array[rows, start : start + values.shape[1]]
                block = block * values if spec.combine == "multiply" else block + values
                self._array[rows, start : start + values.shape[1]] = np.clip(block, spec.bounds.low, spec.bounds.high)
        for name, amounts in delta.counters.items():
            counter = self._counters.setdefault(name, {})
            for key, amount in amounts.items():
                counter[key] = counter.get(key, 0.0) + amount
        self._version += delta.changed_events
        for mark in sources:
            self._watermarks[mark.source] = mark.last
        for source, hashes in (seen or {}).items():
            kept = self._seen.setdefault(source, [])
            kept.extend(hashes.tolist())
            del kept[: max(len(kept) - self.seen_window, 0)]
        return {0: self._version}

    def load_rows(self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Set the rows of ``feature_ids`` to ``values`` (per table, as ``read`` returns them)."""
        rows = self._allocate(feature_ids)
        for name, block in values.items():
            start = self._offsets[name]
            self._array[rows, start : start + block.shape[1]] = block

    def counters(self, name: str) -> dict[str, float]:
        return dict(self._counters.get(name, {}))

    def delete(self, feature_ids: np.ndarray) -> int:
        deleted = 0
        for fid in feature_ids.tolist():
            row = self._row.pop(fid, None)
            if row is None:
                continue
            self._table = None  # the table cannot forget a key: rebuilt on the next large lookup
            self._array[row] = self._array[0]
            self._row_ids[row] = 0
            self._free_rows.append(row)
            deleted += 1
        if deleted:
            self._version += 1
        return deleted

    def iter_rows(self, chunk_rows: int = 10_000) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        ids = np.array(list(self._row), dtype=np.int64)
        for start in range(0, len(ids), chunk_rows):
            chunk = ids[start : start + chunk_rows]
            yield chunk, self.read(chunk)

    def n_features(self) -> int:
        return len(self._row)

    def row_state(self) -> tuple[int, None]:
        """The version: every change of a row here bumps it (``load_rows``, for loaders, excepted)."""
        return self._version, None

    @property
    def version(self) -> int:
        return self._version

    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    def set_metadata(self, values: Mapping[str, str]) -> None:
        self._metadata.update(values)

    def domain_model(self) -> bytes | None:
        return self._domain

    def set_domain_model(self, data: bytes) -> None:
        self._domain = bytes(data)

    # -- for the compiled loops (learners/compiled.py) --------------------------------------------------
    def allocate_rows(
        self, feature_ids: np.ndarray, distinct: tuple[np.ndarray, np.ndarray] | None = None
    ) -> np.ndarray:
        """Row index per feature, creating rows (at initial values) for the features not stored yet.

        ``distinct`` = (distinct ids, inverse) when the caller has them (``FeatureBatch.distinct``).
        """
        unique, inverse = distinct if distinct is not None else np.unique(feature_ids, return_inverse=True)
        return self._allocate(unique)[inverse]

    def packed(self) -> tuple[np.ndarray, dict[str, int]]:
        """The live packed array (rows x columns) and each table's first column; writes go straight in."""
        return self._array, dict(self._offsets)

    def record_bulk(self, updates_applied: int, counters: Sequence[CounterUpdate]) -> None:
        """Account for ``updates_applied`` updates written straight into ``packed()``."""
        version = self._version
        self.apply(counters)
        self._version = version + updates_applied
