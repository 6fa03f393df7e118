"""The worker: consume documents and labelled events, score against Redis, emit decisions, learn from mistakes.

One loop, one batch at a time::

    poll ─► decode (bad → dead-letters) ─► cache tokens ─► score unlabelled docs (ONE weight read)
         ─► labelled docs and events, in order: predict, learn (atomic, idempotent per event_id)
         ─► produce decisions ─► flush (broker acks) ─► commit offsets

Offsets are committed only after the broker acknowledged every decision and
dead letter of the batch and every update was applied, so a crash repeats at
most the last batch: at-least-once decisions, exactly-once updates (by
``event_id``). A labelled document's event id is ``doc:<id>``.

When Redis or the broker fails, the worker logs it, backs off (doubling, capped)
and retries the same batch; it never advances offsets past unfinished work.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

import numpy as np

from stream_winnow.codec import (
    DeadLetter,
    Decision,
    DocumentMessage,
    LabelledEvent,
    decode_document,
    decode_labelled_event,
    encode_dead_letter,
    encode_decision,
)
from stream_winnow.document_cache import DocumentCache
from stream_winnow.errors import CodecError, ServiceUnavailable, StoreError, TransportError
from stream_winnow.features import FeatureBatch, FeatureVector
from stream_winnow.learners import compiled
from stream_winnow.learners.base import Learner
from stream_winnow.learners.mistake_driven import KEEP_TABLE, MistakeDriven
from stream_winnow.learners.registry import describe, from_metadata
from stream_winnow.outcomes import Outcome, push_outcomes
from stream_winnow.stores.base import Update
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.memory import MemoryStore
from workers.config import WorkerConfig
from workers.metrics import WorkerMetrics
from workers.transport import Consumer, Producer, Record, next_offsets

log = logging.getLogger("stream_winnow.worker")

# How often the consumer-lag gauges are refreshed: each refresh asks the broker for every partition's
# offsets (about 50 ms with confluent-kafka on Tansu), and Prometheus scrapes every 15-30 s anyway.
LAG_EVERY_S = 30.0


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class WorkerState:
    """What the health endpoints report."""

    started: float = field(default_factory=time.monotonic)
    last_loop: float = field(default_factory=time.monotonic)
    assigned: set[tuple[str, int]] = field(default_factory=set)
    broker_ok: bool = False
    redis_ok: bool = False

    def alive(self, stall_s: float) -> bool:
        return time.monotonic() - self.last_loop < stall_s

    def ready(self) -> bool:
        return self.broker_ok and self.redis_ok and bool(self.assigned)


@dataclass(frozen=True)
class _Labelled:
    """A learning item: a labelled document (also decided) or a labelled event."""

    record: Record
    event_id: str
    document_id: str
    labels: tuple[str, ...]
    tokens: tuple[str, ...] | None
    decide: bool
    ts_ms: int | None


class Worker:
    """Wires a consumer, a producer, a learner over a Redis store and a document cache."""

    def __init__(
        self,
        config: WorkerConfig,
        consumer: Consumer,
        producer: Producer,
        learner: Learner,
        cache: DocumentCache,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.config = config
        self.consumer = consumer
        self.producer = producer
        self.learner = learner
        self.cache = cache
        self.metrics = metrics or WorkerMetrics()
        self.state = WorkerState()
        self._stop = threading.Event()
        self._lag_reported = float("-inf")
        # The model's settings, to build the batch-local learner like the shared one.
        self._learner_spec = describe(learner)

    # -- lifecycle ------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and leave the group."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            log.info("signal %s: finishing the batch, committing, leaving the group", signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> None:
        topics = [self.config.topics.documents, self.config.topics.labels]
        self.consumer.subscribe(
            topics, self.config.group_id, on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        log.info(
            "worker %s joined group %s on %s (model %s, learner %s)",
            self.config.worker_id, self.config.group_id, topics, self.config.model, self.learner.name,
        )  # fmt: skip
        try:
            while not self._stop.is_set():
                self.state.last_loop = time.monotonic()
                self._report_lag()
                records = self._poll()
                if records:
                    self._process_with_retry(records)
        finally:
            self._close()

    def _on_assign(self, partitions: set[tuple[str, int]]) -> None:
        self.state.assigned |= partitions
        log.info("assigned %s", sorted(partitions))

    def _on_revoke(self, partitions: set[tuple[str, int]]) -> None:
        self.state.assigned -= partitions
        log.info("revoked %s", sorted(partitions))

    def _close(self) -> None:
        for what, close in (("producer", self.producer.close), ("consumer", self.consumer.close)):
            try:
                close()
            except Exception as error:  # noqa: BLE001 - closing must not hide the reason we stop
                log.warning("closing the %s failed: %s", what, error)
        log.info("worker %s stopped", self.config.worker_id)

    def _report_lag(self) -> None:
        """Consumer lag per partition, every ``LAG_EVERY_S`` (it asks the broker for end offsets)."""
        now = time.monotonic()
        if now - self._lag_reported < LAG_EVERY_S or not self.state.assigned:
            return
        self._lag_reported = now
        try:
            for (topic, partition), lag in self.consumer.lag().items():
                self.metrics.lag.labels(topic, str(partition)).set(lag)
        except TransportError as error:
            log.debug("consumer lag unavailable: %s", error)

    def _poll(self) -> list[Record]:
        try:
            records = self.consumer.poll_batch(self.config.batch_max_docs, self.config.poll_timeout_ms)
        except TransportError as error:
            self.state.broker_ok = False
            log.warning("polling the broker failed: %s; retrying", error)
            self._stop.wait(self.config.retry_initial_ms / 1000)
            return []
        self.state.broker_ok = True
        return records

    def _process_with_retry(self, records: list[Record]) -> None:
        delay_ms = self.config.retry_initial_ms
        while True:
            try:
                started = time.perf_counter()
                self.process(records)
                self.metrics.batch_seconds.observe(time.perf_counter() - started)
                self.metrics.batch_size.observe(len(records))
                return
            except ServiceUnavailable as error:
                service = "redis" if isinstance(error, StoreError) else "broker"
                if service == "redis":
                    self.state.redis_ok = False
                else:
                    self.state.broker_ok = False
                self.metrics.retries.labels(service).inc()
                first = records[0]
                log.warning(
                    "%s unavailable (%s); batch of %d from %s[%d]@%d not committed, retrying in %d ms",
                    service, error, len(records), first.topic, first.partition, first.offset, delay_ms,
                    extra={"topic": first.topic, "partition": first.partition, "offset": first.offset},
                )  # fmt: skip
                if self._stop.wait(delay_ms / 1000):
                    log.info("stopping with the batch unfinished; it will be redelivered")
                    return
                delay_ms = min(delay_ms * 2, self.config.retry_max_ms)

    # -- one batch ------------------------------------------------------------------------------------
    def process(self, records: Sequence[Record]) -> None:
        """Decide, learn, produce, flush and commit one batch (raises ServiceUnavailable to retry it)."""
        topics = self.config.topics
        limits = self.config.limits
        unlabelled: list[tuple[Record, DocumentMessage]] = []
        labelled: list[_Labelled] = []
        to_cache: dict[str, tuple[str, ...]] = {}
        for record in records:
            try:
                if record.topic == topics.documents:
                    document = decode_document(record.value, limits)
                    to_cache[document.id] = document.tokens
                    if document.labels is None:
                        unlabelled.append((record, document))
                    else:
                        labelled.append(
                            _Labelled(record, f"doc:{document.id}", document.id, document.labels,
                                      document.tokens, True, document.ts_ms)
                        )  # fmt: skip
                elif record.topic == topics.labels:
                    event = decode_labelled_event(record.value, limits)
                    labelled.append(_labelled_event(record, event))
                else:
                    self._dead_letter(record, "unknown-topic", f"the worker does not read topic {record.topic!r}")
            except CodecError as error:
                self._dead_letter(record, error.code, error.detail)
        self.cache.put_many(to_cache)
        self.state.redis_ok = True
        self._decide_unlabelled(unlabelled)
        self._learn(labelled)
        self.producer.flush()
        self.consumer.commit(next_offsets(records))
        self.state.broker_ok = True

    def _decide_unlabelled(self, items: list[tuple[Record, DocumentMessage]]) -> None:
        if not items:
            return
        learner = self.learner
        batch = learner.featurizer.transform_many([document.tokens for _, document in items])
        started = time.perf_counter()
        margins = learner.margins_many(batch)
        version = learner.store.version
        self.metrics.redis_seconds.observe(time.perf_counter() - started)
        self.metrics.model_version.set(version)
        if isinstance(learner.store, CachedStore):
            self.metrics.staleness.set(learner.store.last_staleness_s)
        names = learner.store.categories()
        rounded = _plain_scores(margins)
        for (_, document), row, scores in zip(items, margins, rounded, strict=True):
            self._send_decision(document.id, learner.decide(row, names), names, scores, version, document.ts_ms)
        self.metrics.documents.inc(len(items))

    def _learn(self, items: list[_Labelled]) -> None:
        """Learn from labelled documents and events in order; each is applied once (by event id)."""
        if not items:
            return
        store = self.learner.store
        missing = [item.document_id for item in items if item.tokens is None]
        cached = self.cache.get_many(missing) if missing else {}
        resolved: list[tuple[_Labelled, tuple[str, ...]]] = []
        for item in items:
            tokens = item.tokens if item.tokens is not None else cached.get(item.document_id)
            if tokens is None:
                self._dead_letter(
                    item.record,
                    "document-not-cached",
                    f"labelled event {item.event_id!r}: document {item.document_id!r} is not in the document "
                    f"cache (expired after {self.config.document_cache_ttl_s} s, or never seen); resend the "
                    "event with its tokens",
                )
            else:
                resolved.append((item, tokens))
        if not resolved:
            return
        store.ensure_categories(sorted({label for item, _ in resolved for label in item.labels}))
        done = store.applied_events([item.event_id for item, _ in resolved])
        fresh = [pair for pair, applied in zip(resolved, done, strict=True) if not applied]
        self.metrics.duplicates.inc(len(resolved) - len(fresh))
        self.metrics.labelled.inc(len(resolved))
        if isinstance(self.learner, MistakeDriven):
            self._learn_batched(self.learner, fresh)
        else:
            self._learn_one_by_one(fresh)

    def _learn_batched(self, learner: MistakeDriven, items: list[tuple[_Labelled, tuple[str, ...]]]) -> None:
        """One read of every feature of the batch, learning in order on a local copy, one write round.

        The local copy sees each update before the next item is scored, so a single worker decides
        and learns exactly as the in-process learner would; the updates then go to Redis with
        ``apply_many`` (atomic per shard, once per event id).
        """
        if not items:
            return
        store = learner.store
        batch = learner.featurizer.transform_many([tokens for _, tokens in items])
        unique = batch.distinct_ids()[0]
        started = time.perf_counter()
        values = store.read(unique)
        version = store.version
        self.metrics.redis_seconds.observe(time.perf_counter() - started)
        names = store.categories()  # one round trip: the local copy and the decisions share it
        local_store = MemoryStore(learner.table_specs(), rows=len(unique) + 1, categories=len(names))
        local_store.ensure_categories(names)
        local_store.load_rows(unique, values)
        local = from_metadata(self._learner_spec, store=local_store)
        assert isinstance(local, MistakeDriven)
        local.featurizer = learner.featurizer
        if learner.d is None and len(batch):  # a new model: d from its first document, as fix_d does
            learner.set_d(max(batch.vector(0).total_strength, 1e-9))
        if learner.d is not None:
            local.set_d(learner.d)
        if compiled.supports(local):
            pending, outcomes = self._learn_compiled(local, batch, items, names, version)
        else:
            pending, outcomes = self._learn_in_python(local, batch, items, names, version)
        applied = store.apply_many(pending)
        push_outcomes(self.cache.client, self.config.model, outcomes)
        self.metrics.updates.inc(sum(1 for (updates, _), ok in zip(pending, applied, strict=True) if ok and updates))
        self.metrics.duplicates.inc(applied.count(False))

    def _learn_compiled(
        self,
        local: MistakeDriven,
        batch: FeatureBatch,
        items: list[tuple[_Labelled, tuple[str, ...]]],
        names: Sequence[str],
        version: int,
    ) -> tuple[list[tuple[Sequence[Update], str | None]], list[Outcome]]:
        """The batch through the compiled loop; each item's update rebuilt from its recorded actions."""
        stream = compiled.prepare(local, batch, [item.labels for item, _ in items])
        actions = np.zeros((len(items), len(names)), dtype=np.int8)
        _, margins = compiled.run(local, stream, record_margins=True, actions=actions)
        distinct, inverse = batch.distinct_ids()
        keep = (local.store.read(distinct)[KEEP_TABLE][:, 0] > 0)[inverse]
        pending: list[tuple[Sequence[Update], str | None]] = []
        outcomes: list[Outcome] = []
        mistakes_before = 0
        for i, (item, _) in enumerate(items):
            row = margins[i]
            if item.decide:
                self._send_decision(item.document_id, local.decide(row, names), names, _plain_scores(row),
                                    version + mistakes_before, item.ts_ms)  # fmt: skip
                self.metrics.documents.inc()
            promote = np.flatnonzero(actions[i] > 0)
            demote = np.flatnonzero(actions[i] < 0)
            wrong = tuple(names[c] for c in promote.tolist()) + tuple(names[c] for c in demote.tolist())
            updates: list[Update] = []
            if wrong:
                mistakes_before += 1
                start, end = batch.indptr[i], batch.indptr[i + 1]
                kept = keep[start:end]
                vector = FeatureVector(batch.ids[start:end][kept], batch.strengths[start:end][kept])
                updates = [*(local.rule_updates(vector, promote, demote) if len(vector) else []),
                           *local.bookkeeping(wrong)]  # fmt: skip
                for category in wrong:
                    self.metrics.mistakes.labels(category).inc()
            outcomes.append((item.labels, wrong))
            # Applied even when empty: the event id is recorded, so a redelivery changes nothing later.
            pending.append((updates, item.event_id))
        return pending, outcomes

    def _learn_in_python(
        self,
        local: MistakeDriven,
        batch: FeatureBatch,
        items: list[tuple[_Labelled, tuple[str, ...]]],
        names: Sequence[str],
        version: int,
    ) -> tuple[list[tuple[Sequence[Update], str | None]], list[Outcome]]:
        """The reference path, one item at a time (rules the compiled loop does not know)."""
        local_store = local.store
        pending: list[tuple[Sequence[Update], str | None]] = []
        outcomes: list[Outcome] = []
        for i, (item, _) in enumerate(items):
            vector = batch.vector(i)
            margins = local.margins(vector)
            if item.decide:
                self._send_decision(
                    item.document_id, local.decide(margins, names), names, _plain_scores(margins),
                    version + local_store.version, item.ts_ms,
                )  # fmt: skip
                self.metrics.documents.inc()
            updates, outcome = local.updates_for(vector, item.labels, margins)
            if updates:
                local_store.apply(updates)
            for category in outcome.promoted + outcome.demoted:
                self.metrics.mistakes.labels(category).inc()
            outcomes.append((item.labels, outcome.promoted + outcome.demoted))
            # Applied even when empty: the event id is recorded, so a redelivery changes nothing later.
            pending.append((updates, item.event_id))
        return pending, outcomes

    def _learn_one_by_one(self, items: list[tuple[_Labelled, tuple[str, ...]]]) -> None:
        """Naive Bayes (its scores need model-wide counts): predict and learn each item against Redis."""
        learner = self.learner
        for item, tokens in items:
            vector = learner.transform(tokens)
            margins = learner.margins(vector)
            if item.decide:
                version = learner.store.version
                names = learner.store.categories()
                scores = _plain_scores(margins)
                self._send_decision(item.document_id, learner.decide(margins, names), names, scores, version, item.ts_ms)
                self.metrics.documents.inc()
            updates, outcome = learner.updates_for(vector, item.labels, margins)
            for category in outcome.promoted + outcome.demoted:
                self.metrics.mistakes.labels(category).inc()
            push_outcomes(self.cache.client, self.config.model, [(item.labels, outcome.promoted + outcome.demoted)])
            if learner.store.apply(updates, event_id=item.event_id):
                self.metrics.updates.inc(bool(updates))
            else:
                self.metrics.duplicates.inc()

    def _send_decision(
        self,
        document_id: str,
        categories: tuple[str, ...],
        names: Sequence[str],
        margins: list[float],
        version: int,
        ts_ms: int | None,
    ) -> None:
        """Produce one decision; ``margins`` are plain floats (rounded to 6 places) in ``names``' order."""
        scores = dict(zip(names, margins, strict=False))
        decision = Decision(
            id=document_id,
            categories=categories,
            scores=scores,
            model_version=version,
            model=self.config.model,
            worker=self.config.worker_id,
            ts_ms=ts_ms,
            decided_ts_ms=now_ms(),
        )
        encoded = encode_decision(decision, check=False)  # built from validated input and our own floats
        self.producer.send(self.config.topics.decisions, encoded, key=document_id.encode())
        self.metrics.decisions.inc()

    def _dead_letter(self, record: Record, reason: str, detail: str) -> None:
        letter = DeadLetter(
            reason=reason,
            detail=detail,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            original=record.value,
            ts_ms=now_ms(),
            worker=self.config.worker_id,
        )
        try:
            encoded = encode_dead_letter(letter)
        except CodecError:  # the original is too large to carry whole: keep its head, say so
            keep = self.config.limits.max_message_bytes // 2
            letter = replace(letter, original=record.value[:keep], detail=f"{detail} (original cut to {keep} bytes)")
            encoded = encode_dead_letter(letter, self.config.limits)
        self.producer.send(self.config.topics.dead_letters, encoded, key=record.key)
        self.metrics.dead_letters.labels(reason).inc()
        log.warning(
            "dead letter from %s[%d]@%d: %s: %s", record.topic, record.partition, record.offset, reason, detail,
            extra={"topic": record.topic, "partition": record.partition, "offset": record.offset, "reason": reason},
        )  # fmt: skip


def _labelled_event(record: Record, event: LabelledEvent) -> _Labelled:
    return _Labelled(record, event.event_id, event.id, event.labels, event.tokens, False, event.ts_ms)


def _plain_scores(margins: np.ndarray) -> list[Any]:
    """Margins as plain floats rounded to 6 places, infinities capped (the decision schema wants finite numbers)."""
    scores: list[Any] = np.round(np.nan_to_num(margins, nan=0.0, posinf=1e300, neginf=-1e300), 6).tolist()
    return scores
