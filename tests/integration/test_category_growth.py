"""Categories added by another worker at any moment: every path scores at a width both its rows and counts know."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from stream_winnow.learners import build_learner
from stream_winnow.learners.mistake_driven import MistakeDriven
from stream_winnow.models.named import connect
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.redis import RedisStore

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["multinomial-nb", "bernoulli-nb"])
def test_naive_bayes_scores_rows_read_before_categories_were_added(redis_url: str, name: str) -> None:
    """Rows read at two categories, counts naming four by the time they are used: margins for the first two."""
    model = f"grow-{uuid.uuid4().hex[:10]}"
    mine, theirs = build_learner(name), build_learner(name)
    mine.store = RedisStore(connect(redis_url), model, mine.table_specs())
    theirs.store = RedisStore(connect(redis_url), model, theirs.table_specs())
    mine.learn_one(["oil", "price"], ["crude", "ship"])
    vector = mine.transform(["oil", "wheat"])
    rows = mine.store.read(vector.ids)
    assert rows["counts"].shape[1] == 2
    theirs.learn_one(["wheat", "corn"], ["grain", "corn"])  # another worker, meanwhile
    margins = mine.margins_from(rows, vector.strengths, vector.total_strength)
    assert margins.shape == (2,)
    assert mine.margins(vector).shape == (4,)  # read afresh: every category


def test_a_cache_whose_rows_come_back_wider_keeps_its_width(redis_url: str) -> None:
    """A category added between the cache's width check and its read: the rows are cut, not a crash."""
    model = f"grow-{uuid.uuid4().hex[:10]}"
    mine, theirs = build_learner("balanced-winnow"), build_learner("balanced-winnow")
    store = RedisStore(connect(redis_url), model, mine.table_specs())
    mine.store = cached = CachedStore(store)
    theirs.store = RedisStore(connect(redis_url), model, theirs.table_specs())
    theirs.learn_one(["oil", "price"], ["crude"])
    assert isinstance(mine, MistakeDriven)
    batch = mine.featurizer.transform_many([["oil", "price", "wheat"]])
    assert mine.margins_many(batch).shape == (1, 1)
    real_read = store.read_for_update
    added: list[str] = []

    def racing(ids: np.ndarray) -> object:
        # Past the cache's room for 16 categories, after each of its width checks.
        fresh = [f"new-{len(added) + i}" for i in range(20)]
        added.extend(fresh)
        theirs.store.ensure_categories(fresh)
        return real_read(ids)

    store.read_for_update = racing  # type: ignore[method-assign]
    theirs.learn_one(["price"], ["crude"])  # so the cache has rows to read again
    wider = mine.featurizer.transform_many([["oil", "price", "wheat", "corn"]])
    margins = mine.margins_many(wider)  # the cache's rows: narrower than Redis's by now, and exact
    assert margins.shape[0] == 1 and 1 <= margins.shape[1] <= 1 + len(added)
    store.read_for_update = real_read  # type: ignore[method-assign]
    assert mine.margins_many(wider).shape == (1, 1 + len(added))
    assert cached.categories() == ("crude", *added)
