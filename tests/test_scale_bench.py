"""``benchmarks.scale``: its pure functions on made-up inputs, and one small run end to end (slow).

Timing is never asserted (the machine is shared); the run only has to finish with every label
counted and report every figure.
"""

from __future__ import annotations

import doctest
import json
import math
from typing import Any

import pytest

import benchmarks.scale as scale
from benchmarks.scale import (
    FIGURES,
    LabelSender,
    LearnedCount,
    Messages,
    ScaleConfig,
    accounted_keys,
    documents_allowed,
    first_decisions,
    markdown,
    pods_per_redis_node,
    ratios,
    run_scale,
    summarize,
)
from stream_winnow.wire.codec import Decision, encode_decision


def test_the_modules_examples_hold() -> None:
    # pytest collects doctests under stream_winnow/ and workers/ only.
    assert doctest.testmod(scale).failed == 0


def _run(events_per_s: float, redis_us: float, worker_us: float = 300.0, **more: float) -> dict[str, float]:
    """A run's figures with every key of FIGURES: 1.0 where not given."""
    run = {key: 1.0 for key, _, _ in FIGURES}
    run.update(events_per_s=events_per_s, redis_cpu_us_per_event=redis_us, worker_cpu_us_per_event=worker_us, **more)
    return run


def test_each_figure_is_the_median_of_the_runs_with_min_and_max() -> None:
    summary = summarize([_run(3_000.0, 40.0), _run(1_000.0, 60.0), _run(2_000.0, 50.0)])
    assert summary["events_per_s"] == {"median": 2_000.0, "min": 1_000.0, "max": 3_000.0}
    assert summary["redis_cpu_us_per_event"] == {"median": 50.0, "min": 40.0, "max": 60.0}
    assert set(summary) == {key for key, _, _ in FIGURES}


def test_an_even_number_of_runs_takes_the_mean_of_the_middle_two() -> None:
    assert summarize([_run(1_000.0, 1.0), _run(2_000.0, 1.0)])["events_per_s"]["median"] == 1_500.0


def test_ratios_are_against_the_smallest_worker_count() -> None:
    summary = {2: summarize([_run(2_000.0, 50.0, 400.0)]), 4: summarize([_run(3_000.0, 150.0, 600.0)])}
    got = ratios(summary)
    assert got[2] == {"events_per_s": 1.0, "events_per_s_per_pod": 1.0, "worker_cpu_us_per_event": 1.0,
                      "redis_cpu_us_per_event": 1.0}  # fmt: skip
    assert got[4]["events_per_s"] == pytest.approx(1.5)
    assert got[4]["events_per_s_per_pod"] == pytest.approx(0.75)
    assert got[4]["worker_cpu_us_per_event"] == pytest.approx(1.5)
    assert got[4]["redis_cpu_us_per_event"] == pytest.approx(3.0)


def test_pods_one_redis_node_feeds_is_a_core_over_the_redis_cpu_a_pod_uses() -> None:
    # 50 µs an event at 4,000 events/s is 0.2 of a core: five pods fill one.
    assert pods_per_redis_node(50.0, 4_000.0) == pytest.approx(5.0)


def test_bytes_are_accounted_for_every_key_but_rows_and_cached_documents() -> None:
    sizes = {  # key -> MEMORY USAGE, as a model's keys and its document cache might be
        b"sw:{scale:0}:f:123": 900,  # a row
        b"sw:{scale:15}:f:9": 900,  # a row of another shard
        b"sw:scale:docs:493:7": 5_000,  # a document-cache hash
        b"sw:{scale:0}:wm": 700,  # a shard's watermarks
        b"sw:{scale}:wm": 60,  # the model part's watermarks
        b"sw:{scale}:seen:labels:0": 60,  # a partition's seen events
        b"sw:{scale}:seen:labels:1": 70,
        b"sw:{scale}:seen:labels:2": 70,
        b"sw:{scale:0}:n": 50,
        b"sw:{scale}:version": 40,
    }
    kept = accounted_keys(sizes, "scale")
    assert kept == [b"sw:{scale:0}:wm", b"sw:{scale}:wm", b"sw:{scale}:seen:labels:0",
                    b"sw:{scale}:seen:labels:1", b"sw:{scale}:seen:labels:2", b"sw:{scale:0}:n", b"sw:{scale}:version"]  # fmt: skip
    events = 2
    assert sum(sizes[key] for key in kept) / events == (700 + 2 * 60 + 2 * 70 + 50 + 40) / 2


def test_only_the_models_own_rows_are_left_out() -> None:
    # A model whose name begins like this one's: its rows are not this one's.
    assert accounted_keys([b"sw:{scale-2:0}:f:1", b"sw:scale-2:docs:1:0"], "scale") == [
        b"sw:{scale-2:0}:f:1",
        b"sw:scale-2:docs:1:0",
    ]


def test_documents_run_at_most_the_window_ahead_of_the_labels_counted() -> None:
    assert [documents_allowed(counted, 100, 250) for counted in (0, 99.9, 100, 200)] == [100, 199, 200, 250]


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.sent.append((topic, value, key))


def test_a_label_goes_once_when_its_documents_first_decision_arrives() -> None:
    producer = _Producer()
    learned = LearnedCount()
    sender = LabelSender(producer, Messages([b"a", b"b"], [b"doc-a", b"doc-b"], [b"label-a", b"label-b"]), learned)
    assert sender.first_s is None
    for key in (b"b", b"b", b"zzz", b"a", None):
        sender(key, 0.0)
        learned.value += 1
    assert producer.sent == [("labels", b"label-b", b"b"), ("labels", b"label-a", b"a")]
    assert sender.first_s is not None
    # what the workers had counted when each document's first decision arrived
    assert sender.learned_at == {b"b": 0, b"a": 3}


def test_the_in_process_reference_never_learns_a_documents_own_label_before_predicting_it() -> None:
    stream = scale.load_stream(ScaleConfig(synthetic=200))
    n = len(stream.docs)
    strict, _ = scale.in_process_run("balanced-winnow", stream, scale.lagging(n, 0))
    # counts taken after later labels were learned are capped at the document's own position
    assert scale.in_process_run("balanced-winnow", stream, [n] * n)[0] == strict
    # the final model of labels learned in stream order is the strict run's
    in_order = scale.in_process_test_f1("balanced-winnow", stream, [doc.id.encode() for doc in stream.docs])
    assert in_order == scale.in_process_run("balanced-winnow", stream, scale.lagging(n, 0))[1]
    late, _ = scale.in_process_run("balanced-winnow", stream, scale.lagging(n, 50))
    assert late != strict
    assert scale.labels_lacking(scale.lagging(n, 50), 50) == 50.0


def test_only_a_documents_first_decision_counts() -> None:
    values = [
        encode_decision(Decision("a", ("earn",), {"earn": 1.0}, 1)),
        encode_decision(Decision("a", ("acq",), {"acq": 1.0}, 2)),  # a re-decision after a redelivery
        b"not a decision",
        encode_decision(Decision("b", (), {}, 2)),
    ]
    assert first_decisions(values) == {"a": ("earn",), "b": ()}


def _results(summary: dict[int, Any]) -> dict[str, Any]:
    return {
        "command": "python -m benchmarks.scale --workers 1,2", "corpus": "test corpus", "redis": "single-node Redis",
        "partitions": 4, "kafka_client": "confluent", "learner": "balanced-winnow", "window": 2000, "repeats": 3,
        "cpus": 2, "load_average_start": 0.5, "load_average_end": 1.5,
        "in_process": {"strict_micro_f1": 0.79, "prequential_micro_f1": 0.6,
                       "prequential_past_window_micro_f1": 0.7, "test_micro_f1": 0.81}, "summary": summary, "ratios": ratios(summary),
        "pods_per_redis_node": 12.5, "redis_commands": {1: {"evalsha": 30.5, "mget": 4.25}},
    }  # fmt: skip


def test_the_table_has_a_row_per_worker_count_and_the_ratios() -> None:
    summary = {1: summarize([_run(2_000.0, 40.0), _run(2_200.0, 44.0), _run(1_800.0, 38.0)]),
               2: summarize([_run(3_000.0, 80.0)])}  # fmt: skip
    text = markdown(_results(summary))
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| workers | runs | labelled events/s"))
    assert header.count("|") == len(FIGURES) + 3  # workers, runs, every figure
    row = next(line for line in lines if line.startswith("| 1 | 3/3 | 2,000 (1,800–2,200)"))
    assert "40.0 (38.0–44.0)" in row
    assert "prequential micro-F1 0.6000 with the window's delay (0.7000 past the first window, 0.7900 strict), test micro-F1 0.8100" in text
    assert any(line.startswith("| 2 | 1.50 | 0.75 | 1.00 | 2.00 |") for line in lines)
    assert "**12.5**" in text
    assert "N=1: evalsha 30.5, mget 4.2" in text


def test_a_failed_run_is_counted_and_quoted() -> None:
    summary = {1: summarize([_run(2_000.0, 40.0), _run(2_200.0, 44.0)])}
    results = _results(summary) | {
        "failures": {1: ["worker exited with 1; log ends:\nTraceback\nValueError: shape mismatch"],
                     4: ["only 3 of 9 counted", "only 5 of 9 counted", "only 1 of 9 counted"]},
    }  # fmt: skip
    lines = markdown(results).splitlines()
    assert any(line.startswith("| 1 | 2/3 | 2,100 (2,000–2,200)") for line in lines)
    assert any(line.startswith("| 4 | 0/3 | – | – |") for line in lines)
    assert "Failed runs of 1 worker(s): worker exited with 1; log ends: … ValueError: shape mismatch" in lines


@pytest.mark.slow
@pytest.mark.integration
def test_one_worker_over_a_small_synthetic_stream_counts_every_label() -> None:
    config = ScaleConfig(synthetic=300, workers=(1,), repeats=1, window=100, timeout_s=120.0, command="pytest")
    results = json.loads(json.dumps(run_scale(config), default=str))  # what --json prints
    assert {"command", "config", "corpus", "runs", "summary", "ratios", "pods_per_redis_node",
            "in_process"} <= set(results)  # fmt: skip
    (run,) = results["runs"]["1"]
    assert run["events"] == 210  # the synthetic stream's first 70 %
    assert run["decisions"] == run["events"] and run["dead_letters"] == 0
    # the stream ends on the model's own count (Redis); the workers' counters agree with it
    assert run["labelled_counted"] == run["events"]
    # learning writes go through the delta script, so it is among the commands Redis spent its time on
    assert "evalsha" in results["redis_commands"]["1"] and run["redis_commands"]["evalsha"]["calls_per_event"] > 0
    for key, _, _ in FIGURES:
        assert math.isfinite(run[key]), key
        assert set(results["summary"]["1"][key]) == {"median", "min", "max"}
    assert run["events_per_s"] > 0 and run["redis_bytes_per_event"] > 0
    assert results["ratios"]["1"]["events_per_s"] == 1.0
