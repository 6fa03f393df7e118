"""``rows_product`` (the worker's scoring sum) equals scipy's CSR product over gathered rows, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.learners import build_learner
from stream_winnow.learners.base import Learner
from stream_winnow.learners.row_product import rows_product
from stream_winnow.models.training import fit
from stream_winnow.stores.cached import CachedStore


def gathered(indptr: np.ndarray, rows: np.ndarray, strengths: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """The old way: the distinct rows copied out, then scipy's sparse product over them."""
    unique, inverse = np.unique(rows, return_inverse=True)
    csr = sparse.csr_matrix((strengths, inverse, indptr), shape=(len(indptr) - 1, len(unique)))
    return np.asarray(csr @ matrix[unique])


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    n_rows=st.integers(1, 50),
    width=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_equals_the_sparse_product_over_gathered_rows(lengths: list[int], n_rows: int, width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # Each document's rows distinct, as a FeatureBatch's are; documents share rows freely.
    rows = np.concatenate([rng.permutation(n_rows)[: min(k, n_rows)] for k in lengths]).astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum([min(k, n_rows) for k in lengths])]).astype(np.int64)
    strengths = rng.uniform(0.1, 5.0, len(rows))
    matrix = rng.normal(size=(n_rows, width)) * 10.0 ** rng.integers(-3, 4, size=(n_rows, 1))
    got = rows_product(indptr, rows, strengths, matrix)
    assert got.shape == (len(lengths), width)
    np.testing.assert_array_equal(got, gathered(indptr, rows, strengths, matrix))
    assert not got[np.diff(indptr) == 0].any()  # a document without features sums to 0


def test_an_empty_batch_has_no_rows() -> None:
    out = rows_product(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), np.ones((3, 4)))
    assert out.shape == (0, 4)


def test_cached_margins_equal_the_gathered_ones_exactly() -> None:
    """The worker's path (the cache's whole view, rows indexed) gives what gathering gave, to the bit."""
    docs = synthetic_stream(500)
    learner = build_learner("balanced-winnow")
    fit(learner, docs[:300])
    batch = learner.featurizer.transform_many([d.tokens for d in docs[300:]])
    unique, strengths, totals = Learner.batch_strengths(batch)
    before = np.asarray(learner.unit(totals) * (strengths @ learner.store.read_view(unique, learner.scoring_rows)))
    learner.store = CachedStore(learner.store)
    learner.store.prefetch()
    np.testing.assert_array_equal(learner.margins_many(batch), before - learner.theta)


def test_a_float32_matrix_is_read_as_it_is_and_summed_in_float64() -> None:
    """The scoring view is float32: its products are those of its values as float64, not of a rounded sum."""
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((50, 7)).astype(np.float32)
    indptr, rows, strengths = np.array([0, 3, 3, 8]), rng.integers(0, 50, 8), rng.random(8) * 3
    got = rows_product(indptr, rows, strengths, matrix)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, rows_product(indptr, rows, strengths, matrix.astype(np.float64)))
