"""MemoryStore: reads of unseen features, the one update operation, counters, growth, delete, metadata."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from stream_winnow.errors import ConfigError
from stream_winnow.stores.base import Bounds, CounterUpdate, RowUpdate, StaleWatermark, TableSpec
from stream_winnow.stores.delta import RowDelta, SourceRange, fold_updates, shared
from stream_winnow.stores.memory import MemoryStore

TABLES = [
    TableSpec("positive", 2.0),
    TableSpec("negative", 1.0, bounds=Bounds(0.25, 8.0)),
    TableSpec("keep", 1.0, per_category=False, bounds=Bounds(0.0, 1.0)),
]


@pytest.fixture
def store_factory() -> Callable[..., MemoryStore]:
    """``store_factory(categories=(), tables=TABLES) -> MemoryStore``."""

    def make(categories: tuple[str, ...] = (), tables: list[TableSpec] | None = None) -> MemoryStore:
        store = MemoryStore(tables or TABLES)
        if categories:
            store.ensure_categories(list(categories))
        return store

    return make


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_table_names_must_be_unique_and_present() -> None:
    with pytest.raises(ConfigError):
        MemoryStore([TableSpec("w", 0.0), TableSpec("w", 1.0)])
    with pytest.raises(ConfigError):
        MemoryStore([])


def test_unseen_features_read_as_initial_values(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a", "b", "c"))
    values = store.read(ids(70_000, 80_000))
    assert values["positive"].tolist() == [[2.0] * 3] * 2
    assert values["negative"].tolist() == [[1.0] * 3] * 2
    assert values["keep"].tolist() == [[1.0], [1.0]]
    assert store.n_features() == 0  # reading allocates nothing
    assert store.widths() == {"positive": 3, "negative": 3, "keep": 1}


def test_read_of_no_features_and_no_categories(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory()
    assert store.read(ids())["positive"].shape == (0, 0)
    assert store.read(ids(70_000))["positive"].shape == (1, 0)
    assert store.categories() == ()


def test_read_returns_a_copy(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a",))
    store.apply([RowUpdate("positive", ids(70_000), np.array([0]), add=np.array([[1.0]]))])
    store.read(ids(70_000))["positive"][:] = 99.0
    store.read(ids(90_000))["positive"][:] = 99.0
    assert store.read(ids(70_000, 90_000))["positive"].tolist() == [[3.0], [2.0]]


def test_ensure_categories_returns_columns_and_keeps_order(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory()
    assert store.ensure_categories(["b", "a"]).tolist() == [0, 1]
    assert store.ensure_categories(["a", "c", "b", "c"]).tolist() == [1, 2, 0, 2]
    assert store.categories() == ("b", "a", "c")


def test_apply_multiply_add_and_clip(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a", "b", "c"))
    f = ids(70_000, 70_001)
    assert store.apply([RowUpdate("positive", f, np.array([0, 2]), multiply=np.array([1.5, 0.5]))])
    assert store.read(f)["positive"].tolist() == [[3.0, 2.0, 1.0]] * 2
    store.apply([RowUpdate("positive", f, np.array([1]), add=np.array([[0.25], [-0.5]]))])
    assert store.read(f)["positive"].tolist() == [[3.0, 2.25, 1.0], [3.0, 1.5, 1.0]]
    # multiply then add, in one update: w * m + a
    store.apply([RowUpdate("positive", f, np.array([0]), multiply=np.array([2.0]), add=np.array([[1.0], [-1.0]]))])
    assert store.read(f)["positive"][:, 0].tolist() == [7.0, 5.0]
    # clipped to the table's bounds (negative: [0.25, 8])
    store.apply([RowUpdate("negative", f, np.array([0, 1]), multiply=np.array([100.0, 0.001]))])
    assert store.read(f)["negative"].tolist() == [[8.0, 0.25, 1.0]] * 2
    # the default bounds [1e-30, 1e30]
    store.apply([RowUpdate("positive", f, np.array([2]), multiply=np.array([1e300]))])
    store.apply([RowUpdate("positive", f, np.array([1]), multiply=np.array([0.0]))])
    assert store.read(f)["positive"][:, 1:].tolist() == [[1e-30, 1e30]] * 2
    # other features untouched
    assert store.read(ids(70_002))["positive"].tolist() == [[2.0, 2.0, 2.0]]


def test_apply_several_tables_in_one_call_bumps_the_version_once(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a",))
    f = ids(70_000)
    version = store.version
    store.apply([
        RowUpdate("positive", f, np.array([0]), multiply=np.array([1.5])),
        RowUpdate("negative", f, np.array([0]), multiply=np.array([0.5])),
        RowUpdate("keep", f, np.array([0]), multiply=np.zeros(1)),
        CounterUpdate("updates", {"*": 1.0, "a": 1.0}),
    ])  # fmt: skip
    assert store.version == version + 1
    values = store.read(f)
    assert (values["positive"][0, 0], values["negative"][0, 0], values["keep"][0, 0]) == (3.0, 0.5, 0.0)


def test_counters(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory()
    assert store.counters("docs") == {}
    store.apply([CounterUpdate("docs", {"*": 1.0, "a": 1.0}), CounterUpdate("tokens", {"*": 7.0})])
    store.apply([CounterUpdate("docs", {"*": 1.0, "b": 2.5})])
    assert store.counters("docs") == {"*": 2.0, "a": 1.0, "b": 2.5}
    assert store.counters("tokens") == {"*": 7.0}
    copy = store.counters("docs")
    copy["*"] = 100.0
    assert store.counters("docs")["*"] == 2.0


def test_a_delta_moves_the_watermark_and_a_redelivery_is_refused(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a",))
    update = [RowUpdate("positive", ids(70_000), np.array([0]), multiply=np.array([1.5])), CounterUpdate("n", {"*": 1})]
    delta = fold_updates([update, update], list(store.tables.values()), 1)
    store.apply_delta(delta, [SourceRange("labels:0", (-1, -1), 41)], {"labels:0": np.array([7, 8], dtype=np.uint64)})
    assert store.read(ids(70_000))["positive"][0, 0] == 2.0 * 1.5**2
    assert store.counters("n") == {"*": 2}
    assert store.version == 2
    assert store.watermarks(["labels:0", "labels:1"])["labels:0"].tolist() == [41, 41]
    assert store.seen_events("labels:0").tolist() == [7, 8]
    with pytest.raises(StaleWatermark):  # a writer that did not know of offset 41
        store.apply_delta(delta, [SourceRange("labels:0", (-1, -1), 50)])
    assert store.version == 2
    assert store.read(ids(70_000))["positive"][0, 0] == 2.0 * 1.5**2


def test_growth_past_16_categories_and_4096_rows_keeps_values(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("c0",))
    rng = np.random.default_rng(0)
    features = np.arange(70_000, 70_000 + 5_000, dtype=np.int64)
    expected_pos: dict[tuple[int, str], float] = {}
    expected_keep: dict[int, float] = {}
    categories = ["c0"]
    for step in range(40):
        if step % 2 == 0:  # a new category every other step: 21 in all, past the initial 16
            categories.append(f"c{len(categories)}")
            store.ensure_categories(categories[-1:])
        pool = features[: 300 + 150 * step]  # rows grow past 4,096
        chosen = rng.choice(pool, size=min(len(pool), 400), replace=False)
        name = categories[int(rng.integers(len(categories)))]
        column = store.ensure_categories([name])
        add = rng.random((len(chosen), 1))
        before = store.read(chosen)["positive"][:, column[0]].copy()
        store.apply([RowUpdate("positive", chosen, column, add=add),
                     RowUpdate("keep", chosen, np.array([0]), multiply=np.full(1, 0.5))])  # fmt: skip
        for fid, old, a in zip(chosen.tolist(), before.tolist(), add[:, 0].tolist(), strict=True):
            expected_pos[(fid, name)] = old + a
            expected_keep[fid] = expected_keep.get(fid, 1.0) * 0.5
    assert len(store.categories()) > 16
    assert store.n_features() > 4096
    touched = np.array(sorted(expected_keep), dtype=np.int64)
    values = store.read(touched)
    for i, fid in enumerate(touched.tolist()):
        for j, name in enumerate(store.categories()):
            assert values["positive"][i, j] == expected_pos.get((fid, name), 2.0), (fid, name)
        assert values["negative"][i].tolist() == [1.0] * len(store.categories())
        assert values["keep"][i, 0] == expected_keep[fid]
    # A feature never touched still reads as initial, in every column.
    untouched = store.read(ids(999_999))
    assert untouched["positive"].tolist() == [[2.0] * len(store.categories())]


def test_delete_forgets_rows_and_rows_are_reused(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a", "b"))
    f = ids(70_000, 70_001, 70_002)
    store.apply([RowUpdate("positive", f, np.array([0, 1]), multiply=np.array([3.0, 0.5]))])
    assert store.n_features() == 3
    assert store.delete(ids(70_001, 12_345_678)) == 1  # only existing rows count
    assert store.n_features() == 2
    assert store.read(ids(70_001))["positive"].tolist() == [[2.0, 2.0]]
    assert store.read(ids(70_000, 70_002))["positive"].tolist() == [[6.0, 1.0]] * 2
    # A new feature takes the freed row and starts from the initial values, not the deleted ones.
    store.apply([RowUpdate("negative", ids(80_000), np.array([0]), add=np.array([[1.0]]))])
    assert store.read(ids(80_000))["positive"].tolist() == [[2.0, 2.0]]
    assert store.read(ids(80_000))["negative"].tolist() == [[2.0, 1.0]]
    assert store.n_features() == 3
    assert store.delete(ids(70_001)) == 0


def test_iter_rows_yields_every_stored_row_once(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a",))
    f = np.arange(70_000, 70_025, dtype=np.int64)
    store.apply([RowUpdate("positive", f, np.array([0]), add=np.arange(25, dtype=float)[:, None])])
    store.delete(ids(70_003))
    seen: dict[int, float] = {}
    for chunk, values in store.iter_rows(chunk_rows=7):
        assert len(chunk) <= 7
        assert set(values) == {"positive", "negative", "keep"}
        for fid, v in zip(chunk.tolist(), values["positive"][:, 0].tolist(), strict=True):
            assert fid not in seen
            seen[fid] = v
    assert seen == {70_000 + i: 2.0 + i for i in range(25) if i != 3}
    assert list(MemoryStore(TABLES).iter_rows()) == []


def test_the_same_feature_twice_in_one_update(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a",))
    store.apply([RowUpdate("positive", ids(70_000, 70_000), np.array([0]), add=np.array([[1.0], [1.0]]))])
    assert store.n_features() == 1
    assert store.read(ids(70_000))["positive"][0, 0] in (3.0, 4.0)


def test_metadata(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory()
    assert store.metadata() == {}
    store.set_metadata({"learner": "perceptron", "mode": "any-of"})
    store.set_metadata({"mode": "one-of"})
    assert store.metadata() == {"learner": "perceptron", "mode": "one-of"}
    store.metadata()["learner"] = "changed"
    assert store.metadata()["learner"] == "perceptron"
    assert store.version == 0  # metadata is not an update


def test_version_counts_applies(store_factory: Callable[..., MemoryStore]) -> None:
    store = store_factory(("a",))
    assert store.version == 0
    for n in range(1, 4):
        store.apply([CounterUpdate("x", {"*": 1.0})])
        assert store.version == n


def test_bulk_path_accounts_for_updates(store_factory: Callable[..., MemoryStore]) -> None:
    """``allocate_rows`` / ``packed`` / ``record_bulk``: what the compiled loop writes through."""
    store = store_factory(("a", "b"))
    rows = store.allocate_rows(ids(70_005, 70_001, 70_005))
    assert rows[0] == rows[2] != rows[1] and store.n_features() == 2
    weights, offsets = store.packed()
    weights[rows[1], offsets["positive"] + 1] = 5.0
    assert store.read(ids(70_001))["positive"].tolist() == [[2.0, 5.0]]
    store.record_bulk(7, [CounterUpdate("updates", {"*": 7.0})])
    assert store.version == 7
    store.record_bulk(0, [])
    assert store.version == 7


def test_large_lookups_through_the_hash_table_agree_with_the_dict() -> None:
    """rows_of for many ids uses a compiled table mirroring the row dict, across allocations and deletes."""
    store = MemoryStore([TableSpec("w", 1.0)])
    store.ensure_categories(["a"])
    rng = np.random.default_rng(0)
    ids = rng.integers(1 << 16, 1 << 62, size=3000, dtype=np.int64)
    for step in range(6):
        chunk = ids[step * 500 : (step + 1) * 500]
        store.apply([RowUpdate("w", chunk[:40], np.array([0]), np.array([2.0]))])  # small: the dict path
        store.apply([RowUpdate("w", chunk, np.array([0]), np.array([3.0]))])  # large: the table path
        if step % 2:
            store.delete(chunk[:100])  # the table is rebuilt after deletes
        probe = np.concatenate([ids[: (step + 1) * 500], [0, 5, 1 << 40]]).astype(np.int64)
        get = store._row.get
        assert store.rows_of(probe).tolist() == [get(f, 0) for f in probe.tolist()]


@pytest.mark.parametrize("combine", ["multiply", "add"])
def test_two_peers_averaging_the_same_change_land_it_once(combine: str) -> None:
    """Averaged at 2 peers, a change two peers both learned is written as one learner's; the keep flag
    and counters, which count documents, stay whole."""
    specs = [TableSpec("w", 1.0, combine=combine), TableSpec("keep", 1.0, per_category=False)]  # type: ignore[arg-type]
    change = np.array([[1.69, 1.0], [0.49, 1.0]]) if combine == "multiply" else np.array([[0.6, 0.0], [-0.2, 0.0]])
    delta = RowDelta(np.array([4, 9]), {"w": change, "keep": np.array([[1.0], [0.0]])}, {"updates": {"*": 1.0}}, 1)
    once, averaged = MemoryStore(specs), MemoryStore(specs)
    for store in (once, averaged):
        store.ensure_categories(["a", "b"])
    once.apply_delta(delta)
    for _ in range(2):
        averaged.apply_delta(shared(delta, specs, 0.5))
    np.testing.assert_allclose(averaged.read(np.array([4, 9]))["w"], once.read(np.array([4, 9]))["w"])
    assert averaged.read(np.array([9]))["keep"].tolist() == once.read(np.array([9]))["keep"].tolist() == [[1e-30]]
    assert averaged.counters("updates") == {"*": 2.0}
    with pytest.raises(ConfigError, match="share must be in"):
        shared(delta, specs, 0.0)
