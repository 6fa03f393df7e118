"""fit: early stop, the pass cap, discarding (§4.4), pass averaging; the registry of learners."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import ConfigError
from stream_winnow.evaluation.runs import prequential
from stream_winnow.learners import LEARNERS, Learner, MistakeDriven, build_learner, describe, from_metadata
from stream_winnow.learners.mistake_driven import KEEP_TABLE
from stream_winnow.learners.registry import hyperparameters
from stream_winnow.learners.term_weights import DF_TABLE
from stream_winnow.models.training import TrainingConfig, fit
from stream_winnow.text.features import FeatureConfig

LINEAR = ("balanced-winnow", "positive-winnow", "perceptron")


@pytest.fixture
def learner_factory() -> Callable[..., Learner]:
    def make(name: str, **overrides: Any) -> Learner:
        return build_learner(name, **overrides)

    return make


def separable(n: int = 60) -> list[LabelledDocument]:
    """Each category has its own tokens; every document carries one category's tokens plus a shared word."""
    docs = []
    for i in range(n):
        c = "abc"[i % 3]
        docs.append(LabelledDocument(str(i), (f"{c}1", f"{c}2", "the", f"{c}{3 + i % 4}"), (c,)))
    return docs


def contradictory() -> list[LabelledDocument]:
    """The same document labelled a and then b: no weights can be right on both."""
    return [LabelledDocument(str(i), ("same", "words"), ("a",) if i % 2 == 0 else ("b",)) for i in range(6)]


def noisy(n: int = 300, seed: int = 0) -> list[LabelledDocument]:
    """A few informative tokens per category, drowned in many rare noise tokens."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        labels = tuple(c for c in "abcd" if rng.random() < 0.3) or ("abcd"[i % 4],)
        tokens = [f"{c}{k}" for c in labels for k in rng.integers(0, 4, 3).tolist()]
        tokens += [f"noise{k}" for k in rng.integers(0, 5000, 25).tolist()]
        docs.append(LabelledDocument(str(i), tuple(tokens), labels))
    return docs


# -- passes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LINEAR)
@pytest.mark.parametrize("average", [False, True])
def test_fit_stops_early_after_a_pass_without_mistakes(
    name: str, average: bool, learner_factory: Callable[..., Learner]
) -> None:
    learner = learner_factory(name)
    seen: list[tuple[int, int]] = []
    report = fit(
        learner, separable(), TrainingConfig(passes=30, average=average), on_pass=lambda n, c: seen.append((n, c))
    )
    assert report.mistakes_per_pass[-1] == 0
    assert all(m > 0 for m in report.mistakes_per_pass[:-1])
    assert 1 < len(report.mistakes_per_pass) < 30
    assert seen == list(enumerate(report.mistakes_per_pass, start=1))
    # Learned: every training document is predicted right.
    for doc in separable():
        assert learner.predict_one(doc.tokens).categories == doc.labels


@pytest.mark.parametrize("name", LINEAR)
def test_passes_cap_the_training(name: str, learner_factory: Callable[..., Learner]) -> None:
    report = fit(learner_factory(name), contradictory(), TrainingConfig(passes=4, average=False))
    assert len(report.mistakes_per_pass) == 4
    assert all(m > 0 for m in report.mistakes_per_pass)


@pytest.mark.parametrize("name", ["multinomial-nb", "bernoulli-nb"])
def test_naive_bayes_makes_one_pass(name: str, learner_factory: Callable[..., Learner]) -> None:
    learner = learner_factory(name)
    report = fit(learner, separable(30), TrainingConfig(passes=10))
    assert len(report.mistakes_per_pass) == 1
    assert learner.store.counters("nb_documents")["*"] == 30


def test_passes_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="passes must be >= 1"):
        TrainingConfig(passes=0)


@pytest.mark.parametrize("name", LINEAR)
def test_averaged_weights_are_the_mean_over_passes(name: str) -> None:
    docs = noisy(120, seed=3)
    passes = 3
    per_pass = []
    for k in range(1, passes + 1):
        plain = build_learner(name)
        report = fit(plain, docs, TrainingConfig(passes=k, average=False))
        assert len(report.mistakes_per_pass) == k  # still learning after k passes
        per_pass.append(plain)
    averaged = build_learner(name)
    fit(averaged, docs, TrainingConfig(passes=passes, average=True))
    ids = np.unique(averaged.featurizer.transform_many([d.tokens for d in docs]).ids)
    got = averaged.store.read(ids)
    for table in got:
        if table == KEEP_TABLE:
            continue
        mean = np.mean([p.store.read(ids)[table] for p in per_pass], axis=0)
        np.testing.assert_allclose(got[table], mean, rtol=1e-12, err_msg=table)


# -- discarding ------------------------------------------------------------------------------------------------


def discarded_tokens(learner: MistakeDriven, docs: list[LabelledDocument]) -> tuple[list[str], list[str]]:
    vocabulary = sorted({t for d in docs for t in d.tokens})
    ids = np.array([learner.featurizer.token_id(t) for t in vocabulary])
    keep = learner.store.read(ids)[KEEP_TABLE][:, 0]
    return [t for t, k in zip(vocabulary, keep, strict=True) if k == 0], [
        t for t, k in zip(vocabulary, keep, strict=True) if k > 0
    ]


@pytest.mark.parametrize("name", LINEAR)
def test_discard_removes_a_sizeable_fraction_of_noise_features(
    name: str, learner_factory: Callable[..., Learner]
) -> None:
    docs = noisy()
    learner = learner_factory(name)
    assert isinstance(learner, MistakeDriven)
    report = fit(learner, docs, TrainingConfig(passes=5, discard_below_mistakes=10**9, average=False))
    assert report.discard is not None
    assert report.discard.examined > 1000
    assert report.discard.fraction > 0.3
    assert report.discard.discarded == round(report.discard.fraction * report.discard.examined)
    dropped, kept = discarded_tokens(learner, docs)
    assert len(dropped) == report.discard.discarded
    assert all(t.startswith("noise") for t in dropped) or len([t for t in dropped if not t.startswith("noise")]) < 5
    # Informative tokens survive.
    assert {f"{c}{k}" for c in "abcd" for k in range(4)} <= set(kept)


@pytest.mark.parametrize("name", LINEAR)
def test_a_discarded_feature_neither_scores_nor_learns(name: str, learner_factory: Callable[..., Learner]) -> None:
    docs = noisy(seed=1)
    learner = learner_factory(name)
    assert isinstance(learner, MistakeDriven)
    fit(learner, docs, TrainingConfig(passes=3, discard_below_mistakes=10**9, average=False))
    dropped, kept = discarded_tokens(learner, docs)
    gone, alive = dropped[0], "a0"
    assert alive in kept
    gone_id = np.array([learner.featurizer.token_id(gone)])

    # A document of discarded features only scores 0 in every category.
    only_gone = learner.transform([gone, dropped[1]])
    np.testing.assert_allclose(learner.margins(only_gone), -learner.theta)
    if not (learner.features.normalize or learner.features.idf):  # (normalised or idf-weighted strengths
        # share the document's total with every feature, discarded or not)
        np.testing.assert_allclose(
            learner.margins(learner.transform([alive, gone])), learner.margins(learner.transform([alive]))
        )

    before = {t: v.copy() for t, v in learner.store.read(gone_id).items()}
    alive_before = learner.store.read(np.array([learner.featurizer.token_id(alive)]))
    outcome = learner.learn_one([alive, gone], ["zz-new"])  # a new category: certainly a mistake
    assert outcome.mistake and outcome.applied
    after = learner.store.read(gone_id)
    width = before[KEEP_TABLE].shape[1]
    for table, values in before.items():
        if learner.store.tables[table].per_category:
            np.testing.assert_array_equal(after[table][:, : values.shape[1]], values)
            assert np.all(after[table][:, values.shape[1] :] == learner.store.tables[table].initial)
        elif table == DF_TABLE:  # a frequency counts the document, whatever the feature's weight
            np.testing.assert_array_equal(after[table], values + 1)
        else:
            assert after[table].shape[1] == width
            np.testing.assert_array_equal(after[table], values)
    alive_after = learner.store.read(np.array([learner.featurizer.token_id(alive)]))
    first = learner.table_specs()[0].name
    assert alive_after[first][0, -1] != learner.store.tables[first].initial  # the live feature did learn
    assert alive_before[first].shape[1] == alive_after[first].shape[1] - 1


def test_no_discard_without_the_setting() -> None:
    report = fit(build_learner("balanced-winnow"), noisy(100), TrainingConfig(passes=2))
    assert report.discard is None


def test_discard_waits_for_the_first_pass_below_the_limit() -> None:
    docs = noisy(200)
    plain = fit(build_learner("balanced-winnow"), docs, TrainingConfig(passes=6, average=False)).mistakes_per_pass
    assert plain[1] < plain[0]
    # Not below the limit after pass 1, below it after pass 2: discarding happens then, so passes 1-2 are unchanged.
    report = fit(
        build_learner("balanced-winnow"), docs, TrainingConfig(passes=6, discard_below_mistakes=plain[0], average=False)
    )
    assert report.mistakes_per_pass[:2] == plain[:2]
    assert report.discard is not None and report.discard.discarded > 0
    # A limit of 0 is never reached.
    assert (
        fit(build_learner("balanced-winnow"), docs, TrainingConfig(passes=3, discard_below_mistakes=0)).discard is None
    )


EMPTY_D = (
    "estimate_d (training.py) calls set_d(total strength / documents) without the floor fix_d uses "
    "(max(..., 1e-9)): a training set, or the first 100 documents of a prequential stream, made only of empty "
    "documents raises ConfigError('d must be > 0; got 0.0') instead of learning"
)


@pytest.mark.parametrize("name", ["balanced-winnow", "perceptron"])  # positive-winnow has d = 1 by default
def test_training_on_empty_documents_only(name: str) -> None:
    learner = build_learner(name)
    fit(learner, [LabelledDocument("1", (), ("a",)), LabelledDocument("2", (), ("b",))])
    assert learner.store.categories() == ("a", "b")


def test_prequential_stream_starting_with_empty_documents() -> None:
    stream = [LabelledDocument(str(i), (), ("a",)) for i in range(100)] + [LabelledDocument("x", ("w",), ("a",))]
    prequential(build_learner("perceptron"), stream)


# -- registry ----------------------------------------------------------------------------------------------


def test_build_learner_rejects_unknown_settings_listing_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as error:
        build_learner("perceptron", beta=0.5)
    assert str(error.value) == (
        "perceptron does not take 'beta'; it takes alpha, theta, theta_minus, theta_plus, mean_active_features"
    )
    with pytest.raises(ConfigError, match="multinomial-nb does not take 'alpha'; it takes smoothing"):
        build_learner("multinomial-nb", alpha=2.0)


def test_build_learner_rejects_unknown_names_listing_the_learners() -> None:
    with pytest.raises(ConfigError) as error:
        build_learner("nope")
    message = str(error.value)
    assert "unknown learner 'nope'" in message
    assert all(name in message for name in LEARNERS)


def test_build_learner_rejects_bad_modes() -> None:
    with pytest.raises(ConfigError, match="any-of, one-of"):
        build_learner("balanced-winnow", mode="many")


@pytest.mark.parametrize(
    ("name", "settings", "match"),
    [
        ("balanced-winnow", {"theta_minus": 1.2}, "theta_minus <= theta <= theta_plus"),
        ("positive-winnow", {"alpha": 0.9}, "alpha > 1"),
        ("perceptron", {"alpha": 0.0}, "alpha > 0"),
        ("multinomial-nb", {"smoothing": 0.0}, "smoothing must be > 0"),
        ("balanced-winnow", {"mean_active_features": -1.0}, "mean_active_features must be > 0"),
    ],
)
def test_bad_hyperparameter_values(name: str, settings: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_learner(name, **settings)


def test_positive_winnow_needs_normalised_features() -> None:
    with pytest.raises(ConfigError, match="normalize=True"):
        build_learner("positive-winnow", features=FeatureConfig(normalize=False))


def test_hyperparameters() -> None:
    assert hyperparameters("balanced-winnow") == (
        "alpha",
        "beta",
        "theta",
        "theta_minus",
        "theta_plus",
        "mean_active_features",
    )
    assert hyperparameters("bernoulli-nb") == ("smoothing",)


ROUND_TRIPS = [
    ("balanced-winnow", {"alpha": 1.3, "beta": 0.7, "theta": 1.0, "theta_minus": 0.8}, FeatureConfig(bigrams=True)),
    ("positive-winnow", {"alpha": 2.0, "mean_active_features": 1.0}, FeatureConfig(strength="count", normalize=True)),
    ("perceptron", {"alpha": 0.5, "theta_plus": 1.5, "mean_active_features": 12.5}, FeatureConfig(strength="binary")),
    ("multinomial-nb", {"smoothing": 0.5}, FeatureConfig(strength="count")),
    ("bernoulli-nb", {}, None),
]


@pytest.mark.parametrize(("name", "settings", "features"), ROUND_TRIPS)
@pytest.mark.parametrize("mode", ["any-of", "one-of"])
def test_describe_from_metadata_round_trip(
    name: str, settings: dict[str, float], features: FeatureConfig | None, mode: str
) -> None:
    learner = build_learner(name, mode=mode, features=features, **settings)
    metadata = describe(learner)
    assert all(isinstance(v, str) for v in metadata.values())
    assert metadata["learner"] == name and metadata["mode"] == mode
    json.loads(metadata["settings"])
    rebuilt = from_metadata(metadata)
    assert type(rebuilt) is type(learner)
    assert rebuilt.params() == learner.params()
    assert describe(rebuilt) == metadata
    # Sharing the store, the rebuilt learner predicts exactly as the original.
    for i in range(20):
        learner.learn_one([f"t{i % 5}", f"u{i % 3}"], ["a" if i % 2 else "b"])
    twin = from_metadata(describe(learner), store=learner.store)
    for tokens in (["t1", "u2"], ["t3"], ["zzz"]):
        a, b = learner.predict_one(tokens), twin.predict_one(tokens)
        assert a.categories == b.categories
        np.testing.assert_array_equal(a.margins, b.margins)


def test_from_metadata_picks_up_d_from_the_model() -> None:
    learner = build_learner("balanced-winnow")
    fit(learner, separable(), TrainingConfig(passes=2))
    assert isinstance(learner, MistakeDriven) and learner.d is not None
    twin = from_metadata(describe(learner), store=learner.store)
    assert isinstance(twin, MistakeDriven) and twin.d == learner.d


def test_from_metadata_without_a_learner() -> None:
    with pytest.raises(ConfigError, match="no learner recorded"):
        from_metadata({"mode": "any-of"})
