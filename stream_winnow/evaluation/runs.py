"""The two ways to measure a learner: hold-out (train, then score a test set) and prequential.

Prequential evaluation is what a service sees: one pass over a stream, each
document predicted with the model as it stands and then learned from. Both
runs return an ``EvaluationResult`` whose ``seconds`` cover featurising,
predicting and learning (not reading files), so ``docs_per_second`` compares
with peers fed the same token stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_winnow.documents import LabelledDocument
from stream_winnow.evaluation.metrics import ClassificationReport, classification_report, label_matrix
from stream_winnow.learners import compiled
from stream_winnow.learners.base import Learner, one_of
from stream_winnow.learners.mistake_driven import MistakeDriven
from stream_winnow.models.training import TrainingConfig, TrainingReport, estimate_d, fit

# Documents per progress callback in the per-document path.
_PROGRESS_EVERY = 500
# A prequential run takes d from this many documents' lengths (tokens only, never labels).
PREQUENTIAL_D_SAMPLE = 100


@dataclass(frozen=True, slots=True)
class EvaluationResult:
    """Scores, sizes and speed of one evaluation run."""

    report: ClassificationReport
    categories: tuple[str, ...]
    n_train: int
    n_test: int
    seconds: float
    training: TrainingReport | None = None
    curve: tuple[tuple[int, float], ...] = ()  # (documents seen, running micro-F1), prequential only

    @property
    def docs_per_second(self) -> float:
        return (self.n_train + self.n_test) / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.report.as_dict())
        out.update(
            n_train=self.n_train,
            n_test=self.n_test,
            n_categories=len(self.categories),
            seconds=round(self.seconds, 4),
            docs_per_second=round(self.docs_per_second, 1),
        )
        if self.training is not None:
            out["mistakes_per_pass"] = list(self.training.mistakes_per_pass)
            if self.training.discard is not None:
                out["discarded_fraction"] = round(self.training.discard.fraction, 4)
        return out


def categories_of(*doc_lists: Sequence[LabelledDocument]) -> tuple[str, ...]:
    """The categories labelled anywhere in the documents, sorted."""
    return tuple(sorted({label for docs in doc_lists for d in docs for label in d.labels}))


def _aligned(margins: np.ndarray, learner: Learner, categories: Sequence[str]) -> np.ndarray:
    """Margins re-ordered to ``categories``; a category the model lacks gets -inf."""
    column = {name: i for i, name in enumerate(learner.store.categories())}
    out = np.full((margins.shape[0], len(categories)), -np.inf)
    for j, name in enumerate(categories):
        i = column.get(name)
        if i is not None and i < margins.shape[1]:
            out[:, j] = margins[:, i]
    return out


def _decisions(learner: Learner, margins: np.ndarray) -> np.ndarray:
    if learner.mode == "one-of":
        decided = np.zeros(margins.shape, dtype=bool)
        alive = np.isfinite(margins).any(axis=1)
        decided[np.flatnonzero(alive), one_of(margins[alive])] = True
        return decided
    return margins > 0


def _margins_one_by_one(
    learner: Learner, docs: Sequence[LabelledDocument], learn: bool, on_progress: Callable[[int], None] | None
) -> np.ndarray:
    rows: list[np.ndarray] = []
    for i, doc in enumerate(docs):
        vector = learner.transform(doc.tokens)
        prediction = learner.predict_one(vector)
        rows.append(prediction.margins)
        if learn:
            learner.learn_one(vector, doc.labels)
        if on_progress is not None and (i + 1) % _PROGRESS_EVERY == 0:
            on_progress(_PROGRESS_EVERY)
    width = len(learner.store.categories())
    out = np.full((len(docs), width), -np.inf)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _margins(
    learner: Learner, docs: Sequence[LabelledDocument], learn: bool, on_progress: Callable[[int], None] | None
) -> np.ndarray:
    """Each document's margins, predicted before learning from it when ``learn``.

    With idf, a run that learns weighs each document by the counts of the documents before it, one
    by one; one that does not weighs them all by the model's counts.
    """
    if not compiled.supports(learner) or (learn and learner.counts_terms):
        return _margins_one_by_one(learner, docs, learn, on_progress)
    assert isinstance(learner, MistakeDriven)
    batch = learner.weigh(learner.featurizer.transform_many([d.tokens for d in docs]))
    labels = [d.labels for d in docs] if learn else [()] * len(docs)
    known = learner.store.categories()
    stream = compiled.prepare(learner, batch, labels)
    order = np.arange(len(docs), dtype=np.int64)
    born = compiled.first_positions(labels, order, known)
    _, margins = compiled.run(learner, stream, order=order, learn=learn, record_margins=True, new_categories=born)
    if on_progress is not None:
        on_progress(len(docs))
    return margins


def running_micro_f1(true: np.ndarray, predicted: np.ndarray, points: int = 200) -> tuple[tuple[int, float], ...]:
    """(documents seen, micro-F1 so far) at about ``points`` evenly spaced positions."""
    tp = np.cumsum((true & predicted).sum(axis=1))
    fp = np.cumsum((~true & predicted).sum(axis=1))
    fn = np.cumsum((true & ~predicted).sum(axis=1))
    at = np.unique(np.linspace(1, len(true), min(points, len(true))).astype(int)) - 1
    denominator = 2 * tp[at] + fp[at] + fn[at]
    f1 = np.where(denominator > 0, 2 * tp[at] / np.maximum(denominator, 1), 0.0)
    return tuple((int(i) + 1, float(v)) for i, v in zip(at, f1, strict=True))


def prequential(
    learner: Learner, stream: Sequence[LabelledDocument], on_progress: Callable[[int], None] | None = None
) -> EvaluationResult:
    """Predict each document with the model so far, then learn from it; score all predictions."""
    started = time.perf_counter()
    sample = stream[:PREQUENTIAL_D_SAMPLE]
    estimate_d(learner, learner.featurizer.transform_many([d.tokens for d in sample]))
    margins = _margins(learner, stream, True, on_progress)
    seconds = time.perf_counter() - started
    categories = categories_of(stream)
    aligned = _aligned(margins, learner, categories)
    true = label_matrix([d.labels for d in stream], categories)
    predicted = _decisions(learner, aligned)
    report = classification_report(true, predicted, aligned)
    curve = running_micro_f1(true, predicted)
    return EvaluationResult(report, categories, 0, len(stream), seconds, curve=curve)


def holdout(
    learner: Learner,
    train: Sequence[LabelledDocument],
    test: Sequence[LabelledDocument],
    training: TrainingConfig | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EvaluationResult:
    """Train on ``train`` (iteratively, per ``training``), then predict ``test`` without learning."""
    started = time.perf_counter()
    report_training = fit(learner, train, training)
    margins = _margins(learner, test, False, on_progress)
    seconds = time.perf_counter() - started
    categories = categories_of(train, test)
    aligned = _aligned(margins, learner, categories)
    true = label_matrix([d.labels for d in test], categories)
    report = classification_report(true, _decisions(learner, aligned), aligned)
    return EvaluationResult(report, categories, len(train), len(test), seconds, training=report_training)
