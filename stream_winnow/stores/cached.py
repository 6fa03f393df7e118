"""A worker-local cache of weight rows, exact by default, with an optional bounded staleness.

Scoring a batch of 500 Reuters documents reads about 10,000 rows of 724 bytes from Redis
(7 MB); building, sending and parsing that reply was half of a worker's scoring time. The
cache keeps rows in memory. The default (``max_staleness_ms = 0``) is exact: results equal
reading Redis for every batch. Each cached row remembers its shard's *write counter* as it
was read (every row write bumps its shard's counter), and once per batch the cache reads all
counters (one ``MGET`` of 18 small values): rows whose shard was not written since are exact
and served from memory; only the others and rows never seen are fetched. A worker's own
learned batch (``apply_delta``) keeps the cache warm: when a shard's counter moved by just
that write, nobody else wrote it, so the changed rows take the values Redis computed and the
shard's other cached rows stay exact. Learning reads (``read_for_update``) come from the cache
too; on the Reuters learning benchmark a batch of 2,000 events then reads only its new rows
instead of about 15,000 (11 MB).

With ``max_staleness_ms`` > 0 the cache works on the model's *row state* (version and
epoch) instead: while it holds, cached rows are exact; when it moves, rows fetched within
the bound are still served. In the spirit of the parameter server's bounded delay, a worker
then scores with rows at most that old. Updates pass straight through and drop the updated
features from that cache, so a worker always sees its own updates. A store that can tell
neither (``part_writes`` and ``row_state`` None) is read directly at staleness 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence

import numpy as np

from stream_winnow.errors import StoreError
from stream_winnow.stores.base import RowSnapshot, RowUpdate, RowView, Update, WeightStore
from stream_winnow.stores.delta import RowDelta, SourceRange, identity_of
from stream_winnow.stores.memory import MemoryStore


class CachedStore(WeightStore):
    """Rows read within ``max_staleness_ms`` (or at the current version) come from memory."""

    def __init__(self, inner: WeightStore, max_staleness_ms: int = 0, max_bytes: int = 256 * 2**20) -> None:
        super().__init__(list(inner.tables.values()))
        self.inner = inner
        self.seen_window = inner.seen_window
        self.max_staleness_ms = max_staleness_ms
        # Rows are float64, one value per table and category: 1,448 bytes a row for Balanced Winnow at
        # 90 categories, so 256 MiB holds about 185,000 rows (Reuters' model has 26,413). A full cache
        # starts afresh.
        self.max_bytes = max_bytes
        self._rows = MemoryStore(list(inner.tables.values()))
        # feature id -> (monotonic time, row state) of its fetch; kept only with a staleness bound
        self._fetched: dict[int, tuple[float, Hashable | None]] = {}
        # view -> its rows for every cached row, by row index (read_view)
        self._views: dict[RowView, np.ndarray] = {}
        self._state: Hashable | None = None  # the row state the cached rows were read at (exact mode)
        # Exact mode on write counters (part_writes): per cache row (rows_of), its part and that part's
        # write counter when the row was read (-1: unknown), and whether the store held it.
        self._epoch: Hashable | None = None
        self._clear_row_records()
        self.last_staleness_s = 0.0
        self.last_version: int | None = None  # the model version the last read saw (None: not known)
        # The write counters the next scoring read checks, requested already (read_ahead): reads the reply.
        self._ahead: Callable[[], tuple[int, Hashable, np.ndarray] | None] | None = None

    def __repr__(self) -> str:
        return f"CachedStore({self.inner!r}, max_staleness_ms={self.max_staleness_ms}, rows={self._rows.n_features()})"

    def max_rows(self) -> int:
        width = sum(self._rows.widths().values())
        return max(self.max_bytes // (8 * max(width, 1)), 1)

    def _reset(self) -> None:
        self._rows = MemoryStore(list(self.inner.tables.values()))
        self._fetched.clear()
        self._views.clear()
        self._state = None
        self._clear_row_records()

    def forget_rows(self) -> None:
        """Drop every row held: the store went back in time (its write counters no longer vouch for them)."""
        self._reset()

    def read(self, feature_ids: np.ndarray) -> dict[str, np.ndarray]:
        if not self._refresh(feature_ids):
            return self.inner.read(feature_ids)
        return self._rows.read(feature_ids)

    def read_view(self, feature_ids: np.ndarray, view: RowView) -> np.ndarray:
        """The view's rows, kept beside the cached rows: a batch gathers them and derives nothing.

        Scoring 1,000 Reuters documents gathered 9,536 rows of 181 float64 (14 MB) and derived
        ``positive - negative`` and the kept strengths from them; with the view kept, margins
        cost 3.4 instead of 7.0 µs a document (``benchmarks/stages``).
        """
        if not self._refresh(feature_ids, distinct=True):
            return view(self.inner.read(feature_ids))
        return self._view_of(view)[self._rows.rows_of(feature_ids)]

    def read_view_rows(self, feature_ids: np.ndarray, view: RowView) -> tuple[np.ndarray, np.ndarray]:
        """The view kept over every cached row, and each feature's row in it (nothing gathered).

        The matrix is the cache's own: read it before the cache changes again (the next read or
        update may grow or rewrite it). The write counters checked are those ``read_ahead`` started
        reading, if it did.
        """
        if not self._refresh(feature_ids, distinct=True, ahead=True):
            return view(self.inner.read(feature_ids)), np.arange(len(feature_ids))
        return self._view_of(view), self._rows.rows_of(feature_ids)

    def read_ahead(self) -> None:
        """Ask for the write counters the next ``read_view_rows`` checks now; it reads the reply.

        Exact mode checks every batch's rows against each shard's write counter: one round trip
        to Redis (an ``MGET`` of 18 values) that the worker's loop waited for, 14 % of its time at
        18,000 documents/s (py-spy, the latency benchmark). The worker sends it before parsing the
        batch, so the reply comes while it parses (``resp.Pending``: the same connection, no
        thread). The rows are then exact as of that request, a few milliseconds earlier than
        before, as if the batch had been taken that much earlier. Every other read that checks
        counters, and every write, first reads that reply and drops it (``drop_read_ahead``), so
        learning always reads the counters as they are when it reads. The worker drops
        a read ahead its batch did not score with. No effect with a staleness bound.
        """
        if self.max_staleness_ms > 0:
            return
        self.drop_read_ahead()  # one left by a batch that failed before scoring is older than this batch
        self._ahead = self.inner.part_writes_later()

    def drop_read_ahead(self) -> None:
        """Read and forget the reply of a ``read_ahead`` still unused (its failure too: the next read asks again)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                ahead()
            except StoreError:
                pass  # not wanted; whatever failed fails again in the read that follows

    def _part_writes(self, ahead: bool = False) -> tuple[int, Hashable, np.ndarray] | None:
        """The inner store's write counters: those read ahead if ``ahead`` (else they are dropped), or read now."""
        if ahead and self._ahead is not None:
            pending, self._ahead = self._ahead, None
            return pending()  # raises its StoreError
        self.drop_read_ahead()
        return self.inner.part_writes()

    def keep_view(self, view: RowView) -> None:
        """Derive ``view`` over every cached row now, so the first ``read_view`` only gathers.

        The worker calls it after ``prefetch``: derived lazily, the Reuters model's view (26,413 rows
        of 90 categories) cost the first batch 157 of its 264 ms under load, a backlog the next
        batches at 20,000 documents/s took seconds to clear.
        """
        self._view_of(view)

    def _view_of(self, view: RowView) -> np.ndarray:
        views = self._views.get(view)
        if views is None:
            views = self._views[view] = np.ascontiguousarray(view(self._rows.read_rows()))
        return views

    def _refresh(self, feature_ids: np.ndarray, distinct: bool = False, ahead: bool = False) -> bool:
        """Bring the rows of ``feature_ids`` up to date in the cache; False: read the inner store instead.

        ``distinct``: the ids are known to be distinct (np.unique of 10,000 ids costs 0.7 ms).
        ``ahead``: check them against the write counters ``read_ahead`` read, if it did.
        """
        bounded = self.max_staleness_ms > 0
        if not bounded:
            counted = self._part_writes(ahead)
            if counted is not None:
                self._refresh_counted(feature_ids if distinct else np.unique(feature_ids), *counted)
                return True
        state = self.inner.row_state()
        self.last_version = None if state is None else state[0]
        if state is None and not bounded:
            return False
        now = time.monotonic()
        categories = self.inner.known_categories() if state is not None else self.inner.categories()
        if categories != self._rows.categories():
            self._start_afresh(categories)  # a new category widens every row
        unique = feature_ids if distinct else np.unique(feature_ids)
        self.last_staleness_s = 0.0
        if state is not None and state == self._state:
            # Nothing changed since the cached rows were read: they are exact; fetch the unseen ones.
            stale = unique[self._rows.rows_of(unique) == 0]
        elif not bounded:
            self._start_afresh(categories)
            stale = unique
        else:
            stale = self._stale(unique, state, now)
        # After a bounded read rows at older states may remain: the per-row check stays on from then on.
        self._state = state if not bounded or self._state == state else None
        if len(stale):
            if self._rows.n_features() + len(stale) > self.max_rows():
                self._start_afresh(categories)
                stale = unique
            values = self.inner.read(stale)
            if self._width(values) != len(self._rows.categories()):
                # Categories were added since the state was read: start afresh at the new width.
                self._start_afresh(self.inner.known_categories())
                stale = unique
                values = self.inner.read(stale)
            self._load(stale, values)
            if bounded:  # fetch times matter only for the staleness bound
                self._fetched.update(dict.fromkeys(stale.tolist(), (now, state)))
        return True

    def _refresh_counted(self, unique: np.ndarray, version: int, epoch: Hashable, writes: np.ndarray) -> None:
        """Exact mode on write counters: fetch the rows of ``unique`` not cached or whose part was written since."""
        self.last_version, self.last_staleness_s = version, 0.0
        categories = self.inner.known_categories()  # part_writes read them if there were more
        if categories != self._rows.categories() or epoch != self._epoch:
            self._start_afresh(categories)  # a new category widens every row; a new epoch rewrote rows
            self._epoch = epoch
        rows = self._rows.rows_of(unique)
        parts = self.inner.part_of(unique)
        current = writes[parts]
        recorded = self._row_writes[rows]
        fetch = (rows == 0) | (recorded != current)
        behind = np.flatnonzero(fetch & (rows > 0) & (recorded >= 0) & (recorded < current))
        if len(behind):
            unchanged = behind[self._unchanged(unique[behind], parts[behind], recorded[behind], current[behind])]
            self._row_writes[rows[unchanged]] = current[unchanged]
            fetch[unchanged] = False
        stale = unique[fetch]
        if not len(stale):
            return
        if self._rows.n_features() + len(stale) > self.max_rows():
            self._start_afresh(categories)
            stale = unique
        snapshot = self.inner.read_for_update(stale)
        if self._width(snapshot.values) != len(self._rows.categories()):
            # Categories were added since the counters were read: start afresh at the new width.
            self._start_afresh(self.inner.known_categories())
            stale = unique
            snapshot = self.inner.read_for_update(stale)
        self._load_counted(stale, snapshot.values, snapshot)

    def _unchanged(self, feature_ids: np.ndarray, parts: np.ndarray, since: np.ndarray, until: np.ndarray) -> np.ndarray:
        """Per cached row exact at write ``since`` of its part, whether its part's change log proves it
        unchanged up to write ``until`` (the part's counter now): then it need not be read again.

        With 4 pods learning Balanced Winnow on Reuters every round writes every shard, yet changes only
        the rows of its own mistakes; the log tells those apart, so a pod rereads them alone.
        """
        wanted: dict[int, int] = {}
        for part, first, last in zip(parts.tolist(), since.tolist(), until.tolist(), strict=True):
            wanted[part] = max(wanted.get(part, 0), last - first)
        logs = self.inner.part_changes(wanted)
        out = np.zeros(len(feature_ids), dtype=bool)
        if logs is None:
            return out
        for part, log in logs.items():
            members = np.flatnonzero(parts == part)
            for first in np.unique(since[members]).tolist():
                at = members[since[members] == first]
                out[at] = log.unchanged(feature_ids[at], first, int(until[at[0]]))
        return out

    def _load_counted(self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray], snapshot: RowSnapshot) -> None:
        """Rows into the cache with their parts' write counters as ``snapshot`` read them (and stored flags)."""
        self._load(feature_ids, values)
        rows = self._rows.rows_of(feature_ids)
        parts = self.inner.part_of(feature_ids)
        stored = snapshot.stored if snapshot.stored is not None else True
        self._record_rows(rows, parts, _per_row(snapshot.writes or {}, parts), stored)

    def _load(self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Rows into the cache, and into every view kept.

        When the rows double, each view grows alike: its rows are copied, not derived anew from
        every row (deriving the Reuters model's took 157 ms; a copy of it, 19 MB, a few).
        """
        values = self._at_width(values)
        self._rows.load_rows(feature_ids, values)
        self._grow_row_records()
        if not self._views:
            return
        rows = self._rows.rows_of(feature_ids)
        capacity = self._rows.capacity()
        for view, views in list(self._views.items()):
            if len(views) < capacity:
                # Rows past the old end are allocated only for features loaded here, set just below.
                grown = np.empty((capacity, *views.shape[1:]), dtype=views.dtype)
                grown[: len(views)] = views
                views = self._views[view] = grown
            views[rows] = view(values)

    def _at_width(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Rows cut to (or padded with initial values up to) the cached categories.

        Another worker may add a category between the cache's width check and its read, so rows can
        come one category wider: the cache keeps the categories it knows, exactly, and the next
        batch's width check starts it afresh at the new width.
        """
        width = len(self._rows.categories())
        out: dict[str, np.ndarray] = {}
        for name, block in values.items():
            spec = self.tables[name]
            if not spec.per_category or block.shape[1] == width:
                out[name] = block
            elif block.shape[1] > width:
                out[name] = block[:, :width]
            else:
                padded = np.full((block.shape[0], width), spec.initial)
                padded[:, : block.shape[1]] = block
                out[name] = padded
        return out

    def _clear_row_records(self) -> None:
        self._row_parts = np.zeros(0, dtype=np.int64)
        self._row_writes = np.zeros(0, dtype=np.int64)
        self._row_stored = np.zeros(0, dtype=bool)
        self._grow_row_records()

    def _record_rows(self, rows: np.ndarray, parts: np.ndarray, writes: np.ndarray, stored: np.ndarray | bool) -> None:
        """Cache rows ``rows``: their part, that part's write counter they are exact at (-1: unknown), stored."""
        self._row_parts[rows] = parts
        self._row_writes[rows] = writes
        self._row_stored[rows] = stored

    def _grow_row_records(self) -> None:
        """Part, counter and stored flag for every cache row (the cache's rows double as they fill)."""
        grow = self._rows.capacity() - len(self._row_writes)
        if grow > 0:
            self._row_parts = np.concatenate([self._row_parts, np.zeros(grow, dtype=np.int64)])
            self._row_writes = np.concatenate([self._row_writes, np.full(grow, -1, dtype=np.int64)])
            self._row_stored = np.concatenate([self._row_stored, np.zeros(grow, dtype=bool)])

    def _start_afresh(self, categories: Sequence[str]) -> None:
        self._reset()
        self._rows.ensure_categories(categories)

    def _width(self, values: Mapping[str, np.ndarray]) -> int:
        """Categories in rows as the inner store returned them."""
        for name, spec in self.tables.items():
            if spec.per_category:
                return int(values[name].shape[1])
        return len(self._rows.categories())

    def prefetch(self) -> int:
        """Load the model's rows into the cache until it is full; returns how many were loaded.

        A worker does this before joining its group, so its first batches do not each wait for
        thousands of rows (Reuters' model has 26,413). The rows are exact
        while the row state read first holds; after a change they are refreshed like any others.
        """
        counted = self._part_writes() if self.max_staleness_ms == 0 else None
        state = self.inner.row_state()
        if state is None and counted is None:
            return 0
        categories = self.inner.categories()
        self._start_afresh(categories)
        budget, loaded, now = self.max_rows(), 0, time.monotonic()
        chunks = []
        for ids, values in self.inner.iter_rows():
            if loaded + len(ids) > budget or self._width(values) != len(categories):
                break  # full, or a category was added meanwhile: the rest is read when asked for
            self._load(ids, values)
            chunks.append(ids)
            if self.max_staleness_ms > 0:
                self._fetched.update(dict.fromkeys(ids.tolist(), (now, state)))
            loaded += len(ids)
        self._state = state
        after = self.inner.part_writes() if counted is not None else None
        if counted is not None and after is not None and chunks:
            # Rows of a part not written while the scan ran are exact at its counter; the others unknown.
            self._epoch = counted[1]
            ids = np.concatenate(chunks)
            rows, parts = self._rows.rows_of(ids), self.inner.part_of(ids)
            before = counted[2]
            same = (before == after[2]) & (after[1] == counted[1])
            self._record_rows(rows, parts, np.where(same[parts], before[parts], -1), True)
        return loaded

    def _stale(self, unique: np.ndarray, state: Hashable | None, now: float) -> np.ndarray:
        """Ids to fetch again: fetched at another state (or unknown) longer ago than the bound."""
        oldest = now - self.max_staleness_ms / 1000
        fetched = self._fetched
        stale_ids = []
        staleness = 0.0
        for fid in unique.tolist():
            seen = fetched.get(fid)
            current = seen is not None and state is not None and seen[1] == state
            if seen is None or (not current and seen[0] < oldest):
                stale_ids.append(fid)
            elif not current:
                staleness = max(staleness, now - seen[0])
        self.last_staleness_s = staleness
        return np.array(stale_ids, dtype=np.int64)

    def apply(self, updates: Sequence[Update]) -> bool:
        self.drop_read_ahead()
        self._forget(updates)
        return self.inner.apply(updates)

    def read_for_update(self, feature_ids: np.ndarray) -> RowSnapshot:
        """Exact mode: the rows from the cache, brought up to date first (a batch reads only its new rows)."""
        counted = self._part_writes() if self.max_staleness_ms == 0 else None
        if counted is None or not len(feature_ids):
            return self.inner.read_for_update(feature_ids)
        self._refresh_counted(feature_ids, *counted)
        rows = self._rows.rows_of(feature_ids)
        parts, writes = self._row_parts[rows], self._row_writes[rows]
        oldest = {p: int(writes[parts == p].min()) for p in np.unique(parts).tolist()}
        return self.inner.snapshot_from(feature_ids, self._rows.read(feature_ids), self._row_stored[rows], oldest)

    @property
    def n_parts(self) -> int:
        return self.inner.n_parts

    def watermarks(self, sources: Sequence[str]) -> dict[str, np.ndarray]:
        return self.inner.watermarks(sources)

    def seen_events(self, source: str) -> np.ndarray:
        return self.inner.seen_events(source)

    def apply_delta(
        self,
        delta: RowDelta,
        sources: Sequence[SourceRange] = (),
        seen: Mapping[str, np.ndarray] | None = None,
        parts: Sequence[int] | None = None,
    ) -> dict[int, int]:
        self.drop_read_ahead()
        for fid in delta.feature_ids.tolist():
            self._fetched.pop(fid, None)
        writes = self.inner.apply_delta(delta, sources, seen, parts)
        if self.max_staleness_ms == 0:
            self._written(delta, writes)
        return writes

    def _written(self, delta: RowDelta, writes: Mapping[int, int]) -> None:
        """After a delta of ours landed: keep exact what it proves exact.

        A shard's write counter moves by one per write, so a shard the delta wrote whose counter is
        now one past a cached row's was written by nobody else: that row is exact again, and if the
        delta changed it, its new value is the one Redis computed (the same float64 multiply or add,
        clipped and rounded to float32). A worker learning alone thus never reads its rows again.
        """
        ids = delta.feature_ids
        if not len(ids) or not writes or self._width(delta.values) != len(self._rows.categories()):
            return
        moved = np.zeros(len(ids), dtype=bool)
        for name, values in delta.values.items():
            moved |= (values != identity_of(self.tables[name])).any(axis=1)
        parts = self.inner.part_of(ids)
        after = _per_row(writes, parts)
        rows = self._rows.rows_of(ids)
        exact = (rows > 0) & (self._row_writes[rows] == after - 1) & moved
        new: dict[str, np.ndarray] = {}
        cached = self._rows.read(ids[exact])
        for name, values in cached.items():
            spec = self.tables[name]
            factor = delta.values[name][exact]
            changed = values * factor if spec.combine == "multiply" else values + factor
            new[name] = np.clip(changed, spec.bounds.low, spec.bounds.high).astype(np.float32).astype(np.float64)
        for part in np.unique(parts[moved]).tolist():
            count = writes.get(part)
            if count is not None:
                advance = (self._row_parts == part) & (self._row_writes == count - 1)
                self._row_writes[advance] = count
        self._row_writes[rows[moved & ~exact & (rows > 0)]] = -1  # changed by us from a value not known exact
        if exact.any():
            self._load(ids[exact], new)
            self._record_rows(self._rows.rows_of(ids[exact]), parts[exact], after[exact], True)

    def _forget(self, updates: Sequence[Update]) -> None:
        for update in updates:
            if isinstance(update, RowUpdate):
                for fid in update.feature_ids.tolist():
                    self._fetched.pop(fid, None)

    # -- everything else is the inner store's ---------------------------------------------------------
    def categories(self) -> tuple[str, ...]:
        return self.inner.categories()

    def row_state(self) -> tuple[int, Hashable] | None:
        return self.inner.row_state()

    def known_categories(self) -> tuple[str, ...]:
        return self.inner.known_categories()

    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        return self.inner.ensure_categories(names)

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

    def domain_model(self) -> bytes | None:
        return self.inner.domain_model()

    def set_domain_model(self, data: bytes) -> None:
        self.inner.set_domain_model(data)


def _per_row(writes: Mapping[int, int], parts: np.ndarray) -> np.ndarray:
    """Each row's part's counter in ``writes`` (-1 for a part it does not name)."""
    if not len(parts):
        return np.zeros(0, dtype=np.int64)
    lookup = np.full(max(int(parts.max()), max(writes, default=0)) + 1, -1, dtype=np.int64)
    for part, count in writes.items():
        lookup[part] = count
    return lookup[parts]
