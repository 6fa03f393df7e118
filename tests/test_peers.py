"""The peer runners learn a trivially separable synthetic stream."""

from __future__ import annotations

import random

import pytest

from benchmarks.peers import PeerResult, main, run_river_prequential, run_vw_prequential
from stream_winnow.documents import LabelledDocument

CATEGORIES = ("alpha", "beta")


def _stream(n_docs: int = 400, seed: int = 0) -> list[LabelledDocument]:
    """Two categories with disjoint vocabularies; one label per document; ':' and '|' appear in tokens."""
    rng = random.Random(seed)
    vocabularies = {
        "alpha": [f"a{i}" for i in range(30)] + ["a:colon", "a|pipe"],
        "beta": [f"b{i}" for i in range(30)] + ["b:colon", "b|pipe"],
    }
    docs = []
    for i in range(n_docs):
        label = rng.choice(CATEGORIES)
        tokens = tuple(rng.choice(vocabularies[label]) for _ in range(rng.randint(5, 15)))
        docs.append(LabelledDocument(id=str(i), tokens=tokens, labels=(label,)))
    return docs


def _check(result: PeerResult, n_documents: int) -> None:
    assert result.n_documents == n_documents
    assert result.seconds > 0
    assert result.docs_per_second == pytest.approx(n_documents / result.seconds)
    assert result.micro_f1 > 0.8
    assert 0.0 <= result.macro_f1 <= 1.0


def test_vw_learns_a_separable_stream() -> None:
    pytest.importorskip("vowpalwabbit")
    docs = _stream()
    _check(run_vw_prequential(docs, CATEGORIES), len(docs))


def test_river_learns_a_separable_stream() -> None:
    pytest.importorskip("river")
    docs = _stream()
    result = run_river_prequential(docs, CATEGORIES)
    _check(result, len(docs))
    assert result.note == "count features; whole stream"


def test_river_max_docs_scores_the_prefix() -> None:
    pytest.importorskip("river")
    docs = _stream()
    result = run_river_prequential(docs, CATEGORIES, max_docs=150)
    assert result.n_documents == 150
    assert "first 150 of 400" in result.note


def test_main_rejects_unknown_flags() -> None:
    with pytest.raises(SystemExit):
        main(["--source", "x", "--no-such-flag"])


def test_river_binary_features() -> None:
    pytest.importorskip("river")
    docs = _stream()
    result = run_river_prequential(docs, CATEGORIES, features="binary")
    _check(result, len(docs))
    assert result.note.startswith("binary features")
