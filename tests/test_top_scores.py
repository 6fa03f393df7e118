"""``top_columns``: the compiled choice of the scores a decision reports, against a plain sort."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_winnow.wire.top_scores import top_columns


def _plain(scores: np.ndarray, k: int, must: np.ndarray) -> list[list[int]]:
    out = []
    for row, marks in zip(scores.tolist(), must.tolist(), strict=True):
        best = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
        out.append(best + [j for j, mark in enumerate(marks) if mark and j not in best])
    return out


@st.composite
def _cases(draw: st.DrawFn) -> tuple[np.ndarray, int, np.ndarray]:
    n = draw(st.integers(0, 6))
    m = draw(st.integers(0, 15))
    # Few distinct values, so ties at the k-th score are common.
    values = draw(st.lists(st.sampled_from([-2.0, -0.5, 0.0, 0.5, 3.0]), min_size=n * m, max_size=n * m))
    marks = draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m))
    return (np.array(values, dtype=float).reshape(n, m), draw(st.integers(0, m + 2)),
            np.array(marks, dtype=bool).reshape(n, m))  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_equals_a_plain_sort_ties_to_the_earlier_column(case: tuple[np.ndarray, int, np.ndarray]) -> None:
    scores, k, must = case
    indptr, columns = top_columns(scores, k, must)
    got = [columns[indptr[i] : indptr[i + 1]].tolist() for i in range(scores.shape[0])]
    assert got == _plain(scores, k, must)


def test_k_of_at_least_the_width_reports_every_column_highest_first() -> None:
    indptr, columns = top_columns(np.array([[0.1, 0.3, 0.2]]), 5)
    assert indptr.tolist() == [0, 3] and columns.tolist() == [1, 2, 0]


def test_zero_reports_only_the_marked_columns() -> None:
    must = np.array([[False, True, True], [False, False, False]])
    indptr, columns = top_columns(np.array([[9.0, 1.0, 2.0], [3.0, 2.0, 1.0]]), 0, must)
    assert indptr.tolist() == [0, 2, 2] and columns.tolist() == [1, 2]


def test_bad_arguments_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="2-d"):
        top_columns(np.zeros(3), 1)
    with pytest.raises(ValueError, match="k must be >= 0"):
        top_columns(np.zeros((1, 3)), -1)
    with pytest.raises(ValueError, match="must has shape"):
        top_columns(np.zeros((1, 3)), 1, np.zeros((1, 2), dtype=bool))
