"""Positive Winnow: one positive weight per feature and category, on length-normalised strengths.

Dagan, Karov & Roth (1997, §3.1, §4.1): weights start at theta/d; a promotion
multiplies the active weights by alpha (> 1), a demotion by beta (< 1). With
only positive weights a long document would outscore a short one, so strengths
are normalised to sum to 1 (then d = 1 and a fresh model scores exactly theta).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stream_winnow.errors import ConfigError
from stream_winnow.learners.base import DecisionMode
from stream_winnow.learners.mistake_driven import MistakeDriven
from stream_winnow.stores.base import RowUpdate, TableSpec, WeightStore
from stream_winnow.text.features import FeatureConfig, FeatureVector


class PositiveWinnow(MistakeDriven):
    """Positive Winnow; refuses features without length normalisation."""

    name = "positive-winnow"

    def __init__(
        self,
        alpha: float = 1.5,
        beta: float = 0.5,
        *,
        theta: float = 1.0,
        theta_minus: float = 0.9,
        theta_plus: float = 1.1,
        mean_active_features: float | None = 1.0,
        mode: DecisionMode = "any-of",
        features: FeatureConfig | None = None,
        store: WeightStore | None = None,
    ) -> None:
        features = features or self.default_features()
        if not features.normalize:
            raise ConfigError("positive-winnow needs length-normalised strengths (FeatureConfig(normalize=True))")
        if not (alpha > 1 and 0 < beta < 1):
            raise ConfigError(f"positive-winnow needs alpha > 1 and 0 < beta < 1; got {alpha}, {beta}")
        self.alpha = alpha
        self.beta = beta
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
        return FeatureConfig(normalize=True)

    def table_specs(self) -> list[TableSpec]:
        return [TableSpec("weight", 1.0), *self.feature_specs()]

    def linear_weights(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        return values["weight"]

    def rule_updates(self, vector: FeatureVector, promote: np.ndarray, demote: np.ndarray) -> list[RowUpdate]:
        columns = np.concatenate([promote, demote])
        factors = np.concatenate([np.full(len(promote), self.alpha), np.full(len(demote), self.beta)])
        return [RowUpdate("weight", vector.ids, columns, factors)]

    def discardable(self, values: dict[str, np.ndarray]) -> np.ndarray:
        return self.within_one_step(values["weight"], 1.0, self.alpha, self.beta)
