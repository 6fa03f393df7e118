"""Model snapshots in process: MemoryStore -> file -> MemoryStore gives back the identical model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgpack
import numpy as np
import pytest

from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import ConfigError, DataError
from stream_winnow.learners import Learner, build_learner, describe, from_metadata
from stream_winnow.models.snapshot import (
    Snapshot,
    copy_model,
    export_model,
    import_model,
    read_snapshot,
    snapshot_format,
    take_snapshot,
)
from stream_winnow.models.training import TrainingConfig, fit
from stream_winnow.stores import MemoryStore, TableSpec, Update
from stream_winnow.stores.cached import CachedStore

CATEGORIES = ("grain", "oil", "earn", "acq")


def synthetic_docs(n: int = 120, seed: int = 0) -> list[LabelledDocument]:
    """Documents drawn from shared words, one word of their own and words typical of their (1-2) categories."""
    rng = np.random.default_rng(seed)
    common = [f"w{i}" for i in range(80)]
    typical = {c: [f"{c}{i}" for i in range(12)] for c in CATEGORIES}
    docs = []
    for i in range(n):
        labels = list(rng.choice(CATEGORIES, size=int(rng.integers(1, 3)), replace=False))
        tokens = [*rng.choice(common, size=15), f"rare{seed}-{i}"]  # rare words: what feature discarding drops
        for label in labels:
            tokens += list(rng.choice(typical[label], size=5))
        docs.append(LabelledDocument(str(i), tuple(str(t) for t in tokens), tuple(str(c) for c in labels)))
    return docs


def trained(name: str = "balanced-winnow", passes: int = 4) -> Learner:
    learner = build_learner(name)
    fit(learner, synthetic_docs(), TrainingConfig(passes=passes))
    learner.store.set_metadata({**describe(learner), "shards": "4"})
    return learner


def assert_same_model(a: Snapshot, b: Snapshot) -> None:
    assert a.metadata == b.metadata
    assert a.categories == b.categories
    assert a.tables == b.tables
    assert a.counters == b.counters
    assert a.version == b.version
    np.testing.assert_array_equal(a.feature_ids, b.feature_ids)
    assert list(a.values) == list(b.values)
    for name in a.values:
        np.testing.assert_array_equal(a.values[name], b.values[name], err_msg=name)


@pytest.mark.parametrize("suffix", [".msgpack", ".npz"])
@pytest.mark.parametrize("learner_name", ["balanced-winnow", "multinomial-nb"])
def test_round_trip_is_exact(tmp_path: Path, suffix: str, learner_name: str) -> None:
    source = trained(learner_name)
    path = tmp_path / f"model{suffix}"
    written = export_model(source.store, path)
    target = MemoryStore(source.table_specs())
    import_model(path, target)
    assert_same_model(take_snapshot(source.store), take_snapshot(target))
    assert_same_model(written, take_snapshot(target))
    assert target.n_features() == source.store.n_features() > 0
    # The rebuilt learner decides exactly as the original.
    rebuilt = from_metadata(target.metadata(), target)
    for doc in synthetic_docs(10, seed=1):
        np.testing.assert_array_equal(rebuilt.predict_one(doc.tokens).margins, source.predict_one(doc.tokens).margins)


def test_files_are_deterministic(tmp_path: Path) -> None:
    source = trained()
    export_model(source.store, tmp_path / "a.msgpack")
    copy = MemoryStore(source.table_specs())
    import_model(tmp_path / "a.msgpack", copy)
    export_model(copy, tmp_path / "b.msgpack")
    assert (tmp_path / "a.msgpack").read_bytes() == (tmp_path / "b.msgpack").read_bytes()


def test_values_are_float32_only_when_exact(tmp_path: Path) -> None:
    store = MemoryStore([TableSpec("w", 0.0)])
    store.ensure_categories(["a", "b"])
    store.apply([_set("w", [1 << 20, 1 << 21], [[0.5, 0.25], [1.0, 2.0]])])
    export_model(store, tmp_path / "narrow.msgpack")
    assert msgpack.unpackb((tmp_path / "narrow.msgpack").read_bytes())["values"]["w"]["dtype"] == "<f4"
    store.apply([_set("w", [1 << 20], [[0.1, 1 / 3]])])
    export_model(store, tmp_path / "wide.msgpack")
    raw = msgpack.unpackb((tmp_path / "wide.msgpack").read_bytes())
    assert raw["values"]["w"]["dtype"] == "<f8"
    assert read_snapshot(tmp_path / "wide.msgpack").values["w"][0].tolist() == [0.1, 1 / 3]


def _set(table: str, ids: list[int], values: list[list[float]]) -> Update:
    from stream_winnow.stores import RowUpdate

    width = len(values[0])
    return RowUpdate(table, np.array(ids, dtype=np.int64), np.arange(width), np.zeros(width), np.array(values))


def test_import_refuses_a_non_empty_store_unless_replace(tmp_path: Path) -> None:
    source = trained(passes=2)
    export_model(source.store, tmp_path / "m.npz")
    other = trained("balanced-winnow", passes=1)
    other.store.ensure_categories(["extra"])
    with pytest.raises(ConfigError, match="not empty"):
        import_model(tmp_path / "m.npz", other.store)
    import_model(tmp_path / "m.npz", other.store, replace=True)
    assert_same_model(take_snapshot(source.store), take_snapshot(other.store))


def test_tables_must_match(tmp_path: Path) -> None:
    export_model(trained(passes=1).store, tmp_path / "m.msgpack")
    with pytest.raises(ConfigError, match="tables"):
        import_model(tmp_path / "m.msgpack", MemoryStore(build_learner("perceptron").table_specs()))


def test_format_from_suffix_or_argument(tmp_path: Path) -> None:
    assert snapshot_format("x.MSGPACK") == "msgpack"
    assert snapshot_format("x.npz") == "npz"
    with pytest.raises(ConfigError, match=r"\*\.msgpack or \*\.npz"):
        snapshot_format("model.bin")
    with pytest.raises(ConfigError, match="msgpack, npz"):
        snapshot_format("model.bin", "pickle")  # type: ignore[arg-type]
    store = trained(passes=1).store
    export_model(store, tmp_path / "model.bin", format="npz")  # content, not the name, tells on reading
    assert read_snapshot(tmp_path / "model.bin").n_features == store.n_features()
    assert not (tmp_path / "model.bin.npz").exists()


def test_bad_files_raise_data_error(tmp_path: Path) -> None:
    (tmp_path / "junk.msgpack").write_bytes(b"\xc1 not msgpack")
    with pytest.raises(DataError):
        read_snapshot(tmp_path / "junk.msgpack")
    (tmp_path / "other.msgpack").write_bytes(msgpack.packb({"format": "something-else"}))
    with pytest.raises(DataError, match="not a stream-winnow snapshot"):
        read_snapshot(tmp_path / "other.msgpack")
    export_model(trained(passes=1).store, tmp_path / "m.msgpack")
    raw = msgpack.unpackb((tmp_path / "m.msgpack").read_bytes())
    raw["values"]["positive"]["shape"][1] += 1
    (tmp_path / "bad.msgpack").write_bytes(msgpack.packb(raw))
    with pytest.raises(DataError):
        read_snapshot(tmp_path / "bad.msgpack")


def _Proxy(tables: Sequence[TableSpec]) -> CachedStore:
    """A store that is neither MemoryStore nor RedisStore: copy_model must use the generic path."""
    return CachedStore(MemoryStore(tables), max_staleness_ms=0)


def test_copy_model_through_the_generic_path() -> None:
    source = trained(passes=2)
    target = _Proxy(source.table_specs())
    copy_model(source.store, target)
    a, b = take_snapshot(source.store), take_snapshot(target)
    assert (a.metadata, a.categories, a.counters) == (b.metadata, b.categories, b.counters)
    np.testing.assert_array_equal(a.feature_ids, b.feature_ids)
    for name in a.values:
        np.testing.assert_array_equal(a.values[name], b.values[name])
