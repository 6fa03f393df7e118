"""The latency phase: documents paced at a given rate with ts = send time; percentiles of ts -> decision arrival, for
the worker and then for the bare pipe at the same load (the transport's own latency)."""

from __future__ import annotations

import gc
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import msgpack
import numpy as np

from benchmarks.service.config import _settings
from benchmarks.service.load import _LoadProducer
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
from benchmarks.service.pipe import _pipe_command
from benchmarks.service.services import Environment, WorkerProcess, _broker_for_run, _worker
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import TransportError
from stream_winnow.wire.codec import DocumentMessage, encode_document

# The latency phase's first second of load is not counted: a consumer that was just assigned its
# partitions takes ~120 ms on Tansu to look up its offsets and fetch, and the documents sent
# meanwhile arrive at once (a 150-240 ms start spike, for the worker and the bare pipe alike).
LATENCY_WARMUP_S = 1.0
# The load generator sends what is due every tick; 1 ms keeps bursts under ~1 % of a 20k/s rate.
_PACE_TICK_S = 0.001


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
