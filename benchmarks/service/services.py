"""The services every phase runs on: its topics, the worker as a subprocess, and the environment (broker, Redis,
settings) that the phases share.

Every phase runs in a subprocess (the worker as ``python -m workers.cli worker`` with
``STREAM_WINNOW_*`` variables; the pipe as ``python -m benchmarks.service _pipe``) on its own
topics (one partition each unless ``--partitions`` says otherwise) and consumer group.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.service.collector import Collector
from benchmarks.service.config import LOAD_LINGER_MS, PARTITIONS, SESSION_TIMEOUT_MS
from stream_winnow.errors import TransportError

_WORKER_STOP_GRACE_S = 15.0
_LOG_TAIL_CHARS = 3_000


@dataclass
class Topics:
    documents: str
    labels: str
    decisions: str
    dead_letters: str

    @classmethod
    def of(cls, prefix: str) -> Topics:
        return cls(f"{prefix}.documents", f"{prefix}.labels", f"{prefix}.decisions", f"{prefix}.dead-letters")

    def all(self) -> list[str]:
        return [self.documents, self.labels, self.decisions, self.dead_letters]


class WorkerProcess:
    """``python -m workers.cli worker`` with STREAM_WINNOW_* settings; --worker-arg flags are appended."""

    def __init__(
        self,
        *,
        bootstrap: str,
        redis_url: str,
        model: str,
        client: str,
        topics: Topics,
        group: str,
        worker_args: Sequence[str],
        log_dir: Path,
        profile_out: Path | None = None,
    ) -> None:
        from workers.embedded import free_port

        self.http_port = free_port()
        self.log_path = log_dir / f"{group}.log"
        env = dict(os.environ)
        env.update({
            "STREAM_WINNOW_BOOTSTRAP_SERVERS": bootstrap,
            "STREAM_WINNOW_REDIS_URL": redis_url,
            "STREAM_WINNOW_MODEL": model,
            "STREAM_WINNOW_KAFKA_CLIENT": client,
            "STREAM_WINNOW_GROUP_ID": group,
            "STREAM_WINNOW_DOCUMENTS_TOPIC": topics.documents,
            "STREAM_WINNOW_LABELS_TOPIC": topics.labels,
            "STREAM_WINNOW_DECISIONS_TOPIC": topics.decisions,
            "STREAM_WINNOW_DEAD_LETTERS_TOPIC": topics.dead_letters,
            "STREAM_WINNOW_HTTP_PORT": str(self.http_port),
            "STREAM_WINNOW_WORKER_ID": f"bench-{group}",
        })  # fmt: skip
        env.setdefault("STREAM_WINNOW_SESSION_TIMEOUT_MS", str(SESSION_TIMEOUT_MS))
        if profile_out is None:
            argv = [sys.executable, "-m", "workers.cli", "worker", *worker_args]
        else:
            argv = [sys.executable, "-m", "benchmarks.service", "_profiled_worker", str(profile_out), *worker_args]
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise TransportError(f"worker exited with {self.process.returncode}; log ends:\n{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"

    def _get(self, path: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=2.0) as response:
                body: bytes = response.read()
                return body.decode("utf-8", "replace")
        except (urllib.error.URLError, OSError):
            return None

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._get("/readyz") is None:
            self.check_alive()
            if time.monotonic() > deadline:
                raise TransportError(f"worker not ready after {timeout_s:.0f} s; log ends:\n{self.log_tail()}")
            time.sleep(0.05)

    def metric(self, name: str) -> float | None:
        """Sum over label values of a counter in /metrics (None when the endpoint does not answer)."""
        text = self._get("/metrics")
        return None if text is None else sum(_samples(text, name))

    def slow_batches(self, over_s: float = 0.1) -> int | None:
        """Batches that took over ``over_s`` (a bucket bound of ``stream_winnow_batch_seconds``) so far, by /metrics."""
        text = self._get("/metrics")
        if text is None:
            return None
        count = _samples(text, "stream_winnow_batch_seconds_count")
        within = _samples(text, f'stream_winnow_batch_seconds_bucket{{le="{over_s}"}}')
        return int(count[0] - within[0]) if count and within else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(_WORKER_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _samples(metrics_text: str, name: str) -> list[float]:
    """The values of the samples of ``name`` in a Prometheus text page, any labels (``name{...}``) or none.

    >>> page = "\\n".join(["b_count 7", 'b_bucket{le="0.1"} 5', 'b_bucket{le="1.0"} 7', "b_sum 0.4"])
    >>> _samples(page, "b_bucket"), _samples(page, 'b_bucket{le="0.1"}'), _samples(page, "b")
    ([5.0, 7.0], [5.0], [])
    """
    return [
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{")
    ]


@dataclass
class Environment:
    bootstrap: str
    redis_url: str
    log_dir: Path
    worker_args: tuple[str, ...]
    batch: int
    shards: int
    timeout_s: float
    run_id: str = field(default_factory=lambda: str(os.getpid()))
    # Numbers the names of groups, topics and worker logs; one iterator, shared by the copies a latency
    # run on a fresh broker makes (``replace``), so names stay unique over the invocation.
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    # The worker's fetch wait and linger, which the bare pipe uses too (same batch settings).
    fetch_max_wait_ms: int = 10
    linger_ms: int = 5
    max_batches_in_flight: int = 4
    commit_interval_ms: int = 100
    load_linger_ms: int = LOAD_LINGER_MS
    partitions: int = PARTITIONS
    # Codecs of the worker's decision batches (the bare pipe's too), and of the documents' and labels' producers.
    compression: str = "none"
    load_compression: str = "none"
    # The embedded broker's and Redis's processes, whose CPU the latency runs report beside the runner's.
    broker_pid: int | None = None
    redis_pid: int | None = None

    def name(self, phase: str, client: str) -> str:
        return f"{phase}-{client}-{self.run_id}-{next(self.numbers)}"

    def collector(self, topics: Sequence[str], **kwargs: Any) -> Collector:
        """A :class:`Collector` of ``topics``, on every partition this run's topics have."""
        return Collector(self.bootstrap, topics, partitions=self.partitions, **kwargs)

    def topics(self, prefix: str) -> Topics:
        from workers.embedded import create_topics

        topics = Topics.of(prefix)
        create_topics(self.bootstrap, dict.fromkeys(topics.all(), self.partitions))
        return topics


def _worker(env: Environment, client: str, model: str, topics: Topics, group: str,
            profile_out: Path | None = None) -> WorkerProcess:  # fmt: skip
    return WorkerProcess(
        bootstrap=env.bootstrap, redis_url=env.redis_url, model=model, client=client, topics=topics, group=group,
        worker_args=env.worker_args, log_dir=env.log_dir, profile_out=profile_out,
    )  # fmt: skip


@contextmanager
def _broker_for_run(env: Environment, fresh: bool) -> Iterator[Environment]:
    """``env`` itself, or ``env`` on a new embedded broker, stopped when the run ends."""
    if not fresh:
        yield env
        return
    from workers.embedded import start_broker

    with start_broker() as broker:
        yield replace(env, bootstrap=broker.bootstrap_servers, broker_pid=broker.pid)
