"""What every learner is: one binary classifier per category over a weight store.

Vocabulary, used everywhere (library, CLI, docs): ``predict_one`` decides a
document's categories; ``learn_one`` learns from a document and its true labels;
``updates_for`` says what ``learn_one`` would change without changing it (the
worker applies those updates in Redis, atomically and once per event).

Each learner scores a document per category and turns the score into a *margin*
(score minus threshold for the linear learners, log-odds for Naive Bayes), so
margins compare across categories: ``any-of`` decides every category with a
margin above 0, ``one-of`` the category with the highest margin.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
from scipy import sparse

from stream_winnow.errors import ConfigError
from stream_winnow.learners import term_weights
from stream_winnow.learners.term_weights import DF_TABLE, DOCUMENTS_COUNTER
from stream_winnow.stores.base import CounterUpdate, TableSpec, Update, WeightStore
from stream_winnow.stores.memory import MemoryStore
from stream_winnow.text.domain import DomainFeatures
from stream_winnow.text.features import FeatureBatch, FeatureConfig, FeatureVector, Featurizer

DecisionMode = Literal["any-of", "one-of"]
DECISION_MODES: tuple[str, ...] = get_args(DecisionMode)

# One-of decisions compare margins rounded to this many decimals: categories whose scores are equal
# but for the order of summation (the compiled loop adds feature by feature, numpy's dot as its BLAS
# does, and they differ in the 15th digit) tie, and the first in store order wins on every path.
ONE_OF_DECIMALS = 9


def one_of(margins: np.ndarray) -> np.ndarray:
    """Index of the one-of category per row (the last axis): the highest margin, ties to the first.

    >>> one_of(np.array([[0.3, 0.7 - 1e-16, 0.7], [0.1, 0.2, 0.0]])).tolist()
    [1, 1]
    """
    return np.argmax(np.round(margins, ONE_OF_DECIMALS), axis=-1)


# Counter every learner keeps: updates made per category (key "*": labelled documents that changed the model).
UPDATES_COUNTER = "updates"


@dataclass(frozen=True, slots=True)
class Prediction:
    """A decision: the chosen categories, and the margin of every category (store column order)."""

    categories: tuple[str, ...]
    margins: np.ndarray
    model_version: int

    def scores(self, names: Sequence[str]) -> dict[str, float]:
        return {name: float(m) for name, m in zip(names, self.margins.tolist(), strict=False)}


@dataclass(frozen=True, slots=True)
class LearnOutcome:
    """What ``learn_one`` did: the categories promoted and demoted, and whether the store changed."""

    promoted: tuple[str, ...]
    demoted: tuple[str, ...]
    applied: bool

    @property
    def mistake(self) -> bool:
        return bool(self.promoted or self.demoted)


class Learner(ABC):
    """Base of every learning rule. Hyperparameters are constructor arguments stored as given."""

    name: ClassVar[str]
    #: Whether the rule's strengths may be idf-weighted (``FeatureConfig.idf``): the mistake-driven rules'.
    weighs_terms: ClassVar[bool] = False

    def __init__(
        self,
        *,
        mode: DecisionMode = "any-of",
        features: FeatureConfig | None = None,
        store: WeightStore | None = None,
    ) -> None:
        if mode not in DECISION_MODES:
            raise ConfigError(f"mode must be one of {', '.join(DECISION_MODES)}; got {mode!r}")
        self.mode = mode
        self.features = features or self.default_features()
        if self.features.idf and not self.weighs_terms:
            raise ConfigError(f"{self.name} counts tokens: idf weighs the strengths of the mistake-driven rules only")
        self.featurizer = Featurizer(self.features)
        self.store = store if store is not None else MemoryStore(self.table_specs())
        missing = {t.name for t in self.table_specs()} - set(self.store.tables)
        if missing:
            raise ConfigError(f"the store lacks tables {sorted(missing)} that {self.name} needs")

    # -- parameters (river's _get_params idea: the signature is the truth) ----------------------------
    def params(self) -> dict[str, Any]:
        """Hyperparameters as given to the constructor (store excluded)."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p not in ("self", "store")]
        return {n: getattr(self, n) for n in names}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    @classmethod
    def default_features(cls) -> FeatureConfig:
        """The feature settings this rule uses unless told otherwise."""
        return FeatureConfig()

    @property
    def domain(self) -> DomainFeatures | None:
        """The domain features this learner sees beside (or instead of) words; None for words only."""
        return self.featurizer.domain

    def use_domain(self, domain: DomainFeatures) -> None:
        """See documents through ``domain`` from now on, and keep its domain model in the store.

        A model's domain model is fixed when the model is made: a store that
        already holds weights, or another domain model, is refused
        (``ConfigError``); train a new model with the new domain model instead.
        """
        recorded = self.store.metadata().get("domain_version")
        if recorded != domain.model.version:
            if recorded is not None or self.store.n_features():
                raise ConfigError(
                    "this model already holds weights learned "
                    + (f"with domain model {recorded}" if recorded else "without a domain model")
                    + f"; train a new model with domain model {domain.model.version}"
                )
            self.store.set_domain_model(domain.model.to_bytes())
            self.store.set_metadata({"feature_set": domain.feature_set, "domain_version": domain.model.version})
        self.featurizer = Featurizer(self.features, domain=domain)

    # -- what a rule defines ---------------------------------------------------------------------------
    @abstractmethod
    def table_specs(self) -> list[TableSpec]:
        """The tables this rule keeps per feature."""

    def margins(self, vector: FeatureVector) -> np.ndarray:
        """Margin per category (store column order); > 0 means the category is predicted."""
        return self.margins_from(self.store.read(vector.ids), vector.strengths, vector.total_strength)

    def margins_many(self, batch: FeatureBatch) -> np.ndarray:
        """Margins of every document of ``batch`` (documents x categories) from ONE store read.

        The batch's distinct features are read once (one Redis round trip for a
        worker's micro-batch); each document's strengths become a sparse row over them.
        """
        unique, strengths, totals = self.batch_strengths(batch)
        return np.asarray(self.margins_from(self.store.read(unique), strengths, totals))

    @staticmethod
    def batch_strengths(batch: FeatureBatch) -> tuple[np.ndarray, sparse.csr_matrix, np.ndarray]:
        """(the batch's distinct ids, documents x those ids strengths, each document's total as a column)."""
        unique, inverse = batch.distinct_ids()
        strengths = sparse.csr_matrix(
            (batch.strengths, inverse.astype(np.int64), batch.indptr), shape=(len(batch), len(unique))
        )
        return unique, strengths, Learner.batch_totals(batch)

    @staticmethod
    def batch_totals(batch: FeatureBatch) -> np.ndarray:
        """Each document's total strength, as a column (documents × 1); 0 for a document without features."""
        lengths = np.diff(batch.indptr)
        if len(batch.ids) and lengths.all():
            return np.add.reduceat(batch.strengths, batch.indptr[:-1])[:, None]
        # reduceat cannot take an empty document at the end (a domain-only batch can have one)
        documents = np.repeat(np.arange(len(batch)), lengths)
        return np.bincount(documents, weights=batch.strengths, minlength=len(batch)).astype(np.float64)[:, None]

    @abstractmethod
    def margins_from(self, values: dict[str, np.ndarray], strengths: Any, total_strength: Any) -> np.ndarray:
        """Margins from the features' stored rows ``values`` and their strengths.

        ``strengths`` is a vector (one document) or a sparse documents x features
        matrix; the formulas use ``strengths @ ...`` so both work.
        """

    @abstractmethod
    def updates_for(
        self, vector: FeatureVector, labels: Collection[str], margins: np.ndarray | None = None
    ) -> tuple[list[Update], LearnOutcome]:
        """The store updates that learning from (vector, labels) makes, computed from current weights."""

    # -- shared behaviour ------------------------------------------------------------------------------
    def transform(self, tokens: Sequence[str]) -> FeatureVector:
        """One document's features, weighed (``weigh_vector``)."""
        return self.weigh_vector(self.featurizer.transform(tokens))

    # -- term weighting (FeatureConfig.idf; learners.term_weights) -------------------------------------
    @property
    def counts_terms(self) -> bool:
        """Whether documents are idf-weighted and counted: ``idf`` on, and no domain model (which weighs words)."""
        return self.features.idf and self.featurizer.domain is None

    def weigh(self, batch: FeatureBatch, rows: Mapping[str, np.ndarray] | None = None) -> FeatureBatch:
        """``batch`` idf-weighted by the model's counts as they are now; ``batch`` itself without idf, or with a
        domain model (which weighs words by its own idf). ``rows``: the batch's distinct features' rows, when
        the caller has just read them (else they are read)."""
        if not self.counts_terms or not len(batch.ids):
            return batch
        df = (rows if rows is not None else self.store.read(batch.distinct_ids()[0]))[DF_TABLE][:, 0]
        return term_weights.weigh(batch, df, self.store.counters(DOCUMENTS_COUNTER).get("*", 0.0))

    def weigh_vector(self, vector: FeatureVector) -> FeatureVector:
        """``weigh`` for one document."""
        if not self.counts_terms or not len(vector):
            return vector
        return self.weigh(FeatureBatch.of_vector(vector)).vector(0)

    def counting(self, batch: FeatureBatch | FeatureVector) -> list[Update]:
        """The updates that count ``batch``'s documents into the model's frequencies (none without idf)."""
        if not self.counts_terms or not len(batch):
            return []
        if isinstance(batch, FeatureVector):
            batch = FeatureBatch.of_vector(batch)
        unique, inverse = batch.distinct_ids()
        counts = np.bincount(inverse, minlength=len(unique))  # a document holds each of its ids once
        return term_weights.frequency_updates(unique, counts, len(batch))

    def decide(self, margins: np.ndarray, names: Sequence[str] | None = None) -> tuple[str, ...]:
        """The categories ``margins`` decide; pass ``names`` (the store's categories) to save a lookup."""
        if names is None:
            names = self.store.categories()
        if not len(margins):
            return ()
        if self.mode == "one-of":
            return (names[int(one_of(margins))],)
        return tuple(names[i] for i in np.flatnonzero(margins > 0).tolist())

    def decide_many(self, margins: np.ndarray, names: Sequence[str]) -> list[tuple[str, ...]]:
        """``decide`` for every row of a (documents x categories) block, with one numpy pass.

        >>> from stream_winnow.learners import build_learner
        >>> learner = build_learner("perceptron")
        >>> learner.decide_many(np.array([[0.5, -1.0], [-0.1, -2.0], [2.0, 3.0]]), ["earn", "acq"])
        [('earn',), (), ('earn', 'acq')]
        """
        n = margins.shape[0]
        if margins.ndim != 2 or not margins.shape[1]:
            return [()] * n
        if self.mode == "one-of":
            return [(names[c],) for c in one_of(margins).tolist()]
        rows, columns = np.nonzero(margins > 0)
        counts = np.bincount(rows, minlength=n).tolist()
        chosen = [names[c] for c in columns.tolist()]
        out: list[tuple[str, ...]] = []
        at = 0
        for count in counts:
            out.append(tuple(chosen[at : at + count]) if count else ())
            at += count
        return out

    def predict_one(self, tokens: Sequence[str] | FeatureVector) -> Prediction:
        vector = tokens if isinstance(tokens, FeatureVector) else self.transform(tokens)
        margins = self.margins(vector)
        return Prediction(self.decide(margins), margins, self.store.version)

    def learn_one(self, tokens: Sequence[str] | FeatureVector, labels: Collection[str]) -> LearnOutcome:
        """Learn one document (a vector from ``transform``, or tokens) and count it into the frequencies
        (with idf: in the same step, so the model version moves for every document learned)."""
        vector = tokens if isinstance(tokens, FeatureVector) else self.transform(tokens)
        return self.learn_vector(vector, labels, self.counting(vector))

    def learn_vector(
        self, vector: FeatureVector, labels: Collection[str], counting: Sequence[Update] = ()
    ) -> LearnOutcome:
        """Learn one weighed document, applying ``counting`` with its updates (none: a training pass)."""
        self.store.ensure_categories(list(labels))
        updates, outcome = self.updates_for(vector, labels)
        if not updates and not counting:
            return outcome
        applied = self.store.apply([*updates, *counting]) and bool(updates)
        return LearnOutcome(outcome.promoted, outcome.demoted, applied)

    def label_vector(self, labels: Collection[str]) -> np.ndarray:
        """Bool per category column: is the category among ``labels``."""
        columns = self.store.ensure_categories(list(labels))
        truth = np.zeros(len(self.store.categories()), dtype=bool)
        truth[columns] = True
        return truth

    @staticmethod
    def bookkeeping(updated: Collection[str]) -> list[Update]:
        """The counter update recorded with every applied update: one per updated category, one in total."""
        return [CounterUpdate(UPDATES_COUNTER, {"*": 1.0, **{c: 1.0 for c in updated}})]
