"""How the service scales with worker pods: ``python -m benchmarks.scale``.

For each N in ``--workers``, and ``--repeats`` times over (the Ns alternate within a repeat, so a
busy spell of the machine touches them alike), one run:

1. starts a fresh embedded broker and Redis (``--cluster``: a local 3-master Redis Cluster), creates
   ``documents``, ``labels``, ``decisions`` and ``dead-letters`` with ``--partitions`` (4) partitions
   each, and creates the model empty (``--learner``), d fixed from the stream's first 100 documents as
   ``stream-winnow evaluate --prequential`` fixes it;
2. starts N ``stream-winnow worker`` processes in one consumer group, each with its own metrics port,
   and waits until their ``/readyz`` shows every partition of both input topics held, unchanged for a
   second;
3. streams the ModApte training documents in order (``--documents`` cuts them, ``--passes`` repeats
   them with fresh ids), each to ``documents`` with tokens and no labels, keyed by document id
   (confluent-kafka when installed). A document's labelled event (``event_id``, ``id``, ``labels`` and
   ``tokens``, so no document-cache lookup) goes to ``labels`` as soon as its decision arrives here, so
   every decision is made before its own label is sent. Documents are sent while fewer than
   ``--window`` (2,000, the worker's ``--batch-max-docs``) of them are ahead of the labelled events
   the model has applied (read from Redis every 20 ms, not from the workers, whose ``/metrics``
   would cost each 1.7 ms of CPU a request), whatever N: how late labels come is the stream's, not
   the pods', so a decision's model lacks at most that many earlier labels at every N, and the N
   share the window (4 pods: batches of about 500).

What a run reports, and how:

- **labelled events/s**: events ÷ (first label sent → the first poll, every 20 ms, of the model's
  watermark hash in Redis that finds all of them applied); the workers' labelled-events counters,
  read once after the stream, must agree;
- **documents/s**: decisions ÷ (first document sent → the last decision arriving here); with the
  window it follows the learning rate;
- **worker CPU µs per labelled event**: the workers' utime + stime (``/proc/<pid>/stat``) from just
  before the first document is sent until every label is applied and every decision has arrived, ÷
  labelled events. The span holds the scoring of as many documents as there are events, so it is the
  cost of a document *and* its labelled event; **per message** divides the same CPU by events +
  documents. There is no label-only phase: learning alone is not what the pods do;
- **Redis CPU µs per labelled event**: ``INFO cpu`` used_cpu_sys + used_cpu_user, summed over every
  master, over the same span ÷ labelled events; it holds the documents' scoring reads and their
  document-cache writes as well as the learning writes. The report also splits it by command
  (``INFO commandstats`` µs over the same span ÷ labelled events; a script's figure holds the
  commands it calls), which names where Redis spends its time as N grows;
- **conflicts** and **retries**: the workers' counters named by ``CONFLICTS_METRIC`` and
  ``RETRIES_METRIC``, summed (0 where a worker does not expose the metric);
- **Redis bytes per labelled event**: ``MEMORY USAGE ... SAMPLES 0`` summed over the model's keys
  other than its rows (``sw:{<model>:<shard>}:f:*``) and its document cache (``sw:<model>:docs:*``),
  that is the event and attempt markers, counters and metadata, ÷ labelled events counted (an event
  that was no mistake is marked too, so every labelled event is an applied one);
- **prequential micro-F1**: each document's first decision against its true labels; **past the
  first window**: the same from document ``window`` on. The first window's documents are all sent
  before any label is learned, and one pod decides them all on the empty model, but several pods
  take them in smaller batches, learn their labels meanwhile and decide the rest on categories just
  created, which Balanced Winnow's initial weights (margin 0 at the average length) give to every
  longer document; from then on labels flow at every N. The header gives the reference, the same stream in one process with each document predicted once the labels
  of all but the window's documents before it were learned (the most the window lets a run's
  decisions lack), and strict prequential (delay 0);
- **test micro-F1**: the final model, read from Redis into memory, on the ModApte test split; the
  header gives the same for the in-process learner once it learned the whole stream, and **the run's
  label order** for one that learned the documents in the order the run sent their labels (decisions
  arrive from several partitions, so that order is not the stream's, and a mistake-driven rule's
  final model depends on it).

Each figure is the median of the repeats, with min and max. A run in which a worker exits or the
stream stalls has no figures: the table counts it, quotes its error and names its logs' directory,
and the other runs go on. Then the ratios against the smallest N
(N=1 when given): events/s, events/s a pod, worker CPU per event, Redis CPU per event; and "pods one
Redis node could feed at the 1-worker rate" = 1 core ÷ (Redis CPU s per event × labelled events/s of
one pod), from the medians at the smallest N (on a Cluster, Redis CPU is the masters' sum, so it
supposes one node did all of it). A run of one pod takes about 15 s, most of it starting the
services and the group; the stream itself 2-3 s.

    python -m benchmarks.scale --source ../shared/datasets/reuters21578.tar.gz --workers 1,2,4 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.service.collector import Collector
from benchmarks.service.config import _helper_client, _settings
from benchmarks.service.measure import cpu_seconds
from benchmarks.service.model import _memory_usage
from benchmarks.service.services import Topics, WorkerProcess
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import CodecError, TransportError
from stream_winnow.evaluation.runs import PREQUENTIAL_D_SAMPLE
from stream_winnow.learners import LEARNERS
from stream_winnow.wire.codec import (
    DocumentMessage,
    LabelledEvent,
    decode_decision,
    encode_document,
    encode_labelled_event,
)
from workers.config import Topics as TopicNames

if TYPE_CHECKING:
    from stream_winnow.learners.base import Learner
    from stream_winnow.text.features import FeatureVector

__all__ = ["ScaleConfig", "main", "run_scale"]

# The workers' metric names (Prometheus text, counters with their ``_total``). Each is read in one place.
LABELLED_METRIC = "stream_winnow_labelled_events_total"
CONFLICTS_METRIC = "stream_winnow_stale_watermarks_total"
RETRIES_METRIC = "stream_winnow_retries_total"
DUPLICATES_METRIC = "stream_winnow_duplicate_events_total"
UPDATES_METRIC = "stream_winnow_updates_applied_total"
DEAD_LETTERS_METRIC = "stream_winnow_dead_letters_total"

MODEL = "scale"
GROUP = "scale-bench"
PARTITIONS = 4
CLUSTER_MASTERS = 3
# Documents that may be sent beyond the labelled events counted so far, whatever N: as many as one
# worker's batch holds (--batch-max-docs). It bounds how stale a decision's model is and how large the
# workers' batches can grow; see the module's docstring.
WINDOW_DOCS = 2000
# N workers joining one group rebalance each other; on Tansu a join takes about half the session timeout.
READY_TIMEOUT_S = 120.0
# The assignment must stay unchanged this long before the stream is sent.
SETTLE_S = 1.0
# How often the model's applied events are read from Redis while the stream drains: the labelled-events
# timing resolution.
PROGRESS_POLL_S = 0.02
_ASSIGNMENT_POLL_S = 0.1
# Columns of the table: (key in a run's figures, heading, decimals).
FIGURES: tuple[tuple[str, str, int], ...] = (
    ("events_per_s", "labelled events/s", 0),
    ("documents_per_s", "documents/s", 0),
    ("worker_cpu_us_per_event", "worker CPU µs / event", 1),
    ("worker_cpu_us_per_message", "worker CPU µs / message", 1),
    ("redis_cpu_us_per_event", "Redis CPU µs / event", 1),
    ("conflicts", "conflicts", 0),
    ("retries", "retries", 0),
    ("redis_bytes_per_event", "Redis bytes / event", 1),
    ("prequential_micro_f1", "prequential micro-F1", 4),
    ("prequential_past_window_micro_f1", "prequential micro-F1 past the first window", 4),
    ("labels_lacking_past_window", "labels a decision lacked, past the first window", 0),
    ("alike_past_window_micro_f1", "one learner lacking the same labels, past the first window", 4),
    ("test_micro_f1", "test micro-F1", 4),
    ("same_order_test_micro_f1", "one learner, the run's label order: test micro-F1", 4),
)


# ---------------------------------------------------------------------------------------------------
# settings and the stream


@dataclass(frozen=True)
class ScaleConfig:
    """What one invocation measures."""

    source: str | None = None
    synthetic: int | None = None
    workers: tuple[int, ...] = (1, 2, 4)
    cluster: bool = False
    learner: str = "balanced-winnow"
    kafka_client: str = "confluent"
    repeats: int = 3
    documents: int | None = None
    passes: int = 1
    window: int = WINDOW_DOCS
    partitions: int = PARTITIONS
    worker_args: tuple[str, ...] = ()
    timeout_s: float = 600.0
    command: str = ""


@dataclass(frozen=True)
class Stream:
    """The documents sent (in order), the held-out documents and the categories they are scored on."""

    docs: list[LabelledDocument]
    test: list[LabelledDocument]
    categories: tuple[str, ...]
    description: str


def load_stream(config: ScaleConfig) -> Stream:
    """ModApte's training documents (or a synthetic stream's first 70 %), cut to ``config.documents`` and
    repeated ``config.passes`` times (copies get ids ``<id>~<pass>``); the test split (or the other 30 %)."""
    if config.synthetic is not None:
        from stream_winnow.datasets.synthetic import synthetic_stream

        every = synthetic_stream(config.synthetic)
        cut = len(every) * 7 // 10
        docs, test, what = every[:cut], every[cut:], f"synthetic stream of {len(every):,}"
    elif config.source is not None:
        from stream_winnow.datasets import read_modapte

        split = read_modapte(config.source)
        docs, test, what = split.train, split.test, "Reuters-21578 ModApte training documents"
    else:
        raise SystemExit("give --source (Reuters-21578 .tar.gz) or --synthetic N")
    docs = docs[: config.documents] if config.documents is not None else docs
    if config.passes > 1:
        from benchmarks.service.load import repeat_stream

        docs = repeat_stream(docs, config.passes * len(docs))
        what += f" × {config.passes} passes"
    categories = tuple(sorted({label for doc in docs + test for label in doc.labels}))
    return Stream(docs, test, categories, f"{what}: {len(docs):,} sent, {len(test):,} held out, "
                                          f"{len(categories)} categories")  # fmt: skip


@dataclass(frozen=True)
class Messages:
    """The stream encoded once: a document message and a labelled event per document, and the keys."""

    keys: list[bytes]
    documents: list[bytes]
    labels: list[bytes]


def encode_stream(docs: Sequence[LabelledDocument]) -> Messages:
    """Each document without labels, and its labelled event ``label:<id>`` with its tokens."""
    return Messages(
        [doc.id.encode() for doc in docs],
        [encode_document(DocumentMessage(doc.id, doc.tokens, None, None)) for doc in docs],
        [encode_labelled_event(LabelledEvent(f"label:{doc.id}", doc.id, doc.labels, doc.tokens, None)) for doc in docs],
    )


# ---------------------------------------------------------------------------------------------------
# services


# The topic names the worker defaults to (the contract in ``schemas/``): each run has a broker of its own.
_NAMES = TopicNames()
TOPICS = Topics(_NAMES.documents, _NAMES.labels, _NAMES.decisions, _NAMES.dead_letters)


@dataclass(frozen=True)
class RedisService:
    """Where a run's Redis is: the URL workers get, and every master (for INFO)."""

    url: str
    nodes: tuple[tuple[str, int], ...]


@contextmanager
def redis_service(cluster: bool) -> Iterator[RedisService]:
    """A fresh embedded redis-server, or a local Redis Cluster of ``CLUSTER_MASTERS``; stopped on exit."""
    from workers.embedded import start_redis, start_redis_cluster

    if cluster:
        with start_redis_cluster(CLUSTER_MASTERS) as nodes:
            yield RedisService(nodes.url, tuple(nodes.startup_nodes))
    else:
        with start_redis() as server:
            yield RedisService(server.url, ((server.host, server.port),))


def node_infos(nodes: Iterable[tuple[str, int]], section: str) -> Iterator[dict[str, Any]]:
    """``INFO <section>`` of each of ``nodes``."""
    import redis

    for host, port in nodes:
        client = redis.Redis(host=host, port=port)
        try:
            yield client.info(section)
        finally:
            client.close()


def redis_cpu_s(nodes: Iterable[tuple[str, int]]) -> float:
    """used_cpu_sys + used_cpu_user (``INFO cpu``) summed over ``nodes``."""
    return sum(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]) for info in node_infos(nodes, "cpu"))


def redis_commands(nodes: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """Per command, its calls and µs (``INFO commandstats``) summed over ``nodes``. A script's µs hold
    those of the commands it calls, which are counted under their own names as well."""
    total: dict[str, tuple[int, int]] = {}
    for info in node_infos(nodes, "commandstats"):
        for key, stats in info.items():
            name = key.removeprefix("cmdstat_")
            calls, usec = total.get(name, (0, 0))
            total[name] = (calls + int(stats["calls"]), usec + int(stats["usec"]))
    return total


def commands_spent(before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]],
                   events: int) -> dict[str, dict[str, float]]:  # fmt: skip
    """Per command called between ``before`` and ``after``, its calls and µs per labelled event.

    >>> commands_spent({"get": (10, 50)}, {"get": (30, 250), "set": (4, 40)}, 2)
    {'get': {'calls_per_event': 10.0, 'us_per_event': 100.0}, 'set': {'calls_per_event': 2.0, 'us_per_event': 20.0}}
    """
    out = {}
    for name, (calls, usec) in sorted(after.items()):
        calls_before, usec_before = before.get(name, (0, 0))
        if calls > calls_before:
            out[name] = {"calls_per_event": (calls - calls_before) / events, "us_per_event": (usec - usec_before) / events}
    return out


def create_model(redis_url: str, learner: str, docs: Sequence[LabelledDocument]) -> None:
    """Create the empty model before any worker starts (so none races another to create it) and fix d from
    the first documents, as the in-process reference does."""
    from stream_winnow.models.named import connect, open_learner
    from stream_winnow.models.training import estimate_d

    client = connect(redis_url)
    try:
        model = open_learner(client, MODEL, learner=learner)
        estimate_d(model, model.featurizer.transform_many([doc.tokens for doc in docs[:PREQUENTIAL_D_SAMPLE]]))
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------------
# the workers


class ScaleWorker(WorkerProcess):
    """One ``stream-winnow worker`` of the group, logging to a directory of its own."""

    def assigned_partitions(self) -> int | None:
        """The partitions its ``/readyz`` says it holds (None while it is not ready)."""
        body = self._get("/readyz")
        if body is None:
            return None
        fields = dict(part.split("=", 1) for part in body.split() if "=" in part)
        return int(fields["partitions"]) if "partitions" in fields else None


def start_workers(config: ScaleConfig, n: int, bootstrap: str, redis_url: str, log_dir: Path) -> list[ScaleWorker]:
    """N worker processes on the run's broker and Redis, each with its own id, metrics port and log."""
    workers: list[ScaleWorker] = []
    try:
        for i in range(n):
            own_dir = log_dir / f"worker-{i}"
            own_dir.mkdir(parents=True)
            args = (*config.worker_args, "--learner", config.learner, "--worker-id", f"scale-{n}-{i}")
            workers.append(ScaleWorker(
                bootstrap=bootstrap, redis_url=redis_url, model=MODEL, client=config.kafka_client, topics=TOPICS,
                group=GROUP, worker_args=args, log_dir=own_dir,
            ))  # fmt: skip
    except BaseException:
        stop_workers(workers)
        raise
    return workers


def wait_assigned(workers: Sequence[ScaleWorker], partitions: int, timeout_s: float) -> None:
    """Until every partition of both input topics is held by a ready worker, unchanged for ``SETTLE_S``."""
    deadline = time.monotonic() + timeout_s
    wanted = 2 * partitions  # documents and labels
    settled: tuple[int | None, ...] | None = None
    since = 0.0
    while True:
        check_all_alive(workers)
        held = tuple(worker.assigned_partitions() for worker in workers)
        complete = None not in held and sum(h or 0 for h in held) == wanted
        if not complete or held != settled:
            settled, since = (held if complete else None), time.monotonic()
        elif time.monotonic() - since >= SETTLE_S:
            return
        if time.monotonic() > deadline:
            raise TransportError(f"partitions held {held} (want {wanted} in all) after {timeout_s:.0f} s; "
                                 f"first log ends:\n{workers[0].log_tail()}")  # fmt: skip
        time.sleep(_ASSIGNMENT_POLL_S)


def check_all_alive(workers: Sequence[WorkerProcess]) -> None:
    """Raise ``TransportError`` with its log's tail if any worker has exited."""
    for worker in workers:
        worker.check_alive()


def stop_workers(workers: Sequence[WorkerProcess]) -> None:
    """SIGTERM all at once, then wait for each (``WorkerProcess.stop`` kills one that overstays); kills
    whatever is left if waiting is interrupted."""
    try:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.terminate()
        for worker in workers:
            worker.stop()
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()


def metric_sum(workers: Sequence[WorkerProcess], name: str) -> float | None:
    """A counter summed over the workers (0 for a worker without it; None if one does not answer)."""
    total = 0.0
    for worker in workers:
        value = worker.metric(name)
        if value is None:
            return None
        total += value
    return total


def workers_cpu_s(workers: Sequence[WorkerProcess]) -> float:
    """utime + stime of the worker processes, summed (NaN if ``/proc`` cannot tell for one)."""
    seconds = [cpu_seconds(worker.pid) for worker in workers]
    return float("nan") if None in seconds else sum(s for s in seconds if s is not None)


# ---------------------------------------------------------------------------------------------------
# one run


@dataclass(frozen=True)
class Clock:
    """When the first document and the first label went out, every label was counted, every decision arrived."""

    first_document_s: float
    first_label_s: float
    labels_counted_s: float
    decisions_done_s: float


class LearnedCount:
    """The labelled events the model has applied, as last read (written by the feeder, read by the
    collector's thread: one float, replaced whole)."""

    def __init__(self) -> None:
        self.value = 0.0


def applied_events(marks: Mapping[bytes, bytes], topic: str) -> int:
    """Labelled events applied, from the model's watermark hash: the events seen of each ``topic`` partition.

    >>> applied_events({b"labels:0": b"41", b"labels:0#n": b"42", b"labels:3#n": b"7", b"documents:1": b"9"}, "labels")
    49
    """
    prefix = topic.encode() + b":"
    return sum(int(v) for k, v in marks.items() if k.startswith(prefix) and k.endswith(b"#n"))


class AppliedEvents:
    """Reads how many labelled events the model has applied from Redis (one HGETALL of the model's
    watermark hash, which every learning batch updates in its atomic step).

    Asking the workers instead (their ``/metrics``, 1.7 ms of a worker's CPU a request here, every
    ``PROGRESS_POLL_S``) would add about 90 ms a second to each worker's CPU and so grow the CPU an event
    with N and the run's length; one HGETALL costs Redis a few µs.
    """

    def __init__(self, redis_url: str) -> None:
        from stream_winnow.models.named import connect
        from stream_winnow.stores.redis.keys import ModelKeys

        self._client = connect(redis_url)
        self._key = ModelKeys(MODEL, 1).model_watermark_key

    def __call__(self) -> int:
        marks: Mapping[bytes, bytes] = self._client.hgetall(self._key)  # type: ignore[assignment]  # bytes: no decoding
        return applied_events(marks, TOPICS.labels)

    def close(self) -> None:
        self._client.close()


class LabelSender:
    """Sends a document's labelled event as soon as its first decision arrives (the collector's callback).

    So every decision is made before its own label is even sent; ``first_s`` is when the first label went.
    ``learned_at`` keeps, per document key (in the order the labels went), the labelled events applied
    when its decision arrived, as last read: up to one poll (``PROGRESS_POLL_S``) plus the decision's
    delivery after the decision, so it can overstate what the decision's model had learned by that much.
    """

    def __init__(self, producer: Any, messages: Messages, learned: LearnedCount) -> None:
        self._producer = producer
        self._label_of = dict(zip(messages.keys, messages.labels, strict=True))
        self.learned = learned
        self.learned_at: dict[bytes, int] = {}
        self.first_s: float | None = None

    def __call__(self, key: bytes | None, now_s: float) -> None:
        value = self._label_of.pop(key or b"", None)
        if value is None:  # a re-decision, or not a document of the stream
            return
        if self.first_s is None:
            self.first_s = time.time()
        self.learned_at[key or b""] = int(self.learned.value)
        self._producer.send(TOPICS.labels, value, key=key)


def documents_allowed(counted: float, window: int, n: int) -> int:
    """How many documents may have been sent once ``counted`` labelled events are learned: ``window`` ahead.

    >>> documents_allowed(0, 1000, 7770), documents_allowed(7000, 1000, 7770)
    (1000, 7770)
    """
    return min(n, int(counted) + window)


def feed_documents(
    producer: Any, messages: Messages, workers: Sequence[ScaleWorker], window: int, timeout_s: float,
    learned: LearnedCount, applied: Callable[[], int],
) -> tuple[float, float]:  # fmt: skip
    """Send the documents in order, at most ``window`` ahead of the labelled events the model has applied
    (``applied``, kept in ``learned``), until every event is; returns when the first document went and
    when all were applied."""
    n = len(messages.keys)
    deadline = time.monotonic() + timeout_s
    sent, counted, first_s = 0, 0.0, float("nan")
    while True:
        allowed = documents_allowed(counted, window, n)
        if sent == 0 and allowed:
            first_s = time.time()
        while sent < allowed:
            producer.send(TOPICS.documents, messages.documents[sent], key=messages.keys[sent])
            sent += 1
        time.sleep(PROGRESS_POLL_S)
        counted = applied()
        learned.value = counted
        if counted >= n:
            return first_s, time.time()
        check_all_alive(workers)
        if time.monotonic() > deadline:
            raise TransportError(f"{counted:.0f} of {n} labelled events counted after {timeout_s:.0f} s")


def drive(
    config: ScaleConfig, bootstrap: str, workers: Sequence[ScaleWorker], collector: Collector,
    labels: LabelSender, messages: Messages, applied: Callable[[], int],
) -> Clock:  # fmt: skip
    """Stream the documents (their labels follow their decisions) until every label is applied and every
    decision has arrived."""
    from workers.transport import make_producer

    producer = make_producer(_settings(bootstrap, "scale-documents"), _helper_client())  # type: ignore[arg-type]
    try:
        first_document_s, labels_counted_s = feed_documents(
            producer, messages, workers, config.window, config.timeout_s, labels.learned, applied
        )
        producer.flush(120_000)
    finally:
        producer.close()
    collector.wait_for(len(messages.keys), config.timeout_s, lambda: check_all_alive(workers))
    assert collector.last_s is not None and labels.first_s is not None
    return Clock(first_document_s, labels.first_s, labels_counted_s, collector.last_s)


def accounted_keys(keys: Iterable[bytes], model: str) -> list[bytes]:
    """The keys whose memory counts against the events: the model's, except its weight rows
    (``sw:{<model>:<shard>}:f:*``) and its document cache (``sw:<model>:docs:*``).

    >>> accounted_keys([b"sw:{m:3}:f:12", b"sw:m:docs:5:0", b"sw:{m:3}:wm", b"sw:{m}:seen:labels:0", b"sw:{m:3}:n"], "m")
    [b'sw:{m:3}:wm', b'sw:{m}:seen:labels:0', b'sw:{m:3}:n']
    """
    name = model.encode()
    row = re.compile(rb"sw:\{" + re.escape(name) + rb":\d+\}:f:")
    cached = b"sw:" + name + b":docs:"
    return [key for key in keys if not row.match(key) and not key.startswith(cached)]


def accounted_memory(redis_url: str, learner: str) -> int:
    """Bytes of :func:`accounted_keys` of the model: MEMORY USAGE with every member counted."""
    from stream_winnow.learners import build_learner
    from stream_winnow.models.named import connect
    from stream_winnow.stores.redis import RedisStore

    client = connect(redis_url)
    try:
        keys = accounted_keys(RedisStore(client, MODEL, build_learner(learner).table_specs()).model_keys(), MODEL)
        return _memory_usage(client, keys)
    finally:
        client.close()


def first_decisions(values: Iterable[bytes]) -> dict[str, tuple[str, ...]]:
    """Each document's first decision (a re-decision after a redelivery is left out)."""
    decided: dict[str, tuple[str, ...]] = {}
    for value in values:
        try:
            decision = decode_decision(value)
        except CodecError:
            continue
        decided.setdefault(decision.id, decision.categories)
    return decided


def micro_f1(truth: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], categories: Sequence[str]) -> float:
    """Micro-F1 of ``predicted`` label sets against ``truth`` over ``categories``.

    >>> micro_f1([("a",), ("b",)], [("a",), ("a",)], ["a", "b"])
    0.5
    """
    from stream_winnow.evaluation.metrics import classification_report, label_matrix

    return classification_report(label_matrix(truth, categories), label_matrix(predicted, categories)).micro_f1


def holdout_micro_f1(redis_url: str, stream: Stream) -> float:
    """The final model, copied from Redis into memory, scored on the held-out documents."""
    from stream_winnow.learners import from_metadata
    from stream_winnow.models.named import connect, open_learner
    from stream_winnow.models.snapshot import copy_model
    from stream_winnow.stores.memory import MemoryStore

    client = connect(redis_url)
    try:
        stored = open_learner(client, MODEL, create=False)
        memory = MemoryStore(stored.table_specs())
        copy_model(stored.store, memory)
    finally:
        client.close()
    learner = from_metadata(memory.metadata(), memory)
    predicted = [learner.predict_one(doc.tokens).categories for doc in stream.test]
    return micro_f1([doc.labels for doc in stream.test], predicted, stream.categories)


def prequential_f1(stream: Stream, predicted: Sequence[Sequence[str]], start: int = 0) -> float:
    """Micro-F1 of the decisions of the stream's documents from ``start`` on (``predicted`` in stream order)."""
    return micro_f1([doc.labels for doc in stream.docs[start:]], predicted[start:], stream.categories)


def reference_learner(learner: str, stream: Stream) -> Learner:
    """A new in-process ``learner`` with d fixed from the stream's first documents, as :func:`create_model`
    fixes the run's."""
    from stream_winnow.learners import build_learner
    from stream_winnow.models.training import estimate_d

    model = build_learner(learner)
    estimate_d(model, model.featurizer.transform_many([doc.tokens for doc in stream.docs[:PREQUENTIAL_D_SAMPLE]]))
    return model


def in_process_run(
    learner: str, stream: Stream, learned_before: Sequence[int]
) -> tuple[list[tuple[str, ...]], float]:  # fmt: skip
    """The references for a run: the same stream in one in-process learner, document ``i`` predicted once
    the labels of the first ``learned_before[i]`` documents (at most ``i``) were learned; its decisions in
    stream order, and the micro-F1 on the held-out documents once it learned them all.

    :func:`lagging` gives the schedule of a fixed delay: delay 0 is strict prequential (``stream-winnow
    evaluate --prequential`` gives the same figure), and a run sends a document only once all but
    ``window`` of the labels before it are learned, whatever N, so its decisions saw at least as many
    labels as this reference's with that delay. A run's own schedule (:func:`run_schedule`) gives the
    figure one learner would reach with the labels the run's pods had when they decided.
    """
    model = reference_learner(learner, stream)
    # With idf a document is weighed by the frequencies counted when it is used, so it is featurised then.
    fixed = None if model.features.idf else [model.transform(doc.tokens) for doc in stream.docs]

    def features(i: int) -> FeatureVector:
        return fixed[i] if fixed is not None else model.transform(stream.docs[i].tokens)

    predicted: list[tuple[str, ...]] = [()] * len(stream.docs)
    learned = 0
    for i in sorted(range(len(stream.docs)), key=lambda i: min(i, learned_before[i])):
        while learned < min(i, learned_before[i]):
            model.learn_one(features(learned), stream.docs[learned].labels)
            learned += 1
        predicted[i] = model.predict_one(features(i)).categories
    for i in range(learned, len(stream.docs)):
        model.learn_one(features(i), stream.docs[i].labels)
    test = [model.predict_one(doc.tokens).categories for doc in stream.test]
    return predicted, micro_f1([doc.labels for doc in stream.test], test, stream.categories)


def in_process_test_f1(learner: str, stream: Stream, order: Sequence[bytes]) -> float:
    """Micro-F1 on the held-out documents of one in-process learner that learned the stream's documents in
    ``order`` (document keys: the order a run sent their labels in; any left out follow in stream order).

    Mistake-driven rules depend on the order of their mistakes, and a run's labels go out as decisions
    arrive from 4 partitions, not in stream order: this is the final model a run's pods should match.
    """
    model = reference_learner(learner, stream)
    position = {doc.id.encode(): i for i, doc in enumerate(stream.docs)}
    sequence = [position[key] for key in order if key in position]
    sequence += sorted(set(range(len(stream.docs))) - set(sequence))
    for i in sequence:
        model.learn_one(model.transform(stream.docs[i].tokens), stream.docs[i].labels)
    test = [model.predict_one(doc.tokens).categories for doc in stream.test]
    return micro_f1([doc.labels for doc in stream.test], test, stream.categories)


def lagging(n: int, delay: int) -> list[int]:
    """Document ``i`` predicted with the labels of all documents but the ``delay`` before it.

    >>> lagging(5, 2)
    [0, 0, 0, 1, 2]
    """
    return [max(0, i - delay) for i in range(n)]


def run_schedule(stream: Stream, learned_at: Mapping[bytes, int]) -> list[int]:
    """Per document in stream order, the labelled events counted when its decision arrived (0 if none did)."""
    return [learned_at.get(doc.id.encode(), 0) for doc in stream.docs]


def labels_lacking(schedule: Sequence[int], start: int) -> float:
    """Mean labels of earlier documents a decision's model lacked, from document ``start`` on.

    >>> labels_lacking([0, 0, 1, 1, 4], 2)
    1.0
    """
    lacking = [max(0, i - learned) for i, learned in enumerate(schedule)][start:]
    return sum(lacking) / len(lacking) if lacking else 0.0


# Counters read from every worker before and after a run's stream; the run reports their differences.
_COUNTED = (LABELLED_METRIC, CONFLICTS_METRIC, RETRIES_METRIC, DUPLICATES_METRIC, UPDATES_METRIC, DEAD_LETTERS_METRIC)


@dataclass(frozen=True)
class Measured:
    """What one run's stream took: its clock, the CPU the workers and Redis used, the workers' counters."""

    clock: Clock
    worker_cpu_s: float
    redis_cpu_s: float
    redis_commands: dict[str, dict[str, float]]
    counts: dict[str, float]
    decisions: list[bytes]
    dead_letters: int
    learned_at: dict[bytes, int]


def measure(
    config: ScaleConfig, n: int, bootstrap: str, redis_nodes: RedisService, messages: Messages, log_dir: Path
) -> Measured:
    """Start ``n`` workers, stream the messages through them, stop them; the CPU spans the whole stream."""
    from workers.transport import make_producer

    label_producer = make_producer(_settings(bootstrap, "scale-labels"), _helper_client())  # type: ignore[arg-type]
    labels = LabelSender(label_producer, messages, LearnedCount())
    collector = Collector(bootstrap, [TOPICS.decisions, TOPICS.dead_letters], latency=True, on_message=labels,
                          partitions=config.partitions).start_and_wait()  # fmt: skip
    workers: list[ScaleWorker] = []
    applied = AppliedEvents(redis_nodes.url)
    try:
        workers = start_workers(config, n, bootstrap, redis_nodes.url, log_dir)
        wait_assigned(workers, config.partitions, READY_TIMEOUT_S)
        before = {name: metric_sum(workers, name) or 0.0 for name in _COUNTED}
        cpu_before, redis_before = workers_cpu_s(workers), redis_cpu_s(redis_nodes.nodes)
        commands_before = redis_commands(redis_nodes.nodes)
        clock = drive(config, bootstrap, workers, collector, labels, messages, applied)
        cpu_s = workers_cpu_s(workers) - cpu_before
        redis_s = redis_cpu_s(redis_nodes.nodes) - redis_before
        commands = commands_spent(commands_before, redis_commands(redis_nodes.nodes), len(messages.labels))
        counts = {name: (metric_sum(workers, name) or 0.0) - before[name] for name in _COUNTED}
    finally:
        stop_workers(workers)
        collector.stop()
        label_producer.close()
        applied.close()
    return Measured(
        clock, cpu_s, redis_s, commands, counts, collector.values(), collector.counts[TOPICS.dead_letters], labels.learned_at
    )


def figures(
    measured: Measured, stream: Stream, config: ScaleConfig, accounted_bytes: int, test_f1: float
) -> dict[str, Any]:  # fmt: skip
    """Every figure of :data:`FIGURES` of one run, and the counts behind them."""
    clock, counts, window = measured.clock, measured.counts, config.window
    events = len(stream.docs)
    decided = first_decisions(measured.decisions)
    predicted = [decided.get(doc.id, ()) for doc in stream.docs]
    schedule = run_schedule(stream, measured.learned_at)
    alike = in_process_run(config.learner, stream, schedule)[0]
    return {
        "events": events,
        "events_per_s": events / (clock.labels_counted_s - clock.first_label_s),
        "documents_per_s": len(decided) / (clock.decisions_done_s - clock.first_document_s),
        "worker_cpu_us_per_event": 1e6 * measured.worker_cpu_s / events,
        "worker_cpu_us_per_message": 1e6 * measured.worker_cpu_s / (events + len(decided)),
        "redis_cpu_us_per_event": 1e6 * measured.redis_cpu_s / events,
        "conflicts": counts[CONFLICTS_METRIC],
        "retries": counts[RETRIES_METRIC],
        "redis_bytes_per_event": accounted_bytes / events,
        "prequential_micro_f1": prequential_f1(stream, predicted),
        "prequential_past_window_micro_f1": prequential_f1(stream, predicted, window),
        "labels_lacking_past_window": labels_lacking(schedule, window),
        "alike_past_window_micro_f1": prequential_f1(stream, alike, window),
        "test_micro_f1": test_f1,
        "same_order_test_micro_f1": in_process_test_f1(config.learner, stream, list(measured.learned_at)),
        "decisions": len(decided),
        "dead_letters": measured.dead_letters,
        "labelled_counted": counts[LABELLED_METRIC],
        "duplicates": counts[DUPLICATES_METRIC],
        "updates_applied": counts[UPDATES_METRIC],
        "labels_s": clock.labels_counted_s - clock.first_label_s,
        "span_s": max(clock.labels_counted_s, clock.decisions_done_s) - clock.first_document_s,
        "worker_cpu_s": measured.worker_cpu_s,
        "redis_cpu_s": measured.redis_cpu_s,
        "accounted_bytes": accounted_bytes,
        "redis_commands": measured.redis_commands,
    }


def run_once(config: ScaleConfig, n: int, stream: Stream, messages: Messages, log_dir: Path) -> dict[str, Any]:
    """One run of ``n`` workers on a fresh broker and Redis."""
    from workers.embedded import create_topics, start_broker

    with start_broker() as broker, redis_service(config.cluster) as redis_nodes:
        create_topics(broker.bootstrap_servers, dict.fromkeys(TOPICS.all(), config.partitions))
        create_model(redis_nodes.url, config.learner, stream.docs)
        measured = measure(config, n, broker.bootstrap_servers, redis_nodes, messages, log_dir)
        accounted_bytes = accounted_memory(redis_nodes.url, config.learner)
        test_f1 = holdout_micro_f1(redis_nodes.url, stream)
    return {"workers": n, **figures(measured, stream, config, accounted_bytes, test_f1)}


# ---------------------------------------------------------------------------------------------------
# aggregation and the report


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max.

    >>> spread([3.0, 1.0, 2.0, 10.0])
    {'median': 2.5, 'min': 1.0, 'max': 10.0}
    """
    return {"median": float(statistics.median(values)), "min": float(min(values)), "max": float(max(values))}


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """:func:`spread` of each figure of :data:`FIGURES` over ``runs`` (of one N)."""
    return {key: spread([float(run[key]) for run in runs]) for key, _, _ in FIGURES}


def commands_median(runs: Sequence[Mapping[str, Any]], top: int = 6) -> dict[str, float]:
    """The ``top`` commands by median Redis µs per labelled event over ``runs`` (of one N).

    >>> runs = [{"redis_commands": {"get": {"us_per_event": u}, "evalsha": {"us_per_event": 9.0}}} for u in (1, 3, 2)]
    >>> commands_median(runs)
    {'evalsha': 9.0, 'get': 2.0}
    """
    names = {name for run in runs for name in run["redis_commands"]}
    medians = {name: float(statistics.median(run["redis_commands"].get(name, {}).get("us_per_event", 0.0)
                                             for run in runs)) for name in names}  # fmt: skip
    return dict(sorted(medians.items(), key=lambda item: -item[1])[:top])


def ratios(summary: Mapping[int, Mapping[str, Mapping[str, float]]]) -> dict[int, dict[str, float]]:
    """Per N, the medians of events/s, worker CPU per event and Redis CPU per event ÷ those of the smallest N.

    >>> s = {1: {"events_per_s": {"median": 100.0}, "worker_cpu_us_per_event": {"median": 10.0},
    ...          "redis_cpu_us_per_event": {"median": 4.0}},
    ...      2: {"events_per_s": {"median": 150.0}, "worker_cpu_us_per_event": {"median": 12.0},
    ...          "redis_cpu_us_per_event": {"median": 6.0}}}
    >>> ratios(s)[2]
    {'events_per_s': 1.5, 'events_per_s_per_pod': 0.75, 'worker_cpu_us_per_event': 1.2, 'redis_cpu_us_per_event': 1.5}
    """
    base_n = min(summary)
    base = summary[base_n]
    out: dict[int, dict[str, float]] = {}
    for n, row in sorted(summary.items()):
        events = row["events_per_s"]["median"] / base["events_per_s"]["median"]
        out[n] = {
            "events_per_s": events,
            "events_per_s_per_pod": events * base_n / n,
            **{key: row[key]["median"] / base[key]["median"]
               for key in ("worker_cpu_us_per_event", "redis_cpu_us_per_event")},
        }  # fmt: skip
    return out


def pods_per_redis_node(redis_cpu_us_per_event: float, events_per_s_per_pod: float) -> float:
    """Pods one Redis core could feed: 1 s of CPU a second ÷ (Redis CPU s an event × events/s of a pod).

    >>> pods_per_redis_node(20.0, 5_000.0)
    10.0
    """
    return 1.0 / (redis_cpu_us_per_event * 1e-6 * events_per_s_per_pod)


def _cell(figure: Mapping[str, float], decimals: int) -> str:
    """``median (min–max)``.

    >>> _cell({"median": 1234.4, "min": 1000.0, "max": 1500.2}, 0)
    '1,234 (1,000–1,500)'
    """
    return f"{figure['median']:,.{decimals}f} ({figure['min']:,.{decimals}f}–{figure['max']:,.{decimals}f})"


def markdown(results: Mapping[str, Any]) -> str:
    """The report: a row per N with every figure, then the ratios and the pods a Redis node could feed."""
    summary: Mapping[int, Mapping[str, Mapping[str, float]]] = results["summary"]
    reference: Mapping[str, float] = results["in_process"]
    base_n = min(summary)
    lines = [
        f"`{results['command']}`",
        "",
        f"{results['corpus']}; {results['redis']}; {results['partitions']} partitions a topic; workers on "
        f"{results['kafka_client']}, learner {results['learner']}; documents at most {results['window']:,} "
        f"ahead of the labels counted, whatever N, each label sent once its decision arrived; median (min–max) of "
        f"{results['repeats']} run(s); {results['cpus']} CPUs, load average {results['load_average_start']:.2f} at "
        f"start, {results['load_average_end']:.2f} at end. The same stream in one in-process learner: prequential "
        f"micro-F1 {reference['prequential_micro_f1']:.4f} with the window's delay "
        f"({reference['prequential_past_window_micro_f1']:.4f} past the first window, "
        f"{reference['strict_micro_f1']:.4f} strict), test micro-F1 {reference['test_micro_f1']:.4f}",
        "",
        "| workers | runs | " + " | ".join(heading for _, heading, _ in FIGURES) + " |",
        "|---|---|" + "---|" * len(FIGURES),
    ]
    failures: Mapping[int, Sequence[str]] = results.get("failures", {})
    for n in sorted(set(summary) | set(failures)):
        failed = len(failures.get(n, ()))
        ok = results["repeats"] - failed
        cells = ([_cell(summary[n][key], decimals) for key, _, decimals in FIGURES] if n in summary
                 else ["–"] * len(FIGURES))  # fmt: skip
        lines.append(f"| {n} | {ok}/{results['repeats']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"| workers | events/s ÷ N={base_n} | events/s a pod ÷ N={base_n} | worker CPU / event ÷ N={base_n} | "
        f"Redis CPU / event ÷ N={base_n} |",
        "|---|---|---|---|---|",
    ]
    for n, ratio in sorted(results["ratios"].items()):
        lines.append(f"| {n} | {ratio['events_per_s']:.2f} | {ratio['events_per_s_per_pod']:.2f} | "
                     f"{ratio['worker_cpu_us_per_event']:.2f} | {ratio['redis_cpu_us_per_event']:.2f} |")  # fmt: skip
    lines += ["", "Redis µs per labelled event by command (median; a script's figure holds the commands it calls): "
              + "; ".join(f"N={n}: " + ", ".join(f"{name} {us:.1f}" for name, us in commands.items())
                          for n, commands in sorted(results["redis_commands"].items()))]  # fmt: skip
    for n, messages in sorted((n, m) for n, m in failures.items() if m):
        lines += ["", f"Failed runs of {n} worker(s): " + "; ".join(failure_summary(m) for m in messages)]
    lines += ["", f"Pods one Redis node could feed at the {base_n}-worker rate: **{results['pods_per_redis_node']:.1f}** "
                  f"(1 core ÷ (Redis CPU s / event × labelled events/s a pod at N={base_n}))."]  # fmt: skip
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# the invocation


def failure_summary(message: str) -> str:
    """The first line of a failed run's error and, when it quotes a log, the log's last line (the exception).

    >>> failure_summary("worker exited with 1; log ends:\\nTraceback ...\\nValueError: shape mismatch\\n")
    'worker exited with 1; log ends: … ValueError: shape mismatch'
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} … {lines[-1]}"


def run_scale(config: ScaleConfig, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every run of every N, their summaries, the in-process references, the ratios and the pods a Redis
    node could feed."""
    if max(config.workers) > config.partitions:
        raise SystemExit(f"{max(config.workers)} workers on {config.partitions} partitions: some would sit idle")
    stream = load_stream(config)
    say(f"stream: {stream.description}")
    messages = encode_stream(stream.docs)
    strict = prequential_f1(stream, in_process_run(config.learner, stream, lagging(len(stream.docs), 0))[0])
    late, test = in_process_run(config.learner, stream, lagging(len(stream.docs), config.window))
    reference = {"strict_micro_f1": strict, "prequential_micro_f1": prequential_f1(stream, late),
                 "prequential_past_window_micro_f1": prequential_f1(stream, late, config.window),
                 "test_micro_f1": test}  # fmt: skip
    say(
        f"in process: prequential micro-F1 {strict:.4f} strict, {reference['prequential_micro_f1']:.4f} "
        f"{config.window:,} documents late ({reference['prequential_past_window_micro_f1']:.4f} past the first "
        f"window); test micro-F1 {test:.4f}"
    )
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()[0]
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in config.workers}
    failures: dict[int, list[str]] = {n: [] for n in config.workers}
    log_root = Path(tempfile.mkdtemp(prefix="stream-winnow-scale-"))
    for repeat in range(config.repeats):
        for n in config.workers:
            say(f"run {repeat + 1}/{config.repeats}: {n} worker(s)")
            try:
                run = run_once(config, n, stream, messages, log_root / f"n{n}-r{repeat}")
            except TransportError as error:  # a worker died or the stream stalled: the run has no figures
                failures[n].append(str(error))
                say(f"  failed: {failure_summary(str(error))} (logs in {log_root / f'n{n}-r{repeat}'})")
                continue
            runs[n].append(run)
            say(
                f"  {run['events_per_s']:,.0f} labelled events/s, {run['documents_per_s']:,.0f} documents/s, "
                f"worker {run['worker_cpu_us_per_event']:.1f} / Redis {run['redis_cpu_us_per_event']:.1f} CPU µs "
                f"an event, {run['conflicts']:.0f} conflicts, prequential micro-F1 {run['prequential_micro_f1']:.4f}"
            )
    summary = {n: summarize(group) for n, group in runs.items() if group}
    if not summary:
        raise TransportError("every run failed: " + "; ".join(failure_summary(f) for f in sum(failures.values(), [])))
    base_n = min(summary)
    base = summary[base_n]
    return {
        "command": config.command,
        "started": started,
        "config": asdict(config),
        "corpus": stream.description,
        "redis": f"Redis Cluster of {CLUSTER_MASTERS} masters" if config.cluster else "single-node Redis",
        "partitions": config.partitions,
        "kafka_client": config.kafka_client,
        "learner": config.learner,
        "window": config.window,
        "repeats": config.repeats,
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0],
        "metrics": {"labelled": LABELLED_METRIC, "conflicts": CONFLICTS_METRIC, "retries": RETRIES_METRIC},
        "in_process": reference,
        "log_dir": str(log_root),
        "runs": runs,
        "failures": failures,
        "summary": summary,
        "redis_commands": {n: commands_median(group) for n, group in runs.items() if group},
        "ratios": ratios(summary),
        "pods_per_redis_node": pods_per_redis_node(
            base["redis_cpu_us_per_event"]["median"], base["events_per_s"]["median"] / base_n
        ),
    }


def _worker_counts(text: str) -> tuple[int, ...]:
    """``--workers 1,2,4`` as (1, 2, 4).

    >>> _worker_counts("4, 1,2")
    (1, 2, 4)
    """
    counts = sorted({int(part) for part in text.split(",") if part.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"--workers wants positive counts like 1,2,4; got {text!r}")
    return tuple(counts)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="Reuters-21578 .tar.gz or folder.")
    parser.add_argument("--synthetic", type=int, default=None, help="Use N synthetic documents instead (tests).")
    parser.add_argument("--workers", type=_worker_counts, default=(1, 2, 4), help="Worker counts [default: 1,2,4].")
    parser.add_argument("--cluster", action="store_true", help=f"A local Redis Cluster of {CLUSTER_MASTERS} masters.")
    parser.add_argument(
        "--learner",
        choices=list(LEARNERS),
        default="balanced-winnow",
        help="Learner of the model [default: %(default)s].",
    )
    parser.add_argument(
        "--kafka-client",
        choices=["confluent", "kafka-python"],
        default="confluent",
        help="The workers' client [default: %(default)s].",
    )
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each N [default: %(default)s].")
    parser.add_argument("--documents", type=int, default=None, help="Send only the first N documents.")
    parser.add_argument(
        "--passes",
        type=int,
        default=1,
        help="Send the documents this many times, with fresh ids [default: %(default)s].",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=WINDOW_DOCS,
        help="Documents that may be sent ahead of the labels learned, whatever N [default: %(default)s].",
    )
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="Partitions a topic [default: %(default)s].")
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="A flag for every worker, e.g. --worker-arg=--max-staleness-ms=1000 (repeatable).",
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="Give up on a run's stream after this.")
    parser.add_argument("--json", action="store_true", help="Print the results as one JSON object after the table.")
    args = parser.parse_args(argv)
    for name in ("repeats", "partitions", "documents", "passes", "window"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1; got {value}")
    config = ScaleConfig(
        source=args.source, synthetic=args.synthetic, workers=args.workers, cluster=args.cluster,
        learner=args.learner, kafka_client=args.kafka_client, repeats=args.repeats, documents=args.documents,
        passes=args.passes, window=args.window, partitions=args.partitions, worker_args=tuple(args.worker_arg),
        timeout_s=args.timeout_s, command="python -m benchmarks.scale " + shlex.join(argv),
    )  # fmt: skip
    results = run_scale(config, say=lambda text: print(text, file=sys.stderr, flush=True))
    print(markdown(results))
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
