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

from stream_winnow.errors import ConfigError, StoreError
from stream_winnow.learners.balanced_winnow import BalancedWinnow
from stream_winnow.stores import Bounds, CounterUpdate, MemoryStore, RowUpdate, TableSpec, Update
from stream_winnow.stores.base import MODEL_PART, StaleWatermark
from stream_winnow.stores.delta import RowDelta, SourceRange, fold_updates
from stream_winnow.stores.redis import RedisStore
from stream_winnow.stores.redis.keys import CHANGE_LOG_WRITES
from workers.embedded import start_redis

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# A global table between two per-category ones, and bounds that clip: the layout's awkward cases.
TABLES = [
    TableSpec("positive", 2.0),
    TableSpec("keep", 1.0, per_category=False, bounds=Bounds(0.0, 1.0), combine="add"),
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
        target.apply([RowUpdate("negative", ids[:1], np.array([2]), np.array([3.0]))])
    assert_same_rows(store, memory, ids)


# -- updates equal MemoryStore's --------------------------------------------------------------------


@st.composite
def update_steps(draw: st.DrawFn) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = [("categories", draw(st.integers(1, 3)))]
    n_categories = steps[0][1]
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["categories", "apply", "apply", "apply"]))
        if kind == "categories":
            n_new = draw(st.integers(1, 2))
            n_categories += n_new
            steps.append(("categories", n_new))
            continue
        updates: list[Update] = []
        # One update a table per apply: a store clips once per apply (a delta), not once per update.
        for table in draw(st.lists(st.sampled_from(TABLES), min_size=1, max_size=3, unique_by=lambda t: t.name)):
            ids = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6))
            if table.per_category:
                columns = draw(st.lists(st.integers(0, n_categories - 1), min_size=1, max_size=n_categories))
            else:
                columns = [0]
            factors = st.floats(0.25, 4.0, allow_nan=False)
            amounts = st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=len(columns), max_size=len(columns))
            if table.combine == "multiply":
                multiply, add = draw(st.lists(factors, min_size=len(columns), max_size=len(columns))), None
            else:
                multiply, add = None, draw(st.lists(amounts, min_size=len(ids), max_size=len(ids)))
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
        steps.append(("apply", updates))
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
                assert store.apply(arg) == memory.apply(arg)
        assert store.categories() == memory.categories()
        assert_same_rows(store, memory, np.arange(-1, 42, dtype=np.int64))
        assert store.version == memory.version
        assert store.n_features() <= memory.n_features()  # an update that changes nothing stores no row in Redis
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


# -- exactly once by offsets -------------------------------------------------------------------------


def _winnow_updates(ids: np.ndarray) -> list[Update]:
    return [
        RowUpdate("positive", ids, np.array([0, 2]), np.array([1.5, 0.5])),
        RowUpdate("negative", ids, np.array([0, 2]), np.array([0.5, 1.5])),
        RowUpdate("keep", ids[:3], np.array([0]), add=np.full((3, 1), -0.25)),
        CounterUpdate("updates", {"*": 1.0, "a": 1.0, "c": 1.0}),
    ]


def _delta(store: RedisStore | MemoryStore, ids: np.ndarray, events: int = 2) -> RowDelta:
    return fold_updates([_winnow_updates(ids)] * events, TABLES, len(store.categories()))


def _from(store: RedisStore | MemoryStore, last: int, expected: int = -1, source: str = "labels:0") -> SourceRange:
    return SourceRange(source, (expected,) * (store.n_parts + 1), last)


def test_a_batch_moves_every_parts_watermark_and_its_redelivery_is_refused(make_store: StoreFactory) -> None:
    store, memory = make_store(), MemoryStore(TABLES)
    ids = np.arange(0, 200, 7, dtype=np.int64)
    for target in (store, memory):
        target.ensure_categories(["a", "b", "c"])
        target.apply_delta(_delta(target, ids), [_from(target, 99)])
    assert store.watermarks(["labels:0"])["labels:0"].tolist() == [99] * (store.shards + 1)
    with pytest.raises(StaleWatermark) as refused:  # a worker that did not see offset 99 applied
        store.apply_delta(_delta(store, ids), [_from(store, 120)])
    assert refused.value.found == 99 and refused.value.expected == -1
    assert_same_rows(store, memory, ids)
    assert store.version == memory.version == 2
    assert store.counters("updates") == {"*": 2.0, "a": 2.0, "c": 2.0}
    store.apply_delta(_delta(store, ids, 1), [_from(store, 120, expected=99)])  # the next batch
    assert store.version == 3


def test_a_write_cut_short_between_parts_is_completed_by_the_parts_behind(make_store: StoreFactory) -> None:
    """A Cluster writes part by part: a crash after five shards leaves them ahead, and only the rest is written."""
    store, memory = make_store(), MemoryStore(TABLES)
    ids = np.arange(0, 64, dtype=np.int64)  # every one of the 16 shards
    for target in (store, memory):
        target.ensure_categories(["a", "b", "c"])
    memory.apply_delta(_delta(memory, ids), [_from(memory, 10)])
    store.apply_delta(_delta(store, ids), [_from(store, 10)], parts=range(5))  # the worker dies here
    marks = store.watermarks(["labels:0"])["labels:0"]
    assert marks.tolist() == [10] * 5 + [-1] * 12
    assert store.version == 0
    behind = [p for p in range(store.shards) if marks[p] < 10] + [MODEL_PART]
    store.apply_delta(_delta(store, ids), [SourceRange("labels:0", tuple(marks.tolist()), 10)], parts=behind)
    assert_same_rows(store, memory, ids)
    assert store.version == memory.version == 2 and store.n_features() == 64
    assert store.watermarks(["labels:0"])["labels:0"].tolist() == [10] * 17


def test_seen_events_are_a_ring_of_fixed_size(make_store: StoreFactory) -> None:
    store = make_store(seen_window=5)
    store.ensure_categories(["a"])
    empty = RowDelta(np.zeros(0, dtype=np.int64), {t.name: np.zeros((0, 1)) for t in TABLES})
    store.apply_delta(empty, [_from(store, 3)], {"labels:0": np.arange(1, 4, dtype=np.uint64)})
    assert sorted(store.seen_events("labels:0").tolist()) == [1, 2, 3]
    store.apply_delta(empty, [_from(store, 7, expected=3)], {"labels:0": np.arange(4, 9, dtype=np.uint64)})
    assert sorted(store.seen_events("labels:0").tolist()) == [4, 5, 6, 7, 8]
    ring = store.client.get(store.keys.seen_key("labels:0"))
    assert len(ring) == 5 * 8  # the window, however many events went by
    assert store.seen_events("labels:1").tolist() == []


def test_bookkeeping_memory_does_not_grow_with_the_events(make_store: StoreFactory) -> None:
    """Watermarks and the seen ring: fixed keys per partition, about 8 bytes an event until the ring is full."""
    store = make_store(seen_window=1_000)
    store.ensure_categories(["a", "b", "c"])
    ids = np.arange(0, 64, dtype=np.int64)
    sizes = []
    for batch in range(6):
        hashes = np.arange(batch * 500, (batch + 1) * 500, dtype=np.uint64)
        store.apply_delta(_delta(store, ids, 1), [_from(store, (batch + 1) * 500, batch * 500 or -1)], {"labels:0": hashes})
        keys = [k for k in store.model_keys() if b":f:" not in k and k not in store.keys.change_keys]
        sizes.append(sum(int(store.client.memory_usage(k) or 0) for k in keys))
    assert sizes[2] == sizes[-1]  # ring full after 1,000 events: nothing grows from then on
    assert sizes[-1] / 3_000 <= 64  # bytes of bookkeeping per applied event
    for _ in range(CHANGE_LOG_WRITES):
        store.apply_delta(_delta(store, ids, 1))
    # a change log keeps its last writes' row ids, whatever the events
    assert all(store.client.llen(key) == CHANGE_LOG_WRITES for key in store.keys.change_keys)


def _worker(url: str, model: str, worker: int, n_updates: int) -> None:
    store = RedisStore.from_url(url, model, TABLES)
    store.ensure_categories(["a", "b"])
    ids = np.arange(0, 24, dtype=np.int64)  # the same features (all shards) in every worker
    for _ in range(n_updates):
        updates: list[Update] = [
            RowUpdate("positive", ids, np.array([0, 1]), np.array([1.001, 0.999])),
            RowUpdate("negative", ids, np.array([1]), np.array([1.01])),
            CounterUpdate("updates", {"*": 1.0}),
        ]
        store.apply(updates)
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
    np.testing.assert_array_equal(values["negative"][:, 1], 8.0)  # 1.01^800 clipped at 8
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
    one.apply(_winnow_updates(ids)[:2] + [CounterUpdate("updates", {"*": 1.0})])
    one.set_metadata({"alpha": "1.5"})
    assert two.apply([RowUpdate("positive", ids, np.array([0]), np.array([2.0]))])
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
    store.apply(_winnow_updates(np.arange(0, 160, dtype=np.int64)))
    client = store.client
    nodes_of_shards = set()
    for shard in range(store.shards):
        prefix = f"sw:{{{store.model}:{shard}}}:".encode()
        keys = [key for key in store.model_keys() if key.startswith(prefix)]
        assert len(keys) == 10 + 3  # 10 rows, the row count, the write counter, the change log
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
        target.apply(_winnow_updates(ids))
    store.client.script_flush()
    for target in (store, memory):
        target.apply_delta(_delta(target, ids, 1), [_from(target, 5)])
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
        lambda: store.apply([CounterUpdate("updates", {"*": 1.0})]),
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
    for tokens, labels in _synthetic_documents(300, seed=11):
        expected = on_memory.learn_one(tokens, labels)
        got = on_redis.learn_one(tokens, labels)
        assert (got.promoted, got.demoted) == (expected.promoted, expected.demoted)
    assert on_redis.store.version == on_memory.store.version > 10
    mistakes = 0
    for tokens, labels in _synthetic_documents(60, seed=12):
        expected_prediction, got_prediction = on_memory.predict_one(tokens), on_redis.predict_one(tokens)
        assert got_prediction.categories == expected_prediction.categories
        np.testing.assert_allclose(got_prediction.margins, expected_prediction.margins, rtol=1e-5, atol=1e-6)
        mistakes += set(got_prediction.categories) != set(labels)
    assert mistakes < 30  # it did learn something
