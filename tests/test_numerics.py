"""Extreme runs: 100,000 promotions (or demotions) of one weight neither overflow nor underflow.

Unclipped, 1.5**1750 overflows float64 and 0.5**1075 underflows to 0; ``Bounds`` clips every stored
value into [1e-30, 1e30] (Winnow) or [-1e30, 1e30] (Perceptron), and the decision stays right.

To force an update on every document, the thick range is opened wide: with ``theta_plus = 1e300``
a positive example is always "inside" the range and promoted; with ``theta_minus = -1e300`` a
negative one is always demoted. The 100,000-document runs use the compiled loop (``fit`` on a
``MemoryStore``); the per-document Python path is driven with ``learn_one`` for 2,000 updates,
which is already past both float64 limits above.
"""

from __future__ import annotations

import numpy as np
import pytest

from stream_winnow.documents import LabelledDocument
from stream_winnow.learners import MistakeDriven, build_learner
from stream_winnow.models.training import TrainingConfig, fit

LINEAR = ("balanced-winnow", "positive-winnow", "perceptron")
N = 100_000
PYTHON_N = 2_000
WIDE_OPEN = 1e300


def one_feature_learner(name: str, **settings: float) -> MistakeDriven:
    learner = build_learner(name, mean_active_features=1.0, **settings)
    assert isinstance(learner, MistakeDriven)
    return learner


def assert_within_bounds(learner: MistakeDriven) -> None:
    for _, values in learner.store.iter_rows():
        for table, array in values.items():
            bounds = learner.store.tables[table].bounds
            assert np.all(np.isfinite(array)), table
            assert np.all((array >= bounds.low) & (array <= bounds.high)), table


def weights_of(learner: MistakeDriven, token: str, category: str) -> dict[str, float]:
    column = learner.store.categories().index(category)
    values = learner.store.read(np.array([learner.featurizer.token_id(token)]))
    return {table: float(v[0, column]) for table, v in values.items() if learner.store.tables[table].per_category}


def expected_after_promotions(name: str, n: int) -> dict[str, float]:
    return {
        "balanced-winnow": {"positive": 1e30, "negative": 1e-30},
        "positive-winnow": {"weight": 1e30},
        "perceptron": {"weight": float(n)},  # alpha = 1, strength 1: n steps of 1, exact in float64
    }[name]


def expected_after_demotions(name: str, n: int) -> dict[str, float]:
    return {
        "balanced-winnow": {"positive": 1e-30, "negative": 1e30},
        "positive-winnow": {"weight": 1e-30},
        "perceptron": {"weight": -float(n)},
    }[name]


@pytest.mark.parametrize("name", LINEAR)
def test_100k_promotions_compiled(name: str) -> None:
    learner = one_feature_learner(name, theta_plus=WIDE_OPEN)
    doc = LabelledDocument("spam", ("spam",), ("a",))
    report = fit(learner, [doc] * N, TrainingConfig(passes=1))
    assert report.mistakes_per_pass == (N,)
    assert learner.store.counters("updates") == {"*": float(N), "a": float(N)}
    assert weights_of(learner, "spam", "a") == expected_after_promotions(name, N)
    assert_within_bounds(learner)
    prediction = learner.predict_one(["spam"])
    assert np.all(np.isfinite(prediction.margins))
    assert prediction.categories == ("a",)


@pytest.mark.parametrize("name", LINEAR)
def test_100k_demotions_compiled(name: str) -> None:
    learner = one_feature_learner(name, theta_minus=-WIDE_OPEN)
    learner.store.ensure_categories(["a"])  # the category to demote exists before the run
    doc = LabelledDocument("ham", ("spam",), ("b",))
    report = fit(learner, [doc] * N, TrainingConfig(passes=1))
    assert report.mistakes_per_pass == (N,)
    assert learner.store.counters("updates")["a"] == float(N)
    assert learner.store.counters("updates")["b"] < 5  # promoted only until it cleared theta_plus
    assert weights_of(learner, "spam", "a") == expected_after_demotions(name, N)
    assert_within_bounds(learner)
    prediction = learner.predict_one(["spam"])
    assert np.all(np.isfinite(prediction.margins))
    assert prediction.categories == ("b",)


@pytest.mark.parametrize("name", LINEAR)
def test_many_promotions_and_demotions_python_path(name: str) -> None:
    promoted = one_feature_learner(name, theta_plus=WIDE_OPEN)
    demoted = one_feature_learner(name, theta_minus=-WIDE_OPEN)
    demoted.store.ensure_categories(["a"])
    for _ in range(PYTHON_N):
        assert promoted.learn_one(["spam"], ["a"]).promoted == ("a",)
        assert "a" in demoted.learn_one(["spam"], ["b"]).demoted
    assert weights_of(promoted, "spam", "a") == expected_after_promotions(name, PYTHON_N)
    assert weights_of(demoted, "spam", "a") == expected_after_demotions(name, PYTHON_N)
    for learner, right in ((promoted, ("a",)), (demoted, ("b",))):
        assert_within_bounds(learner)
        prediction = learner.predict_one(["spam"])
        assert np.all(np.isfinite(prediction.margins))
        assert prediction.categories == right


@pytest.mark.parametrize("name", ["balanced-winnow", "positive-winnow"])
def test_a_saturated_weight_recovers_after_demotions(name: str) -> None:
    """Clipping keeps a saturated weight finite, so demotions bring it back in about as many steps as it took up."""
    learner = one_feature_learner(name, theta_plus=WIDE_OPEN)
    fit(learner, [LabelledDocument("x", ("spam",), ("a",))] * N, TrainingConfig(passes=1))
    steps = 0
    while "a" in learner.predict_one(["spam"]).categories:
        learner.learn_one(["spam"], ["b"])
        steps += 1
        assert steps < 1_000
    assert steps > 10  # it took more than a few steps: the weight was saturated, not lost
    assert_within_bounds(learner)


def test_the_strongest_document_does_not_overflow_the_score() -> None:
    """A saturated weight times a large strength and many categories still gives a finite margin."""
    learner = one_feature_learner("perceptron", theta_plus=WIDE_OPEN)
    assert learner.features.strength == "sqrt"
    fit(learner, [LabelledDocument("x", ("spam",), ("a",))] * 1_000, TrainingConfig(passes=1))
    prediction = learner.predict_one(["spam"] * 10_000)  # strength sqrt(10_000) = 100
    assert np.isfinite(prediction.margins).all()
    assert prediction.margins[0] == pytest.approx(100 * 1_000 - 1)
