"""The weight store interface: per-feature rows of per-category values.

A model is a few named *tables* (Balanced Winnow: ``positive`` and ``negative``
weights; Naive Bayes: term counts). A table row belongs to one feature and holds
one value per category (or a single value when ``per_category`` is false). A
feature the store has never seen reads as the table's initial value, so stores
keep only features that were updated: learners touch active features only.

Every change is a ``RowUpdate``: for the listed features ``f`` and category
columns ``c``::

    w[f, c] <- clip(w[f, c] * multiply[c] + add[f, c], bounds.low, bounds.high)

Multiplicative (Winnow) and additive (Perceptron, Naive Bayes) rules are both
this one operation, which a Redis script can apply atomically, and which stays
correct when several workers apply updates to the same features concurrently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream_winnow.errors import ConfigError

#: Rows of some features (per table, as ``read`` returns them) -> one array row per feature. A
#: store may keep the result with its rows, keyed by the view itself (a learner's bound method).
RowView = Callable[[Mapping[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True, slots=True)
class Bounds:
    """Every stored value is clipped into ``[low, high]`` after an update.

    The default keeps a Winnow weight a normal float32 (Redis stores packed
    float32 vectors): 100,000 promotions by 1.5 would overflow float64 (1.5^1750
    does already), while a weight held at 1e30 still decides alone against a
    threshold of 1, so clipping never turns a right decision wrong.
    """

    low: float = 1e-30
    high: float = 1e30


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One table of a model: its name, the value of an unseen entry, and its width."""

    name: str
    initial: float
    per_category: bool = True
    bounds: Bounds = field(default_factory=Bounds)


@dataclass(frozen=True, slots=True)
class RowUpdate:
    """``w[f, c] <- clip(w[f, c] * multiply[c] + add[f, c])`` on one table.

    ``feature_ids`` has k entries, ``columns`` m; ``multiply`` has shape (m,)
    and ``add`` (k, m); either may be None (meaning 1 and 0).
    """

    table: str
    feature_ids: np.ndarray
    columns: np.ndarray
    multiply: np.ndarray | None = None
    add: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class CounterUpdate:
    """Add ``amounts[key]`` to the counter ``name`` at each key (a category name, or ``"*"`` for a total)."""

    name: str
    amounts: Mapping[str, float]


Update = RowUpdate | CounterUpdate


@dataclass(frozen=True, slots=True)
class RowSnapshot:
    """Rows read to learn from: their values, and what the store needs to tell later if they changed."""

    feature_ids: np.ndarray
    values: dict[str, np.ndarray]
    token: Any = None  # the store's own record of what it read, opaque to callers
    # Per part (``part_of``) of the rows, its write counter as they were read; None: the store cannot tell.
    writes: Mapping[int, int] | None = None
    stored: np.ndarray | None = None  # per row, whether it was stored (False: it read as the initial values)


@dataclass(frozen=True, slots=True)
class LearnedEvent:
    """One event of a batch whose rows are written whole: its id, bookkeeping counters, whether it changed rows."""

    event_id: str
    counters: Sequence[CounterUpdate]
    changed_rows: bool


class WeightStore(ABC):
    """Where a model's tables live: in this process, or in Redis shared by workers."""

    def __init__(self, tables: Sequence[TableSpec]) -> None:
        names = [t.name for t in tables]
        if len(set(names)) != len(names) or not names:
            raise ConfigError(f"table names must be unique and non-empty; got {names}")
        self.tables: dict[str, TableSpec] = {t.name: t for t in tables}

    # -- categories ---------------------------------------------------------------------------------
    @abstractmethod
    def categories(self) -> tuple[str, ...]:
        """Category names, in column order."""

    @abstractmethod
    def ensure_categories(self, names: Sequence[str]) -> np.ndarray:
        """Column index of each name, creating the categories not seen before (open category set)."""

    # -- rows ----------------------------------------------------------------------------------------
    @abstractmethod
    def read(self, feature_ids: np.ndarray) -> dict[str, np.ndarray]:
        """For each table, an array (len(feature_ids), width) of current values; unseen read as initial."""

    def read_view(self, feature_ids: np.ndarray, view: RowView) -> np.ndarray:
        """``view`` of the rows of ``feature_ids`` (distinct): one row of the result per feature.

        A learner scores from such a view (Balanced Winnow: ``positive - negative``, zero for a
        discarded feature); ``CachedStore`` keeps it beside its rows instead of deriving it again
        for every batch.
        """
        return view(self.read(feature_ids))

    def read_view_rows(self, feature_ids: np.ndarray, view: RowView) -> tuple[np.ndarray, np.ndarray]:
        """``view`` as a matrix and, per feature of ``feature_ids`` (distinct), the index of its row there.

        ``matrix[rows]`` equals ``read_view(feature_ids, view)``. Here the matrix is that very
        result (``rows`` counts up); ``CachedStore`` returns the view it keeps over every cached
        row instead, so a batch is scored without copying its rows out (``row_product``).
        """
        return self.read_view(feature_ids, view), np.arange(len(feature_ids))

    @abstractmethod
    def apply(self, updates: Sequence[Update], event_id: str | None = None) -> bool:
        """Apply all ``updates`` (rows and counters) at once and bump the version.

        With no updates and an ``event_id``, only record the event (no new version), so
        a redelivered event that first changed nothing is recognised and skipped too.

        With an ``event_id`` already applied, change nothing and return False
        (a redelivered labelled event must not move the weights twice).
        """

    def apply_many(self, batch: Sequence[tuple[Sequence[Update], str | None]]) -> list[bool]:
        """``apply`` for each (updates, event_id) in order; stores may do it in fewer round trips."""
        return [self.apply(updates, event_id) for updates, event_id in batch]

    def read_for_update(self, feature_ids: np.ndarray) -> RowSnapshot:
        """``read`` (never from a cache), remembering what ``apply_rows`` must check; ids unique."""
        return RowSnapshot(feature_ids, self.read(feature_ids))

    def snapshot_from(
        self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray], stored: np.ndarray, writes: Mapping[int, int]
    ) -> RowSnapshot:
        """A snapshot ``apply_rows`` takes, of rows a cache holds: ``values`` as the store held them when each
        part's write counter was ``writes[part]``, ``stored`` per row. This default cannot check (None later)."""
        return RowSnapshot(feature_ids, dict(values))

    def part_of(self, feature_ids: np.ndarray) -> np.ndarray:
        """The part (shard) holding each feature's row; the rows of a part share one write counter."""
        return np.zeros(len(feature_ids), dtype=np.int64)

    def part_writes(self) -> tuple[int, Hashable, np.ndarray] | None:
        """(version, epoch, each part's write counter), read in one round trip; None: this store cannot tell.

        Every write of a row bumps its part's counter, so a row read when its part's counter was ``c``
        is unchanged while the counter is still ``c`` (within one epoch: bulk rewrites set a new one).
        """
        return None

    def part_writes_later(self) -> Callable[[], tuple[int, Hashable, np.ndarray] | None]:
        """``part_writes`` started now and finished by the function returned (a store over a network sends
        its request at once, so the reply comes while the caller works). Here it is read when called."""
        return self.part_writes

    def apply_rows(
        self, snapshot: RowSnapshot, learned: Mapping[str, np.ndarray], events: Sequence[LearnedEvent]
    ) -> list[bool] | None:
        """Write the rows a batch of ``events`` learned (``learned``: values per table for the snapshot's ids).

        Only when none of the rows that changed was changed by anyone else since the snapshot,
        and none of the events was applied before; then it counts, marks and versions each
        event like ``apply`` and returns what ``apply_many`` would. None means "not written":
        the caller applies the events one by one with ``apply_many`` instead (stores that
        cannot check, like this default, always answer None).
        """
        return None

    @abstractmethod
    def applied_events(self, event_ids: Sequence[str]) -> list[bool]:
        """For each event id, whether an ``apply`` with it has completed."""

    @abstractmethod
    def counters(self, name: str) -> dict[str, float]:
        """The counter ``name``: value per key (category name or ``"*"``); absent keys are 0."""

    @abstractmethod
    def delete(self, feature_ids: np.ndarray) -> int:
        """Forget the rows of these features (they read as initial again); returns how many existed."""

    @abstractmethod
    def iter_rows(self, chunk_rows: int = 10_000) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Every stored row, in chunks of (feature_ids, {table: values})."""

    @abstractmethod
    def n_features(self) -> int:
        """How many feature rows are stored (statistics rows included)."""

    def row_state(self) -> tuple[int, Hashable] | None:
        """(version, token): changes whenever any row may have changed; None if this store cannot tell.

        A worker-local cache keeps rows read at one state for as long as the state holds.
        """
        return None

    def known_categories(self) -> tuple[str, ...]:
        """The categories as last seen, without asking a shared store again (``categories()`` here)."""
        return self.categories()

    @property
    @abstractmethod
    def version(self) -> int:
        """Number of applied updates; grows by one per ``apply`` that changed something."""

    # -- model metadata ------------------------------------------------------------------------------
    @abstractmethod
    def metadata(self) -> dict[str, str]:
        """The model's settings (learner name and hyperparameters) as stored."""

    @abstractmethod
    def set_metadata(self, values: Mapping[str, str]) -> None:
        """Record settings; existing keys are overwritten."""

    def widths(self) -> dict[str, int]:
        n = len(self.categories())
        return {name: (n if spec.per_category else 1) for name, spec in self.tables.items()}
