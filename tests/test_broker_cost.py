"""Smoke test of ``benchmarks.broker_cost``: a short paced run reports a row per second and consumes the stream.

Timing and CPU figures are never asserted (the machine is shared); only that the run measured
what it says and that a bad flag is refused.
"""

from __future__ import annotations

import pytest

from benchmarks.broker_cost import main, run

pytestmark = [pytest.mark.integration]
confluent_kafka = pytest.importorskip("confluent_kafka")


def test_a_paced_run_reports_every_second_and_is_consumed() -> None:
    rows = run(rate=1_000, seconds=3, partitions=2, keyed=True, linger_ms=10, idempotent=True, history=2)
    assert len(rows) >= 2
    assert all(row["broker_cpu_percent"] >= 0 for row in rows)
    assert sum(row["fetches"] for row in rows) > 0
    assert rows[-1]["lag"] < 1_000, "the consumer keeps up with 1,000 msg/s"


def test_a_bad_flag_says_what_is_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--partitions", "0"])
    assert "--partitions must be at least 1" in capsys.readouterr().err
