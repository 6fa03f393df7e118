"""A worker-local cache of weight rows with bounded staleness, in front of a shared store.

In the spirit of the parameter server's bounded delay: a worker may score with a
row fetched up to ``max_staleness_ms`` ago, saving most of the batch's Redis
reply (the cost that dominates scoring). A row is also current, whatever its age,
while the model's version has not moved since it was fetched, which one ``GET``
per batch tells. With ``max_staleness_ms = 0`` every read goes to the inner
store, exactly as without the cache. Updates pass straight through and drop the
updated features from the cache, so a worker always sees its own updates.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from stream_winnow.stores.base import LearnedEvent, RowSnapshot, RowUpdate, Update, WeightStore
from stream_winnow.stores.memory import MemoryStore


class CachedStore(WeightStore):
    """Rows read within ``max_staleness_ms`` (or at the current version) come from memory."""

    def __init__(self, inner: WeightStore, max_staleness_ms: int, max_rows: int = 1_000_000) -> None:
        super().__init__(list(inner.tables.values()))
        self.inner = inner
        self.max_staleness_ms = max_staleness_ms
        # About 750 bytes a row at 90 categories (two float64 tables): 1,000,000 rows is ~750 MB at most.
        self.max_rows = max_rows
        self._rows = MemoryStore(list(inner.tables.values()))
        self._fetched: dict[int, tuple[float, int]] = {}  # feature id -> (monotonic time, model version)
        self.last_staleness_s = 0.0

    def __repr__(self) -> str:
        return f"CachedStore({self.inner!r}, max_staleness_ms={self.max_staleness_ms}, rows={len(self._fetched)})"

    def _reset(self) -> None:
        self._rows = MemoryStore(list(self.inner.tables.values()))
        self._fetched.clear()

    def read(self, feature_ids: np.ndarray) -> dict[str, np.ndarray]:
        if self.max_staleness_ms <= 0:
            return self.inner.read(feature_ids)
        now = time.monotonic()
        version = self.inner.version
        categories = self.inner.categories()
        if categories != self._rows.categories():
            self._reset()  # a new category widens every row: start afresh
            self._rows.ensure_categories(categories)
        oldest = now - self.max_staleness_ms / 1000
        unique = np.unique(feature_ids)
        fetched = self._fetched
        stale_ids = []
        staleness = 0.0
        for fid in unique.tolist():
            seen = fetched.get(fid)
            if seen is None or (seen[1] != version and seen[0] < oldest):
                stale_ids.append(fid)
            elif seen[1] != version:
                staleness = max(staleness, now - seen[0])
        self.last_staleness_s = staleness
        if stale_ids:
            if len(fetched) + len(stale_ids) > self.max_rows:
                self._reset()
                self._rows.ensure_categories(categories)
                stale_ids = unique.tolist()
            ids = np.array(stale_ids, dtype=np.int64)
            self._rows.load_rows(ids, self.inner.read(ids))
            for fid in stale_ids:
                fetched[fid] = (now, version)
        return self._rows.read(feature_ids)

    def apply(self, updates: Sequence[Update], event_id: str | None = None) -> bool:
        self._forget(updates)
        return self.inner.apply(updates, event_id)

    def apply_many(self, batch: Sequence[tuple[Sequence[Update], str | None]]) -> list[bool]:
        for updates, _ in batch:
            self._forget(updates)
        return self.inner.apply_many(batch)

    def read_for_update(self, feature_ids: np.ndarray) -> RowSnapshot:
        return self.inner.read_for_update(feature_ids)

    def apply_rows(
        self, snapshot: RowSnapshot, learned: Mapping[str, np.ndarray], events: Sequence[LearnedEvent]
    ) -> list[bool] | None:
        for fid in snapshot.feature_ids.tolist():
            self._fetched.pop(fid, None)
        return self.inner.apply_rows(snapshot, learned, events)

    def _forget(self, updates: Sequence[Update]) -> None:
        for update in updates:
            if isinstance(update, RowUpdate):
                for fid in update.feature_ids.tolist():
                    self._fetched.pop(fid, None)

    # -- everything else is the inner store's ---------------------------------------------------------
    def categories(self) -> tuple[str, ...]:
        return self.inner.categories()

    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        return self.inner.ensure_categories(names)

    def applied_events(self, event_ids: Sequence[str]) -> list[bool]:
        return self.inner.applied_events(event_ids)

    def counters(self, name: str) -> dict[str, float]:
        return self.inner.counters(name)

    def delete(self, feature_ids: np.ndarray) -> int:
        for fid in feature_ids.tolist():
            self._fetched.pop(fid, None)
        return self.inner.delete(feature_ids)

    def iter_rows(self, chunk_rows: int = 10_000) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        return self.inner.iter_rows(chunk_rows)

    def n_features(self) -> int:
        return self.inner.n_features()

    @property
    def version(self) -> int:
        return self.inner.version

    def metadata(self) -> dict[str, str]:
        return self.inner.metadata()

    def set_metadata(self, values: Mapping[str, str]) -> None:
        self.inner.set_metadata(values)
