"""Domain models: the fit, the mapping, the features the learners see, and how a model keeps its domain model."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stream_winnow.datasets import write_labelled_jsonl
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import ConfigError, DataError
from stream_winnow.learners import build_learner
from stream_winnow.learners.registry import describe, from_metadata
from stream_winnow.models.snapshot import read_snapshot, restore_snapshot, take_snapshot, write_snapshot
from stream_winnow.stores.memory import MemoryStore
from stream_winnow.text.domain import DomainFeatures, DomainModel, fit_domain_model
from stream_winnow.text.features import FeatureConfig, Featurizer, feature_id
from stream_winnow.wire.fast_documents import parse_documents
from workers.cli import main

TOPICS = {
    "oil": ["oil", "crude", "barrel", "opec", "refinery", "pipeline"],
    "grain": ["wheat", "grain", "corn", "harvest", "tonnes", "crop"],
    "money": ["bank", "rate", "interest", "dollar", "currency", "fed"],
}


def corpus(n: int = 300, seed: int = 0) -> list[LabelledDocument]:
    """Documents of 4 words of their topic and 4 shared words; a word never sits beside another topic's."""
    rng = np.random.default_rng(seed)
    common = [f"w{i}" for i in range(20)]
    docs = []
    for i in range(n):
        topic = list(TOPICS)[i % len(TOPICS)]
        tokens = [*rng.choice(TOPICS[topic], size=4), *rng.choice(common, size=4)]
        docs.append(LabelledDocument(str(i), tuple(str(t) for t in tokens), (topic,)))
    return docs


@pytest.fixture(scope="module")
def model() -> DomainModel:
    return fit_domain_model([d.tokens for d in corpus()], dimensions=5, seed=0)


def test_the_domain_matrix_has_unit_rows_and_keeps_words_of_two_documents_or_more(model: DomainModel) -> None:
    assert model.matrix.shape == (len(model.term_ids), 5) and model.matrix.flags.c_contiguous  # rows read whole
    np.testing.assert_allclose(np.linalg.norm(model.matrix, axis=1), 1.0, rtol=1e-5)
    assert len(model.term_ids) == 18 + 20  # every topic word and shared word; none once only
    assert np.all(np.diff(model.term_ids) > 0)
    once = fit_domain_model([*(d.tokens for d in corpus()), ("hapax",)], dimensions=5)
    assert feature_id("hapax") not in set(once.term_ids.tolist())


def test_words_of_one_topic_share_domains_that_other_topics_do_not(model: DomainModel) -> None:
    words = ["barrel", "opec", "corn", "dollar"]
    vectors = model.vectors_of([[feature_id(w)] for w in words], [[1.0]] * len(words))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)  # summed in float32
    same, other = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert same > 0.7 and abs(other) < 0.2, (same, other)


def test_a_document_without_a_known_word_has_a_zero_domain_vector(model: DomainModel) -> None:
    vectors = model.vectors_of([[feature_id("unseen")], []], [[3.0], []])
    assert not vectors.any()


def test_too_many_dimensions_are_refused_with_the_counts() -> None:
    with pytest.raises(ConfigError, match="need more than 40 documents and terms"):
        fit_domain_model([d.tokens for d in corpus(30)], dimensions=40)


def test_both_keeps_each_documents_words_then_adds_one_positive_feature_per_domain(model: DomainModel) -> None:
    featurizer = Featurizer(FeatureConfig(normalize=True))
    token_lists = [d.tokens for d in corpus(6)] + [("unseen",)]
    words = featurizer.transform_many(token_lists)
    both = Featurizer(FeatureConfig(normalize=True), domain=DomainFeatures(model, "both")).transform_many(token_lists)
    positive, negative = model.feature_ids()
    vectors = model.vectors_of([w.ids for w in words.vectors()], [np.full(len(w), 1.0) for w in words.vectors()])
    for i in range(len(token_lists)):
        w, b = words.vector(i), both.vector(i)
        np.testing.assert_array_equal(b.ids[: len(w)], w.ids)
        np.testing.assert_array_equal(b.strengths[: len(w)], w.strengths)
        domain_ids, domain_strengths = b.ids[len(w):], b.strengths[len(w):]
        assert np.all(domain_strengths > 0)
        signed = np.zeros(model.dimensions)
        for fid, s in zip(domain_ids, domain_strengths, strict=True):
            j = int(np.flatnonzero((positive == fid) | (negative == fid))[0])
            signed[j] = s if positive[j] == fid else -s
        # counts, not strengths, feed the mapping; these documents have no repeated word but some do
        if len(set(token_lists[i])) == len(token_lists[i]):
            np.testing.assert_allclose(signed, vectors[i], atol=1e-6)
    assert len(both.vector(len(token_lists) - 1)) == 1  # the unseen word, no domain


def test_domain_alone_drops_the_words_and_every_path_gives_the_same_features(model: DomainModel) -> None:
    token_lists = [d.tokens for d in corpus(9)]
    featurizer = Featurizer(domain=DomainFeatures(model, "domain"))
    many = featurizer.transform_many(token_lists)
    words = set(Featurizer().transform_many(token_lists).ids.tolist())
    assert not words & set(many.ids.tolist())
    one = featurizer.transform(token_lists[4])
    np.testing.assert_array_equal(one.ids, many.vector(4).ids)
    raws = [LabelledDocument(str(i), t, ()).tokens for i, t in enumerate(token_lists)]
    import msgpack

    hashed = Featurizer(domain=DomainFeatures(model, "domain")).transform_hashed(
        parse_documents([msgpack.packb({"id": str(i), "tokens": list(t)}) for i, t in enumerate(raws)])
    )
    np.testing.assert_array_equal(hashed.ids, many.ids)
    np.testing.assert_allclose(hashed.strengths, many.strengths)


def test_a_domain_model_file_round_trips_and_a_foreign_file_is_refused(model: DomainModel, tmp_path: Path) -> None:
    model.save(tmp_path / "d.npz")
    loaded = DomainModel.load(tmp_path / "d.npz")
    assert loaded.version == model.version and len(model.version) == 16
    np.testing.assert_array_equal(loaded.matrix, model.matrix)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="bad.npz is not a domain model"):
        DomainModel.load(tmp_path / "bad.npz")
    buffer = io.BytesIO()
    np.savez(buffer, format=np.array(1), term_ids=np.array([object()], dtype=object))
    with pytest.raises(DataError, match="not a domain model"):
        DomainModel.from_bytes(buffer.getvalue())  # object arrays would need pickle: never loaded


def test_the_model_keeps_its_domain_model_through_metadata_and_snapshots(model: DomainModel, tmp_path: Path) -> None:
    learner = build_learner("balanced-winnow")
    learner.use_domain(DomainFeatures(model, "both"))
    for doc in corpus(60):
        learner.learn_one(doc.tokens, doc.labels)
    learner.store.set_metadata(describe(learner))
    assert learner.store.metadata()["domain_version"] == model.version
    probe = ("barrel", "w3")
    for name in ("s.npz", "s.msgpack"):
        write_snapshot(take_snapshot(learner.store), tmp_path / name)
        store = MemoryStore(learner.table_specs())
        restore_snapshot(read_snapshot(tmp_path / name), store)
        again = from_metadata(store.metadata(), store)
        assert again.domain is not None and again.domain.model.version == model.version
        np.testing.assert_allclose(again.predict_one(probe).margins, learner.predict_one(probe).margins)


def test_a_model_with_weights_cannot_change_its_domain_model(model: DomainModel) -> None:
    learner = build_learner("perceptron")
    learner.learn_one(["oil", "crude"], ["oil"])
    with pytest.raises(ConfigError, match="already holds weights learned without a domain model"):
        learner.use_domain(DomainFeatures(model, "both"))
    other = fit_domain_model([d.tokens for d in corpus(seed=1)], dimensions=4)
    fresh = build_learner("perceptron")
    fresh.use_domain(DomainFeatures(model, "domain"))
    fresh.learn_one(["oil", "crude"], ["oil"])
    with pytest.raises(ConfigError, match=f"with domain model {model.version}"):
        fresh.use_domain(DomainFeatures(other, "domain"))


def test_domain_features_teach_a_learner_from_few_labels() -> None:
    # Few labelled documents, each with 2 of its topic's 6 words: the rest of the topic is learned from the
    # unlabelled ones only, through the domains.
    docs = corpus(600)
    fitted = fit_domain_model([d.tokens for d in docs], dimensions=3)
    train = [LabelledDocument(d.id, d.tokens[:2] + d.tokens[4:], d.labels) for d in docs[:9]]
    test = docs[300:]
    scores = {}
    for feature_set in ("words", "domain"):
        learner = build_learner("perceptron")
        if feature_set == "domain":
            learner.use_domain(DomainFeatures(fitted, "domain"))
        for _ in range(5):
            for doc in train:
                learner.learn_one(doc.tokens, doc.labels)
        scores[feature_set] = np.mean([learner.predict_one(d.tokens).categories == d.labels for d in test])
    assert scores["domain"] >= 0.95 and scores["domain"] > scores["words"] + 0.1, scores


def test_the_cli_fits_describes_and_evaluates_with_a_domain_model(tmp_path: Path) -> None:
    docs = corpus(300)
    write_labelled_jsonl(tmp_path / "train.jsonl", docs[:200])
    write_labelled_jsonl(tmp_path / "test.jsonl", docs[200:])
    runner = CliRunner()
    fitted = runner.invoke(main, ["domain", "fit", "--input", str(tmp_path / "train.jsonl"), "--dimensions", "5",
                                  "--out", str(tmp_path / "d.npz"), "--json"])  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    shown = runner.invoke(main, ["domain", "show", str(tmp_path / "d.npz")])
    assert "dimensions  5" in shown.output and "documents  200" in shown.output
    evaluated = runner.invoke(main, ["evaluate", "--train", str(tmp_path / "train.jsonl"), "--test",
                                     str(tmp_path / "test.jsonl"), "--features", "both", "--domain",
                                     str(tmp_path / "d.npz"), "--json", "--quiet"])  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    missing = runner.invoke(main, ["evaluate", "--train", str(tmp_path / "train.jsonl"), "--test",
                                   str(tmp_path / "test.jsonl"), "--features", "domain"])  # fmt: skip
    assert missing.exit_code == 2 and "--features domain needs --domain DOMAIN.npz" in missing.output
    neither = runner.invoke(main, ["domain", "fit", "--out", str(tmp_path / "x.npz")])
    assert neither.exit_code == 2 and "give --input FILE (repeatable) or --from-cache" in neither.output


@pytest.mark.parametrize("feature_set", ["both", "domain"])
def test_the_dense_domain_product_scores_as_the_entry_by_entry_one(model: DomainModel, feature_set: str) -> None:
    from stream_winnow.text.domain import DomainBatch
    from stream_winnow.text.features import FeatureBatch

    learner = build_learner("balanced-winnow")
    learner.use_domain(DomainFeatures(model, feature_set))  # type: ignore[arg-type]
    for doc in corpus(90):
        learner.learn_one(doc.tokens, doc.labels)
    batch = learner.featurizer.transform_many([d.tokens for d in corpus(40, seed=3)] + [("unseen",)])
    assert isinstance(batch, DomainBatch)
    unique, inverse = batch.distinct_ids()
    np.testing.assert_array_equal(unique[inverse], batch.ids)
    assert len(np.unique(unique)) == len(unique) and set(unique.tolist()) == set(batch.ids.tolist())
    plain = FeatureBatch(batch.indptr, batch.ids, batch.strengths)
    # the domains summed in float32: a relative 1e-6 of a margin
    np.testing.assert_allclose(learner.margins_many(batch), learner.margins_many(plain), rtol=1e-5, atol=1e-6)
