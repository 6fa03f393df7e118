"""A batch of updates folded into one commutative change per touched row.

Every rule's update to a stored value is one of two commutative operations, fixed per table
(``TableSpec.combine``): Winnow *multiplies* a weight by its promotion or demotion factor,
Perceptron and Naive Bayes *add*. A batch of labelled events therefore folds into one
``RowDelta``: per touched row and table, the product of the batch's factors or the sum of its
addends. Applying it is ``w <- clip(w * factor)`` or ``w <- clip(w + addend)``, which commutes
with any other worker's delta to the same row, so concurrent workers need no compare-and-set,
no retry and no conflict path: both deltas land, in either order, with the same result.

Clipping is applied once to the folded result, not after each event of the batch. The bounds
(``Bounds``: 1e-30..1e30 for Winnow weights) are 60 orders of magnitude apart, so a batch that
would cross one in the middle and come back within the same batch is not a case that arises:
1.5^340 already overflows the upper bound, more promotions of one weight than a batch holds.

    >>> from stream_winnow.stores.base import RowUpdate, TableSpec
    >>> specs = [TableSpec("w", 1.0)]
    >>> ups = [[RowUpdate("w", np.array([7]), np.array([0]), multiply=np.array([1.5]))],
    ...        [RowUpdate("w", np.array([7, 9]), np.array([0]), multiply=np.array([0.5]))]]
    >>> delta = fold_updates(ups, specs, n_categories=1)
    >>> delta.feature_ids.tolist(), delta.values["w"][:, 0].tolist()
    ([7, 9], [0.75, 0.5])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from stream_winnow.errors import ConfigError
from stream_winnow.stores.base import CounterUpdate, RowUpdate, TableSpec, Update

__all__ = ["RowDelta", "SourceRange", "delta_between", "fold_updates", "identity_of", "shared"]


@dataclass(frozen=True, slots=True)
class SourceRange:
    """The labelled records of one input partition that a write covers.

    ``source`` names the partition (``"labels:3"``); the write moves each part's watermark from
    ``expected[part]`` (what the writer last saw; -1 for none; the model part last, index -1) to
    ``last`` (the highest offset of the batch's records from it), and a part refuses it
    (``StaleWatermark``) if its stored watermark is not as expected: then another writer has
    applied records of this partition since.
    """

    source: str
    expected: tuple[int, ...]
    last: int


@dataclass(frozen=True, slots=True)
class RowDelta:
    """One batch's change: per table, a factor or an addend for each touched row and column.

    ``values[table]`` has shape (len(feature_ids), width): a factor for a ``multiply`` table
    (1 leaves the value alone), an addend for an ``add`` table (0 leaves it alone), over the
    first ``width`` categories (those the batch knew; later columns are untouched).
    ``counters`` are summed per counter and key; ``changed_events`` moves the model version.
    """

    feature_ids: np.ndarray
    values: Mapping[str, np.ndarray]
    counters: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    changed_events: int = 0

    def __len__(self) -> int:
        return len(self.feature_ids)


def identity_of(spec: TableSpec) -> float:
    """The value of a delta that changes nothing: 1 for a multiplied table, 0 for an added one."""
    return 1.0 if spec.combine == "multiply" else 0.0


def shared(delta: RowDelta, specs: Sequence[TableSpec], share: float) -> RowDelta:
    """``delta`` with its learned weights' change taken at ``share`` (0 < share <= 1) of its strength.

    Per-category tables: a factor ``f`` becomes ``f ** share``, an addend ``a`` becomes ``a * share``
    (a promotion by 1.21 at share 1/2 writes 1.1). Global tables (a feature's keep flag, its
    document frequency) and counters stay whole: they count documents, which no share changes.

    >>> from stream_winnow.stores.base import TableSpec
    >>> specs = [TableSpec("w", 1.0, combine="multiply"), TableSpec("df", 0.0, per_category=False, combine="add")]
    >>> delta = RowDelta(np.array([3]), {"w": np.array([[1.21, 1.0]]), "df": np.array([[1.0]])}, {}, 1)
    >>> half = shared(delta, specs, 0.5)
    >>> half.values["w"].round(6).tolist(), half.values["df"].tolist()
    ([[1.1, 1.0]], [[1.0]])
    """
    if not 0 < share <= 1:
        raise ConfigError(f"a delta's share must be in (0, 1]; got {share}")
    if share == 1:
        return delta
    values = dict(delta.values)
    for spec in specs:
        if spec.per_category and spec.name in values:
            block = values[spec.name]
            values[spec.name] = block**share if spec.combine == "multiply" else block * share
    return RowDelta(delta.feature_ids, values, delta.counters, delta.changed_events)


def sum_counters(updates: Sequence[CounterUpdate], into: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """Counter updates summed per counter name and key."""
    sums: dict[str, dict[str, float]] = {} if into is None else into
    for update in updates:
        fields = sums.setdefault(update.name, {})
        for key, amount in update.amounts.items():
            fields[key] = fields.get(key, 0.0) + float(amount)
    return sums


def fold_updates(
    events: Sequence[Sequence[Update]],
    specs: Sequence[TableSpec],
    n_categories: int,
    feature_ids: np.ndarray | None = None,
) -> RowDelta:
    """Fold each event's updates (in any order: the result does not depend on it) into one delta.

    ``feature_ids``: rows to fold into (distinct); by default every row the updates name.
    An event with at least one row update counts as a changed event.
    """
    tables = {spec.name: spec for spec in specs}
    if feature_ids is None:
        named = [u.feature_ids for ups in events for u in ups if isinstance(u, RowUpdate)]
        feature_ids = np.unique(np.concatenate(named)) if named else np.zeros(0, dtype=np.int64)
    ids = np.asarray(feature_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    values = {
        name: np.full((len(ids), n_categories if spec.per_category else 1), identity_of(spec))
        for name, spec in tables.items()
    }
    counters: dict[str, dict[str, float]] = {}
    changed = 0
    for updates in events:
        touched = False
        for update in updates:
            if isinstance(update, CounterUpdate):
                sum_counters([update], counters)
                continue
            spec = tables.get(update.table)
            if spec is None:
                raise ConfigError(f"no table {update.table!r}; tables are {list(tables)}")
            update_ids = np.asarray(update.feature_ids, dtype=np.int64)
            pick = _last_of_each(update_ids)  # a feature named twice in one update changes once, as a store applies it
            rows = order[np.searchsorted(ids, update_ids[pick], sorter=order)]
            columns = np.asarray(update.columns, dtype=np.intp)
            keep = _last_of_each(columns)  # likewise a column named twice
            columns = columns[keep]
            block = values[spec.name]
            if spec.combine == "multiply":
                if update.add is not None:
                    raise ConfigError(f"table {spec.name!r} multiplies; an update added to it")
                if update.multiply is not None:
                    factors = np.asarray(update.multiply)[keep]
                    np.multiply.at(block, (rows[:, None], columns[None, :]), np.broadcast_to(factors, (len(rows), len(columns))))
            else:
                if update.multiply is not None and not np.all(update.multiply == 1):
                    raise ConfigError(f"table {spec.name!r} adds; an update multiplied it")
                if update.add is not None:
                    np.add.at(block, (rows[:, None], columns[None, :]), np.asarray(update.add)[pick][:, keep])
            touched = True
        changed += touched
    return RowDelta(ids, values, counters, changed)


def delta_between(
    before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray], specs: Sequence[TableSpec]
) -> dict[str, np.ndarray]:
    """The delta that takes rows ``before`` to ``after`` (per table, same shapes): after/before or after-before.

    A worker learns a batch in order on a local copy of its rows; this turns the learned rows into
    the commutative change to send. Applied to ``before`` it gives ``after`` up to rounding (one
    float64 multiply or add). A multiplied value that was 0 and is not now cannot be expressed as a
    factor: ``ConfigError`` (no rule does it: a discarded feature is never updated).
    """
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        old, new = before[spec.name], after[spec.name]
        if spec.combine == "multiply":
            same = old == new
            if np.any((old == 0) & ~same):
                raise ConfigError(f"table {spec.name!r}: a zero value changed; no factor takes 0 to a weight")
            with np.errstate(divide="ignore", invalid="ignore"):
                out[spec.name] = np.where(same, 1.0, new / np.where(old == 0, 1.0, old))
        else:
            out[spec.name] = np.where(old == new, 0.0, new - old)
    return out


def _last_of_each(values: np.ndarray) -> np.ndarray:
    """Indices of the last occurrence of each value, in order (all of them when the values are distinct)."""
    _, first_of_reversed = np.unique(values[::-1], return_index=True)
    if len(first_of_reversed) == len(values):
        return np.arange(len(values))
    return np.sort(len(values) - 1 - first_of_reversed)
