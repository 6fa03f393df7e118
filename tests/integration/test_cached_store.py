"""The worker-local weight cache: exact at staleness 0, another worker's update visible within the bound."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from stream_winnow.stores.base import RowSnapshot, RowUpdate, TableSpec
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.delta import RowDelta
from stream_winnow.stores.redis import RedisStore
from stream_winnow.stores.redis.keys import CHANGE_LOG_WRITES

pytestmark = pytest.mark.integration

TABLES = [TableSpec("positive", 2.0), TableSpec("negative", 1.0)]
IDS = np.arange(100_000, 100_050, dtype=np.int64)


def pair(redis_url: str) -> tuple[RedisStore, RedisStore]:
    """Two workers' views of one fresh model."""
    model = f"cache-{uuid.uuid4().hex[:10]}"
    one = RedisStore.from_url(redis_url, model, TABLES, shards=4)
    two = RedisStore.from_url(redis_url, model, TABLES, shards=4)
    one.ensure_categories(["earn", "acq"])
    two.ensure_categories(["earn", "acq"])
    return one, two


def promote(store: RedisStore | CachedStore, factor: float) -> None:
    store.apply([RowUpdate("positive", IDS[:10], np.array([0]), np.array([factor]))])


def test_staleness_zero_reads_exactly_what_the_store_holds(redis_url: str) -> None:
    mine, theirs = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=0)
    for factor in (1.5, 0.5, 1.25):
        promote(theirs, factor)
        got, want = cached.read(IDS), mine.read(IDS)
        for table in want:
            np.testing.assert_array_equal(got[table], want[table])


def test_another_workers_update_is_seen_within_the_bound(redis_url: str) -> None:
    mine, theirs = pair(redis_url)
    bound_ms = 400
    cached = CachedStore(mine, max_staleness_ms=bound_ms)
    before = cached.read(IDS)["positive"][:10, 0].copy()
    promote(theirs, 1.5)
    deadline = time.monotonic() + bound_ms / 1000 + 0.5
    seen_at = None
    started = time.monotonic()
    while time.monotonic() < deadline:
        if np.allclose(cached.read(IDS)["positive"][:10, 0], before * 1.5):
            seen_at = time.monotonic() - started
            break
        time.sleep(0.02)
    assert seen_at is not None and seen_at <= bound_ms / 1000 + 0.1


def test_rows_are_served_from_memory_while_the_model_does_not_change(redis_url: str) -> None:
    mine, _ = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=1)
    cached.read(IDS)
    time.sleep(0.05)  # older than the bound, but the version has not moved: still current
    fetched = dict(cached._fetched)
    cached.read(IDS)
    assert cached._fetched == fetched


def test_own_updates_are_visible_at_once(redis_url: str) -> None:
    mine, _ = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=60_000)
    before = cached.read(IDS)["positive"][:10, 0].copy()
    promote(cached, 2.0)
    np.testing.assert_allclose(cached.read(IDS)["positive"][:10, 0], before * 2.0, rtol=1e-6)


class _CountingReads:
    """Counts the rows a store is asked for (wraps ``read`` and ``read_for_update``)."""

    def __init__(self, store: RedisStore) -> None:
        self.rows = 0
        read, read_for_update = store.read, store.read_for_update

        def counted_read(ids: np.ndarray) -> dict[str, np.ndarray]:
            self.rows += len(ids)
            return read(ids)

        def counted_read_for_update(ids: np.ndarray) -> RowSnapshot:
            self.rows += len(ids)
            return read_for_update(ids)

        store.read = counted_read  # type: ignore[method-assign]
        store.read_for_update = counted_read_for_update  # type: ignore[method-assign]


def test_staleness_zero_serves_unchanged_rows_from_memory_and_rereads_what_another_write_changed(
    redis_url: str,
) -> None:
    mine, theirs = pair(redis_url)
    counted = _CountingReads(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS)
    cached.read(IDS[:20])
    assert counted.rows == len(IDS)  # the second read came from memory: the row state did not move
    promote(theirs, 1.5)  # learning elsewhere: a new version
    np.testing.assert_array_equal(cached.read(IDS)["positive"], mine.read(IDS)["positive"])
    # the 10 rows promoted read again (the change log names them), and all 50 by the check itself
    assert counted.rows == 2 * len(IDS) + 10


def test_deleting_rows_without_a_new_version_still_invalidates(redis_url: str) -> None:
    """compact deletes rows and a bulk import rewrites them; both set a new epoch, the cache sees it."""
    mine, theirs = pair(redis_url)
    promote(theirs, 1.5)
    cached = CachedStore(mine, max_staleness_ms=0)
    assert cached.read(IDS)["positive"][0, 0] == pytest.approx(3.0)
    version = theirs.version
    theirs.delete(IDS[:10])
    assert theirs.version == version
    assert cached.read(IDS)["positive"][0, 0] == pytest.approx(2.0)


def test_a_category_added_between_the_state_and_the_rows_is_read_at_the_new_width(redis_url: str) -> None:
    """Seen in the Reuters demo: labels create categories while a worker scores (a shape mismatch then)."""
    mine, theirs = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS[:10])
    original = mine.row_state

    def racing_state() -> tuple[int, object]:
        state = original()
        theirs.ensure_categories(["grain"])  # right after the state was read, before the rows are
        return state

    mine.row_state = racing_state  # type: ignore[method-assign]
    racing_writes = _racing(mine, lambda: theirs.ensure_categories(["grain"]))
    got = cached.read(IDS)
    mine.row_state = original  # type: ignore[method-assign]
    mine.part_writes = racing_writes  # type: ignore[method-assign]
    assert got["positive"].shape == (len(IDS), 3)
    np.testing.assert_array_equal(got["positive"], mine.read(IDS)["positive"])


def _racing(store: RedisStore, meanwhile: Callable[[], object]) -> Callable[[], tuple[int, object, np.ndarray]]:
    """Make ``store.part_writes`` run ``meanwhile`` right after reading the counters; returns the original."""
    original = store.part_writes

    def racing() -> tuple[int, object, np.ndarray]:
        counters = original()
        meanwhile()
        return counters

    store.part_writes = racing  # type: ignore[method-assign]
    return original


def _learned(snapshot: RowSnapshot, factor: float) -> RowDelta:
    """A learned batch's delta: category 0 promoted by ``factor`` on the first 10 features."""
    values = {name: np.ones_like(v) for name, v in snapshot.values.items()}
    values["positive"][:10, 0] = factor
    return RowDelta(snapshot.feature_ids, values, {"updates": {"*": 1.0, "earn": 1.0}}, 1)


def _write_row_behind_the_version(store: RedisStore, feature_id: int, value: float) -> None:
    """Another worker's row write whose model-level step (the version) has not run yet."""
    s = feature_id % store.shards
    row = np.array([[value, 1.0, 2.0, 1.0]], dtype="<f4")  # [earn: positive, negative | acq: ...]
    store.client.set(store.keys.row_key(s, feature_id), row.tobytes())
    store.client.incr(store.keys.write_keys[s])


@pytest.fixture(params=["single", "cluster"])
def any_redis_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_url" if request.param == "single" else "redis_cluster_url"))


def test_a_workers_own_learned_batch_keeps_its_cache_warm_and_exact(any_redis_url: str) -> None:
    mine, _ = pair(any_redis_url)
    counted = _CountingReads(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    elsewhere = IDS + 1_000  # cached rows of the same shards that the batches do not touch
    cached.read(elsewhere)
    for factor in (1.5, 0.5, 3.0):
        snapshot = cached.read_for_update(IDS)
        assert cached.apply_delta(_learned(snapshot, factor))
    cached.read(elsewhere)
    assert counted.rows == 2 * len(IDS)  # each read once; every later batch came from the cache
    want = RedisStore.from_url(any_redis_url, mine.model, TABLES, mine.shards).read(IDS)
    got = cached.read(IDS)
    for table in want:
        np.testing.assert_array_equal(got[table], want[table])
    np.testing.assert_allclose(want["positive"][:10, 0], 2.0 * 1.5 * 0.5 * 3.0, rtol=1e-6)
    assert counted.rows == 2 * len(IDS)


def test_another_write_rereads_only_the_row_it_changed(any_redis_url: str) -> None:
    mine, theirs = pair(any_redis_url)
    counted = _CountingReads(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS)
    theirs.apply([RowUpdate("positive", IDS[:1], np.array([1]), np.array([2.0]))])
    got = cached.read(IDS)
    assert counted.rows == len(IDS) + 1
    np.testing.assert_array_equal(got["positive"], theirs.read(IDS)["positive"])


def _write_without_a_log_entry(store: RedisStore) -> None:
    _write_row_behind_the_version(store, int(IDS[1]), 7.0)  # bumps the counter, leaves no log entry


def _write_more_than_the_log_keeps(store: RedisStore) -> None:
    for _ in range(CHANGE_LOG_WRITES + 1):
        store.apply([RowUpdate("positive", IDS[1:2], np.array([0]), np.array([1.01]))])


@pytest.mark.parametrize("write", [_write_without_a_log_entry, _write_more_than_the_log_keeps])
def test_writes_the_change_log_cannot_name_reread_that_shards_rows(
    redis_url: str, write: Callable[[RedisStore], None]
) -> None:
    mine, theirs = pair(redis_url)
    counted = _CountingReads(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS)
    write(theirs)
    got = cached.read(IDS)
    assert counted.rows == len(IDS) + int((IDS % mine.shards == IDS[1] % mine.shards).sum())
    np.testing.assert_array_equal(got["positive"], theirs.read(IDS)["positive"])


def test_a_row_written_before_the_version_moved_is_never_served_stale(any_redis_url: str) -> None:
    """The row-state cache would miss this write (the version has not moved yet); the counters do not."""
    mine, theirs = pair(any_redis_url)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS)
    version = theirs.version
    _write_row_behind_the_version(theirs, int(IDS[3]), 7.0)
    assert theirs.version == version
    assert cached.read(IDS)["positive"][3, 0] == 7.0
    snapshot = cached.read_for_update(IDS)
    assert snapshot.values["positive"][3, 0] == 7.0
    cached.apply_delta(_learned(snapshot, 2.0))
    assert theirs.read(IDS)["positive"][3, 0] == 14.0  # their write learned on, not lost
    assert cached.read(IDS)["positive"][3, 0] == 14.0


def test_another_write_to_the_shards_of_a_cached_snapshot_lands_beside_ours(redis_url: str) -> None:
    """Deltas commute: theirs (x5) and ours (x2) both land, and the cache rereads what it cannot prove exact."""
    mine, theirs = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=0)
    snapshot = cached.read_for_update(IDS)
    theirs.apply([RowUpdate("positive", IDS[:1], np.array([0]), np.array([5.0]))])
    cached.apply_delta(_learned(snapshot, 2.0))
    assert theirs.read(IDS)["positive"][0, 0] == 20.0
    np.testing.assert_array_equal(cached.read(IDS)["positive"], theirs.read(IDS)["positive"])


def test_rows_read_at_two_counters_of_one_shard_are_not_trusted_after_our_write(redis_url: str) -> None:
    """A write between the counters and the rows: our delta lands on it, and the cache serves Redis's value."""
    mine, theirs = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS[:10])
    original = _racing(mine, lambda: _write_row_behind_the_version(theirs, int(IDS[0]), 9.0))
    snapshot = cached.read_for_update(IDS)
    mine.part_writes = original  # type: ignore[method-assign]
    cached.apply_delta(_learned(snapshot, 2.0))
    assert theirs.read(IDS)["positive"][0, 0] == 18.0
    np.testing.assert_array_equal(cached.read(IDS)["positive"], theirs.read(IDS)["positive"])


def test_prefetched_rows_are_exact_at_the_counters_read_before_the_scan(redis_url: str) -> None:
    mine, theirs = pair(redis_url)
    promote(theirs, 1.5)
    counted = _CountingReads(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    assert cached.prefetch() == 10
    counted.rows = 0
    cached.read(IDS[:10])
    assert counted.rows == 0
    promote(theirs, 2.0)
    np.testing.assert_allclose(cached.read(IDS[:10])["positive"][:, 0], 2.0 * 1.5 * 2.0, rtol=1e-6)


def difference(values: Mapping[str, np.ndarray]) -> np.ndarray:
    """A view as a learner's scoring_rows is one: positive - negative per feature row."""
    return values["positive"] - values["negative"]


def test_a_kept_view_follows_every_change_of_the_rows(redis_url: str) -> None:
    mine, theirs = pair(redis_url)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.prefetch()
    unseen = np.arange(900_000, 900_040, dtype=np.int64)  # never stored: initial values, new cache rows

    def check(ids: np.ndarray) -> None:
        np.testing.assert_array_equal(cached.read_view(ids, difference), difference(mine.read(ids)))

    check(IDS)
    check(np.concatenate([IDS[::-1], unseen]))  # any order, rows added to the cache and the view
    promote(theirs, 1.5)  # another worker's update: the state moves, cache and view start afresh
    check(IDS)
    promote(cached, 0.5)  # this worker's own update
    check(IDS)
    theirs.ensure_categories(["grain"])  # a new category widens every row
    theirs.apply([RowUpdate("negative", IDS[:5], np.array([2]), np.array([3.0]))])
    check(IDS)
    assert cached.read_view(IDS, difference).shape == (len(IDS), 3)


class _CountingView:
    """``difference``, counting the rows it derives per call (a whole-cache derivation shows as one big call)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        self.calls.append(len(values["positive"]))
        return difference(values)


def test_a_kept_view_grows_with_the_rows_without_being_derived_again(redis_url: str) -> None:
    mine, theirs = pair(redis_url)
    promote(theirs, 1.5)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.prefetch()
    view = _CountingView()
    cached.keep_view(view)  # as the worker does after prefetch: derived once, over every cached row
    assert len(view.calls) == 1
    view.calls.clear()
    unseen = np.arange(900_000, 920_000, dtype=np.int64)
    capacity = cached._rows.capacity()
    for chunk in np.array_split(unseen, 5):
        ids = np.concatenate([IDS, chunk])
        np.testing.assert_array_equal(cached.read_view(ids, view), difference(mine.read(ids)))
    assert cached._rows.capacity() >= 4 * capacity  # the cache's rows doubled at least twice
    assert max(view.calls) <= len(IDS) + len(unseen) // 5  # only the rows loaded each time were derived
    promote(cached, 2.0)  # this worker's own update goes into the grown view
    np.testing.assert_array_equal(cached.read_view(IDS, view), difference(mine.read(IDS)))


def test_margins_from_the_kept_view_equal_margins_from_the_rows(redis_url: str) -> None:
    from stream_winnow.datasets.synthetic import synthetic_stream
    from stream_winnow.learners import build_learner
    from stream_winnow.learners.base import Learner
    from stream_winnow.models.training import fit

    docs = synthetic_stream(600)
    for name in ("balanced-winnow", "positive-winnow", "perceptron"):
        learner = build_learner(name)
        fit(learner, docs[:400])
        assert learner.discard().discarded > 0  # discarded features must score 0 on both paths
        batch = learner.featurizer.transform_many([d.tokens for d in docs[400:]])
        from_rows = Learner.margins_many(learner, batch)
        uncached = learner.margins_many(batch)
        # The view is float32 (one more rounding of positive - negative, a relative 6e-8 a weight):
        # the margins are close to the float64 rows' and the same, to the bit, cached or not.
        np.testing.assert_allclose(uncached, from_rows, rtol=1e-6, atol=1e-6, err_msg=name)
        learner.store = CachedStore(learner.store)
        np.testing.assert_array_equal(learner.margins_many(batch), uncached, err_msg=name)


class _CountingCounters:
    """Wraps a RedisStore, recording its counter reads: "now" (``part_writes``) or "ahead" (``part_writes_later``)."""

    def __init__(self, inner: RedisStore) -> None:
        self.inner = inner
        self.reads: list[str] = []
        self.fail = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def part_writes(self) -> object:
        self.reads.append("now")
        return self.inner.part_writes()

    def part_writes_later(self) -> object:
        from stream_winnow.errors import StoreError

        self.reads.append("ahead")
        if self.fail:

            def broken() -> object:
                raise StoreError("redis unavailable (test)")

            return broken
        return self.inner.part_writes_later()


def _ahead_store(redis_url: str) -> tuple[CachedStore, RedisStore, _CountingCounters]:
    mine, theirs = pair(redis_url)
    counting = _CountingCounters(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.inner = counting  # type: ignore[assignment]
    cached.prefetch()
    counting.reads.clear()
    return cached, theirs, counting


def test_a_scoring_read_checks_the_counters_as_the_read_ahead_found_them(redis_url: str) -> None:
    """read_ahead sends the counter read at once; read_view_rows takes its reply and asks nothing more,
    so rows are exact as of the read ahead: an update by another worker after it is seen next batch."""
    cached, theirs, counting = _ahead_store(redis_url)
    promote(theirs, 1.5)  # before the read ahead: seen
    cached.read_ahead()
    matrix, rows = cached.read_view_rows(IDS, difference)
    before = difference(theirs.read(IDS))
    np.testing.assert_array_equal(matrix[rows], before)
    cached.read_ahead()  # the next batch, its rows all cached and exact at the counters it reads
    promote(theirs, 2.0)  # after the read ahead: this batch scores as of it, the next sees the update
    matrix, rows = cached.read_view_rows(IDS, difference)
    assert counting.reads == ["ahead", "ahead"]
    np.testing.assert_array_equal(matrix[rows], before)
    matrix, rows = cached.read_view_rows(IDS, difference)
    assert counting.reads == ["ahead", "ahead", "now"]
    np.testing.assert_array_equal(matrix[rows], difference(theirs.read(IDS)))


def test_a_read_ahead_not_used_for_scoring_is_dropped_and_read_again(redis_url: str) -> None:
    """Learning (read_for_update) and writes never use counters read ahead: they read anew."""
    cached, theirs, counting = _ahead_store(redis_url)
    cached.read_ahead()
    promote(theirs, 1.5)  # after the read ahead: the learning read must see it
    snapshot = cached.read_for_update(IDS)
    assert counting.reads == ["ahead", "now"]
    np.testing.assert_array_equal(snapshot.values["positive"], theirs.read(IDS)["positive"].astype(np.float32))
    cached.read_ahead()
    promote(cached, 2.0)  # a write of this worker's drops it too; the next scoring read asks again
    matrix, rows = cached.read_view_rows(IDS, difference)
    assert counting.reads == ["ahead", "now", "ahead", "now"]
    np.testing.assert_array_equal(matrix[rows], difference(theirs.read(IDS)))


def test_a_failed_read_ahead_raises_when_scoring_takes_it(redis_url: str) -> None:
    from stream_winnow.errors import StoreError

    cached, _, counting = _ahead_store(redis_url)
    counting.fail = True
    cached.read_ahead()
    with pytest.raises(StoreError, match="unavailable"):
        cached.read_view_rows(IDS, difference)
    cached.read_ahead()
    cached.drop_read_ahead()  # dropped: its failure is not raised, the next read asks again
    cached.read_ahead()  # left by a batch that failed before scoring: the next batch's read ahead replaces it
    counting.fail = False
    cached.read_ahead()
    assert counting.reads[-2:] == ["ahead", "ahead"]
    counting.fail = False
    matrix, rows = cached.read_view_rows(IDS, difference)
    assert matrix[rows].shape == (len(IDS), 2)
