"""The worker: consume documents and labelled events, score against Redis, emit decisions, learn from mistakes.

One loop, one batch at a time::

    poll ─► plain documents: one compiled pass from bytes to token hashes (fast_documents);
            the rest decoded one by one (bad → dead-letters) ─► cache the raw documents
         ─► score the plain documents (ONE weight read), encode every decision at once
         ─► labelled docs and events, in order: predict and learn on a local copy of their rows,
            then write what changed as one commutative delta with the partitions' watermarks
         ─► produce decisions ─► checkpoint ─► commit the offsets of earlier batches the broker
            has acknowledged (``workers/transport/in_flight.py``) ─► poll the next

Offsets are committed only after the broker acknowledged every decision and
dead letter of the batch, every update was applied and its documents were
cached (the cache write runs on a helper thread, finished by the batch's
``Delivery`` or by the first event that reads the cache); the loop does not wait
for that acknowledgement before taking the next batch (``max_batches_in_flight``,
4), so a crash repeats the last five batches (and any whose asynchronous commit
was still on its way): at-least-once decisions, exactly-once updates (by offset
watermarks, ``workers/ledger.py``; resends of an ``event_id`` within a window are dropped too).
A labelled document's event id is ``doc:<id>``.

When Redis or the broker fails, the worker logs it, backs off (doubling, capped)
and retries the same batch; it never advances offsets past unfinished work.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from functools import partial
from types import FrameType
from typing import Any

import msgpack
import numpy as np

from stream_winnow.errors import CodecError, ServiceUnavailable, StoreError, TransportError
from stream_winnow.learners import compiled
from stream_winnow.learners.base import Learner
from stream_winnow.learners.mistake_driven import MistakeDriven
from stream_winnow.learners.registry import describe, from_metadata, without_domain
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.shared.learning_peers import STALENESS_EVENTS, LearningPeers, round_events
from stream_winnow.shared.outcomes import push_outcomes
from stream_winnow.stores.base import RowUpdate, StaleWatermark, Update
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.delta import RowDelta, delta_between, fold_updates, shared, sum_counters
from stream_winnow.stores.memory import MemoryStore
from stream_winnow.text.features import FeatureBatch, Featurizer, gather_rows
from stream_winnow.wire.codec import (
    DeadLetter,
    Decision,
    DocumentMessage,
    LabelledEvent,
    decode_document,
    decode_labelled_event,
    encode_dead_letter,
    encode_decision,
    encode_decisions,
)
from stream_winnow.wire.fast_documents import ParsedDocuments, parse_documents
from stream_winnow.wire.top_scores import reported_scores
from workers.config import WorkerConfig
from workers.ledger import OffsetLedger, event_hash, source_of
from workers.metrics import WorkerMetrics
from workers.transport import Consumer, Delivery, Producer, Record
from workers.transport.in_flight import InFlight

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


# A learning item's tokens; None: they are hashes from the compiled pass (``_Labelled.hashed``).
Tokens = tuple[str, ...] | None
# A write refused as stale is redone from fresh watermarks; more than this in a row means a partition
# is being written by two workers at once (a zombie that lost its group membership), so give up the batch.
_STALE_RETRIES = 3


class _CacheWrite:
    """One batch's documents on their way to the cache, written by the worker's helper thread."""

    __slots__ = ("cache", "documents", "future", "stored")

    def __init__(self, cache: DocumentCache, documents: dict[str, bytes], future: Future[None]) -> None:
        self.cache, self.documents, self.future = cache, documents, future
        self.stored = False

    @property
    def settled(self) -> bool:
        """Finished, or written by the helper thread without an error (nothing left to do)."""
        return self.stored or (self.future.done() and self.future.exception() is None)

    def finish(self, timeout_s: float | None = None) -> None:
        """Wait for the write (``concurrent.futures.TimeoutError`` after ``timeout_s``); one that
        failed is written again here, and raises the cache's ``StoreError`` if it fails again."""
        if self.stored:
            return
        try:
            self.future.result(timeout_s)
        except StoreError:
            self.cache.put_many(self.documents)
        self.stored = True


class _AfterCaching(Delivery):
    """A batch's sends, acknowledged only once its documents are in the cache too.

    A failed cache write is written again when this is asked (the batch's decisions stand), and
    while Redis refuses, its ``StoreError`` keeps the batch uncommitted: the loop backs off and asks again.
    """

    def __init__(self, sends: Delivery, write: _CacheWrite) -> None:
        self.sends, self.write = sends, write

    def done(self) -> bool:
        acknowledged = self.sends.done()
        if not self.write.future.done():
            return False
        self.write.finish()
        return acknowledged

    def wait(self, timeout_ms: int = 30_000) -> bool:
        started = time.monotonic()
        try:
            self.write.finish(timeout_ms / 1000)
        except FutureTimeout:
            return False
        return self.sends.wait(max(0, timeout_ms - int((time.monotonic() - started) * 1000)))


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
    # Tokens as hashes from the compiled pass instead: (that pass's result, message position in it).
    hashed: tuple[ParsedDocuments, int] | None = None


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
        # The first report waits a period too: with kafka-python it asks the broker, which must not
        # hold up the first batches.
        self._lag_reported = time.monotonic()
        self._cache_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="document-cache")
        # The batches' cache writes not known to be finished, oldest first (``_cached`` finishes them).
        self._writes: deque[_CacheWrite] = deque()
        # The model's settings, to build the batch-local learner like the shared one.
        self._learner_spec = without_domain(describe(learner))  # scratch copies take self.learner's featurizer
        self.ledger = OffsetLedger(learner.store)
        self.peers = LearningPeers(cache.client, config.model, config.worker_id)
        # A failed batch is processed again as it was: its learning is skipped by event id.
        self.in_flight = InFlight(
            consumer,
            config.max_batches_in_flight,
            redo=self.process,
            commit_interval_ms=config.commit_interval_ms,
            on_commit=lambda asynchronous: self.metrics.commits.labels("async" if asynchronous else "sync").inc(),
        )

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

    def warm_up(self) -> float:
        """Fill the weight cache and run every compiled path once on a throwaway copy of the model.

        Loading numba's cached machine code takes about 0.2 s per function on first use, and a cold
        cache makes the first batches read every row; done before joining the group, the first
        documents are not held up by either (they were: a 0.4 s latency tail). Returns the seconds.
        """
        started = time.perf_counter()
        learner = self.learner
        if isinstance(learner.store, CachedStore):
            log.info("prefetched %d weight rows into the worker's cache", learner.store.prefetch())
            if isinstance(learner, MistakeDriven):
                learner.store.keep_view(learner.scoring_rows)
        if not isinstance(learner, MistakeDriven) or not learner.featurizer.reads_hashes:
            return time.perf_counter() - started
        names = ("warm-up-a", "warm-up-b")
        store = MemoryStore(learner.table_specs(), rows=4, categories=len(names))
        store.ensure_categories(names)
        local = from_metadata(self._learner_spec, store=store)
        assert isinstance(local, MistakeDriven)
        local.set_d(1.0)
        sample = msgpack.packb({"id": "warm-up", "tokens": ["warm", "up", "warm"], "ts": 0})
        parsed = parse_documents([sample], self.config.limits)
        batch = Featurizer(learner.featurizer.config).transform_hashed(parsed)
        margins = local.margins_many(batch)
        decided, scores = local.decide_many(margins, names), _finite_rounded(margins)
        for top in (None, 1):  # every score, and the highest few (--decision-scores below the categories)
            encode_decisions(["warm-up"], decided, scores, names, 0, top=top)
        if compiled.supports(local):
            stream = compiled.prepare(local, batch, [("warm-up-a",)])
            compiled.run(local, stream, record_margins=True, actions=np.zeros((1, len(names)), dtype=np.int8))
        return time.perf_counter() - started

    def run(self) -> None:
        log.info("warmed up the compiled paths in %.2f s", self.warm_up())
        # Everything alive now (modules, the model's caches, compiled code) lives as long as the
        # process: keep it out of the collector's full passes, which otherwise stopped the loop
        # for up to 44 ms at 15,000 documents/s (a gc callback's trace of the latency benchmark).
        gc.collect()
        gc.freeze()
        topics = [self.config.topics.documents, self.config.topics.labels]
        # Counted before joining, so that workers started together learn their first batches as peers.
        self._retrying([], self.peers.count)
        self.consumer.subscribe(topics, self.config.group_id, on_assign=self._on_assign, on_revoke=self._on_revoke)
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
                    self._retrying(records, partial(self._take, records))
                if not self.in_flight.settled:
                    # When the topics are quiet, wait for the broker and commit everything.
                    self._retrying(records, partial(self.in_flight.settle, wait=not records))
        finally:
            self._close()

    def _take(self, records: list[Record]) -> None:
        self.in_flight.add(records, self.process(records))

    def _on_assign(self, partitions: set[tuple[str, int]]) -> None:
        self.state.assigned |= partitions
        log.info("assigned %s", sorted(partitions))

    def _on_revoke(self, partitions: set[tuple[str, int]]) -> None:
        self.state.assigned -= partitions
        log.info("revoked %s", sorted(partitions))
        self._settle_all("partitions revoked")
        self.in_flight.forget(partitions)
        self.ledger.forget(f"{topic}:{partition}" for topic, partition in partitions)

    def _settle_all(self, why: str) -> None:
        """Wait for every batch in flight and commit it; what cannot be is read again by the next owner."""
        try:
            self.in_flight.settle(wait=True)
        except ServiceUnavailable as error:
            log.warning("%s with %d batch(es) not committed (%s); they will be read again", why,
                        len(self.in_flight), error)  # fmt: skip

    def _close(self) -> None:
        self._settle_all("stopping")
        self.peers.leave()
        self._cache_writer.shutdown(wait=True)
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
        return self._more_labels(self._linger(records))

    def _linger(self, records: list[Record]) -> list[Record]:
        """Keep polling for up to ``batch_linger_ms`` after a batch's first records, until it holds ``batch_max_docs``.

        Below saturation a batch is whatever one fetch brought (~190 documents at 18,700 a second
        behind a producer lingering 10 ms), and a small batch costs more a document than a large
        one. Larger batches trade that for latency: see ``WorkerConfig.batch_linger_ms``.
        """
        cap = self.config.batch_max_docs
        if not self.config.batch_linger_ms or not records or len(records) >= cap:
            return records
        return self._grow(records, cap, self.config.batch_linger_ms / 1000, step=cap)

    def _more_labels(self, records: list[Record]) -> list[Record]:
        """A full batch of labelled events only: add what else is already fetched, up to ``batch_max_labels``.

        Learning writes each changed row once a batch, so a backlog of labels is learned faster in
        larger batches; documents keep ``batch_max_docs`` (their latency).
        """
        labels, cap = self.config.topics.labels, self.config.batch_max_labels
        if len(records) < self.config.batch_max_docs or len(records) >= cap:
            return records
        if any(record.topic != labels for record in records):
            return records
        return self._grow(records, cap, 0, step=self.config.batch_max_docs,
                          more_wanted=lambda more: all(record.topic == labels for record in more))  # fmt: skip

    def _grow(
        self, records: list[Record], cap: int, wait_s: float, *, step: int,
        more_wanted: Callable[[list[Record]], bool] | None = None,
    ) -> list[Record]:  # fmt: skip
        """``records``, already polled, with more polled up to ``cap``, ``step`` at most a poll.

        Each poll waits for what is left of ``wait_s`` (0: takes only what is already fetched); it
        stops at a poll that brings nothing or one that ``more_wanted`` declines (that one is kept).
        A failed poll stops it too, keeping what was polled: the consumer's position is past those
        records, and dropping them would let a later batch's commit skip them. A rebalance meanwhile
        drops the records of partitions no longer ours (their next owner reads them).
        """
        assigned = set(self.state.assigned)
        deadline = time.monotonic() + wait_s
        while len(records) < cap:
            left_s = deadline - time.monotonic()
            if wait_s and left_s <= 0:
                break
            try:
                more = self.consumer.poll_batch(
                    min(step, cap - len(records)), max(1, round(left_s * 1000)) if wait_s else 0
                )
            except TransportError as error:
                log.warning("polling the broker for more of a batch failed: %s; processing the batch so far", error)
                break
            records += more
            if not more or (more_wanted is not None and not more_wanted(more)):
                break
        if self.state.assigned != assigned:
            records = [record for record in records if (record.topic, record.partition) in self.state.assigned]
        return records

    def _retrying(self, records: list[Record], step: Callable[[], object]) -> None:
        """Run ``step`` (process ``records``, or settle the batches in flight) until it succeeds or the worker stops."""
        delay_ms = self.config.retry_initial_ms
        while True:
            try:
                step()
                self.state.broker_ok = True
                return
            except ServiceUnavailable as error:
                service = "redis" if isinstance(error, StoreError) else "broker"
                if service == "redis":
                    self.state.redis_ok = False
                else:
                    self.state.broker_ok = False
                self.metrics.retries.labels(service).inc()
                first = records[0] if records else None
                where = f"from {first.topic}[{first.partition}]@{first.offset}" if first else "in flight"
                log.warning(
                    "%s unavailable (%s); batch of %d %s not committed, retrying in %d ms",
                    service, error, len(records), where, delay_ms,
                    extra={"topic": first.topic, "partition": first.partition, "offset": first.offset} if first else {},
                )  # fmt: skip
                if self._stop.wait(delay_ms / 1000):
                    log.info("stopping with the batch unfinished; it will be redelivered")
                    return
                delay_ms = min(delay_ms * 2, self.config.retry_max_ms)

    # -- one batch ------------------------------------------------------------------------------------
    def process(self, records: Sequence[Record]) -> Delivery:
        """Decide, learn and produce one batch; returns its sends, to commit once acknowledged.

        Raises ServiceUnavailable to have it retried (its updates are applied once by event id).
        """
        started = time.perf_counter()
        topics = self.config.topics
        limits = self.config.limits
        # Plain documents and events in one compiled pass per topic; the rest (declined: broken, or
        # unusual) through decode_document / decode_labelled_event, which name what is wrong.
        hashes = self.learner.featurizer.reads_hashes
        learns_hashed = hashes and isinstance(self.learner, MistakeDriven)
        parsed_documents = parsed_events = None
        documents = [record.value for record in records if record.topic == topics.documents]
        # The weights' write counters come while the batch is parsed (a linear rule scores through
        # read_view_rows, which takes them).
        store = self.learner.store
        ahead = (
            store if documents and isinstance(store, CachedStore) and isinstance(self.learner, MistakeDriven) else None
        )
        if ahead is not None:
            ahead.read_ahead()
        if documents and hashes:
            parsed_documents = parse_documents(documents, limits)
        events = [record.value for record in records if record.topic == topics.labels]
        if events and learns_hashed:
            parsed_events = parse_documents(events, limits, events=True)
        document_ok = parsed_documents.ok.tolist() if parsed_documents is not None else [False] * len(documents)
        event_ok = parsed_events.ok.tolist() if parsed_events is not None else [False] * len(events)
        # Accepted documents without labels, most of a stream, are scored at once and cached as they
        # came; the loop below skips them, and a batch of nothing else skips it (0.5 µs a document).
        plain = np.zeros(len(documents), dtype=bool)
        to_cache: dict[str, bytes] = {}
        if parsed_documents is not None:
            plain = parsed_documents.ok & np.fromiter(
                (labels is None for labels in parsed_documents.labels), dtype=bool, count=len(documents)
            )
            ids = parsed_documents.ids
            to_cache = {ids[i]: documents[i] for i in np.flatnonzero(plain).tolist()}  # type: ignore[misc]
        is_plain = plain.tolist()
        unlabelled: list[DocumentMessage] = []
        labelled: list[_Labelled] = []
        at_document = at_event = -1  # the record's position among the batch's documents / events
        for record in () if len(to_cache) == len(records) else records:
            try:
                if record.topic == topics.documents:
                    at_document += 1
                    if is_plain[at_document]:
                        continue
                    if document_ok[at_document]:  # accepted, with labels
                        assert parsed_documents is not None
                        document_id = parsed_documents.ids[at_document]
                        doc_labels = parsed_documents.labels[at_document]
                        assert document_id is not None and doc_labels is not None
                        to_cache[document_id] = record.value
                        if learns_hashed:
                            labelled.append(
                                _Labelled(record, f"doc:{document_id}", document_id, doc_labels, None, True,
                                          parsed_documents.ts_ms[at_document], (parsed_documents, at_document))
                            )  # fmt: skip
                            continue
                    document = decode_document(record.value, limits)
                    to_cache[document.id] = record.value
                    if document.labels is None:
                        unlabelled.append(document)
                    else:
                        labelled.append(
                            _Labelled(record, f"doc:{document.id}", document.id, document.labels,
                                      document.tokens, True, document.ts_ms)
                        )  # fmt: skip
                elif record.topic == topics.labels:
                    at_event += 1
                    if event_ok[at_event]:
                        assert parsed_events is not None
                        event_id, document_id = parsed_events.event_ids[at_event], parsed_events.ids[at_event]
                        event_labels = parsed_events.labels[at_event]
                        assert event_id is not None and document_id is not None and event_labels is not None
                        with_tokens = bool(parsed_events.has_tokens[at_event])
                        labelled.append(
                            _Labelled(record, event_id, document_id, event_labels, None, False,
                                      parsed_events.ts_ms[at_event],
                                      (parsed_events, at_event) if with_tokens else None)
                        )  # fmt: skip
                        continue
                    event = decode_labelled_event(record.value, limits)
                    labelled.append(_labelled_event(record, event))
                else:
                    self._dead_letter(record, "unknown-topic", f"the worker does not read topic {record.topic!r}")
            except CodecError as error:
                self._dead_letter(record, error.code, error.detail)
        # The documents go to the cache from a helper thread while the batch is scored and the next
        # ones are taken (most of a write is waiting for Redis); the write is finished before any
        # event reads the cache and before the batch's offsets are committed (its Delivery waits for it).
        write = self._cache(to_cache)
        if parsed_documents is not None and plain.any():
            featurizer = self.learner.featurizer
            chosen = np.flatnonzero(plain).tolist()
            ids = [parsed_documents.ids[i] for i in chosen]
            ts = [parsed_documents.ts_ms[i] for i in chosen]
            self._decide(featurizer.transform_hashed(parsed_documents, plain), ids, ts)  # type: ignore[arg-type]
        if unlabelled:
            batch = self.learner.featurizer.transform_many([document.tokens for document in unlabelled])
            self._decide(batch, [d.id for d in unlabelled], [d.ts_ms for d in unlabelled])
        if ahead is not None:
            ahead.drop_read_ahead()  # nothing was scored after all (every document labelled, or declined)
        self._learn(labelled)
        self.state.redis_ok = True
        self.metrics.batch_seconds.observe(time.perf_counter() - started)
        self.metrics.batch_size.observe(len(records))
        sends = self.producer.checkpoint()
        return sends if write is None else _AfterCaching(sends, write)

    def _cache(self, documents: dict[str, bytes]) -> _CacheWrite | None:
        """Start writing a batch's documents to the cache on the helper thread (None: nothing to write).

        The batch does not wait for it, and a write that fails does not fail the batch: before, it
        did, and the batch was scored and its decisions sent again on every retry while that Redis
        refused. ``_cached`` and the batch's ``Delivery`` finish it (a batch of 2,000 Reuters
        documents is a 2 MB write; the speed of either way was within the machine's noise).
        """
        while self._writes and self._writes[0].settled:
            self._writes.popleft()
        if not documents:
            return None
        write = _CacheWrite(self.cache, documents, self._cache_writer.submit(self.cache.put_many, documents))
        self._writes.append(write)
        return write

    def _cached(self) -> None:
        """Wait until every batch's documents so far are in the cache (raises the cache's StoreError)."""
        while self._writes:
            self._writes[0].finish()
            self._writes.popleft()

    def _decide(self, batch: FeatureBatch, ids: Sequence[str], ts_ms: Sequence[int | None]) -> None:
        """Score a batch of unlabelled documents with ONE weight read and produce their decisions."""
        learner = self.learner
        started = time.perf_counter()
        margins = learner.margins_many(learner.weigh(batch))
        store = learner.store
        if isinstance(store, CachedStore) and store.last_version is not None:
            version, names = store.last_version, store.known_categories()  # read with the rows
            self.metrics.staleness.set(store.last_staleness_s)
        else:
            version, names = store.version, store.categories()
        names = names[: margins.shape[1]]  # categories only grow: any added since the read are not scored
        self.metrics.redis_seconds.observe(time.perf_counter() - started)
        self.metrics.model_version.set(version)
        encoded = encode_decisions(
            ids, learner.decide_many(margins, names), _finite_rounded(margins), names, version,
            self.config.model, self.config.worker_id, ts_ms, now_ms(), top=self.config.decision_scores,
        )  # fmt: skip
        self.producer.send_many(self.config.topics.decisions, encoded, [document_id.encode() for document_id in ids])
        self.metrics.decisions.inc(len(ids))
        self.metrics.documents.inc(len(ids))

    def _learn(self, items: list[_Labelled]) -> None:
        """Learn from labelled documents and events in order; each is applied once (by event id)."""
        if not items:
            return
        store = self.learner.store
        missing = [item.document_id for item in items if item.tokens is None and item.hashed is None]
        if missing:
            self._cached()  # a label may refer to a document earlier in this very batch
        cached = self.cache.get_many(missing) if missing else {}
        resolved: list[tuple[_Labelled, Tokens]] = []
        for item in items:
            if item.hashed is not None:
                resolved.append((item, None))
                continue
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
        resolved = self._within_category_limit(resolved)
        if not resolved:
            return
        store.ensure_categories(sorted({label for item, _ in resolved for label in item.labels}))
        try:
            self._learn_exactly_once(resolved)
        except BaseException:
            self.ledger.forget()  # a write may or may not have landed: read the watermarks again
            raise
        # Counted once learned, so a batch retried after a failure counts once, and whoever waits
        # for this counter (the benchmark's learning phase, the demo) finds the model written.
        self.metrics.labelled.inc(len(resolved))

    def _within_category_limit(self, resolved: list[tuple[_Labelled, Tokens]]) -> list[tuple[_Labelled, Tokens]]:
        """``resolved`` without the events whose new categories would take the model past
        ``max_categories``; those go to the dead letters as ``too-many-categories``.

        Checked against the categories this worker knows, in event order; workers that add
        categories at the same moment may together pass the limit by what their batches bring.
        """
        limit = self.config.max_categories
        known = set(self.learner.store.categories())
        kept, undecided = [], []
        for item, tokens in resolved:
            new = [label for label in dict.fromkeys(item.labels) if label not in known]
            if new and len(known) + len(new) > limit:
                shown = ", ".join(repr(label) for label in new[:3]) + (" ..." if len(new) > 3 else "")
                self._dead_letter(item.record, "too-many-categories",
                                  f"labelled event {item.event_id!r} names {len(new)} new categories ({shown}); the "
                                  f"model has {len(known)} of at most {limit} (--max-categories)"
                                  + ("; the document was decided, its labels not learned" if item.decide else ""))  # fmt: skip
                undecided.append((item, tokens))
                continue
            known.update(new)
            kept.append((item, tokens))
        self._decide_unlearned(undecided)
        return kept

    def _decide_unlearned(self, items: list[tuple[_Labelled, Tokens]]) -> None:
        """Decide labelled documents that will not be learned here (a labelled document is decided where
        it is learned): over the category limit, or already applied (a redelivery after a crash that
        came between the write and the decisions' delivery) or resent."""
        items = [(item, tokens) for item, tokens in items if item.decide]
        if items:
            self._decide(self._features(items), [item.document_id for item, _ in items],
                         [item.ts_ms for item, _ in items])  # fmt: skip

    def _learn_exactly_once(self, resolved: list[tuple[_Labelled, Tokens]]) -> None:
        """Learn what the store's watermarks say is still to be learned (``workers.ledger``), and write it.

        Records every part applied are skipped; records some parts applied (a Cluster write cut short)
        are learned one by one for the parts behind; the rest is learned as one batch. A write refused
        as stale (the partition moved to another worker and back) is redone from fresh watermarks.
        """
        decided: set[int] = set()
        for attempt in range(_STALE_RETRIES):
            split = self.ledger.split([item.record for item, _ in resolved], [item.event_id for item, _ in resolved])
            self.metrics.duplicates.inc(len(split.done) + len(split.duplicates))
            skipped = [i for i in (*split.done, *split.duplicates) if i not in decided]
            decided.update(skipped)
            self._decide_unlearned([resolved[i] for i in skipped])
            try:
                for i, parts in split.partial:
                    self.metrics.partial_redeliveries.inc()
                    self._learn_and_write([resolved[i]], parts)
                self._learn_in_rounds([resolved[i] for i in split.fresh])
                return
            except StaleWatermark as stale:
                if stale.found < stale.expected:
                    self._rolled_back(stale)
                else:
                    self.metrics.stale_watermarks.inc()
                    log.warning("learning write refused (%s); reading the watermarks again", stale)
                self.ledger.forget([stale.source])
                if attempt == _STALE_RETRIES - 1:
                    raise

    def _rolled_back(self, stale: StaleWatermark) -> None:
        """A watermark behind what this worker wrote: Redis lost acknowledged writes. Say which records, start afresh.

        The records after the stored watermark up to the one this worker last wrote were applied and
        committed, and the model no longer holds them; the batch goes on from the stored state.
        """
        self.metrics.watermark_rollbacks.inc()
        log.error(
            "Redis lost applied learning: the watermark of %s (part %d) is %d, this worker wrote %d; records "
            "%d..%d of %s are no longer in the model (Redis restarted without its last writes, or failed over "
            "to a replica behind); send them again to learn them",
            stale.source, stale.part, stale.found, stale.expected, stale.found + 1, stale.expected, stale.source,
            extra={"source": stale.source, "lost_from": stale.found + 1, "lost_to": stale.expected},
        )  # fmt: skip
        if isinstance(self.learner.store, CachedStore):
            self.learner.store.forget_rows()

    def _learn_in_rounds(self, items: list[tuple[_Labelled, Tokens]]) -> None:
        """Learn ``items`` in order: in one round alone, in rounds with peers (``stream_winnow.shared.learning_peers``).

        Each round reads its rows afresh and writes its delta with its records' watermarks, so a crash
        between rounds leaves the later ones to be learned on redelivery, and the earlier ones skipped.
        """
        if not items:
            return
        peers = self.peers.count()
        self.metrics.learning_peers.set(peers)
        if not isinstance(self.learner, MistakeDriven):  # Naive Bayes adds counts whatever the model holds
            self.metrics.learning_rounds.inc()
            self._learn_and_write(items, None)
            return
        mixing = self.config.peer_mixing
        staleness = self.config.learn_staleness_events or STALENESS_EVENTS[mixing]
        size = round_events(len(items), peers, staleness)
        share = 1.0 / peers if mixing == "average" else 1.0
        for start in range(0, len(items), size):
            self.metrics.learning_rounds.inc()
            self._learn_and_write(items[start : start + size], None, share)

    def _learn_and_write(
        self, items: list[tuple[_Labelled, Tokens]], parts: list[int] | None, share: float = 1.0
    ) -> None:
        """Learn ``items`` in order into one delta and write it with their partitions' watermarks.

        ``parts``: write only these (a partial redelivery's parts still behind); None: every part.
        ``share``: of the learned weights' change to write (``stores.delta.shared``; 1/peers averaged).
        """
        if not items:
            return
        store = self.learner.store
        if isinstance(self.learner, MistakeDriven):
            delta, wrongs = self._learn_batched(self.learner, items)
            delta = shared(delta, self.learner.table_specs(), share)
        else:
            delta, wrongs = self._learn_one_by_one(items)
        records = [item.record for item, _ in items]
        ranges = self.ledger.ranges(records)
        seen: dict[str, list[int]] = {}
        for item, _ in items:
            seen.setdefault(source_of(item.record), []).append(event_hash(item.event_id))
        started = time.perf_counter()
        store.apply_delta(delta, ranges, {s: np.array(h, dtype=np.uint64) for s, h in seen.items()}, parts)
        self.metrics.redis_seconds.observe(time.perf_counter() - started)
        self.ledger.advanced(ranges, parts, seen)
        push_outcomes(self.cache.client, self.config.model,
                      [(item.labels, wrong) for (item, _), wrong in zip(items, wrongs, strict=True)])  # fmt: skip
        learned = [wrong for wrong in wrongs if wrong]
        self.metrics.updates.inc(len(learned))
        # Once a category a batch (a labels() lookup per event and category cost 15 ms a batch of 4,000).
        for category, count in Counter(category for wrong in learned for category in wrong).items():
            self.metrics.mistakes.labels(category).inc(count)

    def _learn_batched(
        self, learner: MistakeDriven, items: list[tuple[_Labelled, Tokens]]
    ) -> tuple[RowDelta, list[tuple[str, ...]]]:
        """One read of every feature of the batch, learning in order on a local copy; the change as a delta.

        The local copy sees each update before the next item is scored, so a single worker decides
        and learns exactly as the in-process learner would. What the batch changed goes to Redis as
        one factor (Winnow) or addend (Perceptron) per changed value, which commutes with any other
        worker's: their deltas to the same rows both land, in either order.
        """
        store = learner.store
        batch = self._features(items)
        unique = batch.distinct_ids()[0]
        started = time.perf_counter()
        snapshot = store.read_for_update(unique)
        batch = learner.weigh(batch, snapshot.values)  # by the counts before the batch, from the rows just read
        version = store.version
        self.metrics.redis_seconds.observe(time.perf_counter() - started)
        names = store.categories()  # after the rows: at least as many categories as they have
        specs = learner.table_specs()
        local_store = MemoryStore(specs, rows=len(unique) + 1, categories=len(names))
        local_store.ensure_categories(names)
        local_store.load_rows(unique, snapshot.values)
        before = local_store.read(unique)  # every row at the batch's width (columns added since: initial)
        local = from_metadata(self._learner_spec, store=local_store)
        assert isinstance(local, MistakeDriven)
        local.featurizer = learner.featurizer
        if learner.d is None and len(batch):  # a new model: d from its first document, as fix_d does
            learner.set_d(max(batch.vector(0).total_strength, 1e-9))
        if learner.d is not None:
            local.set_d(learner.d)
        if compiled.supports(local):
            wrongs = self._learn_compiled(local, batch, items, names, version)
        else:
            wrongs = self._learn_in_python(local, batch, items, names, version)
        counters: dict[str, dict[str, float]] = {}
        for wrong in wrongs:
            if wrong:
                sum_counters(local.bookkeeping(wrong), counters)  # type: ignore[arg-type]
        counting = local.counting(batch)  # every document of the batch, mistaken or not
        for update in counting:
            if isinstance(update, RowUpdate):
                local_store.apply([update])
            else:
                sum_counters([update], counters)
        values = delta_between(before, local_store.read(unique), specs)
        # Counting changes the model too: with idf every document moves the version, as in process.
        changed = len(items) if counting else sum(1 for wrong in wrongs if wrong)
        return RowDelta(unique, values, counters, changed), wrongs

    def _features(self, items: list[tuple[_Labelled, Tokens]]) -> FeatureBatch:
        """The items' features in order, from token hashes (compiled pass) or token texts alike."""
        featurizer = self.learner.featurizer
        texts = [tokens for item, tokens in items if item.hashed is None]
        if len(texts) == len(items):
            return featurizer.transform_many(texts)  # type: ignore[arg-type]
        hashed = [item.hashed for item, _ in items if item.hashed is not None]
        if len(hashed) == len(items):  # the usual batch: events of one parsed batch, in order (6 µs an item saved)
            parsed = hashed[0][0]
            positions = [position for of, position in hashed if of is parsed]
            if len(positions) == len(items) and all(a < b for a, b in zip(positions, positions[1:], strict=False)):
                mask = np.zeros(len(parsed.ok), dtype=bool)
                mask[positions] = True
                return featurizer.transform_hashed(parsed, mask)
        parts: list[FeatureBatch] = []
        picks: list[tuple[int, int]] = []
        row_of: dict[tuple[int, int], tuple[int, int]] = {}  # (id of a parsed batch, position) -> pick
        selected: dict[int, tuple[ParsedDocuments, np.ndarray]] = {}
        for item, _ in items:
            if item.hashed is not None:
                parsed, position = item.hashed
                mask = selected.setdefault(id(parsed), (parsed, np.zeros(len(parsed.ok), dtype=bool)))[1]
                mask[position] = True
        for parsed, mask in selected.values():
            for row, position in enumerate(np.flatnonzero(mask).tolist()):
                row_of[(id(parsed), position)] = (len(parts), row)
            parts.append(featurizer.transform_hashed(parsed, mask))
        text_part = len(parts)
        if texts:
            parts.append(featurizer.transform_many(texts))  # type: ignore[arg-type]
        text_row = 0
        for item, _ in items:
            if item.hashed is not None:
                picks.append(row_of[(id(item.hashed[0]), item.hashed[1])])
            else:
                picks.append((text_part, text_row))
                text_row += 1
        if len(parts) == 1 and all(row == i for i, (_, row) in enumerate(picks)):
            return parts[0]
        return gather_rows(parts, picks)

    def _learn_compiled(
        self,
        local: MistakeDriven,
        batch: FeatureBatch,
        items: list[tuple[_Labelled, Tokens]],
        names: Sequence[str],
        version: int,
    ) -> list[tuple[str, ...]]:
        """The batch through the compiled loop: each item's mistaken categories."""
        stream = compiled.prepare(local, batch, [item.labels for item, _ in items])
        actions = np.zeros((len(items), len(names)), dtype=np.int8)
        _, margins = compiled.run(local, stream, record_margins=True, actions=actions)
        wrongs: list[tuple[str, ...]] = []
        mistakes_before = 0
        rows, columns = np.nonzero(actions)
        per_item = np.bincount(rows, minlength=len(items)).tolist()
        signs = actions[rows, columns].tolist()
        column_list = columns.tolist()
        at = 0
        for i, (item, _) in enumerate(items):
            if item.decide:
                row = margins[i]
                self._send_decision(item.document_id, local.decide(row, names), names, _plain_scores(row),
                                    version + mistakes_before, item.ts_ms)  # fmt: skip
                self.metrics.documents.inc()
            count = per_item[i]
            # Promoted categories first, then demoted, as the reference path reports them.
            mine = list(zip(signs[at : at + count], column_list[at : at + count], strict=True))
            at += count
            wrong = tuple(names[c] for sign, c in mine if sign > 0) + tuple(names[c] for sign, c in mine if sign < 0)
            if wrong:
                mistakes_before += 1
            wrongs.append(wrong)

        return wrongs

    def _learn_in_python(
        self,
        local: MistakeDriven,
        batch: FeatureBatch,
        items: list[tuple[_Labelled, Tokens]],
        names: Sequence[str],
        version: int,
    ) -> list[tuple[str, ...]]:
        """The reference path, one item at a time (rules the compiled loop does not know)."""
        local_store = local.store
        wrongs: list[tuple[str, ...]] = []
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
            wrongs.append(outcome.promoted + outcome.demoted)
        return wrongs

    def _learn_one_by_one(self, items: list[tuple[_Labelled, Tokens]]) -> tuple[RowDelta, list[tuple[str, ...]]]:
        """Naive Bayes (its scores need model-wide counts): predict each item against the store, fold the counts.

        Every labelled item adds its counts, whatever the prediction, so the delta is a sum the order
        of the batch does not change.
        """
        learner = self.learner
        store = learner.store
        events: list[list[Update]] = []
        wrongs: list[tuple[str, ...]] = []
        for item, tokens in items:
            assert tokens is not None, "only the mistake-driven rules learn from token hashes"
            vector = learner.transform(tokens)
            margins = learner.margins(vector)
            if item.decide:
                version = store.version
                names = store.categories()
                self._send_decision(
                    item.document_id, learner.decide(margins, names), names, _plain_scores(margins), version, item.ts_ms
                )
                self.metrics.documents.inc()
            updates, outcome = learner.updates_for(vector, item.labels, margins)
            events.append(list(updates))
            wrongs.append(outcome.promoted + outcome.demoted)
        delta = fold_updates(events, list(store.tables.values()), len(store.categories()))
        return delta, wrongs

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
        scores = reported_scores(names, margins, categories, self.config.decision_scores)
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


def _finite_rounded(margins: np.ndarray) -> np.ndarray:
    """Margins rounded to 6 places, infinities capped (the decision schema wants finite numbers)."""
    return np.round(np.nan_to_num(margins, nan=0.0, posinf=1e300, neginf=-1e300), 6)


def _plain_scores(margins: np.ndarray) -> list[Any]:
    """``_finite_rounded`` as plain floats."""
    scores: list[Any] = _finite_rounded(margins).tolist()
    return scores
