"""Multinomial and Bernoulli Naive Bayes (Manning, Raghavan & Schütze, IR book ch. 13).

One two-class model per category, c against not-c, with add-one smoothing, in
log space; unlike the mistake-driven rules they count every labelled document.
A category's margin is its log-odds log P(c|d) - log P(not c|d); in ``one-of``
mode the margin is the multi-class log posterior instead.

Counts live in the store: per feature, its count in each category (``counts``)
and over all documents (``total``); counters hold documents and tokens per
category. The IR book's China example (Table 13.1), test document d5 =
"Chinese Chinese Chinese Tokyo Japan":

>>> train = [("Chinese Beijing Chinese", ["China"]), ("Chinese Chinese Shanghai", ["China"]),
...          ("Chinese Macao", ["China"]), ("Tokyo Japan Chinese", ["Japan"])]
>>> d5 = "Chinese Chinese Chinese Tokyo Japan".split()
>>> for learner in (MultinomialNB(), BernoulliNB()):
...     for text, labels in train:
...         _ = learner.learn_one(text.split(), labels)
...     c, not_c = learner.joint_log_likelihoods(learner.transform(d5))
...     print(learner.name, f"{np.exp(c[0]):.1g} vs {np.exp(not_c[0]):.2g}")
multinomial-nb 0.0003 vs 0.00014
bernoulli-nb 0.005 vs 0.022
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection
from typing import Any

import numpy as np
from scipy import sparse

from stream_winnow.errors import ConfigError
from stream_winnow.learners.base import DecisionMode, Learner, LearnOutcome
from stream_winnow.stores.base import Bounds, CounterUpdate, RowUpdate, TableSpec, Update, WeightStore
from stream_winnow.text.features import FeatureConfig, FeatureVector

DOCS_COUNTER = "nb_documents"
TOKENS_COUNTER = "nb_tokens"
_COUNT_BOUNDS = Bounds(0.0, 1e30)


class NaiveBayes(Learner):
    """Shared bookkeeping of the two event models."""

    def __init__(
        self,
        smoothing: float = 1.0,
        *,
        mode: DecisionMode = "any-of",
        features: FeatureConfig | None = None,
        store: WeightStore | None = None,
    ) -> None:
        if smoothing <= 0:
            raise ConfigError(f"smoothing must be > 0; got {smoothing}")
        self.smoothing = smoothing
        super().__init__(mode=mode, features=features, store=store)

    @classmethod
    def default_features(cls) -> FeatureConfig:
        return FeatureConfig(strength="count")

    def count_one(self, vector: FeatureVector, labels: Collection[str]) -> None:
        """Learn from a document without predicting it first (training needs no mistakes, only counts).

        For Bernoulli NB a prediction scans the vocabulary, so this is what keeps ``fit`` linear.
        """
        names = list(labels)
        self.store.ensure_categories(names)
        updates, _ = self.updates_for(vector, labels, margins=np.zeros(len(self.store.categories())))
        self.store.apply(updates)

    def table_specs(self) -> list[TableSpec]:
        return [
            TableSpec("counts", 0.0, bounds=_COUNT_BOUNDS, combine="add"),
            TableSpec("total", 0.0, per_category=False, bounds=_COUNT_BOUNDS, combine="add"),
        ]

    @abstractmethod
    def event_amounts(self, vector: FeatureVector) -> np.ndarray:
        """What one document adds to each of its features' counts (tf, or 1 for presence)."""

    def joint_log_likelihoods(self, vector: FeatureVector) -> tuple[np.ndarray, np.ndarray]:
        """Per category, log P(c) P(d|c) and log P(not c) P(d|not c)."""
        return self.joint_from(self.store.read(vector.ids), vector.strengths)

    @abstractmethod
    def joint_from(self, values: dict[str, np.ndarray], strengths: Any) -> tuple[np.ndarray, np.ndarray]:
        """``joint_log_likelihoods`` from stored rows; ``strengths`` a vector or a sparse docs x features matrix."""

    def _priors(self) -> tuple[np.ndarray, float, np.ndarray]:
        names = self.store.categories()
        docs = self.store.counters(DOCS_COUNTER)
        n_c = np.array([docs.get(c, 0.0) for c in names])
        return n_c, docs.get("*", 0.0), np.array(names)

    def _aligned(self, values: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray, float, list[str]]:
        """Rows and priors over the same categories: the first ``w`` of them, ``w`` the narrower of the two.

        Other workers add categories at any time, so rows read a moment before the counters may hold
        fewer categories than the counters name (or the category list, read from a cache, fewer than
        the rows): margins are then given for the first ``w`` categories, the ones both know.
        """
        n_c, n, names = self._priors()
        width = min(values["counts"].shape[1], len(n_c))
        cut = {name: (v[:, :width] if name == "counts" else v) for name, v in values.items()}
        return cut, n_c[:width], n, names[:width].tolist()

    def margins_from(self, values: dict[str, np.ndarray], strengths: Any, total_strength: Any) -> np.ndarray:
        n_documents = strengths.shape[0] if sparse.issparse(strengths) else None
        if not self.store.counters(DOCS_COUNTER).get("*"):
            width = len(self.store.categories())
            return np.zeros(width if n_documents is None else (n_documents, width))
        c, not_c = self.joint_from(values, strengths)
        if self.mode == "one-of":
            return np.asarray(c - np.logaddexp.reduce(c, axis=-1, keepdims=True))
        return c - not_c

    def updates_for(
        self, vector: FeatureVector, labels: Collection[str], margins: np.ndarray | None = None
    ) -> tuple[list[Update], LearnOutcome]:
        truth = self.label_vector(labels)
        if margins is None or len(margins) != len(truth):
            margins = self.margins(vector)
        predicted = np.zeros_like(truth)
        predicted[: len(margins)] = margins > 0
        names = self.store.categories()
        outcome = LearnOutcome(
            tuple(names[i] for i in np.flatnonzero(truth & ~predicted).tolist()),
            tuple(names[i] for i in np.flatnonzero(~truth & predicted).tolist()),
            False,
        )
        amounts = self.event_amounts(vector)
        columns = np.flatnonzero(truth)
        label_names = [names[i] for i in columns.tolist()]
        tokens = float(amounts.sum())
        updates: list[Update] = [
            RowUpdate("total", vector.ids, np.array([0]), add=amounts[:, None]),
            CounterUpdate(DOCS_COUNTER, {"*": 1.0, **{c: 1.0 for c in label_names}}),
            CounterUpdate(TOKENS_COUNTER, {"*": tokens, **{c: tokens for c in label_names}}),
        ]
        if len(columns):
            updates.append(RowUpdate("counts", vector.ids, columns, add=np.repeat(amounts[:, None], len(columns), 1)))
        updates += self.bookkeeping(outcome.promoted + outcome.demoted)
        return updates, outcome


class MultinomialNB(NaiveBayes):
    """Multinomial event model: P(t|c) = (T_ct + 1) / (sum_t' T_ct' + |V|)."""

    name = "multinomial-nb"

    def event_amounts(self, vector: FeatureVector) -> np.ndarray:
        return vector.strengths

    def joint_from(self, values: dict[str, np.ndarray], strengths: Any) -> tuple[np.ndarray, np.ndarray]:
        values, n_c, n, names = self._aligned(values)
        tokens = self.store.counters(TOKENS_COUNTER)
        t_c = np.array([tokens.get(c, 0.0) for c in names])
        t_all = tokens.get("*", 0.0)
        vocabulary = max(self.store.n_features(), 1)
        k = self.smoothing
        in_c = values["counts"]
        in_not_c = values["total"] - in_c
        s = strengths
        with np.errstate(divide="ignore"):
            c = np.log(n_c / n) + np.asarray(s @ np.log((in_c + k) / (t_c + k * vocabulary)))
            not_c = np.log((n - n_c) / n) + np.asarray(s @ np.log((in_not_c + k) / (t_all - t_c + k * vocabulary)))
        return c, not_c


class BernoulliNB(NaiveBayes):
    """Bernoulli event model: P(t|c) = (N_ct + 1) / (N_c + 2), absent terms count as 1 - P(t|c).

    The absent-term sum runs over the whole vocabulary, so every prediction
    scans the stored rows (cached while the model does not change): fine in
    process, too slow for a service over Redis, where the worker refuses it.
    """

    name = "bernoulli-nb"

    def __init__(
        self,
        smoothing: float = 1.0,
        *,
        mode: DecisionMode = "any-of",
        features: FeatureConfig | None = None,
        store: WeightStore | None = None,
    ) -> None:
        super().__init__(smoothing, mode=mode, features=features, store=store)
        self._absent_cache: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None

    @classmethod
    def default_features(cls) -> FeatureConfig:
        return FeatureConfig(strength="binary")

    def event_amounts(self, vector: FeatureVector) -> np.ndarray:
        return np.ones(len(vector))

    def _log_absent_sums(self, n_c: np.ndarray, n: float) -> tuple[np.ndarray, np.ndarray]:
        """Sum over the vocabulary of log(1 - P(t|c)) and of log(1 - P(t|not c))."""
        version = (self.store.version, len(n_c))
        if self._absent_cache is not None and self._absent_cache[0] == version:
            return self._absent_cache[1], self._absent_cache[2]
        k = self.smoothing
        absent_c = np.zeros(len(n_c))
        absent_not_c = np.zeros(len(n_c))
        for _, values in self.store.iter_rows():
            df_c = values["counts"][:, : len(n_c)]  # rows read after a category was added hold one more
            df_not_c = values["total"] - df_c
            absent_c[: df_c.shape[1]] += np.log1p(-(df_c + k) / (n_c[: df_c.shape[1]] + 2 * k)).sum(axis=0)
            absent_not_c[: df_c.shape[1]] += np.log1p(-(df_not_c + k) / (n - n_c[: df_c.shape[1]] + 2 * k)).sum(axis=0)
        self._absent_cache = (version, absent_c, absent_not_c)
        return absent_c, absent_not_c

    def joint_from(self, values: dict[str, np.ndarray], strengths: Any) -> tuple[np.ndarray, np.ndarray]:
        values, n_c, n, _ = self._aligned(values)
        k = self.smoothing
        absent_c, absent_not_c = self._log_absent_sums(n_c, n)
        # Presence: 1 for each of the document's terms in the vocabulary (unknown terms are ignored,
        # IR book Fig. 13.3); the strengths' values do not matter to the Bernoulli model.
        known = (values["total"][:, 0] > 0).astype(np.float64)
        present = known * (strengths != 0) if isinstance(strengths, np.ndarray) else (strengths != 0) @ sparse.diags(known)
        df_c = values["counts"]
        df_not_c = values["total"] - df_c
        p_c = (df_c + k) / (n_c + 2 * k)
        p_not_c = (df_not_c + k) / (n - n_c + 2 * k)
        with np.errstate(divide="ignore"):
            c = np.log(n_c / n) + absent_c + np.asarray(present @ (np.log(p_c) - np.log1p(-p_c)))
            not_c = np.log((n - n_c) / n) + absent_not_c + np.asarray(present @ (np.log(p_not_c) - np.log1p(-p_not_c)))
        return c, not_c
