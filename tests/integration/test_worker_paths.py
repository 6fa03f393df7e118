"""The worker's compiled path (messages to token hashes) and its text path learn and decide identically.

One batch mixes everything a worker meets: plain documents, labelled documents, labelled events
with tokens, events that find their document in the cache, a malformed message. It goes through
``Worker.process`` twice, on two fresh models in a real Redis, once as it is and once with the
compiled pass switched off; weights, versions and decisions must come out the same.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import msgpack
import numpy as np
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.errors import StoreError, TransportError
from stream_winnow.learners.term_weights import DF_TABLE, DOCUMENTS_COUNTER
from stream_winnow.models.named import connect, open_learner
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.stores.cached import CachedStore
from stream_winnow.text.features import FeatureConfig, Featurizer
from workers.config import Topics, WorkerConfig
from workers.embedded import start_redis
from workers.transport import KafkaSettings, Producer, Record, make_consumer, make_producer
from workers.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class _NoCommit:
    """The batches are handed to ``process`` directly; there is no group to commit to."""

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        return None


def _batches(topics: Topics) -> list[list[Record]]:
    docs = synthetic_stream(60, seed=3)
    first = [Record(topics.documents, 0, i, msgpack.packb({"id": d.id, "tokens": list(d.tokens)}))
             for i, d in enumerate(docs[:30])]  # fmt: skip
    second: list[Record] = []
    for i, d in enumerate(docs[:30]):
        if i % 3 == 0:  # the document comes from the cache
            body = {"event_id": f"e{i}", "id": d.id, "labels": list(d.labels)}
        else:
            body = {"event_id": f"e{i}", "id": d.id, "labels": list(d.labels), "tokens": list(d.tokens)}
        second.append(Record(topics.labels, 0, i, msgpack.packb(body)))
        labelled = docs[30 + i]
        second.append(
            Record(
                topics.documents,
                1,
                i,
                msgpack.packb(
                    {"id": labelled.id, "tokens": list(labelled.tokens), "labels": list(labelled.labels), "ts": 7}
                ),
            )
        )
    second.append(Record(topics.labels, 1, 0, b"\xc1 not msgpack"))
    return [first, second]


def _topics(topic_factory: Callable[..., str]) -> Topics:
    return Topics(topic_factory(prefix="docs"), topic_factory(prefix="labels"), topic_factory(prefix="decisions"),
                  topic_factory(partitions=1, prefix="dead"))  # fmt: skip


def _setting(prefix: str, redis_url: str, bootstrap: str, topics: Topics) -> tuple[str, Any, WorkerConfig, Producer]:
    """A fresh model's name, a Redis client, a worker config on ``topics`` and a kafka-python producer."""
    model = f"{prefix}-{uuid.uuid4().hex[:8]}"
    config = WorkerConfig(KafkaSettings(bootstrap), redis_url, model=model, topics=topics)
    return model, connect(redis_url), config, make_producer(config.kafka, "kafka-python")


def _run(
    redis_url: str, bootstrap: str, topics: Topics, compiled: bool, monkeypatch: pytest.MonkeyPatch,
    features: FeatureConfig | None = None,
) -> tuple[int, np.ndarray, dict[str, np.ndarray], dict[str, float]]:
    model, client, config, producer = _setting("paths", redis_url, bootstrap, topics)
    learner = open_learner(client, model, learner="balanced-winnow", features=features)
    worker = Worker(config, _NoCommit(), producer, learner, DocumentCache(client, model))  # type: ignore[arg-type]
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(Featurizer, "reads_hashes", property(lambda self: False))
        for batch in _batches(topics):
            worker.process(batch)
    producer.close()
    store = learner.store
    ids = np.sort(np.concatenate([chunk for chunk, _ in store.iter_rows()]))
    counted = store.counters(DOCUMENTS_COUNTER).get("*", 0.0)
    return store.version, ids, store.read(ids), {**store.counters("updates"), "documents counted": counted}


def test_compiled_and_text_paths_learn_the_same(
    redis_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = _topics(topic_factory)
    fast = _run(redis_url, kafka_bootstrap, topics, True, monkeypatch)
    slow = _run(redis_url, kafka_bootstrap, topics, False, monkeypatch)
    assert fast[0] == slow[0] > 0  # the same number of updates
    np.testing.assert_array_equal(fast[1], slow[1])
    for table in slow[2]:
        np.testing.assert_array_equal(fast[2][table], slow[2][table])
    assert fast[3] == slow[3]
    # Both runs decided every document (30 plain + 30 labelled, twice) and dead-lettered the bad message.
    with make_consumer(KafkaSettings(kafka_bootstrap), "kafka-python") as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topics.decisions, topics.dead_letters], f"check-{uuid.uuid4().hex[:6]}")
        seen: dict[str, int] = {topics.decisions: 0, topics.dead_letters: 0}
        for _ in range(60):
            for record in consumer.poll_batch(1000, 500):
                seen[record.topic] += 1
            if seen[topics.decisions] >= 120 and seen[topics.dead_letters] >= 2:
                break
    assert seen == {topics.decisions: 120, topics.dead_letters: 2}


def test_with_idf_both_paths_weigh_alike_and_count_every_learned_document_once(
    redis_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = _topics(topic_factory)
    idf = FeatureConfig(idf=True)
    fast = _run(redis_url, kafka_bootstrap, topics, True, monkeypatch, idf)
    slow = _run(redis_url, kafka_bootstrap, topics, False, monkeypatch, idf)
    assert fast[0] == slow[0] > 0
    for table in slow[2]:
        np.testing.assert_array_equal(fast[2][table], slow[2][table])
    assert fast[3] == slow[3]
    learned = synthetic_stream(60, seed=3)  # 30 by their labelled events, 30 sent with their labels
    assert fast[3]["documents counted"] == len(learned)
    df = Counter(Featurizer(idf).token_id(t) for d in learned for t in set(d.tokens))
    np.testing.assert_array_equal(fast[1], sorted(df))
    np.testing.assert_array_equal(fast[2][DF_TABLE][:, 0], [float(df[i]) for i in fast[1].tolist()])


def test_warm_up_derives_the_scoring_view_so_the_first_batch_only_gathers(
    redis_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = _topics(topic_factory)
    model, client, config, producer = _setting("warm", redis_url, kafka_bootstrap, topics)
    teacher = Worker(config, _NoCommit(), producer, open_learner(client, model, learner="balanced-winnow"),  # type: ignore[arg-type]
                     DocumentCache(client, model))  # fmt: skip
    for batch in _batches(topics):
        teacher.process(batch)  # a model with rows in Redis
    learner = open_learner(client, model)
    learner.store = CachedStore(learner.store, max_staleness_ms=0)
    derived: list[int] = []  # rows per derivation of the scoring view
    original = learner.scoring_rows

    def counted(values: Mapping[str, np.ndarray]) -> np.ndarray:
        derived.append(len(next(iter(values.values()))))
        return np.asarray(original(values))

    monkeypatch.setattr(learner, "scoring_rows", counted)
    worker = Worker(config, _NoCommit(), producer, learner, DocumentCache(client, model))  # type: ignore[arg-type]
    worker.warm_up()
    stored = learner.store.n_features()
    assert stored > 0 and derived == [learner.store._rows.capacity()]  # every cached row, before any batch
    derived.clear()
    worker.process(_batches(topics)[0])
    producer.close()
    assert all(rows < stored for rows in derived)  # the first batch derived only rows it loaded, if any


def test_a_batch_is_acknowledged_only_once_its_documents_are_cached(
    redis_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    # The model's Redis stays up; the document cache's goes down before the batch and comes back.
    topics = _topics(topic_factory)
    model, client, config, producer = _setting("cached", redis_url, kafka_bootstrap, topics)
    cache_server = start_redis()
    port = cache_server.port
    cache_client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    cache = DocumentCache(cache_client, model)
    worker = Worker(config, _NoCommit(), producer, open_learner(client, model, learner="balanced-winnow"),  # type: ignore[arg-type]
                    cache)  # fmt: skip
    batch = _batches(topics)[0]  # 30 plain documents
    ids = [msgpack.unpackb(record.value)["id"] for record in batch]
    cache_server.stop()
    try:
        delivery = worker.process(batch)  # scored and sent; the cache write fails on the helper thread
        for _ in range(2):  # the decisions are acknowledged, but until the documents are cached: not done
            with pytest.raises(StoreError, match="caching documents"):
                delivery.wait(10_000)
        again = start_redis(port=port)
        try:
            assert delivery.wait(10_000) and delivery.done()  # written again, then acknowledged
            assert set(cache.get_many(ids)) == set(ids)
        finally:
            again.stop()
    finally:
        producer.close()
        cache_client.close()


class _FailsOnSecondPoll(_NoCommit):
    """A consumer whose first poll brings ``first`` and whose next poll fails, as a broker gone mid-batch does."""

    def __init__(self, first: list[Record]) -> None:
        self.polls = [first]

    def poll_batch(self, max_records: int | None = None, timeout_ms: int = 1000) -> list[Record]:
        if self.polls:
            return self.polls.pop()
        raise TransportError("broker gone")


@pytest.mark.parametrize("extension", ["linger", "labels"])
def test_a_failed_poll_while_a_batch_grows_keeps_what_was_already_polled(
    redis_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str], extension: str
) -> None:
    """The consumer's position is past the first poll's records: dropping them would let a later commit skip them."""
    from dataclasses import replace

    topics = _topics(topic_factory)
    model, client, config, producer = _setting("poll", redis_url, kafka_bootstrap, topics)
    if extension == "linger":  # a batch of documents waiting for more
        config = replace(config, batch_linger_ms=200)
        first = [Record(topics.documents, 0, i, msgpack.packb({"id": f"d{i}", "tokens": ["a"]})) for i in range(3)]
    else:  # a full batch of labelled events, growing towards batch_max_labels
        config = replace(config, batch_max_docs=3, batch_max_labels=6)
        first = [Record(topics.labels, 0, i, msgpack.packb({"event_id": f"e{i}", "id": f"d{i}", "labels": []}))
                 for i in range(3)]  # fmt: skip
    consumer = _FailsOnSecondPoll(first)
    worker = Worker(config, consumer, producer, open_learner(client, model, learner="balanced-winnow"),  # type: ignore[arg-type]
                    DocumentCache(client, model))  # fmt: skip
    worker.state.assigned = {(topics.documents, 0), (topics.labels, 0)}
    try:
        assert worker._poll() == first
        assert worker.state.broker_ok
    finally:
        producer.close()


def test_labelled_events_are_counted_once_learned_even_when_the_first_write_fails(
    redis_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learning benchmark and the demo wait on these counters: they must not run ahead of the model."""
    topics = _topics(topic_factory)
    model, client, config, producer = _setting("counted", redis_url, kafka_bootstrap, topics)
    learner = open_learner(client, model, learner="balanced-winnow")
    worker = Worker(config, _NoCommit(), producer, learner, DocumentCache(client, model))  # type: ignore[arg-type]
    docs = synthetic_stream(20, seed=5)
    # Every event names a category its document does not have: the first ones are mistakes at least.
    batch = [Record(topics.labels, 0, i, msgpack.packb({"event_id": f"e{i}", "id": d.id, "labels": ["nowhere"],
                                                        "tokens": list(d.tokens)}))
             for i, d in enumerate(docs)]  # fmt: skip
    registry = worker.metrics.registry

    def counted() -> tuple[float, float, float]:
        mistakes = sum(sample.value for metric in registry.collect() if metric.name == "stream_winnow_mistakes"
                       for sample in metric.samples if sample.name == "stream_winnow_mistakes_total")  # fmt: skip
        return (registry.get_sample_value("stream_winnow_labelled_events_total") or 0.0,
                registry.get_sample_value("stream_winnow_updates_applied_total") or 0.0, mistakes)  # fmt: skip

    original = learner.store.apply_delta
    failures = [StoreError("redis gone mid-write")]

    def fails_once(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return original(*args, **kwargs)

    monkeypatch.setattr(learner.store, "apply_delta", fails_once)
    try:
        with pytest.raises(StoreError):
            worker.process(batch)
        assert counted() == (0.0, 0.0, 0.0)  # nothing was learned, so nothing is counted
        before = learner.store.version
        worker.process(batch)  # the retry
        labelled, updates, mistakes = counted()
        assert labelled == len(batch)  # once, not once per attempt
        assert 0 < updates == learner.store.version - before  # one model version a learned mistake
        assert mistakes >= updates
    finally:
        producer.close()
