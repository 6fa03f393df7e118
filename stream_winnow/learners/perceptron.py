"""Perceptron: additive updates, w += alpha * s on promotion and w -= alpha * s on demotion.

Weights start at 0 and are kept in units of theta/d like the Winnow rules', so
``alpha`` = 1 moves a weight by one initial Winnow weight (theta/d) per unit of
strength. Same thick threshold and active-features-only updates as the Winnows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stream_winnow.errors import ConfigError
from stream_winnow.learners.base import DecisionMode
from stream_winnow.learners.mistake_driven import MistakeDriven
from stream_winnow.learners.term_weights import DF_TABLE, DOCUMENTS_COUNTER, idf
from stream_winnow.stores.base import Bounds, RowUpdate, TableSpec, WeightStore
from stream_winnow.text.features import FeatureConfig, FeatureVector


class Perceptron(MistakeDriven):
    """Rosenblatt's Perceptron with a fixed threshold theta, one per category."""

    name = "perceptron"

    def __init__(
        self,
        alpha: float = 1.0,
        *,
        theta: float = 1.0,
        theta_minus: float = 0.9,
        theta_plus: float = 1.1,
        mean_active_features: float | None = None,
        mode: DecisionMode = "any-of",
        features: FeatureConfig | None = None,
        store: WeightStore | None = None,
    ) -> None:
        if alpha <= 0:
            raise ConfigError(f"perceptron needs alpha > 0; got {alpha}")
        self.alpha = alpha
        super().__init__(
            theta=theta,
            theta_minus=theta_minus,
            theta_plus=theta_plus,
            mean_active_features=mean_active_features,
            mode=mode,
            features=features,
            store=store,
        )

    @classmethod
    def default_features(cls) -> FeatureConfig:
        # idf-weighted sqrt strengths: R52 one-of 0.9342 -> 0.9408, ModApte 90 any-of 0.8395 -> 0.8476, and
        # in one prequential pass over ModApte 0.7676 -> 0.8036 micro-F1 (benchmarks.learning, evaluate)
        return FeatureConfig(idf=True)

    def table_specs(self) -> list[TableSpec]:
        return [TableSpec("weight", 0.0, bounds=Bounds(-1e30, 1e30), combine="add"), *self.feature_specs()]

    def linear_weights(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        return values["weight"]

    def rule_updates(self, vector: FeatureVector, promote: np.ndarray, demote: np.ndarray) -> list[RowUpdate]:
        columns = np.concatenate([promote, demote])
        signs = np.concatenate([np.ones(len(promote)), -np.ones(len(demote))])
        return [RowUpdate("weight", vector.ids, columns, add=self.alpha * np.outer(vector.strengths, signs))]

    def discardable(self, values: dict[str, np.ndarray]) -> np.ndarray:
        # One step moves a weight by alpha * s; with strengths near 1 that is about alpha. With idf a
        # feature's strength in a document is at most its idf (a document keeps its total, and idf >= 1).
        step: float | np.ndarray = self.alpha
        if self.features.idf:
            documents = self.store.counters(DOCUMENTS_COUNTER).get("*", 0.0)
            step = self.alpha * idf(values[DF_TABLE][:, :1], documents)
        return np.all(np.abs(values["weight"]) <= step * (1 + 1e-6), axis=1)
