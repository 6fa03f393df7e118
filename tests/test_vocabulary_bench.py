"""The memo-size benchmark runs and measures something (timing never decides a test, so no figure is checked)."""

from __future__ import annotations

import math

from benchmarks.vocabulary import featurise_us


def test_featurise_us_over_a_filled_memo() -> None:
    docs: list[dict[str, object]] = [{"id": f"d{i}", "tokens": ["oil", f"w{i % 7}", "price"], "ts": 0} for i in range(40)]
    cost = featurise_us(docs, vocabulary=150_000, batch=8, repeats=1)
    assert math.isfinite(cost) and cost > 0
