"""End-to-end service benchmark: the worker on a real broker and Redis, beside a bare pipe and in-process peers.

One run starts its own embedded Tansu broker and redis-server, trains a model in memory
on the ModApte training split (balanced-winnow, default settings) and writes it to Redis
with ``snapshot.copy_model``, then, for each Kafka client asked for, measures on the
ModApte token stream (training then test documents, repeated with unique ids up to
``--documents``)::

    pipe      consume -> msgpack decode -> msgpack encode -> produce; commits as the worker does
    scoring   the worker on unlabelled documents only (pre-loaded topic)
    learning  the worker on labelled events with tokens, each one a mistake of the model as it
              stands when the event arrives (``mistaken_labels``)
    mixed     documents, plus labelled events (no tokens) for 10 % of them, sent once decided
    latency   documents paced at half the scoring rate, ts = send time; ts -> decision arrival
              over --latency-seconds (10) after a 1 s warm-up, the stream repeated as far as
              that takes; then the bare pipe at the same load (the transport's own latency)

Every phase runs in a subprocess (the worker as ``python -m workers.cli worker`` with
``STREAM_WINNOW_*`` variables; the pipe as ``python -m benchmarks.service _pipe``) on its own
topics (one partition each unless ``--partitions`` says otherwise) and consumer group.
Throughput is counted at a consumer in this process from the first output message to the
last, which leaves out the group join (3-5 s on Tansu);
the learning phase, which emits nothing, from its first event sent to the worker's /metrics
counting the last one learned. The
helper clients (pre-loading, the load generator, the collector) use confluent-kafka when it
is installed, whatever client is measured, so that they are never the bottleneck.

    python -m benchmarks.service --source ../shared/datasets/reuters21578.tar.gz --client both \\
        --documents 50000 --worker-arg=--max-staleness-ms=1000 --json

Also reported: Redis memory of the trained model, and the in-process prequential docs/s of our
learner and of Vowpal Wabbit on the 90-category stream (not repeated), and of River on its first
2,000 documents (one Perceptron per category scores a dict at a time: 160-310 docs/s at 90
categories, so the whole stream would take up to a minute). ``--profile`` runs one
more (untimed) scoring pass under cProfile and prints the top functions by own time.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import pstats
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from benchmarks.service.collector import Collector as Collector
from benchmarks.service.config import (
    LATENCY_BROKERS,
    LOAD_LINGER_MS,
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    BenchConfig,
    worker_settings,
)
from benchmarks.service.config import _helper_client as _helper_client
from benchmarks.service.config import _settings as _settings
from benchmarks.service.load import _LoadProducer, load_stream, preload
from benchmarks.service.load import repeat_stream as repeat_stream
from benchmarks.service.measure import (
    _cpu_s,
    _MachineSampler,
    _now_ms,
    _Pauses,
    _per_document_us,
    _rate,
    _share,
    _tasks_between,
    _Usage,
    _usage,
    saturated,
    stretch_cpu,
)
from benchmarks.service.measure import cpu_seconds as cpu_seconds
from benchmarks.service.model import _memory_usage as _memory_usage
from benchmarks.service.model import _model_version, marker_memory, model_memory, train_model, write_model
from benchmarks.service.model import mistaken_labels as mistaken_labels
from benchmarks.service.services import _LOG_TAIL_CHARS, Environment, _broker_for_run, _worker
from benchmarks.service.services import Topics as Topics
from benchmarks.service.services import WorkerProcess as WorkerProcess
from stream_winnow.codec import DocumentMessage, LabelledEvent, encode_document, encode_labelled_event
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import TransportError
from workers.transport import COMPRESSIONS

__all__ = ["BenchConfig", "main", "run_benchmark"]

MODEL = "bench"
# Share of the scored documents that get a labelled event in the mixed phase.
MIXED_LABEL_EVERY = 10
# The latency phase's first second of load is not counted: a consumer that was just assigned its
# partitions takes ~120 ms on Tansu to look up its offsets and fetch, and the documents sent
# meanwhile arrive at once (a 150-240 ms start spike, for the worker and the bare pipe alike).
LATENCY_WARMUP_S = 1.0
# The learning phase sends its events this long after the worker is ready, for the same reason.
LEARNING_SETTLE_S = 1.0
# The load generator sends what is due every tick; 1 ms keeps bursts under ~1 % of a 20k/s rate.
_PACE_TICK_S = 0.001
# How often the learning phase reads the worker's counters (the timing resolution of that phase).
_METRICS_POLL_S = 0.02


def _pipe_main(spec: dict[str, Any]) -> None:
    """consume -> msgpack decode -> encode -> produce; commits as the worker does (``InFlight``)."""
    from workers.transport import make_consumer, make_producer
    from workers.transport.in_flight import InFlight

    settings = _settings(spec["bootstrap"], "bench-pipe", spec["batch"], spec.get("compression", "none"))
    settings = replace(settings, session_timeout_ms=spec["session_timeout_ms"],
                       fetch_max_wait_ms=spec.get("fetch_max_wait_ms", settings.fetch_max_wait_ms),
                       linger_ms=spec.get("linger_ms", settings.linger_ms))  # fmt: skip
    consumer = make_consumer(settings, spec["client"])
    producer = make_producer(settings, spec["client"])

    def pipe(records: Sequence[Any]) -> Any:
        for record in records:
            producer.send(spec["out_topic"], msgpack.packb(msgpack.unpackb(record.value)), key=record.key)
        return producer.checkpoint()

    in_flight = InFlight(consumer, spec.get("max_batches_in_flight", 0), redo=pipe,
                         commit_interval_ms=spec.get("commit_interval_ms", 0))
    # As the worker does before it joins: what is alive now (modules, compiled code, the clients)
    # lives as long as the process, and full collections over it would stop this loop every few
    # seconds. Freezing it takes kafka-python's bare pipe p99 at 11,848 documents/s from 60-79 ms to
    # 35-46 (--client kafka-python --phases latency --latency-rate 11848 --repeats 2).
    gc.collect()
    gc.freeze()
    consumer.subscribe([spec["in_topic"]], spec["group"])
    done = 0
    first = last = None
    announced = not spec.get("announce")
    try:
        while done < spec["expected"] or not in_flight.settled:
            records = consumer.poll_batch(spec["batch"], 100 if not announced else 500)
            if not announced and consumer.assignment():
                print("ready", flush=True)  # the latency phase starts its load only now
                announced = True
            if records:
                if first is None:
                    first = time.time()
                in_flight.add(records, pipe(records))
                done += len(records)
            if not in_flight.settled and in_flight.settle(wait=not records or done >= spec["expected"]):
                last = time.time()
    finally:
        producer.close()
        consumer.close()
    print(json.dumps({"records": done, "first_consume_s": first, "last_ack_s": last}))


def _profiled_worker(out: str, worker_args: Sequence[str]) -> None:
    """``stream-winnow worker`` with cProfile on from its first batch (the group join left out) until it
    starts to stop.

    The stop is left out too: closing the health server waits up to 0.5 s for its polling thread
    (``socketserver``'s poll interval), which showed as 14-38 "lock waits" of 0.50 s in all, 13-16 %
    of every earlier profile. The last poll of the quiet topics (up to ``--poll-timeout-ms``, 500) is in.
    """
    import cProfile

    from workers import worker as worker_module
    from workers.cli import main as cli_main

    profiler = cProfile.Profile()
    original, original_close = worker_module.Worker.process, worker_module.Worker._close
    started = threading.Event()

    def process(self: Any, records: Any) -> Any:
        if not started.is_set():
            started.set()
            profiler.enable()
        return original(self, records)

    def close(self: Any) -> None:
        profiler.disable()
        original_close(self)

    worker_module.Worker.process = process  # type: ignore[method-assign]
    worker_module.Worker._close = close  # type: ignore[method-assign]
    try:
        cli_main(["worker", *worker_args], standalone_mode=False)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


def median_run(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose ``key`` is the median (the lower middle of an even number), with every run's ``key``.

    >>> median_run([{"p99_ms": 90.0}, {"p99_ms": 70.0}, {"p99_ms": 200.0}], "p99_ms")
    {'p99_ms': 90.0, 'of_runs': [70.0, 90.0, 200.0]}
    """
    ordered = sorted(runs, key=lambda run: run[key])
    return {**ordered[(len(ordered) - 1) // 2], "of_runs": [run[key] for run in ordered]}


def phase_pipe(env: Environment, client: str, docs: Sequence[tuple[bytes, bytes]]) -> dict[str, Any]:
    name = env.name("pipe", client)
    topics = env.topics(name)
    preload_s = preload(env.bootstrap, topics.documents, docs, env.load_compression)
    collector = env.collector([topics.decisions]).start_and_wait()
    started = time.monotonic()
    process = subprocess.run(
        _pipe_command(env, client, topics, name, len(docs)),
        capture_output=True, text=True, timeout=env.timeout_s, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if process.returncode != 0:
        collector.stop()
        raise TransportError(f"the pipe failed ({process.returncode}):\n{process.stderr[-_LOG_TAIL_CHARS:]}")
    collector.wait_for(len(docs), env.timeout_s)
    collector.stop()
    own = json.loads(process.stdout.strip().splitlines()[-1])
    own_s = own["last_ack_s"] - own["first_consume_s"]
    # A short run can reach the collector in a single fetch (a span of 0 s): then the pipe's own clock,
    # first consume to last acknowledgement, is the only measure there is.
    span_s = collector.span_s() if collector.span_s() > 0 else own_s
    return {
        "messages": len(docs),
        "seconds": span_s,
        "per_s": _rate(len(docs), span_s),
        "self_timed_per_s": _rate(len(docs), own_s),
        "process_wall_s": wall,
        "preload_per_s": _rate(len(docs), preload_s),
    }


def _pipe_command(
    env: Environment, client: str, topics: Topics, group: str, expected: int, *, announce: bool = False
) -> list[str]:
    """The bare pipe's command line: documents -> decisions with the worker's batch settings."""
    spec = {
        "bootstrap": env.bootstrap, "client": client, "in_topic": topics.documents, "out_topic": topics.decisions,
        "group": group, "batch": env.batch, "expected": expected, "session_timeout_ms": SESSION_TIMEOUT_MS,
        "fetch_max_wait_ms": env.fetch_max_wait_ms, "linger_ms": env.linger_ms, "announce": announce,
        "max_batches_in_flight": env.max_batches_in_flight, "commit_interval_ms": env.commit_interval_ms,
        "compression": env.compression,
    }  # fmt: skip
    return [sys.executable, "-m", "benchmarks.service", "_pipe", json.dumps(spec)]


def phase_scoring(
    env: Environment, client: str, model: str, docs: Sequence[tuple[bytes, bytes]], profile_out: Path | None = None
) -> dict[str, Any]:
    name = env.name("scoring" if profile_out is None else "profile", client)
    topics = env.topics(name)
    preload(env.bootstrap, topics.documents, docs, env.load_compression)
    collector = env.collector([topics.decisions, topics.dead_letters]).start_and_wait()
    launched = time.time()
    worker = _worker(env, client, model, topics, name, profile_out)
    try:
        collector.wait_for(len(docs), env.timeout_s, worker.check_alive)
        busy_s = worker.metric("stream_winnow_batch_seconds_sum")
    finally:
        worker.stop()
        collector.stop()
    assert collector.first_s is not None
    # A short run can reach the collector in a single fetch (a span of 0 s): then the worker's own
    # time in its batches is the only measure there is.
    seconds = collector.span_s() if collector.span_s() > 0 else (busy_s or float("nan"))
    return {
        "documents": len(docs),
        "seconds": seconds,
        "per_s": _rate(len(docs), seconds),
        "join_s": collector.first_s - launched,
        "dead_letters": collector.counts[topics.dead_letters],
    }


def phase_learning(env: Environment, client: str, model: str, events: Sequence[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The worker on ``events`` alone, timed from the first event sent to the last one learned.

    The events are sent once the worker has joined its group and settled (``LEARNING_SETTLE_S``),
    and the clock stops at the first poll of /metrics that finds every one of them learned (the
    worker counts an event once its update is in Redis). Every event's whole path is inside the
    span, which is at most a poll interval and the first fetch too long, never too short.
    """
    name = env.name("learning", client)
    topics = env.topics(name)
    worker = _worker(env, client, model, topics, name)
    n = len(events)
    version_before = _model_version(env.redis_url, model)
    done_s = None
    learned = 0.0
    try:
        worker.wait_ready(env.timeout_s)
        time.sleep(LEARNING_SETTLE_S)
        started_s = time.time()
        preload(env.bootstrap, topics.labels, events, env.load_compression)  # the worker learns meanwhile
        deadline = time.monotonic() + env.timeout_s
        while learned < n:
            worker.check_alive()
            if time.monotonic() > deadline:
                raise TransportError(f"only {learned:.0f} of {n} labelled events learned in {env.timeout_s:.0f} s")
            learned = worker.metric("stream_winnow_labelled_events_total") or 0.0
            if learned >= n:
                done_s = time.time()
            else:
                time.sleep(_METRICS_POLL_S)
        updated = worker.metric("stream_winnow_updates_applied_total") or 0.0
        mistakes = worker.metric("stream_winnow_mistakes_total") or 0.0
        dead = worker.metric("stream_winnow_dead_letters_total") or 0.0
        # The worker's own account of its batches: how many, and the seconds it spent in them.
        batches = worker.metric("stream_winnow_batch_seconds_count") or 0.0
        batch_s = worker.metric("stream_winnow_batch_seconds_sum") or 0.0
    finally:
        worker.stop()
    assert done_s is not None
    seconds = done_s - started_s
    return {
        "events": n,
        "seconds": seconds,
        "per_s": _rate(n, seconds),
        "updates_metric_fraction": updated / n,
        "mistaken_categories_per_event": mistakes / n,
        "model_version_delta": _model_version(env.redis_url, model) - version_before,
        "dead_letters": int(dead),
        "timing_resolution_s": _METRICS_POLL_S,
        "batches": int(batches),
        "batch_ms": 1000 * batch_s / batches if batches else float("nan"),
    }


def phase_mixed(
    env: Environment, client: str, model: str, docs: Sequence[tuple[bytes, bytes]], labels: dict[bytes, bytes]
) -> dict[str, Any]:
    """Documents pre-loaded; the label of every 10th is sent (without tokens) as soon as its decision arrives."""
    from workers.transport import make_producer

    name = env.name("mixed", client)
    topics = env.topics(name)
    preload(env.bootstrap, topics.documents, docs, env.load_compression)
    producer = make_producer(_settings(env.bootstrap, "bench-labels", compression=env.load_compression),
                             _helper_client())  # type: ignore[arg-type]
    sent = [0]

    def on_decision(key: bytes | None, now_s: float) -> None:
        value = labels.get(key or b"")
        if value is not None:
            producer.send(topics.labels, value, key=key)
            sent[0] += 1

    collector = env.collector([topics.decisions, topics.dead_letters], on_message=on_decision)
    collector.start_and_wait()
    worker = _worker(env, client, model, topics, name)
    try:
        collector.wait_for(len(docs), env.timeout_s, worker.check_alive)
        collector.stop()
        producer.flush()
        deadline = time.monotonic() + env.timeout_s
        learned = dead = 0.0
        while True:
            learned = worker.metric("stream_winnow_labelled_events_total") or 0.0
            dead = worker.metric("stream_winnow_dead_letters_total") or 0.0
            if learned + dead >= len(labels):
                break
            worker.check_alive()
            if time.monotonic() > deadline:
                raise TransportError(f"only {learned:.0f} of {len(labels)} labels learned in {env.timeout_s:.0f} s")
            time.sleep(_METRICS_POLL_S)
        done_s = time.time()
    finally:
        worker.stop()
        collector.stop()
        producer.close()
    assert collector.first_s is not None
    seconds = done_s - collector.first_s
    return {
        "documents": len(docs),
        "labelled_events": sent[0],
        "seconds": seconds,
        "per_s": _rate(len(docs), seconds),
        "decisions_per_s": _rate(len(docs), collector.span_s()),
        "learned": int(learned),
        "dead_letters": int(dead),
    }


def latency_documents(rate: float, seconds: float, warmup_s: float = LATENCY_WARMUP_S) -> int:
    """Documents a paced latency run sends: ``rate`` a second through its warm-up and ``seconds``.

    >>> latency_documents(25_000, 10.0)
    275000
    """
    return max(1, int(rate * (warmup_s + seconds)))


def phase_latency(
    env: Environment, client: str, model: str | None, docs: Sequence[LabelledDocument], rate: float, seconds: float,
    warmup_s: float = LATENCY_WARMUP_S, *, fresh_broker: bool = True,
) -> dict[str, Any]:
    """Documents paced at ``rate``/s with ts = send time; percentiles of ts -> decision arrival here.

    The first ``warmup_s`` of the load is sent alike but not counted. ``model`` None runs the bare
    pipe instead of the worker at the same load: the transport's own latency on this machine, the
    floor under the worker's. With ``fresh_broker`` the run has an embedded broker of its own
    (``LATENCY_BROKERS``); the model stays in ``env``'s Redis.

    This process's long-lived objects (the stream, the model, earlier phases' results) are frozen
    out of the garbage collector for the run, as the worker's are: a full collection over them
    stops the load generator and the collector for 159-169 ms late in an invocation, and one such
    pause can take a run's p99 from about 80 to 106 ms. The garbage collector is then off for the run
    itself (about 11 s, which leaves a few hundred objects to free afterwards): with it on, a
    young-generation collection freeing 296 objects still takes 24-38 ms during the load at 24,000
    docs/s, in the worker's and the bare pipe's runs alike, and up to 60 ms at the longest.
    What is reported is the longest collection during the run: 0 unless something asks for one.
    """
    with _broker_for_run(env, fresh_broker) as run_env:
        gc.collect()
        gc.freeze()
        gc.disable()
        pauses = _Pauses()
        gc.callbacks.append(pauses)
        try:
            measured = _paced(run_env, client, model, docs, rate, seconds, warmup_s)
        finally:
            gc.callbacks.remove(pauses)
            gc.enable()
            gc.unfreeze()
    return {**measured, "harness_gc_max_ms": pauses.longest_s * 1000}


def _paced(
    env: Environment, client: str, model: str | None, docs: Sequence[LabelledDocument], rate: float, seconds: float,
    warmup_s: float,
) -> dict[str, Any]:
    """:func:`phase_latency` itself: load, runner and collector for one run."""

    name = env.name("latency" if model is not None else "pipe-latency", client)
    topics = env.topics(name)
    n = latency_documents(rate, seconds, warmup_s)
    if len(docs) < n:
        raise ValueError(f"a latency run of {seconds} s at {rate:,.0f} docs/s needs {n:,} documents, got {len(docs):,}")
    warm = min(n - 1, int(rate * warmup_s))  # the first `warm` documents are not counted
    collector = env.collector([topics.decisions], latency=True).start_and_wait()
    # Every message but its ts packed beforehand, so pacing costs the load generator little CPU
    # (the worker shares this machine's two cores with it).
    heads = [_without_ts(encode_document(DocumentMessage(doc.id, doc.tokens, None, 0))) for doc in docs[:n]]
    keys = [doc.id.encode() for doc in docs[:n]]
    runner: WorkerProcess | subprocess.Popen[str]
    if model is not None:
        runner = _worker(env, client, model, topics, name)
        check: Callable[[], None] = runner.check_alive
    else:
        runner = subprocess.Popen(
            _pipe_command(env, client, topics, name, n, announce=True),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        )  # fmt: skip
        check = lambda: None  # noqa: E731
    load = replace(_settings(env.bootstrap, "bench-load", compression=env.load_compression), linger_ms=env.load_linger_ms)
    producer = _LoadProducer(load)
    try:
        if isinstance(runner, WorkerProcess):
            runner.wait_ready(env.timeout_s)
        elif runner.stdout is None or runner.stdout.readline().strip() != "ready":
            raise TransportError("the bare pipe never got its partitions")
        started = time.perf_counter()
        sent = 0
        counted_from_ms = None  # ts of the first counted document
        usage_from: _Usage | None = None  # CPU used so far when the first counted document is sent
        sampler: _MachineSampler | None = None  # from the first counted document sent to the last decision here
        # The counted documents in thirds: when the first of each is sent, the clock (s), the broker's
        # CPU so far (s) and its ts, to show how a run changes as its topics fill.
        thirds = {warm + k * (n - warm) // 3 for k in range(3)}
        marks: list[tuple[float, float | None, int]] = []
        send, packed_ts, packed_ms = producer.sender(topics.documents), b"", -1
        while sent < n:
            due = min(n, int((time.perf_counter() - started) * rate) + 1)
            while sent < due:
                ts_ms = _now_ms()
                if ts_ms != packed_ms:
                    packed_ts, packed_ms = msgpack.packb(ts_ms), ts_ms
                if sent in thirds:  # the first of them is `warm`, the first counted document
                    if sent == warm:
                        counted_from_ms, usage_from = ts_ms, _usage(runner.pid, env.broker_pid, env.redis_pid)
                        sampler = _MachineSampler((runner.pid, env.broker_pid, env.redis_pid)).start()
                    marks.append((time.perf_counter(), _cpu_s(env.broker_pid), ts_ms))
                send(heads[sent] + packed_ts, keys[sent])
                sent += 1
            producer.poll()
            time.sleep(_PACE_TICK_S)
        marks.append((time.perf_counter(), _cpu_s(env.broker_pid), _now_ms()))
        offered_s = marks[-1][0] - marks[0][0]
        producer.flush()
        collector.wait_for(n, env.timeout_s, check)
        usage_to = _usage(runner.pid, env.broker_pid, env.redis_pid)
        samples = sampler.stop() if sampler is not None else []
        saturation = saturated([(t, u.machine) for t, u in samples]) if samples else None
        # Who used the CPUs in the longest saturated stretch (None where there was none).
        in_stretch = (
            stretch_cpu(samples[saturation.first], samples[saturation.last])
            if saturation is not None and saturation.last > saturation.first else None
        )
        # Whether the worker's own batches stalled, or it waited elsewhere (warm-up included).
        slow = runner.slow_batches() if isinstance(runner, WorkerProcess) else None
        commits = runner.metric("stream_winnow_offset_commits_total") if isinstance(runner, WorkerProcess) else None
    finally:
        if sampler is not None:
            sampler.stop()
        producer.close()
        if isinstance(runner, WorkerProcess):
            runner.stop()
        else:
            runner.kill()
            runner.wait()
        collector.stop()
    assert counted_from_ms is not None and usage_from is not None
    stamps = collector.timestamps_ms(since_ms=counted_from_ms)
    latencies = np.asarray([arrived - ts for ts, _, arrived in stamps])
    p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
    # The worker's decisions say when they were made: the latency up to then (the document's wait
    # for the worker and its batch) and after (the decision's linger, the broker, this collector).
    split = [(decided - ts, arrived - decided) for ts, decided, arrived in stamps if decided is not None]
    to_decided = after_decided = None
    if split:
        before, after = np.asarray(split).T
        to_decided = [float(v) for v in np.percentile(before, [50, 99])]
        after_decided = [float(v) for v in np.percentile(after, [50, 99])]
    counted = n - warm
    # By ts, which the documents are sent in order of (a ts shared across a boundary counts after it).
    third_of = np.searchsorted([ts for _, _, ts in marks[1:3]], [ts for ts, _, _ in stamps], side="right")
    p99_by_third = [float(np.percentile(latencies[third_of == k], 99)) if (third_of == k).any() else None
                    for k in range(3)]  # fmt: skip
    broker_by_third = [
        None if a is None or b is None or t1 <= t0 else 100.0 * (b - a) / (t1 - t0)
        for (t0, a, _), (t1, b, _) in zip(marks, marks[1:], strict=False)
    ]
    return {
        "documents": len(latencies),
        "warm_up_documents": warm,
        "offered_per_s": rate,
        "achieved_offered_per_s": _rate(n - warm, offered_s),
        "counted_s": offered_s,
        "p50_ms": float(p50),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "max_ms": float(latencies.max()),
        # The runner's and the broker's CPU over the counted documents (their share of the cores while
        # they pass), and the whole machine's: % of all its CPUs busy, and % stolen by the host.
        "cpu_us_per_document": _per_document_us(usage_from.runner_s, usage_to.runner_s, counted),
        "broker_cpu_us_per_document": _per_document_us(usage_from.broker_s, usage_to.broker_s, counted),
        "redis_cpu_us_per_document": _per_document_us(usage_from.redis_s, usage_to.redis_s, counted),
        "harness_cpu_us_per_document": _per_document_us(usage_from.harness_s, usage_to.harness_s, counted),
        "machine_busy_percent": _share(usage_from.machine, usage_to.machine, 1),
        "machine_steal_percent": _share(usage_from.machine, usage_to.machine, 2),
        # p50 and p99 of each part (the worker's decisions only): ts to decided_ts, decided_ts to arrival.
        "to_decided_p50_p99_ms": to_decided,
        "after_decided_p50_p99_ms": after_decided,
        # In each third of the counted documents, by send time: the p99, and the broker's CPU in % of
        # one core while they were sent (Tansu 0.6 lists every produce batch a partition holds on each
        # fetch, so its cost grows through a run; see benchmarks/broker_cost.py).
        "p99_ms_by_third": p99_by_third,
        "broker_cpu_percent_by_third": broker_by_third,
        "worker_batches_over_100ms": slow,
        # The worker's offset commit requests a second of load, warm-up included (--commit-interval-ms).
        "worker_commits_per_s": None if commits is None else commits / (marks[-1][0] - started),
        # From the first counted document sent to the last decision here, in windows of
        # SATURATION_WINDOW_S: the longest stretch (ms) and the share (%) of the time that the
        # machine's CPUs were at least SATURATED_PERCENT busy.
        "saturated_longest_ms": None if saturation is None else saturation.longest_ms,
        "saturated_percent": None if saturation is None else saturation.percent,
        # In that longest stretch, % of one core: the runner, the broker, Redis, this process, the rest.
        "saturated_cpu_percent": in_stretch,
        # Processes and threads the machine started over the counted run, and in that stretch: a burst
        # of them with CPU that no long-lived process shows is a short-lived process of the machine's.
        "tasks_started": _tasks_between(samples[0][1], samples[-1][1]) if samples else None,
        "saturated_tasks_started": (
            _tasks_between(samples[saturation.first][1], samples[saturation.last][1])
            if saturation is not None and saturation.last > saturation.first else None
        ),
    }


def _without_ts(message: bytes) -> bytes:
    """A document encoded with ``ts`` 0 (its last field), cut before the value: append any packed ts."""
    assert message.endswith(b"\xa2ts\x00"), "encode_document puts ts last"
    return message[:-1]


def profile_top(path: Path, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions by own time (tottime) in a cProfile dump."""
    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, function), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{function} ({_short_path(filename)}:{line})", "calls": calls,
                     "own_s": tottime, "cumulative_s": cumtime})  # fmt: skip
    total = sum(r["own_s"] for r in rows) or 1.0
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    for r in rows:
        r["own_share"] = r["own_s"] / total
    return rows[:top]


def _short_path(filename: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


VW_PEER = "vowpalwabbit --multilabel_oaa"  # its name among the peers, and the machine's yardstick (against_vw)


def run_peers(stream: Sequence[LabelledDocument]) -> dict[str, Any]:
    """In-process prequential docs/s of our learner and of VW on the (not repeated) stream, and of River
    on its first ``RIVER_MAX_DOCS`` documents (as ``python -m benchmarks.peers`` runs it)."""
    from benchmarks.peers import RIVER_MAX_DOCS, run_river_prequential, run_vw_prequential
    from stream_winnow.evaluation.runs import categories_of, prequential
    from stream_winnow.learners import build_learner

    out: dict[str, Any] = {}
    result = prequential(build_learner("balanced-winnow"), stream)
    out["stream_winnow balanced-winnow"] = {"per_s": result.docs_per_second, "micro_f1": result.report.micro_f1}
    categories = categories_of(stream)
    peers = {
        VW_PEER: partial(run_vw_prequential, stream, categories),
        f"river linear_model.Perceptron, one per category (first {RIVER_MAX_DOCS:,} documents)": partial(
            run_river_prequential, stream, categories, max_docs=RIVER_MAX_DOCS
        ),
    }
    for name, run in peers.items():
        try:
            peer = run()
            out[name] = {"per_s": peer.docs_per_second, "micro_f1": peer.micro_f1}
        except ImportError as error:  # the extra `bench` is not installed
            out[name] = {"per_s": float("nan"), "micro_f1": float("nan"), "note": str(error)}
    return out


def _latency_broker(kind: str) -> str:
    """How the header names where the latency runs were.

    >>> _latency_broker("fresh")
    'each latency run on a fresh embedded broker'
    """
    return "each latency run on a fresh embedded broker" if kind == "fresh" else "the latency runs on the shared broker"


def run_benchmark(config: BenchConfig, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    from workers.embedded import start_broker, start_redis

    if config.latency_broker not in LATENCY_BROKERS:
        raise ValueError(f"latency_broker {config.latency_broker!r}: choose from {', '.join(LATENCY_BROKERS)}")
    settings = worker_settings(config.worker_args)
    train, base, corpus = load_stream(config)
    say(f"stream: {corpus}")
    model = train_model(train)
    say(f"trained in {model.train_seconds:.1f} s: {len(model.categories)} categories")
    largest = max(config.documents_for(c) for c in config.clients)
    stream = repeat_stream(base, largest)
    encoded = [(d.id.encode(), encode_document(DocumentMessage(d.id, d.tokens, None, None))) for d in stream]
    learned = stream[: min(config.learn_events, largest)] if "learning" in config.phases else []
    wrong, mistakes = mistaken_labels(copy.deepcopy(model.learner), learned) if learned else ([], 0)
    if learned:
        say(f"learning events: {mistakes:,} of {len(learned):,} mistakes in process")
    learn_events = [
        (d.id.encode(), encode_labelled_event(LabelledEvent(f"learn:{d.id}", d.id, (label,), d.tokens, None)))
        for d, label in zip(learned, wrong, strict=True)
    ]
    label_of = {
        d.id.encode(): encode_labelled_event(LabelledEvent(f"label:{d.id}", d.id, d.labels, None, None))
        for i, d in enumerate(stream)
        if i % MIXED_LABEL_EVERY == 0 and d.labels
    }
    results: dict[str, Any] = {
        "command": config.command,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "corpus": corpus,
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg()[0],
        "batch_max_docs": settings.batch_max_docs,
        "batch_max_labels": settings.batch_max_labels,
        "repeats": config.repeats,
        "load_linger_ms": config.load_linger_ms,
        "load_compression": config.load_compression,
        "compression": settings.kafka.compression,
        "partitions": config.partitions,
        "latency_broker": config.latency_broker,
        "worker_args": list(config.worker_args),
        "clients": {},
    }
    log_dir = Path(tempfile.mkdtemp(prefix="stream-winnow-bench-"))
    results["log_dir"] = str(log_dir)
    with start_broker() as broker, start_redis() as redis_server:
        env = Environment(broker.bootstrap_servers, redis_server.url, log_dir, config.worker_args,
                          settings.batch_max_docs, settings.shards, config.timeout_s,
                          fetch_max_wait_ms=settings.kafka.fetch_max_wait_ms,
                          linger_ms=settings.kafka.linger_ms,
                          max_batches_in_flight=settings.max_batches_in_flight,
                          commit_interval_ms=settings.commit_interval_ms,
                          load_linger_ms=config.load_linger_ms, partitions=config.partitions,
                          compression=settings.kafka.compression, load_compression=config.load_compression,
                          broker_pid=broker.pid, redis_pid=redis_server.pid)  # fmt: skip
        write_s = write_model(model, env.redis_url, MODEL, settings.shards, len(train))
        results["model_write_s"] = write_s
        results["memory"] = model_memory(env.redis_url, MODEL, settings.shards, model.learner.table_specs())
        say(f"model in Redis: {results['memory']['bytes'] / 2**20:.1f} MiB")
        for client in config.clients:
            n = config.documents_for(client)
            docs = encoded[:n]
            out: dict[str, Any] = {"documents": n}
            results["clients"][client] = out
            repeats = range(config.repeats)
            # Pipe and scoring alternate, so a quiet or busy spell of the machine touches both alike.
            for repeat in repeats:
                if "pipe" in config.phases:
                    say(f"[{client}] pipe, {n:,} messages")
                    out.setdefault("pipe_runs", []).append(phase_pipe(env, client, docs))
                    say(f"[{client}] pipe: {out['pipe_runs'][-1]['per_s']:,.0f}/s")
                if "scoring" in config.phases:
                    scoring_model = f"{MODEL}-s-{client}-{repeat}"
                    write_model(model, env.redis_url, scoring_model, settings.shards, len(train))
                    out.setdefault("scoring_runs", []).append(phase_scoring(env, client, scoring_model, docs))
                    say(f"[{client}] scoring: {out['scoring_runs'][-1]['per_s']:,.0f}/s")
            for phase in ("pipe", "scoring"):
                if f"{phase}_runs" in out:
                    out[phase] = median_run(out[f"{phase}_runs"], "per_s")
            if "learning" in config.phases:
                learn_model = f"{MODEL}-l-{client}"
                write_model(model, env.redis_url, learn_model, settings.shards, len(train))
                events = learn_events[: min(len(learn_events), n)]
                out["learning"] = phase_learning(env, client, learn_model, events)
                out["learning"]["markers"] = marker_memory(env.redis_url, learn_model, settings.shards,
                                                           model.learner.table_specs())  # fmt: skip
                say(f"[{client}] learning: {out['learning']['per_s']:,.0f}/s")
            if "mixed" in config.phases:
                mixed_model = f"{MODEL}-m-{client}"
                write_model(model, env.redis_url, mixed_model, settings.shards, len(train))
                keys = {key for key, _ in docs}
                out["mixed"] = phase_mixed(env, client, mixed_model, docs,
                                           {k: v for k, v in label_of.items() if k in keys})  # fmt: skip
                say(f"[{client}] mixed: {out['mixed']['per_s']:,.0f}/s")
            if "latency" in config.phases:
                rate = config.latency_rate or out["scoring"]["per_s"] / 2
                # The paced load runs its whole warm-up and seconds: the stream repeats as far as that
                # takes (at 25,000 docs/s, 275,000 documents), not only as far as the other phases'.
                paced = repeat_stream(base, latency_documents(rate, config.latency_seconds))
                fresh_broker = config.latency_broker == "fresh"
                for repeat in repeats:
                    latency_model = f"{MODEL}-t-{client}-{repeat}"
                    write_model(model, env.redis_url, latency_model, settings.shards, len(train))
                    measured = phase_latency(env, client, latency_model, paced, rate, config.latency_seconds,
                                             fresh_broker=fresh_broker)
                    out.setdefault("latency_runs", []).append(measured)
                    say(f"[{client}] latency p99: {measured['p99_ms']:.1f} ms (ts → decided_ts / after, p50 / p99: "
                        f"{_split(measured)}); the bare pipe at the same load")
                    floor = phase_latency(env, client, None, paced, rate, config.latency_seconds,
                                          fresh_broker=fresh_broker)
                    out.setdefault("pipe_latency_runs", []).append(floor)
                    say(f"[{client}] bare pipe latency p99: {floor['p99_ms']:.1f} ms")
                out["latency"] = median_run(out["latency_runs"], "p99_ms")
                out["pipe_latency"] = median_run(out["pipe_latency_runs"], "p99_ms")
            if "pipe" in out and "scoring" in out:
                out["scoring_over_pipe"] = out["scoring"]["per_s"] / out["pipe"]["per_s"]
        if config.profile:
            client = config.clients[0]
            n = config.documents_for(client)
            profile_path = log_dir / "scoring.prof"
            profile_model = f"{MODEL}-p-{client}"
            write_model(model, env.redis_url, profile_model, settings.shards, len(train))
            say(f"[{client}] profile: scoring again under cProfile (untimed)")
            profiled = phase_scoring(env, client, profile_model, encoded[:n], profile_out=profile_path)
            results["profile"] = {
                "client": client,
                "documents": n,
                "per_s_under_cprofile": profiled["per_s"],
                "file": str(profile_path),
                "top": profile_top(profile_path, config.profile_top),
            }
    if config.peers:
        say("peers: in-process prequential on the stream (not repeated)")
        results["peers"] = run_peers(base)
    results["load_average_end"] = os.getloadavg()[0]
    return results


def _f(value: float, digits: int = 0) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"  # NaN check


def _markers(learning: dict[str, Any]) -> str:
    """MiB of the markers, and bytes an event learned.

    >>> _markers({"events": 100_000, "markers": {"keys": 200_016, "bytes": 125_829_120}})
    '120.0 / 1,258'
    """
    markers = learning.get("markers")
    if not markers or not learning["events"]:
        return "–"
    return f"{markers['bytes'] / 2**20:.1f} / {_f(markers['bytes'] / learning['events'])}"


def _cpu(runs: Sequence[dict[str, Any]], key: str = "cpu_us_per_document") -> str:
    """Each run's CPU µs a document (``key``: the runner's, the broker's, Redis's or the harness's), in run order ("–" where /proc could not tell)."""
    return ", ".join("–" if r.get(key) is None else f"{r[key]:.1f}" for r in runs)


def _machine(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's "busy / steal" % of the machine's CPUs ("–" where /proc/stat could not tell)."""
    return ", ".join(
        "–" if r.get("machine_busy_percent") is None else f"{r['machine_busy_percent']:.0f} / {r['machine_steal_percent']:.1f}"
        for r in runs
    )


def _saturation(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's "longest stretch ms / share %" of saturated machine ("–" where /proc/stat could not tell).

    >>> _saturation([{"saturated_longest_ms": 1600.0, "saturated_percent": 21.5}, {}])
    '1,600 / 21.5, –'
    """
    return ", ".join(
        "–" if r.get("saturated_longest_ms") is None else f"{r['saturated_longest_ms']:,.0f} / {r['saturated_percent']:.1f}"
        for r in runs
    )


def _tasks(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's tasks started on the machine, "over the run / in its longest saturated stretch".

    >>> _tasks([{"tasks_started": 38, "saturated_tasks_started": 31}, {"tasks_started": 3,
    ...          "saturated_tasks_started": None}, {}])
    '38 / 31, 3 / –, –'
    """
    def cell(n: int | None) -> str:
        return "–" if n is None else f"{n:,}"

    return ", ".join(
        "–" if r.get("tasks_started") is None else f"{cell(r['tasks_started'])} / {cell(r.get('saturated_tasks_started'))}"
        for r in runs
    )


def _stretch_cpu(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's CPU in its longest saturated stretch, % of a core: "runner / broker / Redis / harness / rest"
    ("–" where the run had no such stretch or ``/proc`` could not tell).

    >>> _stretch_cpu([{"saturated_cpu_percent": {"runner": 96.2, "broker": 61.0, "redis": 3.1, "harness": 24.4,
    ...                                          "rest": 12.0}}, {"saturated_cpu_percent": None}])
    '96 / 61 / 3 / 24 / 12, –'
    """
    return ", ".join(
        "–" if not r.get("saturated_cpu_percent") else " / ".join(f"{v:.0f}" for v in r["saturated_cpu_percent"].values())
        for r in runs
    )


def _partitions(n: int) -> str:
    """How many partitions each topic has, in words.

    >>> _partitions(1), _partitions(4)
    ('1 partition', '4 partitions')
    """
    return f"{n} partition" + ("" if n == 1 else "s")


def _thirds(runs: Sequence[dict[str, Any]], key: str, digits: int = 1) -> str:
    """Each run's three figures, first → last third, runs apart by commas ("–" where one is unknown)."""
    return ", ".join(" → ".join("–" if x is None else _f(x, digits) for x in r.get(key) or [None]) for r in runs)


def _split(run: dict[str, Any]) -> str:
    before, after = run.get("to_decided_p50_p99_ms"), run.get("after_decided_p50_p99_ms")
    if before is None or after is None:
        return "–"
    return f"{_f(before[0], 1)} / {_f(before[1], 1)} + {_f(after[0], 1)} / {_f(after[1], 1)}"


def _spread(figures: dict[str, Any], digits: int = 0) -> str:
    """" (runs: a, b, c)" after a median of several runs; nothing for a single run."""
    runs = figures.get("of_runs", [])
    return f" (runs: {', '.join(_f(v, digits) for v in runs)})" if len(runs) > 1 else ""


def _cell(cell: Callable[[dict[str, Any]], str], figures: dict[str, Any]) -> str:
    """A table cell, or a dash for a phase this run left out (``--phases``)."""
    try:
        return cell(figures)
    except KeyError:
        return "–"


def against_vw(results: dict[str, Any]) -> str:
    """Each client's scoring and learning rates over Vowpal Wabbit's in-process docs/s in the same run.

    The machines a run lands on differ by a factor of about 1.6 in speed (VW 8,800-14,600 docs/s),
    and the service's rates move with them; these ratios do not, much. The targets in these units
    (VW doing about 10,000 docs/s where they were set): scoring 2.0 (20,000 docs/s), learning 0.5
    (5,000 mistaken events/s). Empty when the run has no VW figure.

    >>> against_vw({"peers": {VW_PEER: {"per_s": 10_000.0}},
    ...             "clients": {"confluent": {"scoring": {"per_s": 45_000.0}, "learning": {"per_s": 5_500.0}}}})
    'confluent: scoring 4.50, learning 0.55'
    >>> against_vw({"peers": {VW_PEER: {"per_s": float("nan")}}, "clients": {}})  # VW not installed
    ''
    """
    vw = results.get("peers", {}).get(VW_PEER, {}).get("per_s", float("nan"))
    if vw != vw or vw <= 0:  # NaN (VW not installed) or nothing
        return ""
    parts = []
    for client, figures in results["clients"].items():
        ratios = [f"{phase} {figures[phase]['per_s'] / vw:.2f}" for phase in ("scoring", "learning") if phase in figures]
        if ratios:
            parts.append(f"{client}: " + ", ".join(ratios))
    return "; ".join(parts)


def markdown(results: dict[str, Any]) -> str:
    clients = list(results["clients"])
    lines = [
        f"`{results['command']}`",
        "",
        f"{results['corpus']}; batch_max_docs {results['batch_max_docs']} (labels only: "
        f"{results.get('batch_max_labels', '-')}); worker args: "
        f"{' '.join(results['worker_args']) or '(none)'}; median of {results['repeats']} run(s) of pipe, scoring "
        # Results saved without a partitions field had four.
        f"and latency; {_partitions(results.get('partitions', 4))} a topic; the latency load's producer lingers "
        # Results saved without a latency_broker field ran every latency run on the shared broker.
        f"{results['load_linger_ms']} ms; {_latency_broker(results.get('latency_broker', 'shared'))}; batches compressed: documents and labels "
        f"{results.get('load_compression', 'none')}, decisions {results.get('compression', 'none')}; "
        f"{results['cpus']} CPUs, "
        "load average "
        f"{results['load_average_start']:.2f} at start, {results['load_average_end']:.2f} at end",
        "",
        "| measure | " + " | ".join(clients) + " |",
        "|---|" + "---|" * len(clients),
    ]
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("documents per phase", lambda c: f"{c['documents']:,}"),
        ("bare pipe msg/s (consume→decode→encode→produce)", lambda c: _f(c["pipe"]["per_s"]) + _spread(c["pipe"])),
        ("bare pipe msg/s, self-timed (first consume → last ack)", lambda c: _f(c["pipe"]["self_timed_per_s"])),
        ("scoring docs/s (first → last decision)", lambda c: _f(c["scoring"]["per_s"]) + _spread(c["scoring"])),
        ("**scoring / bare pipe**", lambda c: _f(c["scoring_over_pipe"], 2)),
        ("group join before first decision, s (excluded)", lambda c: _f(c["scoring"]["join_s"], 1)),
        ("learning events/s (every event a mistake)", lambda c: _f(c["learning"]["per_s"])),
        ("learning: events that were mistakes, share (metric)",
         lambda c: _f(c["learning"]["updates_metric_fraction"], 3)),
        ("learning: mistaken categories per event (metric)",
         lambda c: _f(c["learning"]["mistaken_categories_per_event"], 2)),
        ("learning: model version delta / events",
         lambda c: f"{c['learning']['model_version_delta']:,} / {c['learning']['events']:,}"),
        ("learning: the worker's batches / its mean ms in a batch (metrics)",
         lambda c: f"{c['learning']['batches']:,} / {_f(c['learning']['batch_ms'])}"),
        ("learning: Redis memory of the watermarks and seen events, MiB / bytes an event",
         lambda c: _markers(c["learning"])),
        ("mixed docs/s (10 % labelled later, from cache)", lambda c: _f(c["mixed"]["per_s"])),
        ("mixed: labelled events learned / dead letters",
         lambda c: f"{c['mixed']['learned']:,} / {c['mixed']['dead_letters']:,}"),
        ("latency: offered docs/s (½ scoring); seconds counted, each run",
         lambda c: f"{_f(c['latency']['offered_per_s'])}; "
                   + ", ".join(_f(run["counted_s"], 1) for run in c["latency_runs"])),
        ("latency p50 / p95 / p99 ms",
         lambda c: f"{_f(c['latency']['p50_ms'], 1)} / {_f(c['latency']['p95_ms'], 1)} / "
                   f"{_f(c['latency']['p99_ms'], 1)}" + _spread(c["latency"], 1)),
        ("bare pipe at the same load: p50 / p95 / p99 ms",
         lambda c: f"{_f(c['pipe_latency']['p50_ms'], 1)} / {_f(c['pipe_latency']['p95_ms'], 1)} / "
                   f"{_f(c['pipe_latency']['p99_ms'], 1)}" + _spread(c["pipe_latency"], 1)),
        ("latency: ts → decided_ts / decided_ts → arrival, p50 / p99 ms (each run)",
         lambda c: "; ".join(_split(run) for run in c["latency_runs"])),
        ("latency: p99 ms in each third of the counted time, the worker's runs; the bare pipe's",
         lambda c: f"{_thirds(c['latency_runs'], 'p99_ms_by_third')}; {_thirds(c['pipe_latency_runs'], 'p99_ms_by_third')}"),
        ("latency: the worker's batches over 100 ms, each run (its metrics, warm-up included)",
         lambda c: ", ".join("–" if r.get("worker_batches_over_100ms") is None else f"{r['worker_batches_over_100ms']:,}"
                             for r in c["latency_runs"])),
        ("latency: the worker's offset commits a second of load, each run (its metrics)",
         lambda c: ", ".join("–" if r.get("worker_commits_per_s") is None else _f(r["worker_commits_per_s"], 1)
                             for r in c["latency_runs"])),
        ("latency: the broker's CPU, % of a core, in each third, the worker's runs; the bare pipe's",
         lambda c: f"{_thirds(c['latency_runs'], 'broker_cpu_percent_by_third', 0)}; "
                   f"{_thirds(c['pipe_latency_runs'], 'broker_cpu_percent_by_third', 0)}"),
        ("latency: the worker's / the bare pipe's CPU, µs a document",
         lambda c: f"{_cpu(c['latency_runs'])} / {_cpu(c['pipe_latency_runs'])}"),
        ("latency: the broker's CPU, µs a document, in the worker's / the bare pipe's runs",
         lambda c: f"{_cpu(c['latency_runs'], 'broker_cpu_us_per_document')} / "
                   f"{_cpu(c['pipe_latency_runs'], 'broker_cpu_us_per_document')}"),
        ("latency: Redis's / the load generator and collector's CPU, µs a document, in the worker's runs; "
         "the bare pipe's",
         lambda c: f"{_cpu(c['latency_runs'], 'redis_cpu_us_per_document')} / "
                   f"{_cpu(c['latency_runs'], 'harness_cpu_us_per_document')}; "
                   f"{_cpu(c['pipe_latency_runs'], 'redis_cpu_us_per_document')} / "
                   f"{_cpu(c['pipe_latency_runs'], 'harness_cpu_us_per_document')}"),
        ("latency: the machine's CPUs busy / stolen by the host, %, in the worker's runs; the bare pipe's",
         lambda c: f"{_machine(c['latency_runs'])}; {_machine(c['pipe_latency_runs'])}"),
        ("latency: the machine's CPUs ≥ 95 % busy (100 ms windows): longest stretch ms / share of the run %, "
         "the worker's runs; the bare pipe's",
         lambda c: f"{_saturation(c['latency_runs'])}; {_saturation(c['pipe_latency_runs'])}"),
        ("latency: in that longest stretch, % of a core: the worker or pipe / the broker / Redis / the load generator "
         "and collector / the rest of the machine, the worker's runs; the bare pipe's",
         lambda c: f"{_stretch_cpu(c['latency_runs'])}; {_stretch_cpu(c['pipe_latency_runs'])}"),
        ("latency: processes and threads the machine started, over the run / in that longest stretch, the worker's "
         "runs; the bare pipe's",
         lambda c: f"{_tasks(c['latency_runs'])}; {_tasks(c['pipe_latency_runs'])}"),
        ("latency runs: this process's longest gc pause, ms",
         lambda c: _f(max(r["harness_gc_max_ms"] for r in c["latency_runs"] + c["pipe_latency_runs"]), 1)),
    ]  # fmt: skip
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(cell, results["clients"][c]) for c in clients) + " |")
    memory = results["memory"]
    lines += [
        "",
        f"Model in Redis: {memory['bytes']:,} bytes ({memory['bytes'] / 2**20:.1f} MiB) in {memory['keys']:,} keys; "
        f"{memory['features']:,} features × {memory['categories']} categories × {memory['per_category_tables']} "
        f"tables → **{memory['bytes_per_weight']:.2f} bytes per weight**.",
    ]
    if "peers" in results:
        lines += ["", "| in-process prequential (stream not repeated) | docs/s | micro-F1 |", "|---|---|---|"]
        for system, peer in results["peers"].items():
            lines.append(f"| {system} | {_f(peer['per_s'])} | {_f(peer['micro_f1'], 3)} |")
        yardstick = against_vw(results)
        if yardstick:
            lines += ["", "Against Vowpal Wabbit in process, this run (the machine's yardstick): " + yardstick + "."]
    if "profile" in results:
        profile = results["profile"]
        lines += [
            "",
            f"Worker profile ({profile['client']}, scoring {profile['documents']:,} docs under cProfile from the first "
            f"batch, "
            f"{_f(profile['per_s_under_cprofile'])} docs/s with the profiler on), top by own time:",
            "",
            "| function | calls | own s | share | cumulative s |",
            "|---|---|---|---|---|",
        ]
        for row in profile["top"]:
            lines.append(f"| `{row['function']}` | {row['calls']:,} | {row['own_s']:.2f} | "
                         f"{row['own_share']:.1%} | {row['cumulative_s']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_pipe"]:
        _pipe_main(json.loads(argv[1]))
        return
    if argv[:1] == ["_profiled_worker"]:
        _profiled_worker(argv[1], argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="Reuters-21578 .tar.gz or folder.")
    parser.add_argument("--synthetic", type=int, default=None, help="Use N synthetic documents instead (tests).")
    parser.add_argument("--client", choices=["kafka-python", "confluent", "both"], default="confluent")
    parser.add_argument("--documents", type=int, default=100_000, help="Documents per phase (the stream repeats).")
    parser.add_argument("--kafka-python-documents", type=int, default=0,
                        help="Cap for kafka-python, whose phases run ~3x longer; 0: no cap [default].")
    parser.add_argument("--learn-events", type=int, default=BenchConfig.learn_events,
                        help="Labelled events in the learning phase, at most --documents [default: %(default)s].")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="Length of the paced latency phase.")
    parser.add_argument("--latency-rate", type=float, default=None,
                        help="Offered docs/s in the latency phase [default: half the measured scoring rate].")
    parser.add_argument("--load-linger-ms", type=int, default=LOAD_LINGER_MS,
                        help="The latency phase's producer linger (it counts in every latency) [default: %(default)s].")
    parser.add_argument("--load-compression", choices=COMPRESSIONS, default="none",
                        help="Codec of the documents' and labels' producers (a worker's own is --worker-arg="
                             "--compression=...) [default: %(default)s].")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help="Partitions of every topic a run creates [default: %(default)s].")
    parser.add_argument("--latency-broker", choices=LATENCY_BROKERS, default="fresh",
                        help="fresh: each latency run on an embedded broker of its own; shared: on the one every "
                             "other phase used [default: %(default)s].")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1,
                        help="Runs of pipe, scoring and latency; the median run is reported [default: %(default)s].")
    parser.add_argument("--phases", default=",".join(BenchConfig.phases),
                        help="Comma-separated subset of: " + ", ".join(BenchConfig.phases) + ".")
    parser.add_argument("--worker-arg", action="append", default=[], metavar="FLAG",
                        help="A flag for every worker, e.g. --worker-arg=--max-staleness-ms=1000 (repeatable).")
    parser.add_argument("--no-peers", action="store_true", help="Skip the in-process peers.")
    parser.add_argument("--profile", action="store_true", help="Profile one more scoring pass (cProfile).")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="Give up on a phase after this.")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON after the table.")
    args = parser.parse_args(argv)
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = sorted(set(phases) - set(BenchConfig.phases))
    if args.partitions < 1:
        parser.error(f"--partitions must be at least 1; got {args.partitions}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    if unknown or not phases:
        parser.error(f"--phases: {', '.join(unknown) or '(none)'} not allowed; choose from {', '.join(BenchConfig.phases)}")
    if "latency" in phases and "scoring" not in phases and args.latency_rate is None:
        parser.error("--phases latency without scoring needs --latency-rate (the rate is half of scoring's)")
    clients = ("confluent", "kafka-python") if args.client == "both" else (args.client,)
    config = BenchConfig(
        source=args.source,
        synthetic=args.synthetic,
        clients=clients,
        documents=args.documents,
        kafka_python_documents=args.kafka_python_documents or None,
        learn_events=args.learn_events,
        latency_seconds=args.latency_seconds,
        latency_rate=args.latency_rate,
        load_linger_ms=args.load_linger_ms,
        load_compression=args.load_compression,
        partitions=args.partitions,
        repeats=args.repeats,
        latency_broker=args.latency_broker,
        phases=phases,
        worker_args=tuple(args.worker_arg),
        peers=not args.no_peers,
        profile=args.profile,
        timeout_s=args.timeout_s,
        command="python -m benchmarks.service " + shlex.join(argv),
    )
    results = run_benchmark(config, say=lambda text: print(text, file=sys.stderr, flush=True))
    print(markdown(results))
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
