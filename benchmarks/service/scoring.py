"""The scoring phase: the worker on unlabelled documents only (pre-loaded topic); and the worker's profile.

``--profile`` runs one more (untimed) scoring pass under cProfile and prints the top functions by own time.
"""

from __future__ import annotations

import pstats
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.service.load import preload
from benchmarks.service.measure import _rate
from benchmarks.service.services import Environment, _worker


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
