"""Term weighting from the stream: frequencies counted as documents are learned, idf-weighted strengths."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.errors import ConfigError
from stream_winnow.evaluation.runs import prequential
from stream_winnow.learners import build_learner
from stream_winnow.learners.term_weights import DF_TABLE, DOCUMENTS_COUNTER, idf, weigh
from stream_winnow.models.training import TrainingConfig, fit
from stream_winnow.text.domain import DomainFeatures, fit_domain_model
from stream_winnow.text.features import FeatureConfig, Featurizer, feature_id

IDF = FeatureConfig(idf=True)


def test_idf_weighs_rare_terms_up_and_keeps_each_documents_total() -> None:
    batch = Featurizer(FeatureConfig(strength="count")).transform_many([["a", "b", "b"], ["b", "c"], []])
    unique, _ = batch.distinct_ids()
    df = np.array([{feature_id("a"): 1.0, feature_id("b"): 9.0, feature_id("c"): 0.0}[i] for i in unique.tolist()])
    weighed = weigh(batch, df, 10.0)
    totals = np.add.reduceat(weighed.strengths, batch.indptr[:2])
    assert totals.tolist() == pytest.approx([3.0, 2.0])  # the documents' lengths: 3 and 2 tokens
    strength = dict(zip(weighed.ids[:2].tolist(), weighed.strengths[:2].tolist(), strict=True))
    # "a" in 1 of 10 documents outweighs "b" in 9 of them, although "b" occurs twice here
    assert strength[feature_id("a")] > strength[feature_id("b")]
    assert idf(np.array([3.0]), 0.0).tolist() == [1.0]


def test_a_learner_counts_each_document_it_learns_once_and_weighs_by_the_documents_before() -> None:
    docs = synthetic_stream(200, seed=5)
    learner = build_learner("perceptron", mode="one-of", features=replace(FeatureConfig(), idf=True))
    first = learner.transform(docs[0].tokens)
    assert first.strengths.tolist() == Featurizer(FeatureConfig()).transform(docs[0].tokens).strengths.tolist()
    for doc in docs:
        learner.learn_one(doc.tokens, doc.labels[:1])
    df = Counter(token for doc in docs for token in set(doc.tokens))
    tokens = sorted(df)
    stored = learner.store.read(np.array([feature_id(t) for t in tokens]))[DF_TABLE][:, 0]
    assert stored.tolist() == [float(df[t]) for t in tokens]
    assert learner.store.counters(DOCUMENTS_COUNTER) == {"*": 200.0}


def test_training_counts_the_documents_once_whatever_the_passes() -> None:
    docs = synthetic_stream(150, seed=6)
    learner = build_learner("balanced-winnow", features=IDF)
    report = fit(learner, docs, TrainingConfig(passes=4))
    assert len(report.mistakes_per_pass) > 1
    assert learner.store.counters(DOCUMENTS_COUNTER) == {"*": 150.0}
    common = Counter(token for doc in docs for token in set(doc.tokens)).most_common(1)[0]
    assert learner.store.read(np.array([feature_id(common[0])]))[DF_TABLE][0, 0] == common[1]


def test_idf_is_for_the_mistake_driven_rules_on_words() -> None:
    with pytest.raises(ConfigError, match="idf weighs the strengths of the mistake-driven rules"):
        build_learner("multinomial-nb", features=FeatureConfig(strength="count", idf=True))
    domain = fit_domain_model([d.tokens for d in synthetic_stream(120, seed=2)], dimensions=8)
    learner = build_learner("perceptron")  # idf by default
    assert learner.features.idf
    learner.use_domain(DomainFeatures(domain, "both"))  # the domain model weighs the words
    doc = synthetic_stream(1, seed=3)[0]
    learner.learn_one(doc.tokens, doc.labels)
    assert learner.store.counters(DOCUMENTS_COUNTER) == {}


def test_growing_frequencies_do_not_unsettle_a_learned_model() -> None:
    """The same stream counted again doubles every count and keeps every df/N: idf and decisions hardly move."""
    docs = synthetic_stream(1_200, seed=7)
    train, test = docs[:800], docs[800:]
    learner = build_learner("balanced-winnow", features=IDF)
    assert prequential(learner, train).report.micro_f1 > 0.85
    before = [learner.predict_one(doc.tokens) for doc in test]
    learner.store.apply(learner.counting(learner.featurizer.transform_many([d.tokens for d in train])))
    assert learner.store.counters(DOCUMENTS_COUNTER) == {"*": 1_600.0}
    after = [learner.predict_one(doc.tokens) for doc in test]
    same = sum(a.categories == b.categories for a, b in zip(before, after, strict=True)) / len(test)
    assert same >= 0.99, same
    moved = max(float(np.abs(a.margins - b.margins).max()) for a, b in zip(before, after, strict=True))
    assert moved < 0.1, moved  # margins are in units of theta (1): a tenth at most
