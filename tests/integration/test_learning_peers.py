"""Workers sharing a model learn in rounds: their heartbeats in Redis, and what the rounds buy."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from stream_winnow.documents import LabelledDocument
from stream_winnow.evaluation.metrics import classification_report, label_matrix
from stream_winnow.learners import build_learner
from stream_winnow.models.named import connect, open_learner
from stream_winnow.shared.learning_peers import LearningPeers
from tests.integration.test_worker import Service, http_get, metric, reuters_docs, service  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

TRAIN, HELD_OUT = 600, 200


def test_peers_count_each_other_and_drop_the_silent_ones(redis_db: Any) -> None:
    a, b = LearningPeers(redis_db, "m", "a", ttl_s=30.0), LearningPeers(redis_db, "m", "b", ttl_s=30.0)
    other_model = LearningPeers(redis_db, "n", "c", ttl_s=30.0)
    assert a.count(now_s=1000.0) == 1
    assert b.count(now_s=1010.0) == 2
    assert other_model.count(now_s=1010.0) == 1
    assert b.count(now_s=1035.0) == 1  # a's last beat is 35 s old
    b.leave()
    assert a.count(now_s=1036.0) == 1


def _micro_f1(predict: Callable[[LabelledDocument], tuple[str, ...]], docs: list[LabelledDocument]) -> float:
    categories = sorted({label for d in docs for label in d.labels})
    truth = label_matrix([d.labels for d in docs], categories)
    return classification_report(truth, label_matrix([predict(d) for d in docs], categories)).micro_f1


@pytest.mark.slow
def test_two_workers_learning_a_backlog_in_rounds_end_near_one_learner(
    service: Service, reuters_docs: list[LabelledDocument],  # noqa: F811
) -> None:  # fmt: skip
    """Both find the other's heartbeat, learn in rounds of 40 events (staleness 40, one peer), and the
    model they share scores held-out documents about as well as one learner trained on the same events."""
    from workers.embedded import free_port

    train, held_out = reuters_docs[:TRAIN], reuters_docs[TRAIN : TRAIN + HELD_OUT]
    staleness = 40
    ports = [free_port(), free_port()]
    for port in ports:
        service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port), STREAM_WINNOW_LEARN_STALENESS_EVENTS=str(staleness),
                             STREAM_WINNOW_BATCH_MAX_LABELS="400")  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all(http_get(port, "/readyz")[0] == 200 for port in ports):
        time.sleep(0.5)
    time.sleep(2.0)  # the group settles on its assignment
    service.produce("labels", [
        (msgpack.packb({"event_id": f"label:{d.id}", "id": d.id, "labels": list(d.labels), "tokens": list(d.tokens)}),
         d.id.encode())
        for d in train
    ])  # fmt: skip
    texts: list[str] = []
    while time.monotonic() < deadline + 90:
        texts = [http_get(port, "/metrics")[1] for port in ports]
        if sum(metric(text, "stream_winnow_labelled_events_total") for text in texts) >= TRAIN:
            break
        time.sleep(0.5)
    assert sum(metric(text, "stream_winnow_labelled_events_total") for text in texts) == TRAIN, service.logs()[-3000:]
    assert [metric(text, "stream_winnow_learning_peers") for text in texts] == [2.0, 2.0]
    rounds = sum(metric(text, "stream_winnow_learning_rounds_total") for text in texts)
    assert rounds >= TRAIN / staleness

    shared = open_learner(connect(service.redis_url), service.model)
    alone = build_learner("balanced-winnow")
    for doc in train:
        alone.learn_one(alone.transform(doc.tokens), doc.labels)
    served = _micro_f1(lambda d: shared.predict_one(d.tokens).categories, held_out)
    reference = _micro_f1(lambda d: alone.predict_one(d.tokens).categories, held_out)
    assert served >= reference - 0.05, (served, reference)


@pytest.mark.parametrize(("mixing", "share"), [("average", 0.5), ("sum", 1.0)])
def test_with_a_peer_averaging_writes_a_change_at_one_over_peers(
    service: Service, mixing: str, share: float  # noqa: F811
) -> None:  # fmt: skip
    """A peer's heartbeat makes two learners; averaged, the worker's promotion of a mistaken document's
    weights lands as the square root of the factor one learner applies; summed, whole."""
    import numpy as np

    from stream_winnow.shared.learning_peers import learners_key
    from workers.embedded import free_port

    client = connect(service.redis_url)
    client.zadd(learners_key(service.model), {"a-peer": time.time() + 3600})  # beats for the test's length
    port = free_port()
    service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port), STREAM_WINNOW_PEER_MIXING=mixing)
    tokens = ["grain", "wheat", "harvest", "tonnes", "export"]
    service.produce("labels", [(msgpack.packb({"event_id": "e1", "id": "d1", "labels": ["grain"], "tokens": tokens}), b"d1")])
    deadline, text = time.monotonic() + 90, ""
    while time.monotonic() < deadline:
        status, text = http_get(port, "/metrics") if http_get(port, "/readyz")[0] == 200 else (0, "")
        if status == 200 and metric(text, "stream_winnow_labelled_events_total") >= 1:
            break
        time.sleep(0.3)
    assert metric(text, "stream_winnow_labelled_events_total") == 1, service.logs()[-3000:]
    assert metric(text, "stream_winnow_learning_peers") == 2.0

    alone = build_learner("balanced-winnow")
    alone.learn_one(alone.transform(tokens), ["grain"])
    served = open_learner(client, service.model)
    ids = alone.transform(tokens).ids
    initial = {spec.name: spec.initial for spec in alone.table_specs()}
    for table in ("positive", "negative"):
        factor = alone.store.read(ids)[table][:, 0] / initial[table]
        assert not np.allclose(factor, 1.0)  # the document was a mistake: one learner moved these weights
        written = served.store.read(ids)[table][:, 0] / initial[table]
        np.testing.assert_allclose(written, factor**share, rtol=1e-6)
