"""What the three linear rules share: a thick threshold, and updates only on mistakes.

Dagan, Karov & Roth (1997, §4.2): during training a score inside the range
``[theta_minus, theta_plus]`` counts as a mistake, so a positive example is
promoted until its score clears ``theta_plus`` and a negative one demoted below
``theta_minus``; prediction compares with ``theta`` alone. An update touches the
document's active features, for the mistaken categories only.

Feature discarding (§4.4): ``discardable`` marks features whose every weight is
still within one promotion/demotion step of its initial value; ``discard`` sets
their ``keep`` flag to 0, after which they neither score nor learn.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from stream_winnow.errors import ConfigError
from stream_winnow.learners.base import DecisionMode, Learner, LearnOutcome
from stream_winnow.learners.row_product import rows_product
from stream_winnow.learners.term_weights import df_spec
from stream_winnow.stores.base import Bounds, RowUpdate, TableSpec, Update, WeightStore
from stream_winnow.text.domain import DomainBatch
from stream_winnow.text.features import FeatureBatch, FeatureConfig, FeatureVector

KEEP_TABLE = "keep"


@dataclass(frozen=True, slots=True)
class DiscardReport:
    """How many stored features ``discard`` examined and switched off."""

    examined: int
    discarded: int

    @property
    def fraction(self) -> float:
        return self.discarded / self.examined if self.examined else 0.0


class MistakeDriven(Learner):
    """A linear rule per category that learns only from mistakes (thick threshold during training)."""

    weighs_terms = True

    def __init__(
        self,
        *,
        theta: float = 1.0,
        theta_minus: float = 0.9,
        theta_plus: float = 1.1,
        mean_active_features: float | None = None,
        mode: DecisionMode = "any-of",
        features: FeatureConfig | None = None,
        store: WeightStore | None = None,
    ) -> None:
        if not theta_minus <= theta <= theta_plus:
            raise ConfigError(f"need theta_minus <= theta <= theta_plus; got {theta_minus}, {theta}, {theta_plus}")
        if mean_active_features is not None and mean_active_features <= 0:
            raise ConfigError(f"mean_active_features must be > 0; got {mean_active_features}")
        self.theta = theta
        self.theta_minus = theta_minus
        self.theta_plus = theta_plus
        # d in the paper: the documents' mean total strength (their number of active features when strength
        # is binary). Weights are stored in units of theta/d, so d only scales scores and can be set late:
        # None takes it from the model's metadata, else from the first document learned.
        self.mean_active_features = mean_active_features
        super().__init__(mode=mode, features=features, store=store)
        self._last_read: tuple[tuple[FeatureVector, int, int], dict[str, np.ndarray], np.ndarray] | None = None
        if mean_active_features is None and "mean_active_features" in self.store.metadata():
            self._d: float | None = float(self.store.metadata()["mean_active_features"])
        else:
            self._d = mean_active_features

    @property
    def d(self) -> float | None:
        """The paper's d as in force (None until set or learned)."""
        return self._d

    def set_d(self, mean_total_strength: float) -> None:
        """Fix d (and record it in the model, so every worker scores alike)."""
        if mean_total_strength <= 0:
            raise ConfigError(f"d must be > 0; got {mean_total_strength}")
        self._d = float(mean_total_strength)
        self.store.set_metadata({"mean_active_features": repr(self._d)})

    def fix_d(self, vector: FeatureVector) -> float:
        """d, set from this document's total strength when nobody set it before."""
        if self._d is None:
            self.set_d(max(vector.total_strength, 1e-9))
        assert self._d is not None
        return self._d

    def unit(self, total_strength: Any) -> Any:
        """theta/d: the value of a stored weight of 1.0 (before any document, d is the document's strength)."""
        d = self._d if self._d is not None else np.maximum(total_strength, 1e-9)
        return self.theta / d

    def feature_specs(self) -> list[TableSpec]:
        """The per-feature tables beside the weights: the keep flag (§4.4), and the document frequencies with idf."""
        return [TableSpec(KEEP_TABLE, 1.0, per_category=False, bounds=Bounds(0.0, 1.0))] + (
            [df_spec()] if self.features.idf else []
        )

    # -- the rule ------------------------------------------------------------------------------------
    @abstractmethod
    def linear_weights(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """Per feature row of ``values``, the weight per category that its strength multiplies."""

    @abstractmethod
    def rule_updates(
        self, vector: FeatureVector, promote: np.ndarray, demote: np.ndarray
    ) -> list[RowUpdate]:
        """Row updates promoting the category columns ``promote`` and demoting ``demote``."""

    @abstractmethod
    def discardable(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """Bool per row: every weight still within one step of its initial value."""

    # -- shared --------------------------------------------------------------------------------------
    def scores(self, values: Mapping[str, np.ndarray], strengths: Any, unit: Any) -> np.ndarray:
        """Score per category from the feature rows ``values``, (kept) strengths and the weight unit."""
        return unit * (strengths @ self.linear_weights(values))

    def scoring_rows(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """The rows' linear weights, zero for a discarded feature, in float32: what a batch is scored from.

        Redis keeps every weight as a float32; the view a worker keeps for scoring is float32 too
        (Balanced Winnow's ``positive - negative`` rounded once more, a relative 6e-8), so the
        Reuters model's view is 9.5 MB instead of 19 and a batch's row product reads half the
        bytes. Margins are still summed in float64. The Reuters margins of batches of 200 took
        2.7-2.8 µs a document from float64 rows and 2.4-2.6 from float32 (``python -m
        benchmarks.stages --batch 200``, twice each, alternating).
        """
        return np.asarray(self.linear_weights(values) * values[KEEP_TABLE][:, :1], dtype=np.float32)

    def margins_many(self, batch: FeatureBatch) -> np.ndarray:
        """As ``Learner.margins_many``, from the features' ``scoring_rows`` (``WeightStore.read_view``).

        A ``CachedStore`` keeps those rows beside the weights, and a batch is summed straight from
        them (``row_product``, no rows gathered): 7.0 → 3.4 µs a Reuters document in batches of
        1,000 with the rows gathered, 2.6 in batches of 200 without (``benchmarks/stages``). ``strengths @ (w * keep)`` sums the same
        products as ``margins_from``'s ``(strengths * keep) @ w`` (keep is 0 or 1), in token
        order rather than the order scipy's sparse product leaves: equal to about 1e-15.
        """
        if isinstance(batch, DomainBatch):
            products = self._domain_products(batch)
        else:
            unique, inverse = batch.distinct_ids()
            matrix, rows = self.store.read_view_rows(unique, self.scoring_rows)
            products = rows_product(batch.indptr, rows[inverse], batch.strengths, matrix)
        return np.asarray(self.unit(self.batch_totals(batch)) * products) - self.theta

    def _domain_products(self, batch: DomainBatch) -> np.ndarray:
        """``strengths @ rows`` of a batch with domain features: the words entry by entry, the domains as one
        float32 BLAS product ``split @ rows`` over every domain at once, in one read of the rows.

        The same sums as the entry-by-entry product but for the order of additions and the domains'
        float32 (a relative 1e-6 of a margin): 2,000 Reuters documents with 400 domains, margins 100 → 21 ms.
        """
        words = batch.words
        unique, inverse = words.distinct_ids() if words is not None else (batch.domain_ids[:0], batch.domain_ids[:0])
        matrix, rows = self.store.read_view_rows(np.concatenate([unique, batch.domain_ids]), self.scoring_rows)
        domain = np.ascontiguousarray(matrix[rows[len(unique) :]], dtype=np.float32)
        products = (batch.split @ domain).astype(np.float64)
        if words is not None:
            products += rows_product(words.indptr, rows[: len(unique)][inverse], words.strengths, matrix)
        return products

    def _read(self, vector: FeatureVector) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The vector's rows and kept strengths; the last read is reused while the model is unchanged."""
        key = (vector, self.store.version, len(self.store.categories()))
        last = self._last_read
        if last is not None and last[0][0] is vector and last[0][1:] == key[1:]:
            return last[1], last[2]
        values = self.store.read(vector.ids)
        strengths = vector.strengths * values[KEEP_TABLE][:, 0]
        self._last_read = (key, values, strengths)
        return values, strengths

    def margins(self, vector: FeatureVector) -> np.ndarray:
        values, strengths = self._read(vector)
        return self.scores(values, strengths, self.unit(vector.total_strength)) - self.theta

    def margins_from(self, values: dict[str, np.ndarray], strengths: Any, total_strength: Any) -> np.ndarray:
        keep = values[KEEP_TABLE][:, 0]
        kept = strengths * keep if isinstance(strengths, np.ndarray) else strengths @ sparse.diags(keep)
        return np.asarray(self.scores(values, kept, self.unit(total_strength))) - self.theta

    def updates_for(
        self, vector: FeatureVector, labels: Collection[str], margins: np.ndarray | None = None
    ) -> tuple[list[Update], LearnOutcome]:
        truth = self.label_vector(labels)
        self.fix_d(vector)
        if margins is None or len(margins) != len(truth):
            margins = self.margins(vector)
        scores = margins + self.theta
        promote, demote = self.mistaken(truth, scores)
        names = self.store.categories()
        outcome = LearnOutcome(
            tuple(names[i] for i in promote.tolist()), tuple(names[i] for i in demote.tolist()), False
        )
        if not (len(promote) or len(demote)):
            return [], outcome
        kept = self._read(vector)[0][KEEP_TABLE][:, 0] > 0
        if not kept.all():
            vector = FeatureVector(vector.ids[kept], vector.strengths[kept])
        updates: list[Update] = list(self.rule_updates(vector, promote, demote)) if len(vector) else []
        updates += self.bookkeeping(outcome.promoted + outcome.demoted)
        return updates, outcome

    def mistaken(self, truth: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The category columns to promote and to demote for a document with true columns ``truth``.

        ``any-of``: each category on its own, by the thick threshold: a true one scoring at most
        ``theta_plus`` is promoted, a wrong one scoring at least ``theta_minus`` demoted. ``one-of``:
        winner take all: each true category not ahead of the best-scoring wrong one by the
        threshold's width (``theta_plus - theta_minus``) is promoted, and that wrong one demoted.

        >>> from stream_winnow.learners import build_learner
        >>> truth = np.array([True, False, False])
        >>> build_learner("perceptron").mistaken(truth, np.array([1.5, 0.95, 0.2]))
        (array([], dtype=int64), array([1]))
        >>> build_learner("perceptron", mode="one-of").mistaken(truth, np.array([1.5, 1.35, 0.2]))
        (array([0]), array([1]))
        >>> build_learner("perceptron", mode="one-of").mistaken(truth, np.array([1.5, 0.95, 0.2]))
        (array([], dtype=int64), array([], dtype=int64))
        """
        if self.mode != "one-of":
            return np.flatnonzero(truth & (scores <= self.theta_plus)), np.flatnonzero(~truth & (scores >= self.theta_minus))
        wrong = np.flatnonzero(~truth)
        if not len(wrong) or not truth.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        rival = int(wrong[np.argmax(scores[wrong])])
        promote = np.flatnonzero(truth & (scores - scores[rival] <= self.theta_plus - self.theta_minus))
        return promote, (np.array([rival]) if len(promote) else np.zeros(0, dtype=np.int64))

    def discard(self, candidates: np.ndarray | None = None) -> DiscardReport:
        """Switch off every feature whose weights never moved more than one step (§4.4).

        ``candidates`` (e.g. the training vocabulary) are examined whether or not the
        store holds a row for them; without it, the stored rows are.
        """
        examined = discarded = 0
        if candidates is None:
            chunks = list(self.store.iter_rows())
        else:
            ids = np.unique(candidates)
            chunks = [(ids[i : i + 10_000], self.store.read(ids[i : i + 10_000])) for i in range(0, len(ids), 10_000)]
        for ids, values in chunks:
            live = values[KEEP_TABLE][:, 0] > 0
            drop = live & self.discardable(values)
            examined += int(live.sum())
            if drop.any():
                dropped = ids[drop]
                self.store.apply([RowUpdate(KEEP_TABLE, dropped, np.array([0]), np.zeros(1))])
                discarded += int(drop.sum())
        return DiscardReport(examined, discarded)

    @staticmethod
    def within_one_step(values: np.ndarray, initial: float, alpha: float, beta: float) -> np.ndarray:
        """Bool per row: every value in [initial*beta, initial*alpha] (a small tolerance for rounding)."""
        low, high = initial * min(alpha, beta) * (1 - 1e-6), initial * max(alpha, beta) * (1 + 1e-6)
        return np.all((values >= low) & (values <= high), axis=1)
