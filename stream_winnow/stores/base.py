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
this one operation; each table is either multiplied or added to (``TableSpec.combine``),
so a batch's updates fold into one commutative ``RowDelta`` per row (``stores.delta``)
that many workers can apply to the same rows concurrently, in any order.

Exactly-once learning from a stream is by offsets: a store keeps, per *part* (a shard of
rows, and the model-level part of counters and version) and per input partition, the
highest offset whose records it has applied (its *watermark*), and moves it in the same
atomic step as the part's delta (``apply_delta``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from stream_winnow.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from stream_winnow.stores.delta import RowDelta, SourceRange

#: How a table's values change: Winnow weights are multiplied, Perceptron weights and counts added to.
Combine = Literal["multiply", "add"]

#: The part of a store holding the model-level keys (counters, version, seen events), after the shards.
MODEL_PART = -1

#: Events remembered per source to recognise a resent duplicate: 8 bytes each, 800 KB a partition.
SEEN_WINDOW = 100_000

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
    combine: Combine = "multiply"


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
class ChangeLog:
    """What a shard's change log proves: the rows each of the writes ``first..last`` changed.

    ``feature_ids[i]`` was changed by write ``writes[i]``; writes outside ``first..last`` are not known
    (``first > last``: none is).
    """

    first: int
    last: int
    feature_ids: np.ndarray
    writes: np.ndarray

    def unchanged(self, feature_ids: np.ndarray, since: int, until: int) -> np.ndarray:
        """Per feature, whether no write after ``since`` up to ``until`` changed its row (False: not known).

        >>> log = ChangeLog(4, 6, np.array([7, 9, 7]), np.array([4, 5, 6]))
        >>> log.unchanged(np.array([7, 8, 9]), 4, 6).tolist(), log.unchanged(np.array([8]), 2, 6).tolist()
        ([False, True, False], [False])
        """
        if since + 1 < self.first or until > self.last:
            return np.zeros(len(feature_ids), dtype=bool)
        window = (self.writes > since) & (self.writes <= until)
        return ~np.isin(feature_ids, self.feature_ids[window])


class WeightStore(ABC):
    """Where a model's tables live: in this process, or in Redis shared by workers."""

    #: Events remembered per source to recognise a resent duplicate (``seen_events``).
    seen_window: int = SEEN_WINDOW

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
        row instead, so a batch is scored without copying its rows out (``learners.row_product``).
        """
        return self.read_view(feature_ids, view), np.arange(len(feature_ids))

    @abstractmethod
    def apply(self, updates: Sequence[Update]) -> bool:
        """Apply all ``updates`` (rows and counters) at once and bump the version (the library's way).

        A stream's learning goes through ``apply_delta`` instead, which is exactly-once by offsets.
        Returns whether anything was applied.
        """

    def read_for_update(self, feature_ids: np.ndarray) -> RowSnapshot:
        """``read`` of unique ids to learn from, with each part's write counter as read where the store has them."""
        return RowSnapshot(feature_ids, self.read(feature_ids))

    def snapshot_from(
        self, feature_ids: np.ndarray, values: Mapping[str, np.ndarray], stored: np.ndarray, writes: Mapping[int, int]
    ) -> RowSnapshot:
        """A snapshot of rows a cache holds: ``values`` as the store held them when each part's write
        counter was ``writes[part]``, ``stored`` per row."""
        return RowSnapshot(feature_ids, dict(values), writes=dict(writes), stored=stored)

    def part_of(self, feature_ids: np.ndarray) -> np.ndarray:
        """The part (shard) holding each feature's row; the rows of a part share one write counter."""
        return np.zeros(len(feature_ids), dtype=np.int64)

    def part_writes(self) -> tuple[int, Hashable, np.ndarray] | None:
        """(version, epoch, each part's write counter), read in one round trip; None: this store cannot tell.

        Every write of a row bumps its part's counter, so a row read when its part's counter was ``c``
        is unchanged while the counter is still ``c`` (within one epoch: bulk rewrites set a new one).
        """
        return None

    def part_changes(self, behind: Mapping[int, int]) -> Mapping[int, ChangeLog] | None:
        """Per part of ``behind`` (part -> how many of its last writes are wanted), which rows they changed;
        None: this store cannot tell (a cache then reads every row of a part written since)."""
        return None

    def part_writes_later(self) -> Callable[[], tuple[int, Hashable, np.ndarray] | None]:
        """``part_writes`` started now and finished by the function returned (a store over a network sends
        its request at once, so the reply comes while the caller works). Here it is read when called."""
        return self.part_writes

    # -- exactly-once learning from a stream --------------------------------------------------------
    @property
    def n_parts(self) -> int:
        """Shards of rows (``part_of``); each has its own watermarks, and so has ``MODEL_PART``."""
        return 1

    @abstractmethod
    def watermarks(self, sources: Sequence[str]) -> dict[str, np.ndarray]:
        """Per source (an input partition, ``"labels:3"``), each part's watermark: ``n_parts`` shards, then
        ``MODEL_PART`` last; -1 where none was recorded. One round trip (per Cluster node)."""

    @abstractmethod
    def seen_events(self, source: str) -> np.ndarray:
        """The hashes (uint64) of the last events applied from ``source``, at most ``seen_window``."""

    @abstractmethod
    def apply_delta(
        self,
        delta: RowDelta,
        sources: Sequence[SourceRange] = (),
        seen: Mapping[str, np.ndarray] | None = None,
        parts: Sequence[int] | None = None,
    ) -> dict[int, int]:
        """Apply ``delta`` and move each source's watermark, in one atomic step per part.

        Each part (its rows' shard; ``MODEL_PART``: counters, version and ``seen`` event hashes per
        source) checks that its watermark of every source is ``expected`` and then applies its share
        and sets the watermark to ``last``; the model part goes last. ``parts``: only these parts
        (a redelivery that some parts applied already); default all. Raises ``StaleWatermark`` if a
        part's watermark was not as expected (that part is left unchanged). Returns each written
        shard's write counter after the write (``part_writes``), so a row cache can tell whether
        anybody else wrote the shard meanwhile.
        """

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
        """Number of applied updates; grows by one per ``apply`` and per changed event of ``apply_delta``."""

    # -- model metadata ------------------------------------------------------------------------------
    @abstractmethod
    def metadata(self) -> dict[str, str]:
        """The model's settings (learner name and hyperparameters) as stored."""

    @abstractmethod
    def set_metadata(self, values: Mapping[str, str]) -> None:
        """Record settings; existing keys are overwritten."""

    @abstractmethod
    def domain_model(self) -> bytes | None:
        """The domain model the weights were learned with (``DomainModel.to_bytes``), or None for words only."""

    @abstractmethod
    def set_domain_model(self, data: bytes) -> None:
        """Keep ``data`` as the model's domain model (about 27 MB for 400 domains of 17,000 terms)."""

    def widths(self) -> dict[str, int]:
        n = len(self.categories())
        return {name: (n if spec.per_category else 1) for name, spec in self.tables.items()}


class StaleWatermark(StoreError):
    """A part's watermark of a source was not what the writer expected: another writer applied
    records of that partition since (a partition that moved to another worker). The part was left
    unchanged; read the watermarks again and redo the batch's learning."""

    def __init__(self, source: str, part: int, found: int, expected: int) -> None:
        self.source, self.part, self.found, self.expected = source, part, found, expected
        super().__init__(f"watermark of {source} in part {part} is {found}, expected {expected}")
