"""The two worked examples the docs lean on, checked through the real code paths.

1. Balanced Winnow (tutorial; Dagan, Karov & Roth 1997 §4.3): a document with ``information`` x2
   and ``retrieval`` x6, effective weights 0.5 and 0.1, theta = 1. Scores: binary 0.6, count 1.6,
   sqrt 0.5*sqrt(2) + 0.1*sqrt(6) ~= 0.95; only count strength predicts the category. (The tutorial
   printed 1.1 for count, an arithmetic slip: 0.5*2 + 0.1*6 = 1.6.)
2. The IR book's China example (Manning, Raghavan & Schuetze, Table 13.1 / Examples 13.1, 13.2):
   multinomial P(China|d5) ~ 0.0003 vs 0.0001 -> China; Bernoulli ~ 0.005 vs 0.022 -> not China.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stream_winnow.learners import BalancedWinnow, BernoulliNB, MultinomialNB
from stream_winnow.stores.base import RowUpdate
from stream_winnow.text.features import FeatureConfig

# -- Balanced Winnow --------------------------------------------------------------------------------------

TUTORIAL_TOKENS = ["retrieval", "information", "retrieval", "retrieval", "information", "retrieval", "retrieval",
                   "retrieval"]  # fmt: skip
EXPECTED_SCORE = {"binary": 0.6, "count": 1.6, "sqrt": 0.5 * math.sqrt(2) + 0.1 * math.sqrt(6)}


def tutorial_learner(strength: str, d: float = 1.0) -> BalancedWinnow:
    """A model whose effective weights unit*(w+ - w-) are 0.5 (information) and 0.1 (retrieval).

    ``unit`` is theta/d; stored weights are set straight in the store so that the difference times the
    unit gives the tutorial's effective weights whatever d is.
    """
    learner = BalancedWinnow(features=FeatureConfig(strength=strength), mean_active_features=d)  # type: ignore[arg-type]
    learner.store.ensure_categories(["ir"])
    ids = np.array([learner.featurizer.token_id("information"), learner.featurizer.token_id("retrieval")])
    unit = learner.theta / d
    positive = np.array([[0.5 / unit + 0.25], [0.1 / unit + 0.25]])
    negative = np.full((2, 1), 0.25)
    column, zero = np.array([0]), np.zeros(1)
    learner.store.apply(
        [RowUpdate("positive", ids, column, zero, positive), RowUpdate("negative", ids, column, zero, negative)]
    )
    return learner


def test_the_document_has_the_tutorial_counts() -> None:
    assert TUTORIAL_TOKENS.count("information") == 2 and TUTORIAL_TOKENS.count("retrieval") == 6


@pytest.mark.parametrize("strength", ["binary", "count", "sqrt"])
@pytest.mark.parametrize("d", [1.0, 4.0])
def test_balanced_winnow_tutorial_scores(strength: str, d: float) -> None:
    learner = tutorial_learner(strength, d)
    vector = learner.transform(TUTORIAL_TOKENS)
    # Strengths come from the real token counts through the Featurizer.
    by_token = dict(zip(vector.ids.tolist(), vector.strengths.tolist(), strict=True))
    expected_strength = {"binary": (1, 1), "count": (2, 6), "sqrt": (math.sqrt(2), math.sqrt(6))}[strength]
    info, retr = learner.featurizer.token_id("information"), learner.featurizer.token_id("retrieval")
    assert (by_token[info], by_token[retr]) == pytest.approx(expected_strength)

    score = float(learner.margins(vector)[0]) + learner.theta
    assert score == pytest.approx(EXPECTED_SCORE[strength], abs=1e-9)
    predicted = learner.predict_one(TUTORIAL_TOKENS).categories
    assert predicted == (("ir",) if strength == "count" else ())


def test_tutorial_rounded_values() -> None:
    rounded = {s: round(float(tutorial_learner(s).margins(tutorial_learner(s).transform(TUTORIAL_TOKENS))[0]) + 1, 2)
               for s in ("binary", "count", "sqrt")}  # fmt: skip
    assert rounded == {"binary": 0.6, "count": 1.6, "sqrt": 0.95}
    assert rounded["count"] != 1.1  # the tutorial's slip


def test_tutorial_scores_directly_as_the_doctest_does() -> None:
    values = {"positive": np.array([[0.5], [0.1]]), "negative": np.zeros((2, 1))}
    rule = BalancedWinnow()
    scores = [float(rule.scores(values, np.array(s, dtype=float), 1.0)[0]) for s in ([1, 1], [2, 6], [2**0.5, 6**0.5])]
    assert scores == pytest.approx([0.6, 1.6, 0.9520], abs=1e-4)
    # Only count clears theta = 1.
    assert [s > rule.theta for s in scores] == [False, True, False]


# -- Naive Bayes: the IR book's China example -------------------------------------------------------------

TRAIN = [
    ("Chinese Beijing Chinese", ["China"]),
    ("Chinese Chinese Shanghai", ["China"]),
    ("Chinese Macao", ["China"]),
    ("Tokyo Japan Chinese", ["Japan"]),
]
D5 = "Chinese Chinese Chinese Tokyo Japan".split()


def china_learner(cls: type[MultinomialNB] | type[BernoulliNB]) -> MultinomialNB | BernoulliNB:
    learner = cls()
    for text, labels in TRAIN:
        learner.learn_one(text.split(), labels)
    return learner


def test_multinomial_china_example() -> None:
    learner = china_learner(MultinomialNB)
    assert learner.store.n_features() == 6  # |V| = 6, as in the book
    c, not_c = learner.joint_log_likelihoods(learner.transform(D5))
    china = learner.store.categories().index("China")
    # Example 13.1: 3/4 (3/7)^3 (1/14)(1/14) ~ 0.0003 and 1/4 (2/9)^3 (2/9)(2/9) ~ 0.0001.
    assert math.exp(c[china]) == pytest.approx(3 / 4 * (3 / 7) ** 3 * (1 / 14) ** 2, rel=1e-9)
    assert math.exp(not_c[china]) == pytest.approx(1 / 4 * (2 / 9) ** 3 * (2 / 9) ** 2, rel=1e-9)
    assert round(math.exp(c[china]), 4) == 0.0003 and round(math.exp(not_c[china]), 4) == 0.0001
    assert "China" in learner.predict_one(D5).categories


def test_bernoulli_china_example() -> None:
    learner = china_learner(BernoulliNB)
    c, not_c = learner.joint_log_likelihoods(learner.transform(D5))
    china = learner.store.categories().index("China")
    # Example 13.2: 3/4 * 4/5 * 1/5 * 1/5 * (1-2/5)^3 ~ 0.005 and 1/4 * (2/3)^3 * (1-1/3)^3 ~ 0.022.
    assert math.exp(c[china]) == pytest.approx(3 / 4 * 4 / 5 * 1 / 5 * 1 / 5 * (3 / 5) ** 3, rel=1e-9)
    assert math.exp(not_c[china]) == pytest.approx(1 / 4 * (2 / 3) ** 3 * (2 / 3) ** 3, rel=1e-9)
    assert round(math.exp(c[china]), 3) == 0.005 and round(math.exp(not_c[china]), 3) == 0.022
    assert "China" not in learner.predict_one(D5).categories


@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB])
def test_china_margin_is_the_log_odds(cls: type[MultinomialNB] | type[BernoulliNB]) -> None:
    learner = china_learner(cls)
    vector = learner.transform(D5)
    c, not_c = learner.joint_log_likelihoods(vector)
    np.testing.assert_allclose(learner.margins(vector), c - not_c)
