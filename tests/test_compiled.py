"""The compiled loop (``learners/compiled.py`` + ``kernels.py``) gives what the per-document Python path gives.

The Python path is forced by wrapping a ``MemoryStore`` in a trivial ``WeightStore`` that only delegates
(``compiled.supports`` is then False). Both paths run ``prequential``, ``holdout`` and ``fit`` on the same
synthetic stream, whose categories appear mid-stream, in both decision modes, with and without shuffling;
margins, weights, mistake counts, counters and versions must agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stream_winnow.documents import LabelledDocument
from stream_winnow.evaluation import runs
from stream_winnow.evaluation.runs import holdout, prequential
from stream_winnow.learners import MistakeDriven, build_learner, compiled
from stream_winnow.learners.base import UPDATES_COUNTER
from stream_winnow.models.training import TrainingConfig, estimate_d, fit
from stream_winnow.stores.base import TableSpec
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.memory import MemoryStore

LINEAR = ("balanced-winnow", "positive-winnow", "perceptron")
MODES = ("any-of", "one-of")


def DelegatingStore(tables: Sequence[TableSpec]) -> CachedStore:
    """A MemoryStore seen through a plain WeightStore: same data, but not a MemoryStore (so the Python path runs)."""
    return CachedStore(MemoryStore(tables), max_staleness_ms=0)


def pair(name: str, **settings_: object) -> tuple[MistakeDriven, MistakeDriven]:
    """The same learner twice: on a MemoryStore (compiled path) and on a DelegatingStore (Python path)."""
    fast = build_learner(name, **settings_)  # type: ignore[arg-type]
    slow = build_learner(name, store=DelegatingStore(fast.table_specs()), **settings_)  # type: ignore[arg-type]
    assert isinstance(fast, MistakeDriven) and isinstance(slow, MistakeDriven)
    assert compiled.supports(fast) and not compiled.supports(slow)
    return fast, slow


def stream(n: int = 300, seed: int = 0, noise: int = 300) -> list[LabelledDocument]:
    """Documents whose categories appear mid-stream: c from doc 80, d from 160, e from 240 on."""
    rng = np.random.default_rng(seed)
    start = {"a": 0, "b": 0, "c": 80, "d": 160, "e": 240}
    docs = []
    for i in range(n):
        alive = [c for c, s in start.items() if i >= s]
        labels = tuple(c for c in alive if rng.random() < 0.3)
        if i in start.values():  # the first document of a new category carries it
            labels = tuple(sorted(set(labels) | {c for c, s in start.items() if s == i}))
        tokens = [f"{c}{k}" for c in labels for k in rng.integers(0, 8, 3).tolist()]
        tokens += [f"n{k}" for k in rng.integers(0, noise, int(rng.integers(0, 12))).tolist()]
        rng.shuffle(tokens)
        docs.append(LabelledDocument(str(i), tuple(tokens), labels))
    return docs


def all_ids(learner: MistakeDriven, docs: Sequence[LabelledDocument]) -> np.ndarray:
    return np.unique(learner.featurizer.transform_many([d.tokens for d in docs]).ids)


def assert_same_model(fast: MistakeDriven, slow: MistakeDriven, docs: Sequence[LabelledDocument]) -> None:
    assert fast.store.categories() == slow.store.categories()
    ids = all_ids(fast, docs)
    a, b = fast.store.read(ids), slow.store.read(ids)
    for table in a:
        np.testing.assert_allclose(a[table], b[table], rtol=1e-12, atol=0, err_msg=table)
    assert fast.store.counters(UPDATES_COUNTER) == slow.store.counters(UPDATES_COUNTER)
    assert fast.store.version == slow.store.version
    assert fast.store.metadata() == slow.store.metadata()
    assert fast.d == slow.d


def assert_same_result(a: runs.EvaluationResult, b: runs.EvaluationResult, bep_abs: float = 0.0) -> None:
    """Same scores, sizes, categories, learning curve and training mistakes (not the same seconds).

    ``bep_abs``: the break-even point ranks every margin of every category, and in one-of mode the
    categories never picked as a rival keep identical rows, so their margins tie and the two paths'
    last-bit differences order them differently; the decisions (every other figure) are the same.
    """
    x, y = a.as_dict(), b.as_dict()
    for key in ("seconds", "docs_per_second"):
        x.pop(key)
        y.pop(key)
    assert x.pop("micro_bep") == pytest.approx(y.pop("micro_bep"), rel=1e-12, abs=bep_abs)
    assert x.pop("mistakes_per_pass", None) == y.pop("mistakes_per_pass", None)
    assert x == pytest.approx(y, rel=1e-12)
    assert a.categories == b.categories
    assert [n for n, _ in a.curve] == [n for n, _ in b.curve]
    assert [f for _, f in a.curve] == pytest.approx([f for _, f in b.curve], rel=1e-12)


# Positive Winnow's weights are products of powers of alpha = 1.5 and beta = 0.5 and its normalised strengths
# are 1/n for distinct tokens, so with the default thresholds its scores often land exactly on 0.9, 1.0 or 1.1,
# where the two paths' summation orders round differently (see test_exact_threshold_ties_* below). Thresholds
# no such sum can reach keep the comparison about the rules rather than about rounding.
NO_TIES: dict[str, dict[str, float]] = {
    "balanced-winnow": {},
    "perceptron": {},
    "positive-winnow": {"theta_minus": 0.87, "theta": 0.97, "theta_plus": 1.13},
}


@pytest.mark.parametrize("name", LINEAR)
@pytest.mark.parametrize("mode", MODES)
def test_prequential_compiled_equals_python(name: str, mode: str) -> None:
    docs = stream()
    fast, slow = pair(name, mode=mode, **NO_TIES[name])
    a, b = prequential(fast, docs), prequential(slow, docs)
    assert_same_result(a, b, bep_abs=0.005 if mode == "one-of" else 0.0)
    assert a.categories == ("a", "b", "c", "d", "e")
    assert_same_model(fast, slow, docs)


@pytest.mark.parametrize("name", LINEAR)
def test_prequential_margins_compiled_equal_python(name: str) -> None:
    """Each document's margins, predicted before it is learned, with -inf for categories not yet created."""
    docs = stream(seed=1)
    fast, slow = pair(name, **NO_TIES[name])
    sample = fast.featurizer.transform_many([d.tokens for d in docs[: runs.PREQUENTIAL_D_SAMPLE]])
    estimate_d(fast, sample)
    estimate_d(slow, sample)
    a = runs._margins(fast, docs, True, None)
    b = runs._margins(slow, docs, True, None)
    assert a.shape == b.shape == (len(docs), 5)
    np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    # A category is never predicted for, nor before, the document that creates it.
    assert np.all(np.isneginf(a[:80, 2])) and np.all(np.isfinite(a[81:, 2]))
    assert np.all(np.isneginf(a[:160, 3])) and np.all(np.isfinite(a[161:, 3]))
    assert_same_model(fast, slow, docs)


@pytest.mark.parametrize("name", LINEAR)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shuffle_seed", [None, 7])
def test_fit_compiled_equals_python(name: str, mode: str, shuffle_seed: int | None) -> None:
    docs = stream(seed=2)
    fast, slow = pair(name, mode=mode, **NO_TIES[name])
    config = TrainingConfig(passes=6, shuffle_seed=shuffle_seed, average=False)
    a, b = fit(fast, docs, config), fit(slow, docs, config)
    assert a.mistakes_per_pass == b.mistakes_per_pass
    assert len(a.mistakes_per_pass) > 1 and a.mistakes_per_pass[0] > 0
    assert_same_model(fast, slow, docs)


@pytest.mark.parametrize("name", LINEAR)
@pytest.mark.parametrize("mode", MODES)
def test_holdout_compiled_equals_python(name: str, mode: str) -> None:
    docs = stream(seed=3)
    train, test = docs[:200], docs[200:]
    fast, slow = pair(name, mode=mode, **NO_TIES[name])
    config = TrainingConfig(passes=4, shuffle_seed=1, average=False)
    a, b = holdout(fast, train, test, config), holdout(slow, train, test, config)
    assert_same_result(a, b)
    assert a.training is not None and a.training.mistakes_per_pass[0] > 0
    assert_same_model(fast, slow, docs)


@pytest.mark.parametrize("name", LINEAR)
def test_fit_continues_a_model_alike(name: str) -> None:
    """A second fit on an existing model (known categories, d already set) agrees too."""
    docs = stream(seed=4)
    fast, slow = pair(name, **NO_TIES[name])
    for learner in (fast, slow):
        fit(learner, docs[:150], TrainingConfig(passes=2, average=False))
        fit(learner, docs[150:], TrainingConfig(passes=3, shuffle_seed=5, average=False))
    assert_same_model(fast, slow, docs)


DOCS = st.lists(
    st.tuples(
        st.lists(st.sampled_from([f"t{i}" for i in range(10)]), max_size=6),
        st.lists(st.sampled_from(["x", "y", "z"]), max_size=2, unique=True),
    ),
    min_size=1,
    max_size=25,
)


@pytest.mark.parametrize("name", LINEAR)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=DOCS, passes=st.integers(1, 4), shuffle=st.sampled_from([None, 3]))
def test_fit_compiled_equals_python_property(
    name: str, docs: list[tuple[list[str], list[str]]], passes: int, shuffle: int | None
) -> None:
    assume(any(tokens for tokens, _ in docs))  # an all-empty training set: see test_training.py
    labelled = [LabelledDocument(str(i), tuple(t), tuple(ls)) for i, (t, ls) in enumerate(docs)]
    fast, slow = pair(name, **NO_TIES[name])
    config = TrainingConfig(passes=passes, shuffle_seed=shuffle, average=False)
    assert fit(fast, labelled, config).mistakes_per_pass == fit(slow, labelled, config).mistakes_per_pass
    assert_same_model(fast, slow, labelled)


DISCARD_DIVERGES = (
    "with discard_below_mistakes the two paths diverge: compiled.prepare allocates a row for every training "
    "feature, so MistakeDriven.discard (mistake_driven.py:162, iterating store.iter_rows) also examines and "
    "switches off never-updated features, while on the Python path those features have no row and stay "
    "active; DiscardReport, later scores and mistakes then differ"
)


@pytest.mark.parametrize("name", LINEAR)
def test_fit_with_discard_compiled_equals_python(name: str) -> None:
    docs = stream(seed=5, noise=2000)
    fast, slow = pair(name, **NO_TIES[name])
    config = TrainingConfig(passes=5, discard_below_mistakes=10**9, average=False)  # discard after the first pass
    a, b = fit(fast, docs, config), fit(slow, docs, config)
    assert a.discard == b.discard
    assert a.mistakes_per_pass == b.mistakes_per_pass
    assert_same_model(fast, slow, docs)


TIES = (
    "at an exact threshold tie the paths can disagree: the kernel sums s*w feature by feature "
    "(kernels.py, the scores loop) while the Python path uses numpy's dot (strengths @ weights in scores(), whose "
    "accumulation order even depends on the memory layout of store.read's result) and then compares "
    "margins + theta = (score - theta) + theta (mistake_driven.py updates_for). Positive Winnow with default "
    "thresholds hits such ties: 0.2*(0.5+1+1+1+1) is 0.8999999999999999 in the kernel but 0.9 (>= theta_minus, "
    "a demotion) in the Python path (seen on stream(seed=1), document 278, category d)"
)


@pytest.mark.xfail(reason=TIES, strict=False)
def test_positive_winnow_default_thresholds_compiled_equals_python() -> None:
    for seed in range(3):
        docs = stream(seed=seed)
        fast, slow = pair("positive-winnow")
        a = runs._margins(fast, docs, True, None)
        b = runs._margins(slow, docs, True, None)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        assert_same_model(fast, slow, docs)
