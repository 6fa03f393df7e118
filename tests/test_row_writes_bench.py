"""Smoke test of ``benchmarks.row_writes``: its deltas change what they say, and it prints a row per k."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.row_writes import CATEGORIES, delta_of, main
from stream_winnow.learners import build_learner
from stream_winnow.models.named import connect
from stream_winnow.stores.redis import RedisStore

pytestmark = [pytest.mark.integration]


def test_a_delta_changes_k_values_a_row_in_redis(redis_url: str) -> None:
    store = RedisStore(connect(redis_url), "row-writes-test", build_learner("balanced-winnow").table_specs(), 4)
    store.ensure_categories([f"c{i}" for i in range(CATEGORIES)])
    delta = delta_of(3, 8, np.random.default_rng(1), 1 << 20)
    store.apply_delta(delta)
    rows = store.read(delta.feature_ids)
    assert (rows["positive"] != 2.0).sum(axis=1).tolist() == [4, 4, 4]  # 8 values: 4 categories, both tables
    assert (rows["negative"] != 1.0).sum(axis=1).tolist() == [4, 4, 4]


def test_it_prints_a_row_per_k(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--rows", "5", "--calls", "2", "--changed", "2,4", "--repeats", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [line.split(" | ")[0] for line in lines] == ["| 2", "| 4"]
