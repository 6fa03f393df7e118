"""Which categories' scores a decision carries: the K highest, plus any assigned category below them.

A decision that carries every score of the 90-category Reuters model is about 1,500 bytes, and the
scores are nine tenths of it: the worker sends those bytes, the broker stores them, and every
consumer of ``decisions`` fetches them, for each document. With the 10 highest it is about 300
bytes. On the embedded broker at 25,000 documents/s, one worker's p99 latency was 209-684 ms with
every score and 75-85 ms with the 10 highest (``python -m benchmarks.service --phases latency
--latency-rate 25000 --repeats 3``, the worker lingering 20 ms).

The columns of a row are its ``k`` highest scores, highest first, ties to the lower column (the
earlier category), then the columns ``must`` marks (the assigned categories) that are not among
them, in column order. ``k`` at least the number of columns selects every column.

>>> indptr, columns = top_columns(np.array([[0.5, 2.0, 2.0, -1.0], [0.0, -3.0, 1.0, 4.0]]), 2)
>>> columns[indptr[0]:indptr[1]].tolist(), columns[indptr[1]:indptr[2]].tolist()
([1, 2], [3, 2])
>>> must = np.array([[False, False, False, True], [True, False, False, False]])
>>> indptr, columns = top_columns(np.array([[0.5, 2.0, 2.0, -1.0], [0.0, -3.0, 1.0, 4.0]]), 1, must)
>>> columns.tolist(), indptr.tolist()
([1, 3, 3, 0], [0, 2, 4])
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from numba import njit

__all__ = ["reported_scores", "top_columns"]


@njit(cache=True)
def _top_columns(scores: np.ndarray, k: int, must: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Compiled :func:`top_columns`: one pass per row keeping its ``k`` best in a sorted buffer."""
    n, m = scores.shape
    k = min(k, m)
    indptr = np.zeros(n + 1, dtype=np.int64)
    columns = np.empty(n * k + np.count_nonzero(must), dtype=np.int64)  # k per row, then the marked
    best_value = np.empty(max(k, 1), dtype=np.float64)
    best_column = np.empty(max(k, 1), dtype=np.int64)
    chosen = np.zeros(m, dtype=np.bool_)
    at = 0
    for i in range(n):
        count = 0
        for j in range(m):
            v = scores[i, j]
            if count == k and (k == 0 or v <= best_value[k - 1]):
                continue  # not above the k-th best (an equal score keeps the earlier column)
            p = count if count < k else k - 1
            while p > 0 and best_value[p - 1] < v:
                if p < k:
                    best_value[p] = best_value[p - 1]
                    best_column[p] = best_column[p - 1]
                p -= 1
            best_value[p] = v
            best_column[p] = j
            if count < k:
                count += 1
        for p in range(count):
            columns[at] = best_column[p]
            chosen[best_column[p]] = True
            at += 1
        for j in range(m):
            if must[i, j] and not chosen[j]:
                columns[at] = j
                at += 1
        for p in range(count):
            chosen[best_column[p]] = False
        indptr[i + 1] = at
    return indptr, columns[:at]


def top_columns(scores: np.ndarray, k: int, must: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores`` (documents x categories), the columns to report, CSR-style.

    Row ``i`` reports ``columns[indptr[i]:indptr[i + 1]]``. ``must`` (bool, the shape of
    ``scores``) marks columns every row reports whatever its rank. About 0.7 µs a row for
    90 columns and ``k`` = 10.
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-d, got shape {scores.shape}")
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}")
    if must is None:
        must = np.zeros(scores.shape, dtype=np.bool_)
    elif must.shape != scores.shape:
        raise ValueError(f"must has shape {must.shape}, expected {scores.shape}")
    return _top_columns(np.ascontiguousarray(scores, dtype=np.float64), k, np.ascontiguousarray(must, dtype=np.bool_))


def reported_scores(
    names: Sequence[str], scores: Sequence[float], categories: Collection[str], k: int | None
) -> dict[str, float]:
    """One document's scores map: its ``k`` highest and those of its ``categories``, as ``top_columns`` orders them.

    ``k`` None, or at least the number of scores, keeps every score in the order of ``names``, as
    ``codec.encode_decisions`` does for a batch. ``names`` may be longer than ``scores`` (categories
    added since the scores were computed); the extra ones are not reported.

    >>> reported_scores(["crude", "oil", "ship"], [3.0, -0.5, 0.25], ("oil",), 1)
    {'crude': 3.0, 'oil': -0.5}
    >>> reported_scores(["crude", "oil", "ship"], [3.0, -0.5, 0.25], ("oil",), None)
    {'crude': 3.0, 'oil': -0.5, 'ship': 0.25}
    """
    if k is None or k >= len(scores):
        return dict(zip(names, scores, strict=False))
    names = names[: len(scores)]
    values = np.asarray(scores, dtype=np.float64).reshape(1, -1)
    must = np.array([[name in categories for name in names]], dtype=np.bool_)
    _, columns = top_columns(values, k, must)
    return {names[c]: float(values[0, c]) for c in columns.tolist()}
