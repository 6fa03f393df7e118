"""The learning rules, one per module, behind ``base.Learner``; ``LEARNERS`` maps CLI names to classes."""

from stream_winnow.learners.balanced_winnow import BalancedWinnow
from stream_winnow.learners.base import DECISION_MODES, DecisionMode, Learner, LearnOutcome, Prediction
from stream_winnow.learners.mistake_driven import DiscardReport, MistakeDriven
from stream_winnow.learners.naive_bayes import BernoulliNB, MultinomialNB, NaiveBayes
from stream_winnow.learners.perceptron import Perceptron
from stream_winnow.learners.positive_winnow import PositiveWinnow
from stream_winnow.learners.registry import LEARNERS, build_learner, describe, from_metadata

__all__ = [
    "DECISION_MODES",
    "LEARNERS",
    "BalancedWinnow",
    "BernoulliNB",
    "DecisionMode",
    "DiscardReport",
    "LearnOutcome",
    "Learner",
    "MistakeDriven",
    "MultinomialNB",
    "NaiveBayes",
    "Perceptron",
    "PositiveWinnow",
    "Prediction",
    "build_learner",
    "describe",
    "from_metadata",
]
