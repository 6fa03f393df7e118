"""One suite every learner must pass, parametrised over the five learners of the registry.

The invariants of DESIGN/style.md "Tests": inactive features never change; no update without a
mistake (mistake-driven rules); only mistaken categories move; predictions do not modify their
input nor the model; an event id is applied once; the open category set. Then property-based
checks (hypothesis) of each update rule, exactly as the rule is written in its module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_winnow.documents import LabelledDocument
from stream_winnow.learners import LEARNERS, Learner, MistakeDriven, build_learner
from stream_winnow.learners.base import UPDATES_COUNTER
from stream_winnow.learners.naive_bayes import DOCS_COUNTER, TOKENS_COUNTER, NaiveBayes
from stream_winnow.learners.term_weights import DF_TABLE
from stream_winnow.stores.base import RowUpdate
from stream_winnow.stores.delta import fold_updates

ALL_LEARNERS = tuple(LEARNERS)
MISTAKE_DRIVEN = ("balanced-winnow", "positive-winnow", "perceptron")
NAIVE_BAYES = ("multinomial-nb", "bernoulli-nb")
CATEGORIES = ("a", "b", "c", "d")

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_registry_has_the_five_learners() -> None:
    assert set(ALL_LEARNERS) == set(MISTAKE_DRIVEN) | set(NAIVE_BAYES)


# -- factories ------------------------------------------------------------------------------------------


@pytest.fixture
def learner_factory() -> Callable[..., Learner]:
    """``learner_factory(name, **overrides) -> Learner`` on a fresh in-memory store."""

    def make(name: str, **overrides: Any) -> Learner:
        return build_learner(name, **overrides)

    return make


def corpus(n: int, seed: int = 0, categories: Sequence[str] = CATEGORIES) -> list[LabelledDocument]:
    """Small documents: a few tokens typical of each of their categories plus shared noise words."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        labels = tuple(c for c in categories if rng.random() < 0.35) or (categories[i % len(categories)],)
        tokens = [f"{c}{k}" for c in labels for k in rng.integers(0, 5, 3).tolist()]
        tokens += [f"w{k}" for k in rng.integers(0, 20, 4).tolist()]
        rng.shuffle(tokens)
        docs.append(LabelledDocument(str(i), tuple(tokens), labels))
    return docs


def trained(learner: Learner, docs: Sequence[LabelledDocument]) -> Learner:
    for doc in docs:
        learner.learn_one(doc.tokens, doc.labels)
    return learner


def stored_ids(learner: Learner) -> np.ndarray:
    chunks = [ids for ids, _ in learner.store.iter_rows()]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def snapshot(learner: Learner, ids: np.ndarray) -> dict[str, np.ndarray]:
    return {name: values.copy() for name, values in learner.store.read(ids).items()}


def model_state(learner: Learner, frequencies: bool = True) -> tuple[Any, ...]:
    """Everything observable about the model: version, categories, rows, counters and metadata (without
    ``frequencies``: but the document frequencies idf counts)."""
    ids = np.sort(stored_ids(learner))
    counters = {name: learner.store.counters(name) for name in (UPDATES_COUNTER, DOCS_COUNTER, TOKENS_COUNTER)}
    rows = {name: values.tolist() for name, values in learner.store.read(ids).items()
            if frequencies or name != DF_TABLE}  # fmt: skip
    return (
        learner.store.version if frequencies else None,  # counting a document moves the version too
        learner.store.categories(),
        learner.store.n_features(),
        ids.tolist(),
        rows,
        counters,
        learner.store.metadata(),
    )


def columns_of(learner: Learner, names: Sequence[str]) -> list[int]:
    order = learner.store.categories()
    return [order.index(n) for n in names]


# -- (a) inactive features never change -----------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_LEARNERS)
def test_inactive_features_never_change(name: str, learner_factory: Callable[..., Learner]) -> None:
    learner = trained(learner_factory(name), corpus(40, seed=1))
    changed = 0
    for probe in [*corpus(15, seed=2), LabelledDocument("new", ("a0", "fresh", "w3"), ("brand-new",))]:
        active = set(learner.transform(probe.tokens).ids.tolist())
        others = np.array([f for f in stored_ids(learner).tolist() if f not in active], dtype=np.int64)
        assert len(others) > 10
        width = len(learner.store.categories())
        before = snapshot(learner, others)
        version = learner.store.version
        learner.learn_one(probe.tokens, probe.labels)
        changed += learner.store.version != version
        after = learner.store.read(others)
        for table, values in before.items():
            spec = learner.store.tables[table]
            if spec.per_category:
                np.testing.assert_array_equal(after[table][:, :width], values, err_msg=table)
                # A category created by this document reads as the initial value on the other features.
                assert np.all(after[table][:, width:] == spec.initial)
            else:
                np.testing.assert_array_equal(after[table], values, err_msg=table)
    assert changed > 0  # the probes did move the model, so the check was not vacuous


# -- (b) no update without a mistake ---------------------------------------------------------------------


def learn_until_no_mistake(learner: Learner, doc: LabelledDocument, limit: int = 500) -> None:
    for _ in range(limit):
        if not learner.learn_one(doc.tokens, doc.labels).mistake:
            return
    pytest.fail(f"{learner.name} still errs on {doc} after {limit} updates")


@pytest.mark.parametrize("name", MISTAKE_DRIVEN)
@pytest.mark.parametrize("mode", ["any-of", "one-of"])
def test_no_update_without_a_mistake(name: str, mode: str, learner_factory: Callable[..., Learner]) -> None:
    learner = trained(learner_factory(name, mode=mode), corpus(40, seed=3))
    assert isinstance(learner, MistakeDriven)
    for doc in corpus(8, seed=4):
        learn_until_no_mistake(learner, doc)
        vector = learner.transform(doc.tokens)
        scores = learner.margins(vector) + learner.theta
        truth = np.isin(np.array(learner.store.categories()), doc.labels)
        # Outside the thick range, on the right side, for every category (one-of: every true category
        # ahead of the best wrong one by the range's width) ...
        if mode == "one-of":
            assert np.all(scores[truth] - scores[~truth].max() > learner.theta_plus - learner.theta_minus)
        else:
            assert np.all(scores[truth] > learner.theta_plus)
            assert np.all(scores[~truth] < learner.theta_minus)
        state = model_state(learner, frequencies=False)
        updates, outcome = learner.updates_for(vector, doc.labels)
        assert updates == [] and not outcome.mistake
        # ... so learning the document again changes nothing at all (but counts it once more, with idf).
        outcome = learner.learn_one(doc.tokens, doc.labels)
        assert not outcome.mistake and not outcome.applied
        assert model_state(learner, frequencies=False) == state


@pytest.mark.parametrize("name", MISTAKE_DRIVEN)
def test_the_thick_threshold_includes_its_edges(name: str) -> None:
    """A score exactly at theta_plus (positive) or theta_minus (negative) is a training mistake."""
    learner = build_learner(name, mean_active_features=1.0)
    assert isinstance(learner, MistakeDriven)
    vector = learner.transform(["edge"])  # one feature of strength 1: score = stored weight x theta/d = weight
    learner.store.ensure_categories(["yes", "no"])
    columns, zero = np.array([0, 1]), np.zeros(2)
    edges = np.array([[learner.theta_plus, learner.theta_minus]])
    if name == "balanced-winnow":
        # score = w+ - w-, with w- at its lower bound (1e-30, which vanishes next to 1)
        learner.store.apply([RowUpdate("positive", vector.ids, columns, zero, edges),
                             RowUpdate("negative", vector.ids, columns, zero, np.zeros((1, 2)))])  # fmt: skip
    else:
        learner.store.apply([RowUpdate("weight", vector.ids, columns, zero, edges)])
    scores = learner.margins(vector) + learner.theta
    assert scores.tolist() == [learner.theta_plus, learner.theta_minus]
    _, outcome = learner.updates_for(vector, ["yes"])
    assert outcome.promoted == ("yes",) and outcome.demoted == ("no",)
    # Just outside the range on the right side: no mistake.
    learner.store.apply([RowUpdate(learner.table_specs()[0].name, vector.ids, columns, np.array([1.001, 0.999]))])
    _, outcome = learner.updates_for(vector, ["yes"])
    assert not outcome.mistake


# -- (c) only mistaken categories move ----------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_LEARNERS)
def test_only_mistaken_categories_change(name: str, learner_factory: Callable[..., Learner]) -> None:
    """Mistake-driven: columns not promoted/demoted keep their values. Naive Bayes: only labelled columns count."""
    learner = learner_factory(name)
    mistakes = untouched_columns_seen = 0
    docs = corpus(60, seed=5)
    for doc in docs:
        vector = learner.transform(doc.tokens)
        learner.store.ensure_categories(list(doc.labels))
        ids = np.union1d(stored_ids(learner), vector.ids)
        before = snapshot(learner, ids)
        outcome = learner.learn_one(vector, doc.labels)
        after = learner.store.read(ids)
        if isinstance(learner, NaiveBayes):
            moved = set(doc.labels)
        else:
            moved = set(outcome.promoted) | set(outcome.demoted)
        mistakes += outcome.mistake
        still = [c for c in range(len(learner.store.categories())) if learner.store.categories()[c] not in moved]
        untouched_columns_seen += len(still) > 0 and bool(moved)
        for table, values in before.items():
            if learner.store.tables[table].per_category:
                np.testing.assert_array_equal(after[table][:, still], values[:, still], err_msg=f"{table} {doc}")
    assert mistakes > 0 and untouched_columns_seen > 0


# -- (d) predictions modify neither their input nor the model ------------------------------------------


@pytest.mark.parametrize("name", ALL_LEARNERS)
@pytest.mark.parametrize("mode", ["any-of", "one-of"])
def test_predict_one_modifies_neither_input_nor_store(
    name: str, mode: str, learner_factory: Callable[..., Learner]
) -> None:
    learner = trained(learner_factory(name, mode=mode), corpus(30, seed=6))
    for doc in [*corpus(5, seed=7), LabelledDocument("unseen", ("never", "seen", "never"), ())]:
        tokens = list(doc.tokens)
        copy = list(tokens)
        state = model_state(learner)
        first = learner.predict_one(tokens)
        assert tokens == copy
        assert model_state(learner) == state

        vector = learner.transform(tokens)
        ids, strengths = vector.ids.copy(), vector.strengths.copy()
        vector.ids.flags.writeable = False  # an in-place write would raise
        vector.strengths.flags.writeable = False
        second = learner.predict_one(vector)
        np.testing.assert_array_equal(vector.ids, ids)
        np.testing.assert_array_equal(vector.strengths, strengths)
        assert model_state(learner) == state
        # The same document predicts the same way whichever form it came in.
        assert first.categories == second.categories
        np.testing.assert_allclose(first.margins, second.margins, rtol=1e-12)
        assert first.model_version == second.model_version == learner.store.version


# -- (e) a batch's updates commute: folded in any order, the model is the same ----------------------


@pytest.mark.parametrize("name", ALL_LEARNERS)
def test_a_batch_folded_in_any_order_gives_the_same_model(name: str, learner_factory: Callable[..., Learner]) -> None:
    learner = trained(learner_factory(name), corpus(20, seed=8))
    docs = corpus(12, seed=9)
    learner.store.ensure_categories(sorted({c for d in docs for c in d.labels}))
    events = [list(learner.updates_for(learner.transform(d.tokens), d.labels)[0]) for d in docs]
    specs = list(learner.store.tables.values())
    n = len(learner.store.categories())
    forward, backward = fold_updates(events, specs, n), fold_updates(events[::-1], specs, n)
    assert forward.changed_events == backward.changed_events > 0
    np.testing.assert_array_equal(forward.feature_ids, backward.feature_ids)
    for table in forward.values:
        np.testing.assert_allclose(forward.values[table], backward.values[table], rtol=1e-12)
    before = model_state(learner)
    learner.store.apply_delta(forward)
    assert model_state(learner) != before
    assert learner.store.version == before[0] + forward.changed_events


# -- (f) the update rules, property-based ------------------------------------------------------------

TOKENS = st.sampled_from([f"t{i}" for i in range(8)] + ["ü", "日本"])
LABELS = st.lists(st.sampled_from(["a", "b", "c", "late"]), max_size=3, unique=True)
STREAMS = st.lists(st.tuples(st.lists(TOKENS, max_size=7), LABELS), min_size=1, max_size=12)


def clip(values: np.ndarray, learner: Learner, table: str) -> np.ndarray:
    bounds = learner.store.tables[table].bounds
    return np.clip(values, bounds.low, bounds.high)


def check_mistake_driven_step(learner: MistakeDriven, tokens: list[str], labels: list[str]) -> None:
    vector = learner.transform(tokens)
    learner.store.ensure_categories(labels)
    names = learner.store.categories()
    truth = np.isin(np.array(names), labels) if names else np.zeros(0, dtype=bool)
    scores = learner.margins(vector) + learner.theta
    expected_promote = [n for n, t, s in zip(names, truth, scores, strict=True) if t and s <= learner.theta_plus]
    expected_demote = [n for n, t, s in zip(names, truth, scores, strict=True) if not t and s >= learner.theta_minus]
    before = snapshot(learner, vector.ids)
    version = learner.store.version
    updates_before = learner.store.counters(UPDATES_COUNTER)

    outcome = learner.learn_one(vector, labels)

    assert list(outcome.promoted) == expected_promote
    assert list(outcome.demoted) == expected_demote
    after = learner.store.read(vector.ids)
    assert learner.store.version == version + bool(expected_promote or expected_demote or (learner.features.idf and len(vector)))
    up, down = columns_of(learner, outcome.promoted), columns_of(learner, outcome.demoted)
    moved = up + down
    still = [c for c in range(len(names)) if c not in moved]
    active = before["keep"][:, 0] > 0
    s = vector.strengths[:, None]
    if isinstance(learner, MistakeDriven) and learner.name == "balanced-winnow":
        a, b = learner.alpha, learner.beta  # type: ignore[attr-defined]
        pos, neg = before["positive"], before["negative"]
        exp_pos, exp_neg = pos.copy(), neg.copy()
        exp_pos[np.ix_(active, up)] = clip(pos[np.ix_(active, up)] * a, learner, "positive")
        exp_neg[np.ix_(active, up)] = clip(neg[np.ix_(active, up)] * b, learner, "negative")
        exp_pos[np.ix_(active, down)] = clip(pos[np.ix_(active, down)] * b, learner, "positive")
        exp_neg[np.ix_(active, down)] = clip(neg[np.ix_(active, down)] * a, learner, "negative")
        np.testing.assert_array_equal(after["positive"], exp_pos)
        np.testing.assert_array_equal(after["negative"], exp_neg)
    elif learner.name == "positive-winnow":
        a, b = learner.alpha, learner.beta  # type: ignore[attr-defined]
        w = before["weight"]
        exp = w.copy()
        exp[np.ix_(active, up)] = clip(w[np.ix_(active, up)] * a, learner, "weight")
        exp[np.ix_(active, down)] = clip(w[np.ix_(active, down)] * b, learner, "weight")
        np.testing.assert_array_equal(after["weight"], exp)
    else:
        a = learner.alpha  # type: ignore[attr-defined]
        w = before["weight"]
        exp = w.copy()
        step = (a * s)[active]
        exp[np.ix_(active, up)] = clip(w[np.ix_(active, up)] + step, learner, "weight")
        exp[np.ix_(active, down)] = clip(w[np.ix_(active, down)] - step, learner, "weight")
        np.testing.assert_array_equal(after["weight"], exp)
    for table, values in before.items():
        if learner.store.tables[table].per_category:
            np.testing.assert_array_equal(after[table][:, still], values[:, still])
    np.testing.assert_array_equal(after["keep"], before["keep"])
    # Bookkeeping: one per updated category and one in total, only for a mistake.
    counters = learner.store.counters(UPDATES_COUNTER)
    if moved:
        assert counters["*"] == updates_before.get("*", 0.0) + 1
        for name in outcome.promoted + outcome.demoted:
            assert counters[name] == updates_before.get(name, 0.0) + 1
    else:
        assert counters == updates_before


@pytest.mark.parametrize("name", MISTAKE_DRIVEN)
@PROPERTY
@given(stream=STREAMS)
def test_mistake_driven_update_rules(name: str, stream: list[tuple[list[str], list[str]]]) -> None:
    learner = build_learner(name)
    assert isinstance(learner, MistakeDriven)
    for tokens, labels in stream:
        check_mistake_driven_step(learner, tokens, labels)


@pytest.mark.parametrize("name", MISTAKE_DRIVEN)
@PROPERTY
@given(stream=STREAMS, alpha=st.sampled_from([1.1, 1.5, 2.0]), beta=st.sampled_from([0.3, 0.5, 0.9]))
def test_mistake_driven_update_rules_other_settings(
    name: str, stream: list[tuple[list[str], list[str]]], alpha: float, beta: float
) -> None:
    settings_ = {"alpha": alpha} if name == "perceptron" else {"alpha": alpha, "beta": beta}
    learner = build_learner(name, mean_active_features=2.0, **settings_)
    assert isinstance(learner, MistakeDriven)
    for tokens, labels in stream:
        check_mistake_driven_step(learner, tokens, labels)


@pytest.mark.parametrize("name", NAIVE_BAYES)
@PROPERTY
@given(stream=STREAMS)
def test_naive_bayes_counts_every_labelled_document(name: str, stream: list[tuple[list[str], list[str]]]) -> None:
    learner = build_learner(name)
    for tokens, labels in stream:
        vector = learner.transform(tokens)
        tf = {t: float(tokens.count(t)) for t in set(tokens)}
        amount = np.array([tf[t] if name == "multinomial-nb" else 1.0 for t in dict.fromkeys(tokens)])
        learner.store.ensure_categories(labels)
        before = snapshot(learner, vector.ids)
        docs_before = learner.store.counters(DOCS_COUNTER)
        tokens_before = learner.store.counters(TOKENS_COUNTER)
        version = learner.store.version

        learner.learn_one(vector, labels)

        after = learner.store.read(vector.ids)
        assert learner.store.version == version + 1  # every labelled document is counted
        cols = columns_of(learner, labels)
        exp_counts = before["counts"].copy()
        exp_counts[:, cols] += amount[:, None]
        np.testing.assert_array_equal(after["counts"], exp_counts)
        np.testing.assert_array_equal(after["total"][:, 0], before["total"][:, 0] + amount)
        docs = learner.store.counters(DOCS_COUNTER)
        assert docs["*"] == docs_before.get("*", 0.0) + 1
        for label in labels:
            assert docs[label] == docs_before.get(label, 0.0) + 1
        for other in set(learner.store.categories()) - set(labels):
            assert docs.get(other, 0.0) == docs_before.get(other, 0.0)
        counted = learner.store.counters(TOKENS_COUNTER)
        assert counted["*"] == pytest.approx(tokens_before.get("*", 0.0) + amount.sum())
        for label in labels:
            assert counted[label] == pytest.approx(tokens_before.get(label, 0.0) + amount.sum())


def test_naive_bayes_event_amounts_are_term_frequency_and_presence() -> None:
    tokens = ["x", "y", "x", "x"]
    multinomial = build_learner("multinomial-nb")
    bernoulli = build_learner("bernoulli-nb")
    for learner in (multinomial, bernoulli):
        learner.learn_one(tokens, ["c"])
    ids = np.array([multinomial.featurizer.token_id("x"), multinomial.featurizer.token_id("y")])
    assert multinomial.store.read(ids)["counts"][:, 0].tolist() == [3.0, 1.0]
    assert bernoulli.store.read(ids)["counts"][:, 0].tolist() == [1.0, 1.0]


# -- (g) the open category set ----------------------------------------------------------------------


BERNOULLI_STALE_CACHE = (
    "BernoulliNB._log_absent_sums caches by store.version only (naive_bayes.py:182), but ensure_categories "
    "adds a column without a new version: a prediction followed by learning a new label at the same version "
    "reuses sums one category short -> ValueError (operands could not be broadcast)"
)


def test_bernoulli_predict_then_learn_a_new_label() -> None:
    learner = build_learner("bernoulli-nb")
    learner.learn_one(["x", "y"], ["a"])
    learner.learn_one(["y", "z"], ["b"])
    learner.predict_one(["x"])  # caches the absent-term sums at this version, two categories wide
    learner.learn_one(["z"], ["c"])  # a new category, same version: the cached sums are one short
    assert learner.store.categories() == ("a", "b", "c")


@pytest.mark.parametrize(
    "name",
    [
        n
        if n == "bernoulli-nb"
        else n
        for n in ALL_LEARNERS
    ],
)
@pytest.mark.parametrize("mode", ["any-of", "one-of"])
def test_a_label_never_seen_creates_its_category(name: str, mode: str, learner_factory: Callable[..., Learner]) -> None:
    learner = trained(learner_factory(name, mode=mode), corpus(30, seed=9))
    doc = LabelledDocument("z", ("zeta1", "zeta2", "zeta3", "zeta1"), ("zeta",))
    before = learner.predict_one(doc.tokens)
    assert "zeta" not in learner.store.categories() and "zeta" not in before.categories
    width = len(learner.store.categories())
    assert len(before.margins) == width

    learner.learn_one(doc.tokens, doc.labels)
    assert learner.store.categories()[-1] == "zeta"
    for _ in range(30):
        prediction = learner.predict_one(doc.tokens)
        assert len(prediction.margins) == width + 1
        if "zeta" in prediction.categories:
            break
        learner.learn_one(doc.tokens, doc.labels)
    else:
        pytest.fail(f"{name} never predicted the new category")
    if mode == "one-of":
        assert prediction.categories == ("zeta",)
    assert prediction.scores(learner.store.categories())["zeta"] > 0 or mode == "one-of"


@pytest.mark.parametrize("name", ALL_LEARNERS)
def test_a_fresh_model_predicts_nothing_and_has_no_categories(name: str) -> None:
    learner = build_learner(name)
    prediction = learner.predict_one(["anything"])
    assert prediction.categories == ()
    assert prediction.margins.shape == (0,)


@pytest.mark.parametrize("name", ALL_LEARNERS)
def test_feature_vector_and_tokens_learn_alike(name: str) -> None:
    by_tokens, by_vector = build_learner(name), build_learner(name)
    for doc in corpus(25, seed=10):
        by_tokens.learn_one(doc.tokens, doc.labels)
        by_vector.learn_one(by_vector.transform(doc.tokens), doc.labels)
    assert model_state(by_tokens) == model_state(by_vector)


def test_empty_document_is_learned_without_error() -> None:
    for name in ALL_LEARNERS:
        learner = trained(build_learner(name), corpus(5))
        learner.learn_one([], ["a"])
        assert not np.isnan(learner.predict_one([]).margins).any()
