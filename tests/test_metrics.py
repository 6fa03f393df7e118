"""Tests for stream_winnow.evaluation.metrics: hand-checked cases, scikit-learn agreement, properties."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from stream_winnow.errors import DataError
from stream_winnow.evaluation.metrics import (
    ClassificationReport,
    classification_report,
    label_matrix,
    micro_break_even,
    micro_precision_recall_curve,
)


def _reference_break_even(true: np.ndarray, margins: np.ndarray) -> float:
    """The docstring's definition written as a plain loop over the cuts."""
    true = true.astype(bool).ravel()
    margins = margins.astype(float).ravel()
    n_positive = int(true.sum())
    if n_positive == 0:
        return 0.0
    points = []
    for t in sorted(set(margins.tolist()), reverse=True):
        predicted = margins >= t
        tp = int((predicted & true).sum())
        if tp == 0:
            continue
        points.append((tp / int(predicted.sum()), tp / n_positive))
    for k, (p, r) in enumerate(points):
        if p == r:
            return p
        if k + 1 < len(points):
            p1, r1 = points[k + 1]
            if (p - r) * (p1 - r1) < 0:
                lam = (p - r) / ((p - r) - (p1 - r1))
                return p + lam * (p1 - p)
    p, r = min(points, key=lambda point: abs(point[0] - point[1]))
    return (p + r) / 2


# --- label_matrix -----------------------------------------------------------------------------------------


def test_label_matrix_ignores_labels_outside_categories() -> None:
    matrix = label_matrix([("earn", "unknown"), (), ("acq", "earn")], ["earn", "acq", "grain"])
    assert matrix.dtype == bool
    assert matrix.tolist() == [[True, False, False], [False, False, False], [True, True, False]]


def test_label_matrix_rejects_duplicate_categories() -> None:
    with pytest.raises(DataError):
        label_matrix([("a",)], ["a", "a"])


# --- classification_report: hand-checked ------------------------------------------------------------------


def test_report_hand_checked() -> None:
    # Category 0: TP 2, FP 1, FN 0 -> P 2/3, R 1, F1 0.8
    # Category 1: TP 1, FP 0, FN 1 -> P 1, R 1/2, F1 2/3
    # Category 2: no true docs, one FP -> excluded from macro, counted in micro.
    true = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]], dtype=bool)
    predicted = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 1]], dtype=bool)
    report = classification_report(true, predicted)
    # Micro: TP 3, FP 2, FN 1.
    assert report.micro_precision == pytest.approx(3 / 5)
    assert report.micro_recall == pytest.approx(3 / 4)
    assert report.micro_f1 == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))
    assert report.macro_precision == pytest.approx((2 / 3 + 1) / 2)
    assert report.macro_recall == pytest.approx((1 + 1 / 2) / 2)
    assert report.macro_f1 == pytest.approx((0.8 + 2 / 3) / 2)
    assert report.accuracy == pytest.approx(2 / 4)
    assert report.micro_bep is None
    assert (report.n_documents, report.n_categories) == (4, 3)


def test_report_zero_denominators_give_zero() -> None:
    true = np.zeros((3, 2), dtype=bool)
    predicted = np.zeros((3, 2), dtype=bool)
    report = classification_report(true, predicted)
    assert report.micro_precision == report.micro_recall == report.micro_f1 == 0.0
    assert report.macro_precision == report.macro_recall == report.macro_f1 == 0.0
    assert report.accuracy == 1.0  # every predicted set (empty) equals its true set


def test_report_nothing_predicted() -> None:
    true = np.array([[1, 0], [0, 1]], dtype=bool)
    report = classification_report(true, np.zeros_like(true))
    assert report.micro_precision == 0.0
    assert report.micro_recall == 0.0
    assert report.macro_f1 == 0.0
    assert report.accuracy == 0.0


def test_report_one_of_accuracy_is_ordinary_accuracy() -> None:
    classes_true = np.array([0, 1, 2, 1, 0])
    classes_predicted = np.array([0, 2, 2, 1, 1])
    eye = np.eye(3, dtype=bool)
    report = classification_report(eye[classes_true], eye[classes_predicted])
    assert report.accuracy == pytest.approx(np.mean(classes_true == classes_predicted))
    # In one-of mode with one prediction per document micro P = R = F1 = accuracy.
    assert report.micro_f1 == pytest.approx(report.accuracy)


def test_report_with_margins_and_as_dict() -> None:
    true = np.array([[1, 0], [1, 1], [0, 1]], dtype=bool)
    margins = np.array([[0.9, -0.5], [0.8, -0.2], [0.1, -0.9]])
    report = classification_report(true, margins > 0, margins)
    assert report.micro_bep == pytest.approx(0.75)
    as_dict = report.as_dict()
    assert as_dict["micro_bep"] == pytest.approx(0.75)
    assert set(as_dict) == set(ClassificationReport.__dataclass_fields__)


def test_report_rejects_mismatched_shapes() -> None:
    with pytest.raises(DataError):
        classification_report(np.zeros((2, 3), dtype=bool), np.zeros((3, 2), dtype=bool))
    with pytest.raises(DataError):
        classification_report(np.zeros(3, dtype=bool), np.zeros(3, dtype=bool))
    with pytest.raises(DataError):
        micro_break_even(np.zeros((2, 3), dtype=bool), np.zeros((2, 2)))


# --- micro_break_even: hand-checked -----------------------------------------------------------------------


def test_break_even_exact_meeting_point() -> None:
    # Ranked cells T T F T F T: P = R = 3/4 at the fourth cut.
    true = np.array([[1, 0], [1, 1], [0, 1]])
    margins = np.array([[0.9, -0.5], [0.8, -0.2], [0.1, -0.9]])
    assert micro_break_even(true, margins) == pytest.approx(0.75)


def test_break_even_interpolates_over_a_tie() -> None:
    # Cuts (P, R): (1, 1/2) then (2/3, 1); lines meet at lambda 3/5, value 0.8.
    assert micro_break_even(np.array([[1], [1], [0]]), np.array([[0.9], [0.5], [0.5]])) == pytest.approx(0.8)


def test_break_even_fallback_when_curves_never_meet() -> None:
    # The only true cell is ranked last: the single cut with a TP has P 1/5, R 1.
    true = np.array([[0], [0], [0], [0], [1]])
    margins = np.array([[0.9], [0.7], [0.5], [0.3], [0.1]])
    assert micro_break_even(true, margins) == pytest.approx((0.2 + 1.0) / 2)


def test_break_even_skips_cuts_without_true_positives() -> None:
    # A false positive ranked first gives P = R = 0 at the top cut: that is not the break-even.
    true = np.array([[0], [1], [1], [0]])
    margins = np.array([[0.9], [0.6], [0.4], [0.1]])
    # Cuts with a TP: (1/2, 1/2) -> meets at 0.5.
    assert micro_break_even(true, margins) == pytest.approx(0.5)


def test_break_even_perfect_ranking_is_one() -> None:
    true = np.array([[1, 0, 0], [0, 1, 1], [0, 0, 1]], dtype=bool)
    margins = np.where(true, 1.0, -1.0) + np.arange(9).reshape(3, 3) * 1e-3
    assert micro_break_even(true, margins) == 1.0


def test_break_even_no_true_cells_is_zero() -> None:
    assert micro_break_even(np.zeros((3, 2), dtype=bool), np.ones((3, 2))) == 0.0


def test_break_even_is_fast_at_reuters_scale() -> None:
    rng = np.random.default_rng(0)
    true = rng.random((3019, 90)) < 0.013
    margins = rng.normal(size=true.shape) + 2.0 * true
    start = time.perf_counter()
    value = micro_break_even(true, margins)
    assert time.perf_counter() - start < 0.5
    assert 0.0 < value < 1.0


# --- agreement with scikit-learn --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_agrees_with_scikit_learn(seed: int) -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    true = rng.random((60, 8)) < 0.2
    true[:, 3] = False  # one category absent from the true labels
    predicted = rng.random((60, 8)) < 0.25
    report = classification_report(true, predicted)

    micro = sklearn_metrics.precision_recall_fscore_support(true, predicted, average="micro", zero_division=0)
    assert (report.micro_precision, report.micro_recall, report.micro_f1) == pytest.approx(micro[:3])

    present = np.flatnonzero(true.any(axis=0))
    macro = sklearn_metrics.precision_recall_fscore_support(
        true, predicted, labels=present, average="macro", zero_division=0
    )
    assert (report.macro_precision, report.macro_recall, report.macro_f1) == pytest.approx(macro[:3])
    assert report.accuracy == pytest.approx(sklearn_metrics.accuracy_score(true, predicted))


# --- properties -------------------------------------------------------------------------------------------

_shapes = st.tuples(st.integers(1, 12), st.integers(1, 6))


@st.composite
def _cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = draw(_shapes)
    true = draw(arrays(bool, shape))
    predicted = draw(arrays(bool, shape))
    # Few distinct values so that ties (and interpolation) are common.
    margins = draw(arrays(np.float64, shape, elements=st.sampled_from([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0])))
    return true, predicted, margins


@settings(max_examples=200, deadline=None)
@given(_cases())
def test_values_lie_in_unit_interval(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    true, predicted, margins = case
    report = classification_report(true, predicted, margins)
    for name, value in report.as_dict().items():
        if name in {"n_documents", "n_categories"}:
            continue
        assert value is not None
        assert 0.0 <= value <= 1.0, name


@settings(max_examples=200, deadline=None)
@given(_cases())
def test_perfect_prediction_scores_one(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    true, _, _ = case
    margins = np.where(true, 1.0, -1.0)
    report = classification_report(true, true, margins)
    assert report.accuracy == 1.0
    if true.any():
        assert report.micro_precision == report.micro_recall == report.micro_f1 == 1.0
        assert report.macro_precision == report.macro_recall == report.macro_f1 == 1.0
        assert report.micro_bep == 1.0


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_break_even_lies_within_the_curve(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    true, _, margins = case
    bep = micro_break_even(true, margins)
    precision, recall = micro_precision_recall_curve(true, margins)
    if not true.any():
        assert bep == 0.0 and precision.size == 0
        return
    low = min(precision.min(), recall.min())
    high = max(precision.max(), recall.max())
    assert low - 1e-12 <= bep <= high + 1e-12
    assert np.all(np.diff(recall) >= 0)  # recall grows as the threshold falls


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_break_even_matches_reference_loop(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    true, _, margins = case
    assert micro_break_even(true, margins) == pytest.approx(_reference_break_even(true, margins))
