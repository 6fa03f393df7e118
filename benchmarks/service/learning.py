"""The learning phase: the worker on labelled events with tokens, each one a mistake of the model as it stands when
the event arrives (:func:`benchmarks.service.model.mistaken_labels`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from benchmarks.service.load import preload
from benchmarks.service.measure import _rate
from benchmarks.service.model import _model_version
from benchmarks.service.services import Environment, _worker
from stream_winnow.errors import TransportError

# The learning phase sends its events this long after the worker is ready, for the reason that the latency
# phase leaves its first second of load uncounted (``latency.LATENCY_WARMUP_S``).
LEARNING_SETTLE_S = 1.0
# How often the learning phase reads the worker's counters (the timing resolution of that phase).
_METRICS_POLL_S = 0.02


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
