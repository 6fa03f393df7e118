"""RedisStore against a real redis-server and a real 3-master Redis Cluster (fixtures in tests/conftest.py).

Every test uses its own model name, so tests share the servers without flushing them.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_winnow import resp
from stream_winnow.errors import ConfigError, StoreError
from stream_winnow.learners.balanced_winnow import BalancedWinnow
from stream_winnow.stores import Bounds, CounterUpdate, MemoryStore, RowUpdate, TableSpec, Update
from stream_winnow.stores.base import LearnedEvent
from stream_winnow.stores.redis import RedisStore
from workers.embedded import start_redis

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# A global table between two per-category ones, and bounds that clip: the layout's awkward cases.
TABLES = [
    TableSpec("positive", 2.0),
    TableSpec("keep", 1.0, per_category=False, bounds=Bounds(0.0, 1.0)),
    TableSpec("negative", 1.0, bounds=Bounds(0.25, 8.0)),
]
# float32 storage: one rounding per update (6e-8 relative), a little cancellation from additive updates.
RTOL, ATOL = 1e-5, 1e-5

StoreFactory = Callable[..., RedisStore]


def unique_model() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def assert_same_rows(redis_store: RedisStore, memory: MemoryStore, ids: np.ndarray) -> None:
    got, expected = redis_store.read(ids), memory.read(ids)
    assert list(got) == list(expected)
    for name in expected:
        assert got[name].dtype == np.float64
        np.testing.assert_allclose(got[name], expected[name], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.fixture(params=["single", "cluster"])
def backend_url(request: pytest.FixtureRequest) -> str:
    fixture = "redis_url" if request.param == "single" else "redis_cluster_url"
    return str(request.getfixturevalue(fixture))


def _factory(url: str) -> Iterator[StoreFactory]:
    made: list[RedisStore] = []

    def make(tables: list[TableSpec] | None = None, model: str | None = None, **kwargs: Any) -> RedisStore:
        store = RedisStore.from_url(url, model or unique_model(), tables or TABLES, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        try:
            store.drop_model()
        finally:
            store.close()


@pytest.fixture
def make_store(backend_url: str) -> Iterator[StoreFactory]:
    """``make_store(tables=TABLES, model=<unique>, **kwargs)`` on the single node, then on the cluster."""
    yield from _factory(backend_url)


@pytest.fixture
def make_single_store(redis_url: str) -> Iterator[StoreFactory]:
    yield from _factory(redis_url)


@pytest.fixture
def make_cluster_store(redis_cluster_url: str) -> Iterator[StoreFactory]:
    yield from _factory(redis_cluster_url)


# -- reads ------------------------------------------------------------------------------------------


def test_unseen_features_read_as_initial_values(make_store: StoreFactory) -> None:
    store = make_store()
    assert store.read(np.array([1, 2], dtype=np.int64))["positive"].shape == (2, 0)
    store.ensure_categories(["a", "b", "c"])
    values = store.read(np.array([5, -7, 2**62], dtype=np.int64))
    np.testing.assert_array_equal(values["positive"], np.full((3, 3), 2.0))
    np.testing.assert_array_equal(values["negative"], np.full((3, 3), 1.0))
    np.testing.assert_array_equal(values["keep"], np.ones((3, 1)))
    assert store.n_features() == 0 and store.version == 0
    assert store.read(np.array([], dtype=np.int64))["keep"].shape == (0, 1)


def test_short_rows_read_and_grow_with_initial_values(make_store: StoreFactory) -> None:
    """Rows written before a category existed read its initial values, and get padded with them, not zeros."""
    store = make_store()
    memory = MemoryStore(TABLES)
    ids = np.array([3, 4, 4, 19], dtype=np.int64)  # a duplicate: reads must gather it twice
    for target in (store, memory):
        target.ensure_categories(["a"])
        target.apply([RowUpdate("positive", ids[:2], np.array([0]), np.array([1.5]))])
        target.ensure_categories(["b", "c"])
    assert_same_rows(store, memory, ids)
    for target in (store, memory):
        target.apply([RowUpdate("negative", ids[:1], np.array([2]), add=np.array([[0.5]]))])
    assert_same_rows(store, memory, ids)


# -- updates equal MemoryStore's --------------------------------------------------------------------


@st.composite
def update_steps(draw: st.DrawFn) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = [("categories", draw(st.integers(1, 3)))]
    n_categories = steps[0][1]
    events: list[str] = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["categories", "apply", "apply", "apply"]))
        if kind == "categories":
            n_new = draw(st.integers(1, 2))
            n_categories += n_new
            steps.append(("categories", n_new))
            continue
        updates: list[Update] = []
        for _ in range(draw(st.integers(1, 3))):
            table = draw(st.sampled_from(TABLES))
            ids = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6))
            if table.per_category:
                columns = draw(st.lists(st.integers(0, n_categories - 1), min_size=1, max_size=n_categories))
            else:
                columns = [0]
            factors = st.floats(0.25, 4.0, allow_nan=False)
            multiply = draw(st.none() | st.lists(factors, min_size=len(columns), max_size=len(columns)))
            amounts = st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=len(columns), max_size=len(columns))
            add = draw(st.none() | st.lists(amounts, min_size=len(ids), max_size=len(ids)))
            updates.append(
                RowUpdate(
                    table.name,
                    np.array(ids, dtype=np.int64),
                    np.array(columns, dtype=np.int64),
                    None if multiply is None else np.array(multiply),
                    None if add is None else np.array(add).reshape(len(ids), len(columns)),
                )
            )
        if draw(st.booleans()):
            updates.append(CounterUpdate("updates", {"*": 1.0, "c0": draw(st.floats(-2.0, 2.0))}))
        if events and draw(st.booleans()):
            event = draw(st.sampled_from(events))  # a redelivery: both stores must skip it
        else:
            event = f"e{len(events)}"
            events.append(event)
        steps.append(("apply", (updates, draw(st.none() | st.just(event)))))
    return steps


def _check_against_memory(store: RedisStore, steps: list[tuple[str, Any]]) -> None:
    memory = MemoryStore(TABLES)
    n_categories = 0
    try:
        for kind, arg in steps:
            if kind == "categories":
                names = [f"c{n_categories + i}" for i in range(arg)]
                n_categories += arg
                np.testing.assert_array_equal(store.ensure_categories(names), memory.ensure_categories(names))
            else:
                updates, event = arg
                assert store.apply(updates, event) == memory.apply(updates, event)
        assert store.categories() == memory.categories()
        assert_same_rows(store, memory, np.arange(-1, 42, dtype=np.int64))
        assert store.version == memory.version
        assert store.n_features() == memory.n_features()
        got, expected = store.counters("updates"), memory.counters("updates")
        assert got.keys() == expected.keys()
        for key in expected:
            assert got[key] == pytest.approx(expected[key], abs=1e-9)
    finally:
        store.drop_model()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=update_steps())
def test_updates_equal_memory_store_single(make_single_store: StoreFactory, steps: list[tuple[str, Any]]) -> None:
    _check_against_memory(make_single_store(shards=4), steps)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=update_steps())
def test_updates_equal_memory_store_cluster(make_cluster_store: StoreFactory, steps: list[tuple[str, Any]]) -> None:
    _check_against_memory(make_cluster_store(shards=8), steps)


# -- exactly once -----------------------------------------------------------------------------------


def _winnow_updates(ids: np.ndarray) -> list[Update]:
    return [
        RowUpdate("positive", ids, np.array([0, 2]), np.array([1.5, 0.5])),
        RowUpdate("negative", ids, np.array([0, 2]), np.array([0.5, 1.5])),
        RowUpdate("keep", ids[:3], np.array([0]), add=np.full((3, 1), -0.25)),
        CounterUpdate("updates", {"*": 1.0, "a": 1.0, "c": 1.0}),
    ]


def test_same_event_twice_applies_once(make_store: StoreFactory) -> None:
    store, memory = make_store(), MemoryStore(TABLES)
    ids = np.arange(0, 200, 7, dtype=np.int64)
    for target in (store, memory):
        target.ensure_categories(["a", "b", "c"])
        target.apply(_winnow_updates(ids))
    assert store.apply(_winnow_updates(ids), event_id="event-1") is True
    assert store.apply(_winnow_updates(ids), event_id="event-1") is False
    memory.apply(_winnow_updates(ids), event_id="event-1")
    assert_same_rows(store, memory, ids)
    assert store.version == memory.version == 2
    assert store.counters("updates") == {"*": 2.0, "a": 2.0, "c": 2.0}


def test_redelivery_after_partial_apply_completes_exactly_once(make_store: StoreFactory) -> None:
    store, memory = make_store(), MemoryStore(TABLES)
    ids = np.arange(0, 64, dtype=np.int64)  # every one of the 16 shards
    for target in (store, memory):
        target.ensure_categories(["a", "b", "c"])
    updates = _winnow_updates(ids)
    shard_calls, _ = store._plan(updates, "crashy")
    assert len(shard_calls) == 16
    store._run_scripts(store._apply_shard, shard_calls[:5])  # the worker dies here
    assert store.version == 0 and store.counters("updates") == {}
    assert store.apply(updates, "crashy") is True  # redelivered
    assert store.apply(updates, "crashy") is False
    memory.apply(updates, "crashy")
    assert_same_rows(store, memory, ids)
    assert store.version == 1 and store.n_features() == 64


def _worker(url: str, model: str, worker: int, n_updates: int) -> None:
    store = RedisStore.from_url(url, model, TABLES)
    store.ensure_categories(["a", "b"])
    ids = np.arange(0, 24, dtype=np.int64)  # the same features (all shards) in every worker
    for i in range(n_updates):
        updates: list[Update] = [
            RowUpdate("positive", ids, np.array([0, 1]), np.array([1.001, 0.999])),
            RowUpdate("negative", ids, np.array([1]), add=np.ones((len(ids), 1))),
            CounterUpdate("updates", {"*": 1.0}),
        ]
        store.apply(updates, event_id=f"w{worker}-{i}")
    store.close()


def test_concurrent_workers_lose_no_update(make_store: StoreFactory, backend_url: str) -> None:
    store = make_store()
    url = backend_url
    workers, n_updates = 4, 200
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_worker, args=(url, store.model, w, n_updates)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    total = workers * n_updates
    values = store.read(np.arange(0, 24, dtype=np.int64))
    # One lost multiplication would be off by 1e-3; float32 rounding over 800 steps stays below 1e-4.
    np.testing.assert_allclose(values["positive"][:, 0], 2.0 * 1.001**total, rtol=1e-4)
    np.testing.assert_allclose(values["positive"][:, 1], 2.0 * 0.999**total, rtol=1e-4)
    np.testing.assert_array_equal(values["negative"][:, 1], min(1.0 + total, 8.0))  # clipped at 8
    assert store.version == total
    assert store.counters("updates") == {"*": float(total)}


# -- categories and models --------------------------------------------------------------------------


def test_categories_are_an_open_set_with_stable_columns(make_store: StoreFactory) -> None:
    first = make_store()
    second = make_store(model=first.model)
    cached = make_store(model=first.model, categories_max_staleness_ms=60_000)
    assert first.ensure_categories(["a", "b"]).tolist() == [0, 1]
    assert cached.categories() == ("a", "b")
    assert second.ensure_categories(["c", "a", "c"]).tolist() == [2, 0, 2]
    assert first.categories() == ("a", "b", "c")
    assert first.ensure_categories(["c", "b"]).tolist() == [2, 1]
    assert cached.categories() == ("a", "b")  # within its staleness: no round trip
    ids = np.array([1, 2], dtype=np.int64)
    second.apply([RowUpdate("positive", ids, np.array([2]), np.array([3.0]))])
    assert cached.read(ids)["positive"].tolist() == [[2.0, 2.0, 6.0]] * 2  # a read sees the new column
    assert cached.categories() == cached.known_categories() == ("a", "b", "c")


def test_a_model_name_holding_other_tables_is_refused(make_store: StoreFactory) -> None:
    store = make_store()
    store.ensure_categories(["a"])
    other = make_store(tables=[TableSpec("counts", 0.0)], model=store.model)
    with pytest.raises(ConfigError, match="other tables"):
        other.ensure_categories(["b"])


def test_models_in_one_redis_are_independent(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    ids = np.arange(10, dtype=np.int64)
    one.ensure_categories(["x", "y", "z"])
    two.ensure_categories(["y"])
    one.apply(_winnow_updates(ids)[:2] + [CounterUpdate("updates", {"*": 1.0})], event_id="same-id")
    one.set_metadata({"alpha": "1.5"})
    assert two.apply([RowUpdate("positive", ids, np.array([0]), np.array([2.0]))], event_id="same-id")
    assert two.categories() == ("y",)
    assert two.read(ids)["positive"].tolist() == [[4.0]] * 10
    assert two.counters("updates") == {} and two.metadata() == {} and two.version == 1
    assert one.metadata() == {"alpha": "1.5"}
    assert one.drop_model() > 0
    assert one.model_keys() == [] and one.n_features() == 0
    assert two.n_features() == 10 and two.read(ids[:1])["positive"].tolist() == [[4.0]]


def test_delete_iter_rows_and_counts(make_store: StoreFactory) -> None:
    store, memory = make_store(), MemoryStore(TABLES)
    ids = np.arange(0, 300, 3, dtype=np.int64)
    for target in (store, memory):
        target.ensure_categories(["a", "b", "c"])
        target.apply(_winnow_updates(ids))
    assert store.n_features() == memory.n_features() == 100
    assert store.delete(np.array([0, 3, 3, 1, 297], dtype=np.int64)) == memory.delete(np.array([0, 3, 1, 297])) == 3
    assert store.n_features() == 97
    seen: list[int] = []
    for chunk_ids, values in store.iter_rows(chunk_rows=40):
        assert len(chunk_ids) <= 40
        expected = memory.read(chunk_ids)
        for name in expected:
            np.testing.assert_allclose(values[name], expected[name], rtol=RTOL)
        seen += chunk_ids.tolist()
    assert sorted(seen) == sorted(set(ids.tolist()) - {0, 3, 297})
    assert store.read(np.array([0], dtype=np.int64))["positive"].tolist() == [[2.0, 2.0, 2.0]]
    keys = store.model_keys()
    assert all(key.startswith((f"sw:{{{store.model}}}:".encode(), f"sw:{{{store.model}:".encode())) for key in keys)
    assert sum(b":f:" in key for key in keys) == 97


# -- Redis specifics --------------------------------------------------------------------------------


def test_cluster_keeps_a_shard_on_one_node_and_spreads_shards(make_cluster_store: StoreFactory) -> None:
    store = make_cluster_store()
    store.ensure_categories(["a", "b", "c"])
    store.apply(_winnow_updates(np.arange(0, 160, dtype=np.int64)), event_id="spread")
    client = store.client
    nodes_of_shards = set()
    for shard in range(store.shards):
        prefix = f"sw:{{{store.model}:{shard}}}:".encode()
        keys = [key for key in store.model_keys() if key.startswith(prefix)]
        assert len(keys) == 10 + 3  # 10 rows, the row count, the write counter, the event marker
        assert len({client.keyslot(key) for key in keys}) == 1
        node = client.get_node_from_key(keys[0])
        assert client.get_redis_connection(node).exists(*keys) == len(keys)  # really stored there
        nodes_of_shards.add(node.name)
    assert len(nodes_of_shards) >= 2
    meta = [key for key in store.model_keys() if key.startswith(f"sw:{{{store.model}}}:".encode())]
    assert len({client.keyslot(key) for key in meta}) == 1


def test_script_flush_is_survived(make_store: StoreFactory) -> None:
    store, memory = make_store(), MemoryStore(TABLES)
    ids = np.arange(0, 40, dtype=np.int64)
    for target in (store, memory):
        target.ensure_categories(["a", "b", "c"])
        target.apply(_winnow_updates(ids), "before")
    store.client.script_flush()
    for target in (store, memory):
        target.apply(_winnow_updates(ids), "after")
    assert_same_rows(store, memory, ids)
    store.client.script_flush()
    assert store.ensure_categories(["d"]).tolist() == [3]
    store.client.script_flush()
    assert store.delete(ids[:4]) == 4


def test_a_stopped_redis_raises_a_retriable_store_error_quickly() -> None:
    with start_redis() as server:
        store = RedisStore.from_url(server.url, unique_model(), TABLES, socket_timeout=0.5, socket_connect_timeout=0.5)
        store.ensure_categories(["a"])
        store.apply(_winnow_updates(np.arange(4, dtype=np.int64))[-1:])
    for call in (
        lambda: store.read(np.arange(4, dtype=np.int64)),
        lambda: store.apply([CounterUpdate("updates", {"*": 1.0})], "e"),
        lambda: store.version,
    ):
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            call()
        assert caught.value.retriable
        assert time.monotonic() - started < 5.0


def test_a_silent_server_raises_store_error_not_a_hang() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts connections into the backlog, never answers
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        started = time.monotonic()
        with pytest.raises(StoreError):
            _ = RedisStore.from_url(url, unique_model(), TABLES, cluster=False, socket_timeout=0.3).version
        assert time.monotonic() - started < 10.0


def test_repr_hides_the_password() -> None:
    with start_redis(password="hunter2-very-secret") as server:
        store = RedisStore.from_url(server.url, unique_model(), TABLES)
        try:
            assert store.ensure_categories(["a"]).tolist() == [0]
            text = repr(store)
            assert "hunter2" not in text and str(server.port) in text
        finally:
            store.drop_model()
            store.close()


def test_bad_settings_are_config_errors(redis_url: str) -> None:
    with pytest.raises(ConfigError):
        RedisStore.from_url(redis_url, "has{brace}", TABLES)
    with pytest.raises(ConfigError):
        RedisStore.from_url(redis_url, "ok", TABLES, shards=0)
    with pytest.raises(ConfigError):
        RedisStore.from_url(redis_url, "ok", TABLES, decode_responses=True)


# -- a learner on top -------------------------------------------------------------------------------


def _synthetic_documents(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    rng = np.random.default_rng(seed)
    categories = ["grain", "crude", "money", "trade", "ship"]
    shared = [f"w{i}" for i in range(300)]
    documents = []
    for _ in range(n):
        labels = list(rng.choice(categories, size=int(rng.integers(1, 3)), replace=False))
        tokens = [f"{label}{int(rng.integers(0, 25))}" for label in labels for _ in range(8)]
        tokens += [shared[int(i)] for i in rng.zipf(1.3, size=40) if i < len(shared)]
        documents.append((tokens, labels))
    return documents


def test_balanced_winnow_on_redis_matches_memory(make_store: StoreFactory) -> None:
    on_memory = BalancedWinnow()
    on_redis = BalancedWinnow(store=make_store(tables=on_memory.table_specs()))
    for i, (tokens, labels) in enumerate(_synthetic_documents(300, seed=11)):
        expected = on_memory.learn_one(tokens, labels, event_id=f"doc-{i}")
        got = on_redis.learn_one(tokens, labels, event_id=f"doc-{i}")
        assert (got.promoted, got.demoted) == (expected.promoted, expected.demoted)
    assert on_redis.store.version == on_memory.store.version > 10
    mistakes = 0
    for tokens, labels in _synthetic_documents(60, seed=12):
        expected_prediction, got_prediction = on_memory.predict_one(tokens), on_redis.predict_one(tokens)
        assert got_prediction.categories == expected_prediction.categories
        np.testing.assert_allclose(got_prediction.margins, expected_prediction.margins, rtol=1e-5, atol=1e-6)
        mistakes += set(got_prediction.categories) != set(labels)
    assert mistakes < 30  # it did learn something


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_apply_many_equals_applying_one_by_one(kind: str, redis_url: str, redis_cluster_url: str) -> None:
    """A worker's batch in one script per shard: same rows, counters and version as event by event.

    Rows agree to float32 rounding: one by one, a row is rounded to float32 after every event; in a
    batch, once at the end (closer to the float64 reference).
    """
    import uuid as _uuid

    from stream_winnow.stores.base import CounterUpdate, RowUpdate, TableSpec
    from stream_winnow.stores.redis import RedisStore

    url = redis_url if kind == "single" else redis_cluster_url
    tables = [TableSpec("positive", 2.0), TableSpec("negative", 1.0), TableSpec("keep", 1.0, per_category=False)]
    many = RedisStore.from_url(url, f"many-{_uuid.uuid4().hex[:8]}", tables, shards=8)
    single = RedisStore.from_url(url, f"one-{_uuid.uuid4().hex[:8]}", tables, shards=8)
    rng = np.random.default_rng(3)
    for store in (many, single):
        store.ensure_categories(["a", "b", "c"])
    batch = []
    for e in range(40):
        ids = rng.choice(np.arange(500, 560), size=12, replace=False).astype(np.int64)
        columns = rng.choice(3, size=2, replace=False)
        factors = rng.choice([0.7, 1.3], size=2)
        updates = [
            RowUpdate("positive", ids, columns, factors),
            RowUpdate("negative", ids, columns, 2.0 - factors),
            CounterUpdate("updates", {"*": 1.0}),
        ]
        batch.append((updates, f"e{e}"))
    batch.append((batch[5][0], "e5"))  # a duplicate inside the batch
    batch.append(([], "nothing"))  # an event that changed nothing: only marked
    results = many.apply_many(batch)
    expected = [single.apply(updates, event) for updates, event in batch]
    assert results == expected
    assert results[-2] is False and many.version == single.version == 40
    assert many.applied_events(["e0", "nothing", "never"]) == [True, True, False]
    ids = np.arange(500, 560, dtype=np.int64)
    got, want = many.read(ids), single.read(ids)
    for table in want:
        np.testing.assert_allclose(got[table], want[table], rtol=1e-6)
    assert many.counters("updates") == single.counters("updates")
    assert many.apply_many(batch) == [False] * len(batch)  # all redelivered: nothing changes
    np.testing.assert_array_equal(many.read(ids)["positive"], got["positive"])


# -- apply_rows: learned rows written whole, compare-and-set per shard ------------------------------
IDS = np.arange(70_000, 70_040, dtype=np.int64)  # 40 features over the 16 shards


def _learned(store: RedisStore, snapshot_values: dict[str, np.ndarray], factor: float) -> dict[str, np.ndarray]:
    """What a learner would hold after promoting category 0 on the first half of the features."""
    learned = {name: values.copy() for name, values in snapshot_values.items()}
    learned["positive"][:20, 0] *= factor
    learned["negative"][:20, 0] /= factor
    return learned


def _events(*ids: str) -> list[LearnedEvent]:
    return [LearnedEvent(e, (CounterUpdate("updates", {"*": 1.0, "a": 1.0}),), True) for e in ids]


def _by_scripts(store: RedisStore, snapshot: Any, learned: dict[str, np.ndarray], events: list[LearnedEvent]) -> Any:
    """``apply_rows`` the shard scripts' way on either backend: its events attempted once before (a
    redelivery), as a single node writes a fresh batch in one transaction, markers and all, which no
    crash can cut between its shards and its model-level markers."""
    store._attempted([e.event_id for e in events if e.changed_rows])
    return store.apply_rows(snapshot, learned, events)


def test_written_rows_equal_applying_the_same_change_as_updates(make_store: StoreFactory) -> None:
    store = make_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    learned = _learned(store, snapshot.values, 1.5)
    assert store.apply_rows(snapshot, learned, [*_events("e1"), LearnedEvent("e2", (), False)]) == [True, True]

    reference = make_store()
    reference.ensure_categories(["a", "b"])
    reference.apply(
        [RowUpdate("positive", IDS[:20], np.array([0]), np.array([1.5])),
         RowUpdate("negative", IDS[:20], np.array([0]), np.array([1 / 1.5]))],
        event_id="e1",
    )  # fmt: skip
    for name in ("positive", "negative", "keep"):
        np.testing.assert_array_equal(store.read(IDS)[name], reference.read(IDS)[name])
    assert store.version == 1  # e2 changed nothing: marked, not versioned
    assert store.counters("updates") == {"*": 1.0, "a": 1.0}
    assert store.n_features() == 20  # only the rows that changed were stored
    assert store.applied_events(["e1", "e2", "e3"]) == [True, True, False]


def test_a_row_changed_since_the_snapshot_writes_nothing(make_store: StoreFactory) -> None:
    store = make_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    store.apply([RowUpdate("positive", IDS[5:6], np.array([1]), np.array([2.0]))], event_id="other-worker")
    before = store.read(IDS)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) is None
    after = store.read(IDS)
    # Shards without the changed row may have been written; the changed row's shard was not.
    np.testing.assert_array_equal(after["positive"][5], before["positive"][5])
    assert store.applied_events(["e1"]) == [False]
    assert store.version == 1


def test_a_write_between_the_counter_check_and_exec_writes_no_shard(
    make_single_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single node writes a fresh batch's shards in one WATCHed transaction: another worker's write
    after the counters were checked, before EXEC, leaves every shard as it was (the scripts' way, only
    that shard)."""
    store = make_single_store()
    store.ensure_categories(["a", "b"])
    rival = make_single_store(model=store.model)
    snapshot = store.read_for_update(IDS)
    transactions: list[list[Any] | None] = []
    real = resp.watched_transaction

    def with_a_rival(client: Any, watch: Any, read: Any, commands_for: Callable[[Any], Any]) -> list[Any] | None:
        def rival_writes_first(reply: Any) -> Any:
            commands = commands_for(reply)  # the counters are as read: the transaction is built
            assert commands is not None
            rival.apply([RowUpdate("positive", IDS[5:6], np.array([1]), np.array([2.0]))], event_id="rival")
            return commands

        transactions.append(real(client, watch, read, rival_writes_first))
        return transactions[-1]

    monkeypatch.setattr(resp, "watched_transaction", with_a_rival)
    before = store.read(IDS)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) is None
    assert transactions == [None]  # EXEC refused
    after = store.read(IDS)
    before["positive"][5, 1] *= 2.0  # the rival's write, and nothing of ours
    for name in ("positive", "negative", "keep"):
        np.testing.assert_array_equal(after[name], before[name])
    assert store.applied_events(["e1", "rival"]) == [False, True]
    assert store.version == 1


def test_a_single_node_writes_fresh_batches_in_a_transaction_and_redeliveries_by_script(
    make_single_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both row-write paths are exercised: the transaction for a fresh batch, the shard scripts (which
    look the suspects up in the marker sets) for a batch holding an event attempted before."""
    store = make_single_store()
    store.ensure_categories(["a", "b"])
    calls: list[int] = []
    real = resp.watched_transaction

    def counted(*args: Any) -> list[Any] | None:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(resp, "watched_transaction", counted)
    snapshot = store.read_for_update(IDS)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) == [True]
    assert len(calls) == 1
    again = store.read_for_update(IDS)
    assert store.apply_rows(again, _learned(store, again.values, 1.5), _events("e1", "e2")) is None  # e1 is there
    assert len(calls) == 1
    fresh = store.read_for_update(IDS)
    assert store.apply_rows(fresh, _learned(store, fresh.values, 1.5), _events("e3")) == [True]
    assert len(calls) == 2
    np.testing.assert_allclose(store.read(IDS)["positive"][:20, 0], 2.0 * 1.5 * 1.5, rtol=1e-6)


def test_a_batch_written_at_once_is_marked_at_the_model_level_only_and_never_applied_twice(
    make_single_store: StoreFactory,
) -> None:
    """The one-transaction write marks its events where a redelivery looks first (the model-level
    markers), with the rows, counters and version: no shard marker set holds them (about 1 KB an event
    over 16 shards, kept a week), and a redelivery, by either path, changes nothing."""
    store = make_single_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    events = [*_events("e1", "e2"), LearnedEvent("e3", (), False)]
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), events) == [True, True, True]
    assert not [key for key in store.model_keys() if b":evs:" in key]
    assert store.applied_events(["e1", "e2", "e3", "e4"]) == [True, True, True, False]
    assert store.version == 2  # e3 changed nothing: marked, not versioned
    assert store.counters("updates") == {"*": 2.0, "a": 2.0}
    written = store.read(IDS)
    # Redelivered: the scripts' way (e1 is a suspect now) finds its marker, so does the event-by-event way.
    again = store.read_for_update(IDS)
    assert store.apply_rows(again, _learned(store, again.values, 1.5), _events("e1")) is None
    assert store.apply_many([([RowUpdate("positive", IDS[:20], np.array([0]), np.array([1.5]))], "e1")]) == [False]
    for name in ("positive", "negative", "keep"):
        np.testing.assert_array_equal(store.read(IDS)[name], written[name])
    assert store.version == 2 and store.counters("updates") == {"*": 2.0, "a": 2.0}


def test_an_event_only_marked_by_another_worker_after_the_check_is_learned_once(
    make_single_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the write counters are WATCHed, not the events' markers: another worker that marks one of
    the batch's events without changing rows (its model had it right), between the check and EXEC,
    leaves the rows and counts to this batch, once; that event's reply is False."""
    store = make_single_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    real = resp.watched_transaction

    def with_a_rival(client: Any, watch: Any, read: Any, commands_for: Callable[[Any], Any]) -> list[Any] | None:
        def rival_marks_first(reply: Any) -> Any:
            commands = commands_for(reply)
            # What the meta step of an event that changed nothing does: its marker, and nothing else.
            assert store.client.set(f"sw:{{{store.model}}}:ev:e2".encode(), b"1", nx=True, ex=3600)
            return commands

        return real(client, watch, read, rival_marks_first)

    monkeypatch.setattr(resp, "watched_transaction", with_a_rival)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("e1", "e2")) == [True, False]
    assert store.applied_events(["e1", "e2"]) == [True, True]
    assert store.version == 2 and store.counters("updates") == {"*": 2.0, "a": 2.0}
    np.testing.assert_allclose(store.read(IDS)["positive"][:20, 0], 2.0 * 1.5, rtol=1e-6)


def test_a_redelivery_after_a_partial_write_is_refused_and_completes_once(make_store: StoreFactory) -> None:
    """A crash after some shards were written: the markers there send the batch the event-by-event way."""
    store = make_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    assert _by_scripts(store, snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) == [True]
    # Simulate "shards written, meta not": drop the model-level marker only.
    store.client.delete(f"sw:{{{store.model}}}:ev:e1".encode())
    again = store.read_for_update(IDS)
    assert store.apply_rows(again, _learned(store, again.values, 1.5), _events("e1")) is None
    # Nothing moved twice.
    np.testing.assert_allclose(store.read(IDS)["positive"][:20, 0], 2.0 * 1.5, rtol=1e-6)


@pytest.mark.parametrize("path", ["apply_many", "apply"])
def test_a_redelivery_after_a_partial_event_by_event_apply_is_refused(make_store: StoreFactory, path: str) -> None:
    """The event-by-event path (apply_rows' fallback) marks its events as attempted too, so a crash
    after its shard scripts sends the redelivery's apply_rows to check the shards' marker sets."""
    store = make_store()
    store.ensure_categories(["a", "b"])
    updates = [RowUpdate("positive", IDS[:20], np.array([0]), np.array([1.5])),
               RowUpdate("negative", IDS[:20], np.array([0]), np.array([1 / 1.5]))]  # fmt: skip
    if path == "apply_many":
        assert store.apply_many([(updates, "e1")]) == [True]
    else:
        assert store.apply(updates, event_id="e1")
    store.client.delete(f"sw:{{{store.model}}}:ev:e1".encode())  # "shards written, meta not"
    again = store.read_for_update(IDS)
    assert store.apply_rows(again, _learned(store, again.values, 1.5), _events("e1")) is None
    np.testing.assert_allclose(store.read(IDS)["positive"][:20, 0], 2.0 * 1.5, rtol=1e-6)


def test_every_event_in_a_shard_marker_set_was_marked_as_attempted_first(make_store: StoreFactory) -> None:
    """apply_rows checks only events attempted before against the marker sets: that is safe only
    if no path marks an event in a shard without its attempt marker."""
    store = make_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("rows")) == [True]
    update = [RowUpdate("positive", IDS[20:], np.array([1]), np.array([2.0]))]
    assert store.apply_many([(update, "many")]) == [True]
    assert store.apply(update, event_id="one")
    marked = {member.decode() for key in store.model_keys() if b":evs:" in key
              for member in store.client.smembers(key)}  # fmt: skip
    # A single node writes a fresh batch in one transaction, its markers at the model level only.
    assert marked == ({"rows", "many", "one"} if store.is_cluster else {"many", "one"})
    attempted = [store.client.exists(f"sw:{{{store.model}}}:try:{e}".encode()) for e in ("rows", "many", "one")]
    assert attempted == [1, 1, 1]
    # Attempt markers outlive the marker sets they guard.
    sets_ttl = max(store.client.ttl(key) for key in store.model_keys() if b":evs:" in key)
    assert store.client.ttl(f"sw:{{{store.model}}}:try:rows".encode()) > sets_ttl


def test_a_fresh_batch_is_written_though_the_marker_sets_are_full(make_store: StoreFactory) -> None:
    """Events never attempted are not looked up in the marker sets (the cost that is saved), and
    events attempted before are: a batch holding one of them is refused."""
    store = make_store()
    store.ensure_categories(["a", "b"])
    first = store.read_for_update(IDS)
    assert _by_scripts(store, first, _learned(store, first.values, 1.5), _events("old")) == [True]
    store.client.delete(f"sw:{{{store.model}}}:ev:old".encode())  # a crash before the meta step
    snapshot = store.read_for_update(IDS)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("new", "old")) is None
    snapshot = store.read_for_update(IDS)
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("new")) == [True]
    np.testing.assert_allclose(store.read(IDS)["positive"][:20, 0], 2.0 * 1.5 * 1.5, rtol=1e-6)


def test_rows_wider_than_the_learned_ones_are_left_to_apply_many(make_store: StoreFactory) -> None:
    store = make_store()
    store.ensure_categories(["a"])
    snapshot = store.read_for_update(IDS)
    other = RedisStore(store.client, store.model, TABLES, store.shards)
    other.ensure_categories(["a", "b"])
    other.apply([RowUpdate("positive", IDS[:1], np.array([1]), np.array([2.0]))], event_id="wide")
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) is None


def test_memory_store_never_writes_rows() -> None:
    memory = MemoryStore(TABLES)
    snapshot = memory.read_for_update(IDS)
    assert memory.apply_rows(snapshot, snapshot.values, _events("e1")) is None


_COUNTER_UPDATES = st.builds(
    CounterUpdate,
    st.sampled_from(["updates", "mistakes"]),
    st.dictionaries(st.sampled_from(["*", "a", "b", "ünï"]), st.floats(-4, 4, allow_nan=False), max_size=3),
)
_LEARNED_EVENTS = st.builds(
    LearnedEvent, st.text(min_size=1, max_size=8), st.lists(_COUNTER_UPDATES, max_size=3).map(tuple), st.booleans()
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_LEARNED_EVENTS, max_size=6))
def test_a_batch_of_learned_events_makes_the_meta_call_each_event_would(
    make_single_store: StoreFactory, events: list[LearnedEvent]
) -> None:
    """apply_rows builds the meta script's call in one pass: the same keys and plan as event by event."""
    from stream_winnow.stores.redis import _counter_amounts, _metas_call

    store = make_single_store()
    ttl = 3600
    each = [store._meta_call(e.event_id, ttl, _counter_amounts(e.counters), not e.changed_rows) for e in events]
    assert store._events_call(events, ttl) == _metas_call(store._version_key, each)


def test_event_by_event_apply_skips_shards_the_row_write_marked(make_store: StoreFactory) -> None:
    """A crash after apply_rows wrote the shards but before the model-level marker: the fallback path,
    which marks events with keys, must still see the shards' marker sets and not apply e1 again."""
    store = make_store()
    store.ensure_categories(["a", "b"])
    snapshot = store.read_for_update(IDS)
    assert _by_scripts(store, snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) == [True]
    written = store.read(IDS)["positive"].copy()
    store.client.delete(f"sw:{{{store.model}}}:ev:e1".encode())
    store.apply([RowUpdate("positive", IDS[:20], np.array([0]), np.array([1.5]))], event_id="e1")
    np.testing.assert_array_equal(store.read(IDS)["positive"], written)


def test_deleting_rows_makes_a_snapshot_of_the_shard_stale(make_store: StoreFactory) -> None:
    store = make_store()
    store.ensure_categories(["a", "b"])
    store.apply([RowUpdate("positive", IDS[:1], np.array([1]), np.array([2.0]))], event_id="seed")
    snapshot = store.read_for_update(IDS)
    assert store.delete(IDS[:1]) == 1  # compact, between the read and the write
    assert store.apply_rows(snapshot, _learned(store, snapshot.values, 1.5), _events("e1")) is None
