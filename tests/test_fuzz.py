"""Every decoder, Python and compiled, on generated good, bad and damaged messages (``benchmarks.fuzz``).

The benchmark runs 1,000,000 inputs; here 20,000 of two seeds, so a regression fails in seconds.
"""

from __future__ import annotations

import pytest

from benchmarks.fuzz import KINDS, fuzz


@pytest.mark.parametrize("seed", [0, 1])
def test_no_decoder_crashes_and_the_compiled_parser_agrees_with_python(seed: int) -> None:
    found = fuzz(20_000, seed=seed)
    assert not found.crashes, found.crashes[:3]
    assert not found.disagreements, found.disagreements[:3]
    # Not vacuous: every kind was accepted and refused, for many reasons, and the compiled parser took part.
    assert set(found.accepted) == set(KINDS) and min(found.accepted.values()) >= 10
    assert len(found.refused) >= 12
    assert found.compiled_declined < sum(found.accepted[k] for k in ("document", "labelled-event")) * 3
