"""The delivery guarantees under faults: ``python -m benchmarks.faults``.

For each seed in ``--seeds``, one run on real services: an embedded broker, an embedded Redis with an
append-only file, and ``--workers`` (3) ``stream-winnow worker`` processes in one consumer group
learning one multinomial-nb model. A producer sends ``--documents`` (100,000) synthetic documents,
keyed by id, to ``documents``: a third carry their labels (a labelled document), a third are followed
``--label-delay`` (500) documents later by a labelled event with the document's tokens, a third are
only scored; ten new categories appear in the second half, and ``--duplicates`` (300) labelled events
are sent twice (a producer's retry: same event id, a later offset). Meanwhile the faults, in a random
order, each once the previous one has recovered and the producer is far enough along:

- ``kill``: SIGKILL of a random worker (``--kills``, 20), started again at once, as a pod would be;
- ``freeze``: SIGSTOP of a worker for ``--freeze-s`` (15 s, longer than its 6 s session timeout), then SIGCONT;
- ``broker``: SIGSTOP of the broker for ``--broker-outage-s`` (30 s), then SIGCONT;
- ``redis-everysec`` / ``redis-always``: SIGKILL of redis-server (a crash), down ``--redis-down-s`` (3 s),
  then restarted on its port from its append-only file, flushed with that ``appendfsync`` policy.

What a run reports:

- **documents without a decision**: documents sent whose id never appears on ``decisions``;
- **duplicate decisions**: decisions beyond one a document (at-least-once output allows them);
- **labelled events applied twice / never**: each labelled event carries a token of its own
  (``oracle<N>``); multinomial-nb's counts are a function of the set of events applied, so the
  model in Redis is compared with one trained once in this process on the events sent once, token
  row by token row (a marker row above the reference's: applied twice; below: never), and as a whole
  (every counter and every count equal);
- **dead letters** by reason; **worker exits** not caused by a kill (each started again);
- **recovery** per fault: from the fault's end (the kill, the SIGCONT, the restart) until every
  document sent before it has its first decision.

A fault cannot end while the stream is idle: documents of the next slot wait for the next fault.

    python -m benchmarks.faults --seeds 1,2,3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.scale import TOPICS, ScaleWorker, stop_workers, wait_assigned
from benchmarks.service.collector import Collector
from benchmarks.service.config import SESSION_TIMEOUT_MS
from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import CodecError, TransportError
from stream_winnow.wire.codec import (
    DocumentMessage,
    LabelledEvent,
    decode_decision,
    encode_document,
    encode_labelled_event,
)
from workers.demo import dead_letter_reason

__all__ = ["FaultConfig", "main", "run_faults"]

MODEL = "faults"
GROUP = "faults-bench"
LEARNER = "multinomial-nb"
# Each document is one of these, drawn with equal odds.
KINDS = ("labelled", "late-label", "plain")
NEW_CATEGORIES = 10
# How long a fault may take to recover before the run gives up on waiting (and reports it).
RECOVERY_TIMEOUT_S = 180.0
# How long the model's version must stay still, once every event is counted, before it is compared.
QUIET_S = 5.0
_POLL_S = 0.1


@dataclass(frozen=True)
class FaultConfig:
    """One invocation: the stream, the faults, the seeds."""

    documents: int = 100_000
    workers: int = 3
    kills: int = 20
    freeze_s: float = 15.0
    broker_outage_s: float = 30.0
    redis_down_s: float = 3.0
    duplicates: int = 300
    label_delay: int = 500
    partitions: int = 4
    rate: float | None = None  # messages/s; None: the stream spans the faults' expected time (``paced_rate``)
    seeds: tuple[int, ...] = (1, 2, 3)
    kafka_client: str = "confluent"
    timeout_s: float = 1800.0
    keep_logs: bool = False


# ---------------------------------------------------------------------------------------------------
# the stream


@dataclass
class Stream:
    """What is sent, in order, and what the oracle learns: the events as sent once."""

    messages: list[tuple[str, bytes, bytes]]  # (topic, key, value)
    document_at: list[int]  # positions of the documents among the messages
    document_ids: list[str]
    events: list[LabelledDocument]  # each labelled event once (tokens with its marker)
    markers: list[str]  # each event's own token
    resent: int


def build_stream(config: FaultConfig, seed: int) -> Stream:
    """The run's messages: documents, late labelled events, resent events, new categories in the second half."""
    rng = random.Random(seed)
    docs = synthetic_stream(config.documents, seed=seed)
    n, half = len(docs), len(docs) // 2
    kinds = [rng.choice(KINDS) for _ in docs]
    labels = [
        (*doc.labels, f"new-{(i - half) * NEW_CATEGORIES // max(n - half, 1)}")
        if i >= half and rng.random() < 0.02 else doc.labels
        for i, doc in enumerate(docs)
    ]  # fmt: skip
    late = [i for i, kind in enumerate(kinds) if kind == "late-label"]
    resent = set(rng.sample(late, min(config.duplicates, len(late))))
    after: dict[int, list[tuple[bytes, bytes]]] = {}  # document position -> events to send after it
    messages: list[tuple[str, bytes, bytes]] = []
    document_at: list[int] = []
    events: list[LabelledDocument] = []
    markers: list[str] = []
    for i, doc in enumerate(docs):
        key, kind, marker = doc.id.encode(), kinds[i], f"oracle{len(events)}"
        if kind == "labelled":
            tokens = (*doc.tokens, marker)
            value = encode_document(DocumentMessage(doc.id, tokens, labels[i], None))
        else:
            value = encode_document(DocumentMessage(doc.id, doc.tokens, None, None))
        if kind == "late-label":
            tokens = (*doc.tokens, marker)
            event = encode_labelled_event(LabelledEvent(f"label:{doc.id}", doc.id, labels[i], tokens, None))
            due = min(i + config.label_delay, n - 1)
            after.setdefault(due, []).append((key, event))
            if i in resent:  # a producer's retry: the same event, later, in the same partition
                after.setdefault(min(due + rng.randint(1, 5 * config.label_delay), n - 1), []).append((key, event))
        if kind != "plain":
            events.append(LabelledDocument(doc.id, tokens, labels[i]))
            markers.append(marker)
        document_at.append(len(messages))
        messages.append((TOPICS.documents, key, value))
        messages += [(TOPICS.labels, k, v) for k, v in after.pop(i, [])]
    return Stream(messages, document_at, [d.id for d in docs], events, markers, len(resent))


class Arrivals:
    """Each document's first decision arrival, read incrementally from a collector of ``decisions``."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.first: dict[str, float] = {}
        self.decisions = 0
        self._read = 0

    def update(self) -> dict[str, float]:
        new = self.collector.arrivals(self._read)
        self._read += len(new)
        for now, value in new:
            self.decisions += 1
            try:
                self.first.setdefault(decode_decision(value).id, now)
            except CodecError:
                continue
        return self.first


# ---------------------------------------------------------------------------------------------------
# the services and the workers


class Services:
    """The run's broker, Redis and workers, and what was done to them."""

    def __init__(self, config: FaultConfig, log_dir: Path) -> None:
        from workers.embedded import create_topics, start_broker, start_redis

        self.config = config
        self.log_dir = log_dir
        self.broker = start_broker()
        self.redis = start_redis(appendfsync="everysec")
        create_topics(self.broker.bootstrap_servers, dict.fromkeys(TOPICS.all(), config.partitions))
        self.workers: list[ScaleWorker] = []
        self.started = 0
        self.unplanned_exits: list[str] = []

    def start_worker(self) -> ScaleWorker:
        own = self.log_dir / f"worker-{self.started}"
        own.mkdir(parents=True)
        args = ("--learner", LEARNER, "--worker-id", f"faults-{self.started}")
        self.started += 1
        return ScaleWorker(
            bootstrap=self.broker.bootstrap_servers, redis_url=self.redis.url, model=MODEL,
            client=self.config.kafka_client, topics=TOPICS, group=GROUP, worker_args=args, log_dir=own,
        )  # fmt: skip

    def supervise(self) -> None:
        """Start again any worker that exited by itself (counted, with its log's tail)."""
        for i, worker in enumerate(self.workers):
            if worker.process.poll() is not None:
                self.unplanned_exits.append(worker.log_tail()[-600:])
                self.workers[i] = self.start_worker()

    def stop(self) -> None:
        stop_workers(self.workers)
        self.redis.stop()
        self.broker.stop()


@dataclass
class Fault:
    kind: str
    started_s: float
    ended_s: float
    recovery_s: float = float("nan")


def inject(kind: str, services: Services, rng: random.Random) -> Fault:
    """One fault, done and undone; returns when it began and when it ended (its recovery starts then)."""
    config = services.config
    started = time.time()
    if kind == "kill":
        at = rng.randrange(len(services.workers))
        services.workers[at].process.send_signal(signal.SIGKILL)
        services.workers[at].process.wait(30)
        services.workers[at] = services.start_worker()
    elif kind == "freeze":
        victim = services.workers[rng.randrange(len(services.workers))]
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(config.freeze_s)
        os.kill(victim.pid, signal.SIGCONT)
    elif kind == "broker":
        os.kill(services.broker.pid, signal.SIGSTOP)
        time.sleep(config.broker_outage_s)
        os.kill(services.broker.pid, signal.SIGCONT)
    elif kind.startswith("redis-"):
        services.redis.crash()
        time.sleep(config.redis_down_s)
        services.redis.restart(appendfsync=kind.removeprefix("redis-"))
    else:
        raise ValueError(f"no fault {kind!r}")
    return Fault(kind, started, time.time())


def paced_rate(config: FaultConfig, messages: int) -> float:
    """Messages a second that make the stream last about as long as the faults and their recoveries
    are expected to (a kill about 12 s: the session timeout, a rejoin, and the restarted worker's join).

    >>> round(paced_rate(FaultConfig(), 133_600))
    366
    """
    session_s = SESSION_TIMEOUT_MS / 1000
    expected_s = (
        config.kills * (2 * session_s + 2)
        + config.freeze_s + 2 * session_s
        + config.broker_outage_s + 2 * session_s
        + 2 * (config.redis_down_s + 5)
    )  # fmt: skip
    return messages / expected_s


def fault_plan(config: FaultConfig, rng: random.Random) -> list[str]:
    """Every fault of a run, in a random order (the Redis crash under everysec before the one under always)."""
    plan = ["kill"] * config.kills + ["freeze", "broker", "redis"]
    rng.shuffle(plan)
    policies = iter(["everysec", "always"])
    plan.insert(rng.randrange(plan.index("redis") + 1, len(plan) + 1), "redis")
    return [f"redis-{next(policies)}" if kind == "redis" else kind for kind in plan]


# ---------------------------------------------------------------------------------------------------
# sending


class Sender(threading.Thread):
    """Sends the stream in order, no further than ``allowed()`` messages, and records each document's send time."""

    def __init__(self, bootstrap: str, stream: Stream, allowed: Callable[[], int], rate: float) -> None:
        super().__init__(daemon=True, name="faults-sender")
        import confluent_kafka

        self.stream = stream
        self.allowed = allowed
        self.rate = rate
        self.sent = 0
        self.sent_s = np.full(len(stream.messages), np.nan)
        self.failed: list[str] = []
        self.error: BaseException | None = None
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10,
            "message.timeout.ms": 600_000, "queue.buffering.max.messages": 1_000_000, "log_level": 4,
        })  # fmt: skip

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))

    def run(self) -> None:
        try:
            producer, messages = self._producer, self.stream.messages
            began = time.monotonic()
            while self.sent < len(messages):
                paced = int(self.rate * (time.monotonic() - began)) + 1
                limit = min(self.allowed(), len(messages), paced)
                if self.sent >= limit:
                    producer.poll(0.05)
                    continue
                topic, key, value = messages[self.sent]
                try:
                    producer.produce(topic, value, key=key or None, on_delivery=self._delivered)
                except BufferError:
                    producer.poll(0.1)
                    continue
                self.sent_s[self.sent] = time.time()
                self.sent += 1
                producer.poll(0)
            while producer.flush(1.0):
                pass
        except BaseException as error:  # noqa: BLE001 - reported to the main thread
            self.error = error


# ---------------------------------------------------------------------------------------------------
# one run


@dataclass
class RunResult:
    seed: int
    documents: int
    decisions: int
    undecided: int
    duplicate_decisions: int
    labelled_events: int
    resent_events: int
    applied_twice: int
    applied_never: int
    model_equal: bool
    dead_letters: dict[str, int]
    unplanned_exits: int
    not_delivered: int
    faults: list[Fault] = field(default_factory=list)
    seconds: float = 0.0


def recovery_s(fault: Fault, stream: Stream, sent_s: np.ndarray, arrivals: dict[str, float]) -> float:
    """From the fault's end until every document sent before it had its first decision (0 if none lagged)."""
    latest = fault.ended_s
    for doc_id, at in zip(stream.document_ids, stream.document_at, strict=True):
        if sent_s[at] <= fault.ended_s:
            latest = max(latest, arrivals.get(doc_id, float("inf")))
    return latest - fault.ended_s


def run_once(config: FaultConfig, seed: int, say: Callable[[str], None]) -> RunResult:
    from stream_winnow.learners.naive_bayes import DOCS_COUNTER
    from stream_winnow.models.named import connect, open_learner

    rng = random.Random(seed * 7919)
    stream = build_stream(config, seed)
    plan = fault_plan(config, rng)
    log_dir = Path(tempfile.mkdtemp(prefix=f"stream-winnow-faults-{seed}-"))
    services = Services(config, log_dir)
    began = time.time()
    decisions = dead_letters = None
    try:
        open_learner(connect(services.redis.url), MODEL, learner=LEARNER)
        decisions = Collector(services.broker.bootstrap_servers, [TOPICS.decisions], latency=True,
                              partitions=config.partitions).start_and_wait()  # fmt: skip
        dead_letters = Collector(services.broker.bootstrap_servers, [TOPICS.dead_letters], latency=True,
                                 partitions=config.partitions).start_and_wait()  # fmt: skip
        seen = Arrivals(decisions)
        services.workers = [services.start_worker() for _ in range(config.workers)]
        wait_assigned(services.workers, config.partitions, 120.0)
        slot = len(stream.messages) / (len(plan) + 1)
        injected = [0]
        rate = config.rate or paced_rate(config, len(stream.messages))
        # The stream flows through each fault; it waits at the slot after next for a fault running late.
        sender = Sender(services.broker.bootstrap_servers, stream, lambda: int((injected[0] + 2) * slot) + 1, rate)
        sender.start()
        faults: list[Fault] = []
        for k, kind in enumerate(plan):
            while sender.sent < int((k + 0.5) * slot) and sender.is_alive():
                services.supervise()
                time.sleep(_POLL_S)
            time.sleep(rng.uniform(0.2, 2.0))
            injected[0] = k + 1
            fault = inject(kind, services, rng)
            faults.append(fault)
            say(f"  fault {k + 1}/{len(plan)} {kind} at {sender.sent:,} messages sent")
            _wait_recovered(fault, stream, sender, seen, services)
        sender.join(config.timeout_s)
        if sender.error is not None:
            raise TransportError(f"the sender failed: {sender.error!r}")
        # Every document decided, every event counted, then a quiet spell for any late application.
        deadline = time.monotonic() + config.timeout_s
        learner = open_learner(connect(services.redis.url), MODEL, learner=LEARNER)
        wanted = set(stream.document_ids)
        while time.monotonic() < deadline:
            services.supervise()
            arrivals = seen.update()
            counted = learner.store.counters(DOCS_COUNTER).get("*", 0)
            if wanted <= arrivals.keys() and counted >= len(stream.events):
                break
            time.sleep(1.0)
        _quiet(learner, deadline)
        arrivals, n_decisions = seen.update(), seen.decisions
        for fault in faults:
            fault.recovery_s = recovery_s(fault, stream, sender.sent_s, arrivals)
        twice, never, equal = compare_with_oracle(learner, stream)
        reasons = Counter(dead_letter_reason(value) for _, value in dead_letters.arrivals())
        return RunResult(
            seed=seed, documents=len(wanted), decisions=n_decisions, undecided=len(wanted - arrivals.keys()),
            duplicate_decisions=n_decisions - len(arrivals.keys() & wanted), labelled_events=len(stream.events),
            resent_events=stream.resent, applied_twice=twice, applied_never=never, model_equal=equal,
            dead_letters=dict(reasons), unplanned_exits=len(services.unplanned_exits),
            not_delivered=len(sender.failed), faults=faults, seconds=time.time() - began,
        )  # fmt: skip
    finally:
        for collector in (decisions, dead_letters):
            if collector is not None:
                collector.stop()
        services.stop()
        if not config.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            say(f"  logs in {log_dir}")


def _wait_recovered(fault: Fault, stream: Stream, sender: Sender, seen: Arrivals, services: Services) -> None:
    """Until every document sent before the fault ended has a decision (or ``RECOVERY_TIMEOUT_S``)."""
    before = [doc_id for doc_id, at in zip(stream.document_ids, stream.document_at, strict=True)
              if sender.sent_s[at] <= fault.ended_s]  # fmt: skip
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        services.supervise()
        arrivals = seen.update()
        before = [doc_id for doc_id in before if doc_id not in arrivals]
        if not before:
            return
        time.sleep(0.5)


def _quiet(learner: Any, deadline: float) -> None:
    version, since = learner.store.version, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = learner.store.version
        if now != version:
            version, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            return


def compare_with_oracle(learner: Any, stream: Stream) -> tuple[int, int, bool]:
    """(marker rows above the reference, below it, whether the whole model equals it) against multinomial-nb
    trained once in this process on each event."""
    from stream_winnow.learners.naive_bayes import DOCS_COUNTER, TOKENS_COUNTER
    from stream_winnow.learners.registry import describe, from_metadata
    from stream_winnow.stores import MemoryStore

    oracle = from_metadata(describe(learner), store=MemoryStore(learner.table_specs()))
    for event in stream.events:
        oracle.learn_one(event.tokens, event.labels)
    featurizer = oracle.featurizer
    marker_ids = np.array([featurizer.token_id(m) for m in stream.markers], dtype=np.int64)
    got, want = learner.store.read(marker_ids)["total"][:, 0], oracle.store.read(marker_ids)["total"][:, 0]
    twice, never = int(np.sum(got > want)), int(np.sum(got < want))
    equal = set(learner.store.categories()) == set(oracle.store.categories()) and all(
        learner.store.counters(name) == oracle.store.counters(name) for name in (DOCS_COUNTER, TOKENS_COUNTER)
    )
    if equal:
        ids = np.array(sorted({featurizer.token_id(t) for e in stream.events for t in e.tokens}), dtype=np.int64)
        order = [learner.store.categories().index(c) for c in oracle.store.categories()]
        mine, theirs = learner.store.read(ids), oracle.store.read(ids)
        equal = bool(np.array_equal(mine["total"], theirs["total"])
                     and np.array_equal(mine["counts"][:, order], theirs["counts"]))  # fmt: skip
    return twice, never, equal


# ---------------------------------------------------------------------------------------------------
# report


def recovery_by_kind(faults: Sequence[Fault]) -> dict[str, tuple[float, float]]:
    """Per fault kind, (median, max) of its recovery times."""
    kinds: dict[str, list[float]] = {}
    for fault in faults:
        kinds.setdefault(fault.kind, []).append(fault.recovery_s)
    return {kind: (statistics.median(v), max(v)) for kind, v in sorted(kinds.items())}


def markdown(config: FaultConfig, runs: Sequence[RunResult]) -> str:
    head = (f"{config.documents:,} documents, {config.workers} workers ({config.kafka_client}), {config.kills} kills, "
            f"a {config.freeze_s:.0f} s freeze, a {config.broker_outage_s:.0f} s broker outage, two Redis crashes "
            f"(down {config.redis_down_s:.0f} s); {config.partitions} partitions a topic")  # fmt: skip
    lines = [head, "",
             "| seed | documents | decisions | without a decision | duplicate decisions | labelled events (resent) "
             "| applied twice | applied never | model = oracle | dead letters | worker exits | minutes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        dead = ", ".join(f"{n} {reason}" for reason, n in sorted(r.dead_letters.items())) or "0"
        lines.append(f"| {r.seed} | {r.documents:,} | {r.decisions:,} | {r.undecided} | {r.duplicate_decisions:,} | "
                     f"{r.labelled_events:,} ({r.resent_events}) | {r.applied_twice} | {r.applied_never} | "
                     f"{'yes' if r.model_equal else 'NO'} | {dead} | {r.unplanned_exits} | {r.seconds / 60:.1f} |")  # fmt: skip
    lines += ["", "| fault | " + " | ".join(f"seed {r.seed}: recovery s median (max)" for r in runs) + " |",
              "|---|" + "---|" * len(runs)]  # fmt: skip
    per_run = [recovery_by_kind(r.faults) for r in runs]
    for kind in sorted({k for kinds in per_run for k in kinds}):
        cells = [f"{kinds[kind][0]:.1f} ({kinds[kind][1]:.1f})" if kind in kinds else "-" for kinds in per_run]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_faults(config: FaultConfig, say: Callable[[str], None] = lambda _: None) -> list[RunResult]:
    runs = []
    for seed in config.seeds:
        say(f"seed {seed}: {config.documents:,} documents, {config.workers} workers")
        run = run_once(config, seed, say)
        say(f"  {run.undecided} without a decision, {run.duplicate_decisions:,} duplicate decisions, "
            f"{run.applied_twice} applied twice, {run.applied_never} never, model equal: {run.model_equal}, "
            f"{run.unplanned_exits} worker exits, {run.seconds:.0f} s")  # fmt: skip
        runs.append(run)
    return runs


def main(argv: Sequence[str] | None = None) -> None:
    defaults = FaultConfig()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=defaults.documents)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--kills", type=int, default=defaults.kills)
    parser.add_argument("--freeze-s", type=float, default=defaults.freeze_s)
    parser.add_argument("--broker-outage-s", type=float, default=defaults.broker_outage_s)
    parser.add_argument("--redis-down-s", type=float, default=defaults.redis_down_s)
    parser.add_argument("--duplicates", type=int, default=defaults.duplicates)
    parser.add_argument("--label-delay", type=int, default=defaults.label_delay, help="Documents between a "
                        "document and its late labelled event.")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=defaults.partitions)
    parser.add_argument("--rate", type=float, default=None, help="Messages a second [default: the stream spans "
                        "the faults' expected time].")  # fmt: skip
    parser.add_argument("--seeds", default=",".join(map(str, defaults.seeds)), help="Comma-separated; a run each.")
    parser.add_argument("--kafka-client", choices=("confluent", "kafka-python"), default=defaults.kafka_client)
    parser.add_argument("--keep-logs", action="store_true", help="Keep the workers' logs (their folder is printed).")
    parser.add_argument("--json", action="store_true", help="Print the runs as one JSON object after the table.")
    args = parser.parse_args(argv)
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers; got {args.seeds!r}")
    if args.workers < 1 or args.documents < 100 or args.kills < 0:
        parser.error("--workers must be at least 1, --documents at least 100, --kills at least 0")
    config = FaultConfig(
        documents=args.documents, workers=args.workers, kills=args.kills, freeze_s=args.freeze_s,
        broker_outage_s=args.broker_outage_s, redis_down_s=args.redis_down_s, duplicates=args.duplicates,
        label_delay=args.label_delay, partitions=args.partitions, rate=args.rate, seeds=seeds, kafka_client=args.kafka_client,
        keep_logs=args.keep_logs,
    )  # fmt: skip
    if config.freeze_s * 1000 <= SESSION_TIMEOUT_MS:
        print(f"note: --freeze-s {config.freeze_s} is within the workers' {SESSION_TIMEOUT_MS / 1000:.0f} s session "
            "timeout: the frozen worker keeps its partitions", file=sys.stderr)  # fmt: skip
    runs = run_faults(config, lambda line: print(line, file=sys.stderr, flush=True))
    print(f"`python -m benchmarks.faults {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(markdown(config, runs))
    if args.json:
        print(json.dumps({"config": asdict(config), "runs": [asdict(r) for r in runs]}, default=str))


if __name__ == "__main__":
    main()
