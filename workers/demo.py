"""The local demo: the whole service on one machine, a corpus streamed through it, scored as it goes.

``stream-winnow demo`` (and ``up``, which stops after the first step)::

    embedded Tansu broker + redis-server ─► topics ─► N worker processes (one consumer group)
        ─► documents, unlabelled ─► decisions ─► running micro-F1 against the true labels
        ─► each label, --labels-delay documents later, once its document was decided

A label is sent only after its document's decision came back, so every decision
is made before the model learned that document (prequential); the labelled event
carries the document's tokens, as ``produce`` sends it, so no label waits for the cache. At most ``_WINDOW_DOCS_PER_WORKER``
documents per worker are in flight, which keeps the stream near real time: a document is
decided soon after the labels before it were learned.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from stream_winnow.datasets.synthetic import DEFAULT_DOCUMENTS, synthetic_stream
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import CodecError, ConfigError, TransportError
from stream_winnow.evaluation.metrics import ClassificationReport, classification_report, label_matrix
from stream_winnow.wire.codec import (
    DocumentMessage,
    LabelledEvent,
    decode_dead_letter,
    decode_decision,
    encode_document,
    encode_labelled_event,
)
from workers.config import ENV_PREFIX, Topics
from workers.embedded import EmbeddedBroker, EmbeddedRedis, create_topics, free_port, start_broker, start_redis
from workers.transport import Client, KafkaSettings, make_producer

__all__ = [
    "DEFAULT_BROKER_PORT",
    "DEFAULT_REDIS_PORT",
    "DemoConfig",
    "DemoResult",
    "exports",
    "load_stream",
    "local_services",
    "now_ms",
    "preferred_port",
    "run_demo",
]

# `up` prefers the usual Kafka port and the port next to Redis's own (a system Redis often holds 6379).
DEFAULT_BROKER_PORT = 9092
DEFAULT_REDIS_PORT = 6380
# Documents produced but not decided yet, per worker. Small, because a worker decides a whole batch before
# it learns the labels in it: with 2 workers, 25 gave a synthetic micro-F1 of 0.90, 200 gave 0.82, at the
# same throughput (per-batch round trips, not the window, bound it).
_WINDOW_DOCS_PER_WORKER = 25
# A worker's first group join on Tansu takes about half its 10 s session timeout, and each member that
# joins later makes the others rejoin: two workers need 10-20 s on a loaded machine.
_READY_TIMEOUT_S = 90.0
# After the last decision: time for the workers to learn the last labels before the summary reads the model.
_DRAIN_TIMEOUT_S = 30.0
# A worker finishes its batch, commits and leaves the group on SIGTERM; past this, SIGKILL.
_WORKER_STOP_GRACE_S = 20.0
# After Ctrl-C or SIGTERM the user wants the prompt back: a killed worker loses nothing (its batch is
# redelivered and applied once by the offset watermarks), so the wait is short.
_INTERRUPTED_STOP_GRACE_S = 3.0
# How often the progress line is redrawn on a terminal, and written when stderr is a file or pipe.
_REFRESH_TTY_S = 1.0
_REFRESH_PLAIN_S = 5.0
# Longest wait for decisions in one turn of the loop; short so producing and redrawing keep going.
_POLL_MS = 100
# Documents whose tokens fix the model's d (mean total strength) before the workers start, as
# `evaluate --prequential` does; tokens only, never labels.
_D_SAMPLE_DOCS = 100
# Characters of a worker's log shown when it fails.
_LOG_TAIL_CHARS = 3000

MODEL = "demo"
GROUP_ID = "stream-winnow-demo"


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------------------------
# Services


def preferred_port(port: int | None, preferred: int, flag: str = "the port") -> int | None:
    """The port to start a service on: ``None`` means ``preferred`` if free, else any; 0 means any.

    A port asked for (``flag``) that something else listens on is a ``ConfigError``: the service
    there is not ours, and pointing the other commands at it would mislead them.
    """
    if port is None:
        return preferred if _port_is_free(preferred) else None
    if port and not _port_is_free(port):
        raise ConfigError(f"port {port} ({flag}) is taken by another process; free it, or give {flag} 0 for any")
    return port or None


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def local_services(
    partitions: int = 4,
    broker_port: int | None = None,
    redis_port: int | None = None,
    topics: Topics | None = None,
) -> Iterator[tuple[EmbeddedBroker, EmbeddedRedis]]:
    """A Tansu broker and a redis-server on loopback (free ports where None), with the four topics.

    documents, labels and decisions get ``partitions`` partitions, dead-letters one. Both
    services stop when the block ends; the broker keeps nothing (memory storage).
    """
    topics = topics or Topics()
    with start_broker(broker_port) as broker, start_redis(redis_port) as redis_server:
        create_topics(broker.bootstrap_servers, {
            topics.documents: partitions,
            topics.labels: partitions,
            topics.decisions: partitions,
            topics.dead_letters: 1,
        })  # fmt: skip
        yield broker, redis_server


def exports(bootstrap_servers: str, redis_url: str) -> str:
    """The shell lines that point workers and the other commands at these services."""
    return (
        f"export {ENV_PREFIX}_BOOTSTRAP_SERVERS={shlex.quote(bootstrap_servers)}\n"
        f"export {ENV_PREFIX}_REDIS_URL={shlex.quote(redis_url)}\n"
    )


# ---------------------------------------------------------------------------------------------------
# The demo


@dataclass(frozen=True)
class DemoConfig:
    """What ``stream-winnow demo`` runs; see its --help."""

    data: Path | None = None
    workers: int = 2
    documents: int | None = None
    labels_delay_docs: int = 50
    kafka_client: Client = "kafka-python"
    timeout_s: float = 300.0
    partitions: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {self.workers}")
        if self.documents is not None and self.documents < 1:
            raise ConfigError(f"documents must be at least 1, got {self.documents}")
        if self.labels_delay_docs < 0:
            raise ConfigError(f"labels_delay_docs must be >= 0, got {self.labels_delay_docs}")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {self.timeout_s}")


@dataclass
class DemoResult:
    """What the summary shows; ``missing`` documents got no decision before the timeout."""

    corpus: str
    documents: int
    decisions: int
    duplicates: int
    labelled_events: int
    dead_letters: dict[str, int]
    report: ClassificationReport
    streaming_s: float
    elapsed_s: float
    model_version: int
    missing: int
    workers: int
    kafka_client: str
    window_docs: int

    @property
    def documents_per_s(self) -> float:
        return self.decisions / self.streaming_s if self.streaming_s > 0 else 0.0

    def table(self) -> str:
        rows = [
            ("documents", f"{self.documents:,}"),
            ("decisions", f"{self.decisions:,}" + (f" (+{self.duplicates:,} repeated)" if self.duplicates else "")),
            ("labelled events", f"{self.labelled_events:,}"),
            ("dead letters", _dead_letters(self.dead_letters)),
            ("micro-F1", f"{self.report.micro_f1:.3f}"),
            ("macro-F1", f"{self.report.macro_f1:.3f}"),
            ("pace", f"{self.documents_per_s:,.0f} documents/s decided, held to at most {self.window_docs:,} "
                     "documents sent and not yet decided (the maximum: python -m benchmarks.service)"),
            ("elapsed", f"{self.streaming_s:.1f} s streaming, {self.elapsed_s:.1f} s in all"),
            ("model version", f"{self.model_version:,}"),
        ]
        if self.missing:
            rows.insert(2, ("missing", f"{self.missing:,} documents without a decision"))
        head = f"stream-winnow demo: {self.corpus}, {self.workers} worker(s), {self.kafka_client}"
        width = max(len(name) for name, _ in rows)
        return "\n".join([head, *(f"  {name:<{width}}  {value}" for name, value in rows), "", NEXT_STEPS]) + "\n"


NEXT_STEPS = """Next, on this machine (the README's "Classify your own documents" has the file format):
  stream-winnow up                                  # a broker and Redis that stay up (own terminal)
  stream-winnow worker --http-port 0                # a worker on them; a second one: run it again
  stream-winnow produce --input your-docs.jsonl     # your documents, labels where known
  stream-winnow tail decisions --from-beginning     # what the workers decided
  stream-winnow status                              # the model: version, categories, mistake rates"""


def _dead_letters(reasons: dict[str, int]) -> str:
    """``3 (2 not-msgpack, 1 empty-tokens)``; the README lists every reason."""
    total = sum(reasons.values())
    if not total:
        return "0"
    return f"{total:,} (" + ", ".join(f"{count:,} {reason}" for reason, count in sorted(reasons.items())) + ")"


def load_stream(data: Path | None, documents: int | None, seed: int = 0) -> tuple[list[LabelledDocument], str]:
    """The documents to stream and a description: ModApte (training then test) or the synthetic stream."""
    if data is None:
        n = documents if documents is not None else DEFAULT_DOCUMENTS
        stream = synthetic_stream(n, seed)
        return stream, f"synthetic stream ({len(stream):,} documents, {len(_categories(stream))} categories)"
    from stream_winnow.datasets import read_modapte

    split = read_modapte(data)
    stream = [*split.train, *split.test][:documents]
    return stream, (
        f"Reuters-21578 ModApte ({len(stream):,} documents, training then test, {len(split.categories)} categories)"
    )


def _categories(stream: Sequence[LabelledDocument]) -> list[str]:
    return sorted({label for doc in stream for label in doc.labels})


class _Progress:
    """The live line on stderr: redrawn in place on a terminal, a line every few seconds otherwise."""

    def __init__(self, out: TextIO, total: int) -> None:
        self.out = out
        self.total = total
        self.tty = out.isatty()
        self.every_s = _REFRESH_TTY_S if self.tty else _REFRESH_PLAIN_S
        self.last = 0.0

    def show(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        if self.tty:
            self.out.write(f"\r\x1b[K{text}")
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


@dataclass
class _Workers:
    """The worker processes of the demo, each logging to its own file."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    http_ports: list[int] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def start(self, count: int, env: dict[str, str], log_dir: Path) -> None:
        for i in range(count):
            port = free_port()
            log_path = log_dir / f"worker-{i}.log"
            worker_env = {
                **env,
                f"{ENV_PREFIX}_HTTP_PORT": str(port),
                f"{ENV_PREFIX}_WORKER_ID": f"demo-worker-{i}",
            }
            with open(log_path, "ab") as log_file:
                process = subprocess.Popen(
                    [sys.executable, "-m", "workers.cli", "worker"],
                    env=worker_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    # Ctrl-C goes to the demo only; it stops the workers in order.
                    start_new_session=True,
                )
            self.processes.append(process)
            self.http_ports.append(port)
            self.logs.append(log_path)

    def check_alive(self) -> None:
        for i, process in enumerate(self.processes):
            if process.poll() is not None:
                raise TransportError(
                    f"worker {i} exited with code {process.returncode}; its log ends:\n{self.log_tail(i)}"
                )

    def log_tail(self, i: int) -> str:
        try:
            return self.logs[i].read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"

    def wait_ready(self, timeout_s: float) -> None:
        """Until every worker's /readyz answers 200 (connected, partitions assigned)."""
        deadline = time.monotonic() + timeout_s
        pending = set(range(len(self.processes)))
        while pending:
            self.check_alive()
            pending = {i for i in pending if not _http_ok(self.http_ports[i], "/readyz")}
            if not pending:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- worker {i}:\n{self.log_tail(i)}" for i in sorted(pending))
                raise TransportError(f"workers {sorted(pending)} not ready after {timeout_s:.0f} s; logs:\n{tails}")
            time.sleep(0.2)

    def labelled_events(self) -> int | None:
        """Labelled events learned so far, summed over the workers' metrics (None if one does not answer)."""
        total = 0
        for port in self.http_ports:
            text = _http_get(port, "/metrics")
            if text is None:
                return None
            total += int(_metric(text, "stream_winnow_labelled_events_total"))
            total += int(_metric(text, "stream_winnow_dead_letters_total"))
        return total

    def stop(self, grace_s: float = _WORKER_STOP_GRACE_S) -> None:
        """SIGTERM every worker; SIGKILL those still running ``grace_s`` later."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _http_get(port: int, path: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2.0) as response:
            body: bytes = response.read()
            return body.decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None


def _http_ok(port: int, path: str) -> bool:
    return _http_get(port, path) is not None  # urlopen raises on 503


def _metric(text: str, name: str) -> float:
    """The sum of every sample of ``name`` (all label values) in Prometheus text format."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _worker_env(bootstrap_servers: str, redis_url: str, config: DemoConfig) -> dict[str, str]:
    """The parent's environment without any STREAM_WINNOW_* setting, plus the demo's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(f"{ENV_PREFIX}_")}
    env.update({
        f"{ENV_PREFIX}_BOOTSTRAP_SERVERS": bootstrap_servers,
        f"{ENV_PREFIX}_REDIS_URL": redis_url,
        f"{ENV_PREFIX}_MODEL": MODEL,
        f"{ENV_PREFIX}_GROUP_ID": GROUP_ID,
        f"{ENV_PREFIX}_KAFKA_CLIENT": config.kafka_client,
    })  # fmt: skip
    return env


def _prepare_model(redis_url: str, stream: Sequence[LabelledDocument]) -> None:
    """Create the model and fix its d from the first documents' tokens, so every worker scores alike."""
    from stream_winnow.models.named import connect, open_learner
    from stream_winnow.models.training import estimate_d

    client = connect(redis_url)
    try:
        learner = open_learner(client, MODEL)
        sample = [doc.tokens for doc in stream[:_D_SAMPLE_DOCS]]
        estimate_d(learner, learner.featurizer.transform_many(sample))
    finally:
        client.close()


def _model_version(redis_url: str) -> int:
    from stream_winnow.models.named import connect, open_learner

    client = connect(redis_url)
    try:
        return int(open_learner(client, MODEL, create=False).store.version)
    finally:
        client.close()


class _Scores:
    """Running micro-F1 from the first decision of each document."""

    def __init__(self, truth: dict[str, tuple[str, ...]]) -> None:
        self.truth = truth
        self.decided: dict[str, tuple[str, ...]] = {}
        self.duplicates = 0
        self.model_version = 0
        self.tp = self.fp = self.fn = 0

    def add(self, document_id: str, categories: tuple[str, ...], model_version: int) -> None:
        self.model_version = max(self.model_version, model_version)
        if document_id in self.decided or document_id not in self.truth:
            self.duplicates += 1
            return
        self.decided[document_id] = categories
        true, predicted = set(self.truth[document_id]), set(categories)
        self.tp += len(true & predicted)
        self.fp += len(predicted - true)
        self.fn += len(true - predicted)

    @property
    def micro_f1(self) -> float:
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else 0.0


def run_demo(config: DemoConfig, out: TextIO | None = None, err: TextIO | None = None) -> DemoResult:
    """Start everything, stream the corpus, stop everything; the summary table goes to ``out``."""
    out = out or sys.stdout
    err = err or sys.stderr
    started = time.monotonic()
    stream, corpus = load_stream(config.data, config.documents, config.seed)
    if not stream:
        raise ConfigError("the corpus holds no documents")
    partitions = max(config.partitions, config.workers)  # a worker without a partition would sit idle
    say = _say(err)
    say("starting a Tansu broker and redis-server on loopback (no Docker)")
    with (
        local_services(partitions) as (broker, redis_server),
        tempfile.TemporaryDirectory(prefix="stream-winnow-demo-") as log_dir,
    ):
        say(f"  broker {broker.bootstrap_servers}, Redis {redis_server.url}; {partitions} partitions per topic")
        _prepare_model(redis_server.url, stream)
        workers = _Workers()
        grace_s = _WORKER_STOP_GRACE_S
        try:
            workers.start(config.workers, _worker_env(broker.bootstrap_servers, redis_server.url, config),
                          Path(log_dir))  # fmt: skip
            say(f"starting {config.workers} worker(s) ({config.kafka_client}); "
                "the first consumer-group join takes a few seconds")  # fmt: skip
            ready_started = time.monotonic()
            workers.wait_ready(_READY_TIMEOUT_S)
            say(f"  workers ready in {time.monotonic() - ready_started:.1f} s")
            say(f"streaming the {corpus}; each label follows {config.labels_delay_docs} documents later")
            result = _stream(config, stream, corpus, broker.bootstrap_servers, workers, err)
            workers.check_alive()
            if not result.missing:
                _wait_learned(workers, result.labelled_events)
        except KeyboardInterrupt:
            grace_s = _INTERRUPTED_STOP_GRACE_S
            raise
        finally:
            say("stopping the workers and the services")
            workers.stop(grace_s)
        result.model_version = max(result.model_version, _model_version(redis_server.url))
    result.elapsed_s = time.monotonic() - started
    out.write(result.table())
    out.flush()
    return result


def _say(err: TextIO) -> Any:
    def say(text: str) -> None:
        err.write(text + "\n")
        err.flush()

    return say


def _wait_learned(workers: _Workers, labelled_events: int) -> None:
    """Give the workers a moment to learn the last labels, so the model version is the final one."""
    deadline = time.monotonic() + _DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        learned = workers.labelled_events()
        if learned is None or learned >= labelled_events:
            return
        time.sleep(0.2)


def _stream(
    config: DemoConfig,
    stream: Sequence[LabelledDocument],
    corpus: str,
    bootstrap_servers: str,
    workers: _Workers,
    err: TextIO,
) -> DemoResult:
    import kafka

    topics = Topics()
    truth = {doc.id: doc.labels for doc in stream}
    scores = _Scores(truth)
    n = len(stream)
    settings = KafkaSettings(bootstrap_servers, client_id="stream-winnow-demo")
    producer = make_producer(settings, config.kafka_client)
    # Read decisions and dead letters by partition, without a group: no join to wait for.
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        client_id="stream-winnow-demo",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=_POLL_MS,
    )
    progress = _Progress(err, n)
    window_docs = _WINDOW_DOCS_PER_WORKER * config.workers
    sent_docs = sent_labels = 0
    dead_letters: dict[str, int] = {}
    bad_decisions = 0
    streaming_started = time.monotonic()
    deadline = streaming_started + config.timeout_s
    last_flush = streaming_started
    try:
        consumer.assign([
            kafka.TopicPartition(topic, partition)
            for topic in (topics.decisions, topics.dead_letters)
            for partition in sorted(consumer.partitions_for_topic(topic) or ())
        ])  # fmt: skip
        while len(scores.decided) < n and time.monotonic() < deadline:
            while sent_docs < n and sent_docs - len(scores.decided) < window_docs:
                doc = stream[sent_docs]
                message = DocumentMessage(doc.id, doc.tokens, None, now_ms())
                producer.send(topics.documents, encode_document(message), key=doc.id.encode())
                sent_docs += 1
            # Labels in stream order, each after `labels_delay_docs` more documents and after its decision.
            while sent_labels < sent_docs and (sent_docs > sent_labels + config.labels_delay_docs or sent_docs == n):
                doc = stream[sent_labels]
                if doc.id not in scores.decided:
                    break
                event = LabelledEvent(f"label:{doc.id}", doc.id, doc.labels, doc.tokens, now_ms())
                producer.send(topics.labels, encode_labelled_event(event), key=doc.id.encode())
                sent_labels += 1
            for records in consumer.poll(timeout_ms=_POLL_MS).values():
                for record in records:
                    if record.topic == topics.dead_letters:
                        reason = dead_letter_reason(record.value)
                        dead_letters[reason] = dead_letters.get(reason, 0) + 1
                        continue
                    try:
                        decision = decode_decision(record.value)
                    except CodecError:
                        bad_decisions += 1
                        continue
                    scores.add(decision.id, decision.categories, decision.model_version)
            if time.monotonic() - last_flush >= _REFRESH_TTY_S:
                producer.flush()  # surfaces send errors; the broker has acknowledged everything so far
                workers.check_alive()
                last_flush = time.monotonic()
            progress.show(_progress_line(sent_docs, n, scores, sent_labels, dead_letters, streaming_started))
        # The labels of the last documents, now that every decision is in.
        while sent_labels < n and stream[sent_labels].id in scores.decided:
            doc = stream[sent_labels]
            event = LabelledEvent(f"label:{doc.id}", doc.id, doc.labels, doc.tokens, now_ms())
            producer.send(topics.labels, encode_labelled_event(event), key=doc.id.encode())
            sent_labels += 1
        producer.flush()
        streaming_s = time.monotonic() - streaming_started
        progress.show(_progress_line(sent_docs, n, scores, sent_labels, dead_letters, streaming_started), force=True)
        progress.done()
    finally:
        consumer.close()
        producer.close()
    missing = n - len(scores.decided)
    if missing:
        err.write(f"timeout: {missing:,} of {n:,} documents got no decision within {config.timeout_s:.0f} s\n")
    if bad_decisions:
        err.write(f"{bad_decisions} messages on {topics.decisions} were not decisions\n")
    categories = _categories(stream)
    decided = [doc for doc in stream if doc.id in scores.decided]
    report = classification_report(
        label_matrix([doc.labels for doc in decided], categories),
        label_matrix([scores.decided[doc.id] for doc in decided], categories),
    )
    return DemoResult(
        corpus=corpus,
        documents=n,
        decisions=len(scores.decided),
        duplicates=scores.duplicates,
        labelled_events=sent_labels,
        dead_letters=dead_letters,
        report=report,
        streaming_s=streaming_s,
        elapsed_s=0.0,
        model_version=scores.model_version,
        missing=missing,
        workers=config.workers,
        kafka_client=config.kafka_client,
        window_docs=window_docs,
    )


def dead_letter_reason(value: bytes) -> str:
    """A dead letter's reason, or ``unreadable`` for a message on that topic that is not one."""
    try:
        return decode_dead_letter(value).reason
    except CodecError:
        return "unreadable"


def _progress_line(sent: int, total: int, scores: _Scores, labels: int, dead_letters: dict[str, int],
                   started: float) -> str:  # fmt: skip
    seconds = max(time.monotonic() - started, 1e-9)
    return (
        f"documents {sent:,}/{total:,} · decisions {len(scores.decided):,} · labelled events {labels:,} · "
        f"dead letters {sum(dead_letters.values()):,} · {len(scores.decided) / seconds:,.0f} docs/s decided · "
        f"micro-F1 {scores.micro_f1:.3f}"
    )
