"""Smoke test of ``benchmarks.service``: a tiny synthetic stream through every phase; every figure present.

Timing is never asserted (the machine is shared); only that each phase ran to the end and
reported its numbers. The benchmark starts its own broker and Redis.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest

from benchmarks.service import BenchConfig, main, markdown, repeat_stream, run_benchmark
from stream_winnow.documents import LabelledDocument

pytestmark = [pytest.mark.integration]


def _client() -> str:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "kafka-python"
    return "confluent"  # its group join is quicker, which keeps the test short


def test_repeat_stream_makes_ids_unique() -> None:
    base = [LabelledDocument(f"d{i}", ("t",), ("c",)) for i in range(3)]
    ids = [d.id for d in repeat_stream(base, 7)]
    assert len(ids) == 9 and len(set(ids)) == 9


def _tiny(client: str, **settings: Any) -> BenchConfig:
    """A run of a 300-document synthetic stream with 1 s of counted latency, ``settings`` on top."""
    return BenchConfig(synthetic=300, clients=(client,), latency_seconds=1.0, timeout_s=120.0, command="pytest",
                       **settings)  # fmt: skip


def test_every_figure_is_reported() -> None:
    client = _client()
    config = _tiny(
        client,
        documents=600,
        learn_events=200,
        repeats=2,
        profile=True,
        profile_top=5,
        # Compressed batches through every phase: documents and labels in zstd, decisions in lz4.
        load_compression="zstd",
        worker_args=("--compression=lz4",),
    )
    results = run_benchmark(config)
    assert (results["load_compression"], results["compression"]) == ("zstd", "lz4")
    figures = results["clients"][client]
    finite = [
        figures["pipe"]["per_s"],
        figures["scoring"]["per_s"],
        figures["scoring_over_pipe"],
        figures["domain_scoring"]["per_s"],
        figures["domain_over_words"],
        figures["learning"]["per_s"],
        figures["mixed"]["per_s"],
        figures["latency"]["p50_ms"],
        figures["latency"]["p95_ms"],
        figures["latency"]["p99_ms"],
        figures["pipe_latency"]["p99_ms"],
        results["memory"]["bytes_per_weight"],
        *(peer["per_s"] for peer in results["peers"].values()),  # ours, Vowpal Wabbit and River
    ]
    assert len(results["peers"]) == 3, results["peers"]
    # Every learning event is a mistake of the worker's model as it stands when the event arrives.
    assert figures["learning"]["updates_metric_fraction"] == 1.0, figures["learning"]
    assert all(math.isfinite(x) and x > 0 for x in finite), finite
    assert 0 < results["domain_dimensions"] <= 400
    for phase in ("pipe", "scoring", "domain_scoring", "latency", "pipe_latency"):  # the median of both runs
        assert len(figures[f"{phase}_runs"]) == len(figures[phase]["of_runs"]) == 2
    assert all(run["harness_gc_max_ms"] >= 0 for run in figures["latency_runs"] + figures["pipe_latency_runs"])
    # Linux: the worker's and the pipe's CPU over the counted documents, read from /proc (in clock ticks of
    # 10 ms: a run this short may use less than one).
    runs = figures["latency_runs"] + figures["pipe_latency_runs"]
    cpu = [run[key] for run in runs for key in ("cpu_us_per_document", "broker_cpu_us_per_document",
                                                "redis_cpu_us_per_document", "harness_cpu_us_per_document")]
    assert all(isinstance(x, float) and x >= 0 for x in cpu), cpu
    # The worker's decisions carry decided_ts: the latency splits at it (both parts at least 0 ms,
    # the clock being one); the bare pipe's messages have none.
    for run in figures["latency_runs"]:
        parts = run["to_decided_p50_p99_ms"] + run["after_decided_p50_p99_ms"]
        assert all(x >= 0 for x in parts), parts
    assert all(run["to_decided_p50_p99_ms"] is None for run in figures["pipe_latency_runs"])
    # The worker's own slow batches, from its histogram; the bare pipe has none to tell.
    assert all(run["worker_batches_over_100ms"] >= 0 for run in figures["latency_runs"])
    assert all(run["worker_batches_over_100ms"] is None for run in figures["pipe_latency_runs"])
    # The worker commits its offsets while the load flows (its metrics); the bare pipe has no metrics.
    assert all(run["worker_commits_per_s"] > 0 for run in figures["latency_runs"])
    assert all(run["worker_commits_per_s"] is None for run in figures["pipe_latency_runs"])
    # Each run in thirds of its counted documents: a p99 for each, and the broker's share of a core.
    for run in runs:
        assert len(run["p99_ms_by_third"]) == len(run["broker_cpu_percent_by_third"]) == 3, run
        assert all(x > 0 for x in run["p99_ms_by_third"]), run["p99_ms_by_third"]
        assert all(x is not None and x >= 0 for x in run["broker_cpu_percent_by_third"])
    # Linux: the machine's busy and stolen shares of its CPUs over the counted documents.
    shares = [run[key] for run in runs for key in ("machine_busy_percent", "machine_steal_percent")]
    assert all(isinstance(x, float) and 0 <= x <= 100 for x in shares), shares
    assert all(run["machine_busy_percent"] > 0 for run in runs)
    # How long the machine was saturated: a stretch no longer than the run, a share of it.
    for run in runs:
        assert 0 <= run["saturated_longest_ms"] <= 1000 * (run["counted_s"] + 60), run["saturated_longest_ms"]
        assert 0 <= run["saturated_percent"] <= 100, run["saturated_percent"]
        # Who used the CPUs in that stretch, % of a core each (a tick of /proc's 100 a second is 10 % of a
        # 100 ms window, so a share may read a little over what the cores allow); none without a stretch.
        shares_in_stretch = run["saturated_cpu_percent"]
        if run["saturated_longest_ms"] == 0:
            assert shares_in_stretch is None
        else:
            assert list(shares_in_stretch) == ["runner", "broker", "redis", "harness", "rest"], shares_in_stretch
            assert all(0 <= v <= 100 * (os.cpu_count() or 1) + 50 for v in shares_in_stretch.values()), shares_in_stretch
        # The machine starts tasks of its own now and then (and the worker none in a steady run): a count, and
        # in the stretch no more than over the whole run.
        assert run["tasks_started"] >= 0, run["tasks_started"]
        if run["saturated_longest_ms"] == 0:
            assert run["saturated_tasks_started"] is None
        else:
            assert 0 <= run["saturated_tasks_started"] <= run["tasks_started"], run
    assert figures["scoring"]["dead_letters"] == 0
    assert figures["learning"]["model_version_delta"] > 0
    assert figures["learning"]["batches"] > 0 and figures["learning"]["batch_ms"] > 0  # the worker's own metrics
    # Learning keeps watermarks and a ring of seen events: a few keys, at most 64 bytes an event.
    markers = figures["learning"]["markers"]
    assert markers["keys"] >= 2 and 0 < markers["bytes"] <= 64 * figures["learning"]["events"], markers
    assert figures["mixed"]["learned"] == figures["mixed"]["labelled_events"] == 60
    assert len(results["profile"]["top"]) == 5
    table = markdown(results)
    for row in ("bare pipe", "scoring docs/s", "learning events/s", "mixed docs/s", "p50 / p95 / p99", "bare pipe at the same load",
                "longest gc pause", "Against Vowpal Wabbit in process", "the worker's batches / its mean ms", "the watermarks and seen events", "batches over 100 ms", "seconds counted", "1 partition a topic", "each latency run on a fresh embedded broker", "in each third", "CPU, µs a document", "ts → decided_ts", "the broker's CPU", "stolen by the host", "≥ 95 % busy", "bytes per weight", "vowpalwabbit", "river"):  # fmt: skip
        assert row in table
    json.dumps(results, default=str)


def test_latency_runs_can_share_the_broker_of_the_other_phases() -> None:
    """``--latency-broker shared``: the worker's and the bare pipe's latency runs on the invocation's own broker."""
    client = _client()
    results = run_benchmark(
        _tiny(client, documents=300, phases=("latency",), latency_rate=300.0, latency_broker="shared", peers=False)
    )
    figures = results["clients"][client]
    assert results["latency_broker"] == "shared"
    assert figures["latency"]["documents"] > 0 and figures["pipe_latency"]["documents"] > 0
    assert math.isfinite(figures["latency"]["p99_ms"]) and math.isfinite(figures["pipe_latency"]["p99_ms"])
    assert "the latency runs on the shared broker" in markdown(results)
    with pytest.raises(ValueError, match="choose from fresh, shared"):
        run_benchmark(BenchConfig(synthetic=10, latency_broker="elsewhere"))


@pytest.mark.parametrize(
    "argv",
    [["--phases", "scoring,warp"], ["--phases", ","], ["--phases", "latency"], ["--repeats", "0"], ["--partitions", "0"]],
)
def test_a_bad_phase_list_says_what_is_allowed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--synthetic", "10", *argv])
    assert exit_info.value.code == 2
    assert f"error: {argv[0]}" in capsys.readouterr().err
