"""The mixed phase: documents, plus labelled events (no tokens) for 10 % of them, sent once decided."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from benchmarks.service.config import _helper_client, _settings
from benchmarks.service.learning import _METRICS_POLL_S
from benchmarks.service.load import preload
from benchmarks.service.measure import _rate
from benchmarks.service.services import Environment, _worker
from stream_winnow.errors import TransportError

# Share of the scored documents that get a labelled event in the mixed phase.
MIXED_LABEL_EVERY = 10


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
