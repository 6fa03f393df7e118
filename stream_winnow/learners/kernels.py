"""Compiled per-document loops of the three linear rules, for in-process runs on a ``MemoryStore``.

The rules' Python code (``balanced_winnow.py`` and its siblings) is the
reference and the path every other store takes; this module runs the very same
arithmetic over a whole stream in one numba-compiled call, because a
prequential run is sequential (each prediction depends on every earlier
update) and a per-document Python loop pays about 40 numpy calls a document.
``tests/test_compiled.py`` checks both paths give the same margins and weights.

Inputs are CSR-like: document ``i`` has store rows ``rows[indptr[i]:indptr[i+1]]``
with ``strengths`` alike, and true category columns
``label_columns[label_indptr[i]:label_indptr[i+1]]``. ``born[c]`` is the index
(in ``order``) of the first document labelled ``c`` in this run (or -1 if the category was
already in the model): a category is predicted only after it exists, and
learned from the document that creates it on, as the Python path does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

BALANCED_WINNOW = 0
POSITIVE_WINNOW = 1
PERCEPTRON = 2


@njit(cache=True, nogil=True)
def run_stream(  # noqa: PLR0913 - a compiled kernel takes flat arrays, not objects
    order: np.ndarray,
    indptr: np.ndarray,
    rows: np.ndarray,
    strengths: np.ndarray,
    label_indptr: np.ndarray,
    label_columns: np.ndarray,
    born: np.ndarray,
    weights: np.ndarray,
    first_offset: int,
    second_offset: int,
    keep_offset: int,
    n_categories: int,
    rule: int,
    alpha: float,
    beta: float,
    theta: float,
    theta_minus: float,
    theta_plus: float,
    unit: float,
    low: float,
    high: float,
    learn: bool,
    one_of: bool,
    margins_out: np.ndarray,
    updates_out: np.ndarray,
    actions_out: np.ndarray,
) -> int:
    """Predict (into ``margins_out`` if it has rows) then, if ``learn``, learn each document in ``order``.

    Returns the number of documents that caused an update; ``updates_out[c]``
    counts updates per category; ``actions_out[i, c]`` (when it has rows) gets +1/-1 for each
    promotion/demotion of document ``i``, so a caller can rebuild each document's update.
    """
    scores = np.zeros(n_categories)
    truth = np.zeros(n_categories, dtype=np.bool_)
    action = np.zeros(n_categories, dtype=np.int8)  # +1 promote, -1 demote
    mistaken = np.zeros(n_categories, dtype=np.int64)  # the columns with an action, in order
    record = margins_out.shape[0] > 0
    record_actions = actions_out.shape[0] > 0
    mistakes = 0
    for position in range(order.shape[0]):
        i = order[position]
        start, end = indptr[i], indptr[i + 1]
        scores[:] = 0.0
        for j in range(start, end):
            r = rows[j]
            s = strengths[j] * weights[r, keep_offset]
            if s == 0.0:
                continue
            if rule == BALANCED_WINNOW:
                for c in range(n_categories):
                    scores[c] += s * (weights[r, first_offset + c] - weights[r, second_offset + c])
            else:
                for c in range(n_categories):
                    scores[c] += s * weights[r, first_offset + c]
        for c in range(n_categories):
            scores[c] *= unit
        if record:
            for c in range(n_categories):
                margins_out[i, c] = scores[c] - theta if born[c] < position else -np.inf
        if not learn:
            continue
        truth[:] = False
        for j in range(label_indptr[i], label_indptr[i + 1]):
            truth[label_columns[j]] = True
        action[:] = 0
        if one_of:
            # Winner take all: each true category not ahead of the best-scoring wrong one by the
            # thick threshold's width is promoted, and that wrong one demoted.
            rival = -1
            for c in range(n_categories):
                if born[c] <= position and not truth[c] and (rival < 0 or scores[c] > scores[rival]):
                    rival = c
            if rival >= 0:
                for c in range(n_categories):
                    if born[c] <= position and truth[c] and scores[c] - scores[rival] <= theta_plus - theta_minus:
                        action[c] = 1
                        action[rival] = -1
        else:
            for c in range(n_categories):
                if born[c] > position:
                    continue
                if truth[c] and scores[c] <= theta_plus:
                    action[c] = 1
                elif not truth[c] and scores[c] >= theta_minus:
                    action[c] = -1
        n_mistaken = 0
        for c in range(n_categories):
            if action[c] != 0:
                mistaken[n_mistaken] = c
                n_mistaken += 1
                updates_out[c] += 1
                if record_actions:
                    actions_out[i, c] = action[c]
        if n_mistaken == 0:
            continue
        mistakes += 1
        for j in range(start, end):
            r = rows[j]
            if weights[r, keep_offset] <= 0.0:
                continue
            s = strengths[j]
            for k in range(n_mistaken):
                c = mistaken[k]
                a = action[c]
                if rule == BALANCED_WINNOW:
                    p = weights[r, first_offset + c] * (alpha if a > 0 else beta)
                    n = weights[r, second_offset + c] * (beta if a > 0 else alpha)
                    weights[r, first_offset + c] = min(max(p, low), high)
                    weights[r, second_offset + c] = min(max(n, low), high)
                elif rule == POSITIVE_WINNOW:
                    w = weights[r, first_offset + c] * (alpha if a > 0 else beta)
                    weights[r, first_offset + c] = min(max(w, low), high)
                else:
                    w = weights[r, first_offset + c] + alpha * s * a
                    weights[r, first_offset + c] = min(max(w, low), high)
    return mistakes
