"""The built-in synthetic news stream: deterministic, the promised sizes and labels, learnable."""

from __future__ import annotations

from collections import Counter

import pytest

from stream_winnow.datasets.synthetic import CATEGORIES, DEFAULT_DOCUMENTS, iter_synthetic, synthetic_stream
from stream_winnow.errors import ConfigError
from stream_winnow.evaluation.runs import prequential
from stream_winnow.learners import build_learner


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    assert synthetic_stream(200, seed=7) == synthetic_stream(200, seed=7)
    assert synthetic_stream(200, seed=7) != synthetic_stream(200, seed=8)


def test_a_prefix_of_a_longer_stream_is_the_shorter_stream() -> None:
    assert synthetic_stream(1_000, seed=3)[:100] == synthetic_stream(100, seed=3)


def test_default_size_ids_and_lengths() -> None:
    docs = synthetic_stream()
    assert len(docs) == DEFAULT_DOCUMENTS == 2_000
    assert [d.id for d in docs[:2]] == ["syn-00000", "syn-00001"]
    assert len({d.id for d in docs}) == len(docs)
    assert all(30 <= len(d.tokens) <= 150 for d in docs)
    assert all(token and " " not in token for d in docs for token in d.tokens)


def test_labels_are_known_categories_one_or_two_and_all_used() -> None:
    docs = synthetic_stream()
    assert 6 <= len(CATEGORIES) <= 8
    sizes = Counter(len(d.labels) for d in docs)
    assert set(sizes) == {1, 2}
    assert 0.08 < sizes[2] / len(docs) < 0.3  # multi-label sometimes
    assert all(len(set(d.labels)) == len(d.labels) for d in docs)
    counts = Counter(label for d in docs for label in d.labels)
    assert set(counts) == set(CATEGORIES)
    assert counts.most_common(1)[0][0] == "earnings"


def test_iter_synthetic_matches_the_list_and_rejects_bad_sizes() -> None:
    assert list(iter_synthetic(50, seed=1)) == synthetic_stream(50, seed=1)
    assert synthetic_stream(0) == []
    with pytest.raises(ConfigError):
        synthetic_stream(-1)


def test_default_balanced_winnow_learns_it_prequentially() -> None:
    result = prequential(build_learner("balanced-winnow"), synthetic_stream())
    assert result.report.micro_f1 > 0.8
    # Learnable, not trivial: the first documents are decided poorly, the later ones well.
    early = dict(result.curve)
    assert min(f1 for seen, f1 in early.items() if seen <= 100) < 0.7
