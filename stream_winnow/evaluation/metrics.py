"""Multi-label evaluation over boolean indicator matrices.

Rows are documents, columns are categories: ``true[d, c]`` says document ``d``
belongs to category ``c``, ``predicted[d, c]`` that the classifier said so.
Micro averages pool the counts of every (document, category) decision; macro
averages take the mean of per-category figures over the categories present in
``true``, the usual Reuters-21578 practice. A zero denominator gives 0.

>>> true = label_matrix([("earn",), ("acq", "earn"), ("grain",)], ["earn", "acq"])
>>> predicted = label_matrix([("earn",), ("earn",), ("acq",)], ["earn", "acq"])
>>> report = classification_report(true, predicted)
>>> report.micro_precision, report.micro_recall, round(report.micro_f1, 4)
(0.6666666666666666, 0.6666666666666666, 0.6667)
>>> report.macro_f1, report.accuracy
(0.5, 0.3333333333333333)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from stream_winnow.errors import DataError

__all__ = [
    "ClassificationReport",
    "classification_report",
    "label_matrix",
    "micro_break_even",
    "micro_precision_recall_curve",
]


def label_matrix(label_sets: Sequence[Collection[str]], categories: Sequence[str]) -> np.ndarray:
    """Boolean indicator matrix ``[len(label_sets), len(categories)]``.

    Labels that are not in ``categories`` are ignored, so a document whose
    labels all lie outside them gets an all-False row.

    >>> label_matrix([("a", "z"), ()], ["a", "b"]).tolist()
    [[True, False], [False, False]]
    """
    column = {category: j for j, category in enumerate(categories)}
    if len(column) != len(categories):
        raise DataError("categories must be distinct")
    matrix = np.zeros((len(label_sets), len(categories)), dtype=bool)
    for i, labels in enumerate(label_sets):
        for label in labels:
            j = column.get(label)
            if j is not None:
                matrix[i, j] = True
    return matrix


@dataclass(frozen=True)
class ClassificationReport:
    """Micro and macro precision/recall/F1, micro break-even point and exact-set accuracy."""

    micro_precision: float
    micro_recall: float
    micro_f1: float
    macro_precision: float
    macro_recall: float
    macro_f1: float
    micro_bep: float | None
    accuracy: float
    n_documents: int
    n_categories: int

    def as_dict(self) -> dict[str, float | int | None]:
        """The fields as a plain dict (for JSON output)."""
        return asdict(self)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Element-wise ``numerator / denominator`` with 0 where the denominator is 0."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.zeros(np.broadcast(numerator, denominator).shape, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def _as_indicator(name: str, matrix: np.ndarray) -> np.ndarray:
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise DataError(f"{name} must be a 2-D [documents, categories] matrix, got shape {array.shape}")
    return array.astype(bool, copy=False)


def classification_report(
    true: np.ndarray, predicted: np.ndarray, margins: np.ndarray | None = None
) -> ClassificationReport:
    """Compare two ``[documents, categories]`` indicator matrices.

    - micro precision/recall/F1 come from the true positives, false positives
      and false negatives pooled over every (document, category) cell;
    - macro precision/recall/F1 are the means of the per-category figures over
      the categories with at least one True in ``true``; categories with no
      true document are left out (they have no recall to measure), as in the
      standard Reuters practice of averaging over the categories present in
      the test set. Per-category F1 is the harmonic mean of that category's
      precision and recall (not recomputed from the macro P and R). If no
      category is present the macro figures are 0;
    - every zero denominator gives 0;
    - ``accuracy`` is the fraction of documents whose predicted set equals the
      true set exactly (ordinary accuracy in one-of mode);
    - ``micro_bep`` is :func:`micro_break_even` of ``margins`` when given, else None.
    """
    true = _as_indicator("true", true)
    predicted = _as_indicator("predicted", predicted)
    if true.shape != predicted.shape:
        raise DataError(f"true has shape {true.shape} but predicted has {predicted.shape}")
    n_documents, n_categories = true.shape

    tp = np.count_nonzero(true & predicted, axis=0)
    fp = np.count_nonzero(~true & predicted, axis=0)
    fn = np.count_nonzero(true & ~predicted, axis=0)

    tp_all, fp_all, fn_all = int(tp.sum()), int(fp.sum()), int(fn.sum())
    micro_p = float(_ratio(np.array(tp_all), np.array(tp_all + fp_all)))
    micro_r = float(_ratio(np.array(tp_all), np.array(tp_all + fn_all)))
    micro_f1 = float(_ratio(np.array(2 * tp_all), np.array(2 * tp_all + fp_all + fn_all)))

    present = (tp + fn) > 0
    if present.any():
        per_p = _ratio(tp, tp + fp)[present]
        per_r = _ratio(tp, tp + fn)[present]
        per_f1 = _ratio(2 * tp, 2 * tp + fp + fn)[present]
        macro_p, macro_r, macro_f1 = float(per_p.mean()), float(per_r.mean()), float(per_f1.mean())
    else:
        macro_p = macro_r = macro_f1 = 0.0

    exact = np.all(true == predicted, axis=1)
    accuracy = float(exact.mean()) if n_documents else 0.0

    bep = None if margins is None else micro_break_even(true, margins)
    return ClassificationReport(
        micro_precision=micro_p,
        micro_recall=micro_r,
        micro_f1=micro_f1,
        macro_precision=macro_p,
        macro_recall=macro_r,
        macro_f1=macro_f1,
        micro_bep=bep,
        accuracy=accuracy,
        n_documents=n_documents,
        n_categories=n_categories,
    )


def micro_precision_recall_curve(true: np.ndarray, margins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Micro precision and recall at each cut, highest threshold first.

    The cuts are the distinct values ``t`` of ``margins``; at cut ``t`` the
    cell (d, c) is predicted iff ``margins[d, c] >= t``. Cuts that retrieve no
    true positive (where P = R = 0) are left out, so every returned point has
    recall > 0; if ``true`` has no True cell both arrays are empty.

    >>> p, r = micro_precision_recall_curve(np.array([[1, 0], [0, 1]]), np.array([[0.9, 0.1], [0.5, 0.1]]))
    >>> p.tolist(), r.tolist()
    ([1.0, 0.5, 0.5], [0.5, 0.5, 1.0])
    """
    true = _as_indicator("true", true)
    scores = np.asarray(margins, dtype=np.float64)
    if scores.shape != true.shape:
        raise DataError(f"true has shape {true.shape} but margins has {scores.shape}")
    if np.isnan(scores).any():
        raise DataError("margins contain NaN")
    flat_scores = scores.ravel()
    flat_true = true.ravel()
    n_positive = int(np.count_nonzero(flat_true))
    if n_positive == 0:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty

    order = np.argsort(-flat_scores, kind="stable")
    sorted_scores = flat_scores[order]
    true_positives = np.cumsum(flat_true[order], dtype=np.int64)
    # A cut at value t keeps every cell with margin >= t: the end of each run of equal values.
    run_ends = np.flatnonzero(np.append(sorted_scores[1:] != sorted_scores[:-1], True))
    tp = true_positives[run_ends]
    keep = tp > 0
    tp = tp[keep]
    retrieved = run_ends[keep] + 1
    return tp / retrieved, tp / n_positive


def micro_break_even(true: np.ndarray, margins: np.ndarray) -> float:
    """Micro-averaged precision/recall break-even point over one global threshold.

    ``margins[d, c]`` is score minus threshold for document d and category c
    (positive means predicted), so margins of different categories are
    comparable. One global offset ``t`` sweeps the distinct margin values
    from the highest down; at each cut (d, c) is predicted iff
    ``margins[d, c] >= t``, giving micro precision P(t) and recall R(t). Cuts
    with no true positive retrieved (P = R = 0, no break-even) are skipped;
    see :func:`micro_precision_recall_curve`.

    Walking the cuts in that order, the first cut where P = R gives P, and the
    first pair of adjacent cuts where P - R changes sign is joined by straight
    lines: λ in [0, 1] solves ``P0 + λ(P1 - P0) = R0 + λ(R1 - R0)`` and the
    break-even is ``P0 + λ(P1 - P0)``; whichever comes first is the answer. If
    P and R never meet, the answer is (P + R) / 2 at the cut minimising
    ``|P - R|``. With no True cell in ``true`` the result is 0.

    Sorting once and taking cumulative sums keeps it O(n log n) in the number
    of cells.

    Three documents, two categories, four true cells. The top two cuts are
    correct (P 1, R 1/4 then 1, 2/4), the third adds a false positive
    (P 2/3, R 2/4), the fourth a true positive (P 3/4, R 3/4): P - R goes
    from +1/6 to 0, so the break-even is 0.75.

    >>> true = np.array([[1, 0], [1, 1], [0, 1]])
    >>> margins = np.array([[0.9, -0.5], [0.8, -0.2], [0.1, -0.9]])
    >>> micro_break_even(true, margins)
    0.75

    Without ties P = R exactly at the cut that retrieves as many cells as
    there are true ones; ties make the curve jump over that point. One
    category, margins 0.9 (true), 0.5 (true), 0.5 (false): the cuts give
    (P, R) = (1, 1/2) then (2/3, 1), P - R goes +1/2 → -1/3, λ = 3/5 and the
    lines meet at 1 - (3/5)(1/3) = 0.8:

    >>> round(micro_break_even(np.array([[1], [1], [0]]), np.array([[0.9], [0.5], [0.5]])), 6)
    0.8
    """
    precision, recall = micro_precision_recall_curve(true, margins)
    if precision.size == 0:
        return 0.0
    difference = precision - recall
    sign = np.sign(difference)
    zeros = np.flatnonzero(sign == 0)
    changes = np.flatnonzero(sign[:-1] * sign[1:] < 0)
    first_zero = int(zeros[0]) if zeros.size else None
    first_change = int(changes[0]) if changes.size else None
    if first_zero is not None and (first_change is None or first_zero <= first_change):
        return float(precision[first_zero])
    if first_change is not None:
        k = first_change
        d0, d1 = difference[k], difference[k + 1]
        lam = d0 / (d0 - d1)
        return float(precision[k] + lam * (precision[k + 1] - precision[k]))
    k = int(np.argmin(np.abs(difference)))
    return float((precision[k] + recall[k]) / 2)
