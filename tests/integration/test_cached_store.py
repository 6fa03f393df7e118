"""The worker-local weight cache: exact at staleness 0, another worker's update visible within the bound."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

import numpy as np
import pytest

from stream_winnow.stores.base import RowUpdate, TableSpec
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.redis import RedisStore

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
    """Counts the rows a store is asked for (wraps ``read``)."""

    def __init__(self, store: RedisStore) -> None:
        self.rows = 0
        original = store.read

        def read(ids: np.ndarray) -> dict[str, np.ndarray]:
            self.rows += len(ids)
            return original(ids)

        store.read = read  # type: ignore[method-assign]


def test_staleness_zero_serves_unchanged_rows_from_memory_and_rereads_after_any_change(redis_url: str) -> None:
    mine, theirs = pair(redis_url)
    counted = _CountingReads(mine)
    cached = CachedStore(mine, max_staleness_ms=0)
    cached.read(IDS)
    cached.read(IDS[:20])
    assert counted.rows == len(IDS)  # the second read came from memory: the row state did not move
    promote(theirs, 1.5)  # learning elsewhere: a new version
    np.testing.assert_array_equal(cached.read(IDS)["positive"], mine.read(IDS)["positive"])
    assert counted.rows == 3 * len(IDS)  # everything read again (and once more by the check itself)


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
    got = cached.read(IDS)
    mine.row_state = original  # type: ignore[method-assign]
    assert got["positive"].shape == (len(IDS), 3)
    np.testing.assert_array_equal(got["positive"], mine.read(IDS)["positive"])


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


def test_margins_from_the_kept_view_equal_margins_from_the_rows(redis_url: str) -> None:
    from stream_winnow.learners import build_learner
    from stream_winnow.learners.base import Learner
    from stream_winnow.synthetic import synthetic_stream
    from stream_winnow.training import fit

    docs = synthetic_stream(600)
    for name in ("balanced-winnow", "positive-winnow", "perceptron"):
        learner = build_learner(name)
        fit(learner, docs[:400])
        assert learner.discard().discarded > 0  # discarded features must score 0 on both paths
        batch = learner.featurizer.transform_many([d.tokens for d in docs[400:]])
        from_rows = Learner.margins_many(learner, batch)
        np.testing.assert_allclose(learner.margins_many(batch), from_rows, rtol=1e-12, atol=1e-12, err_msg=name)
        learner.store = CachedStore(learner.store)
        np.testing.assert_allclose(learner.margins_many(batch), from_rows, rtol=1e-12, atol=1e-12, err_msg=name)
