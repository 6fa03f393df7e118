"""Building a learner from its name and settings (CLI flags, model metadata in Redis)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from stream_winnow.errors import ConfigError, DataError
from stream_winnow.learners.balanced_winnow import BalancedWinnow
from stream_winnow.learners.base import Learner
from stream_winnow.learners.naive_bayes import BernoulliNB, MultinomialNB
from stream_winnow.learners.perceptron import Perceptron
from stream_winnow.learners.positive_winnow import PositiveWinnow
from stream_winnow.stores.base import WeightStore
from stream_winnow.text.domain import DomainFeatures, DomainModel
from stream_winnow.text.features import FeatureConfig

LEARNERS: dict[str, type[Learner]] = {
    cls.name: cls for cls in (BalancedWinnow, PositiveWinnow, Perceptron, MultinomialNB, BernoulliNB)
}


def hyperparameters(name: str) -> tuple[str, ...]:
    """The settings ``name`` accepts besides mode and features."""
    cls = _learner_class(name)
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "store", "mode", "features"))


def _learner_class(name: str) -> type[Learner]:
    try:
        return LEARNERS[name]
    except KeyError:
        raise ConfigError(f"unknown learner {name!r}; choose one of {', '.join(LEARNERS)}") from None


def build_learner(
    name: str,
    *,
    mode: str = "any-of",
    features: FeatureConfig | None = None,
    store: WeightStore | None = None,
    **settings: Any,
) -> Learner:
    """A learner by CLI name; settings it does not take are refused with the list of those it does.

    >>> build_learner("balanced-winnow", alpha=1.3).alpha
    1.3
    >>> build_learner("perceptron", beta=0.5)
    Traceback (most recent call last):
    ...
    stream_winnow.errors.ConfigError: perceptron does not take 'beta'; it takes alpha, theta, theta_minus, theta_plus, mean_active_features
    """
    cls = _learner_class(name)
    allowed = hyperparameters(name)
    for key in settings:
        if key not in allowed:
            raise ConfigError(f"{name} does not take {key!r}; it takes {', '.join(allowed)}")
    kwargs: dict[str, Any] = dict(settings, mode=mode, store=store)
    if features is not None:
        kwargs["features"] = features
    return cls(**kwargs)


def describe(learner: Learner) -> dict[str, str]:
    """The learner's name and settings as model metadata (strings, JSON-encoded values)."""
    params = learner.params()
    features = params.pop("features")
    domain = learner.domain
    return {
        "learner": learner.name,
        "mode": str(params.pop("mode")),
        "strength": features.strength,
        "normalize": json.dumps(features.normalize),
        "bigrams": json.dumps(features.bigrams),
        "idf": json.dumps(features.idf),
        "settings": json.dumps({k: v for k, v in params.items() if v is not None}, sort_keys=True),
        "feature_set": "words" if domain is None else domain.feature_set,
        **({} if domain is None else {"domain_version": domain.model.version}),
    }


def without_domain(metadata: Mapping[str, str]) -> dict[str, str]:
    """``metadata`` of the same rule seeing words only: for a scratch copy of a learner (on a store of its own)
    that is then given the served learner's featurizer, so it needs no domain model of its own."""
    return {k: v for k, v in metadata.items() if k not in ("feature_set", "domain_version")}


def from_metadata(metadata: Mapping[str, str], store: WeightStore | None = None) -> Learner:
    """Rebuild the learner ``describe`` recorded (how a worker learns which model it serves)."""
    if "learner" not in metadata:
        raise ConfigError("the model has no learner recorded; create it with `stream-winnow train` or a worker flag")
    features = FeatureConfig(
        strength=metadata.get("strength", "sqrt"),  # type: ignore[arg-type]
        normalize=json.loads(metadata.get("normalize", "false")),
        bigrams=json.loads(metadata.get("bigrams", "false")),
        idf=json.loads(metadata.get("idf", "false")),
    )
    settings = json.loads(metadata.get("settings", "{}"))
    learner = build_learner(
        metadata["learner"], mode=metadata.get("mode", "any-of"), features=features, store=store, **settings
    )
    feature_set = metadata.get("feature_set", "words")
    if feature_set != "words":
        learner.use_domain(DomainFeatures(_domain_model_of(learner.store, metadata), feature_set))  # type: ignore[arg-type]
    return learner


def _domain_model_of(store: WeightStore, metadata: Mapping[str, str]) -> DomainModel:
    """The domain model ``store`` keeps, checked against the version its metadata records."""
    data = store.domain_model()
    if data is None:
        raise DataError("the model learns with domain features but its domain model is missing from the store")
    model = DomainModel.from_bytes(data, "the model's domain model")
    if model.version != metadata.get("domain_version"):
        raise DataError(
            f"the model's domain model is version {model.version}; its weights were learned with "
            f"{metadata.get('domain_version')}"
        )
    return model
