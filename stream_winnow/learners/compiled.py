"""Running a linear rule over many documents at once, through the compiled loop in ``kernels``.

Used by ``fit`` and the prequential evaluation when the learner's store is a
``MemoryStore``; any other store takes the per-document Python path. The
outcome is the same (``tests/test_compiled.py``); only the speed differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream_winnow.learners import kernels
from stream_winnow.learners.balanced_winnow import BalancedWinnow
from stream_winnow.learners.base import UPDATES_COUNTER, Learner
from stream_winnow.learners.mistake_driven import KEEP_TABLE, MistakeDriven
from stream_winnow.learners.perceptron import Perceptron
from stream_winnow.learners.positive_winnow import PositiveWinnow
from stream_winnow.stores.base import CounterUpdate
from stream_winnow.stores.memory import MemoryStore
from stream_winnow.text.features import FeatureBatch

_RULES: dict[type, tuple[int, str, str]] = {
    BalancedWinnow: (kernels.BALANCED_WINNOW, "positive", "negative"),
    PositiveWinnow: (kernels.POSITIVE_WINNOW, "weight", "weight"),
    Perceptron: (kernels.PERCEPTRON, "weight", "weight"),
}


def supports(learner: Learner) -> bool:
    """True when ``learner`` can run through the compiled loop."""
    return type(learner) in _RULES and isinstance(learner.store, MemoryStore)


@dataclass(frozen=True, slots=True)
class PreparedStream:
    """Documents as flat arrays over store rows (see ``kernels.run_stream``)."""

    indptr: np.ndarray
    rows: np.ndarray
    strengths: np.ndarray
    label_indptr: np.ndarray
    label_columns: np.ndarray

    @property
    def n_documents(self) -> int:
        return int(self.indptr.shape[0] - 1)


def prepare(learner: Learner, batch: FeatureBatch, labels: Sequence[Sequence[str]]) -> PreparedStream:
    """Resolve every document's features to store rows (allocating them) and its labels to columns."""
    store = learner.store
    assert isinstance(store, MemoryStore)
    rows = store.allocate_rows(batch.ids, batch.distinct).astype(np.int64)
    label_lengths = np.fromiter((len(ls) for ls in labels), dtype=np.int64, count=len(labels))
    label_indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(label_lengths, out=label_indptr[1:])
    flat = [name for ls in labels for name in ls]
    columns = store.ensure_categories(flat).astype(np.int64) if flat else np.zeros(0, dtype=np.int64)
    return PreparedStream(batch.indptr, rows, batch.strengths, label_indptr, columns)


def run(
    learner: MistakeDriven,
    stream: PreparedStream,
    *,
    order: np.ndarray | None = None,
    learn: bool = True,
    record_margins: bool = False,
    new_categories: dict[str, int] | None = None,
    actions: np.ndarray | None = None,
) -> tuple[int, np.ndarray]:
    """Predict and learn the documents of ``stream`` in ``order``; returns (mistaken documents, margins).

    ``new_categories`` maps a category created by this stream to the position
    in ``order`` of its first document (categories absent from it already existed).
    ``actions`` (int8, documents x categories, zeros), when given, receives each document's
    promotions (+1) and demotions (-1).
    """
    store = learner.store
    assert isinstance(store, MemoryStore)
    rule, first, second = _RULES[type(learner)]
    weights, offsets = store.packed()
    names = store.categories()
    n = len(names)
    born = np.full(n, -1, dtype=np.int64)
    for name, position in (new_categories or {}).items():
        born[names.index(name)] = position
    if order is None:
        order = np.arange(stream.n_documents, dtype=np.int64)
    margins = np.empty((stream.n_documents if record_margins else 0, n))
    updates = np.zeros(n, dtype=np.int64)
    bounds = store.tables[first].bounds
    d = learner.d if learner.d is not None else 1.0
    alpha = getattr(learner, "alpha", 1.0)
    beta = getattr(learner, "beta", 1.0)
    mistakes = kernels.run_stream(
        order, stream.indptr, stream.rows, stream.strengths, stream.label_indptr, stream.label_columns, born,
        weights, offsets[first], offsets[second], offsets[KEEP_TABLE], n, rule, alpha, beta,
        learner.theta, learner.theta_minus, learner.theta_plus, learner.theta / d, bounds.low, bounds.high,
        learn, learner.mode == "one-of", margins, updates, actions if actions is not None else np.zeros((0, 0), dtype=np.int8),
    )  # fmt: skip
    if mistakes:
        amounts = {names[c]: float(updates[c]) for c in np.flatnonzero(updates).tolist()}
        store.record_bulk(mistakes, [CounterUpdate(UPDATES_COUNTER, {"*": float(mistakes), **amounts})])
    return int(mistakes), margins


def first_positions(labels: Sequence[Sequence[str]], order: np.ndarray, known: Sequence[str]) -> dict[str, int]:
    """Position in ``order`` of the first document of each category not in ``known``."""
    existing = set(known)
    first: dict[str, int] = {}
    for position, i in enumerate(order.tolist()):
        for name in labels[i]:
            if name not in existing and name not in first:
                first[name] = position
    return first
