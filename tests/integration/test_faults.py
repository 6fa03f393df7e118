"""Faults the delivery guarantees must survive, with real workers, a real broker and a real Redis.

``benchmarks.faults`` runs the full measurement (100,000 documents, 20 kills and more); here a
small run of the same code checks that it still holds, and a Redis that lost its last writes is
told apart from a partition that moved.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.faults import FaultConfig, run_faults
from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.learners.naive_bayes import DOCS_COUNTER
from stream_winnow.models.named import connect, open_learner
from tests.integration.test_worker import Service, document, metrics_once, service  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROLLBACKS = "stream_winnow_watermark_rollbacks_total"


@pytest.mark.timeout(600)
def test_a_small_fault_run_loses_no_document_and_applies_every_label_once() -> None:
    config = FaultConfig(documents=1_500, kills=2, freeze_s=8.0, broker_outage_s=4.0, redis_down_s=1.0,
                         duplicates=60, label_delay=100, seeds=(5,))  # fmt: skip
    (run,) = run_faults(config)
    assert [f.kind for f in run.faults].count("kill") == 2 and len(run.faults) == 6
    assert run.undecided == 0
    assert run.applied_twice == run.applied_never == 0 and run.model_equal
    assert run.unplanned_exits == 0 and run.not_delivered == 0
    assert run.dead_letters == {}


@pytest.mark.timeout(300)
def test_a_redis_that_lost_its_last_writes_is_reported_with_the_records_lost(service: Service) -> None:  # noqa: F811
    from workers.embedded import free_port

    client = connect(service.redis_url)
    learner = open_learner(client, service.model, learner="multinomial-nb")
    docs = synthetic_stream(250, seed=39)
    first, lost, after = docs[:100], docs[100:200], docs[200:]
    port = free_port()
    worker = service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port))
    service.produce("documents", [document(d, with_labels=True) for d in first])
    metrics_once(service, port, "stream_winnow_labelled_events_total", len(first))
    keys = [k for pattern in (f"sw:{{{service.model}}}:*", f"sw:{{{service.model}:*}}:*")
            for k in client.scan_iter(pattern)]  # fmt: skip
    snapshot = {key: client.dump(key) for key in keys}
    service.produce("documents", [document(d, with_labels=True) for d in lost])
    metrics_once(service, port, "stream_winnow_labelled_events_total", len(first) + len(lost))
    # Redis goes back to the snapshot: what a restart without its last writes, or a failover to a replica
    # behind, leaves. The worker's Kafka offsets are past those records.
    for pattern in (f"sw:{{{service.model}}}:*", f"sw:{{{service.model}:*}}:*"):
        for key in client.scan_iter(pattern):
            if key not in snapshot:
                client.delete(key)
    for key, value in snapshot.items():
        client.restore(key, 0, value, replace=True)
    service.produce("documents", [document(d, with_labels=True) for d in after])
    metrics_once(service, port, "stream_winnow_labelled_events_total", len(docs))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and learner.store.counters(DOCS_COUNTER).get("*", 0) < len(first) + len(after):
        time.sleep(0.5)
    assert learner.store.counters(DOCS_COUNTER).get("*", 0) == len(first) + len(after)  # the lost ones stay lost
    assert _rollbacks(service, port) >= 1
    assert "Redis lost applied learning" in service.logs()
    assert worker.poll() is None


def _rollbacks(running: Service, port: int) -> float:
    """The worker's rollback counter, once it is at least 1 (within a minute; asserted)."""
    from tests.integration.test_worker import http_get, metric

    deadline = time.monotonic() + 60
    value = 0.0
    while time.monotonic() < deadline and value < 1:
        value = metric(http_get(port, "/metrics")[1], ROLLBACKS)
        time.sleep(0.5)
    assert value >= 1, running.logs()[-2000:]
    return value


@pytest.mark.timeout(300)
def test_labelled_documents_already_learned_are_still_decided(service: Service) -> None:  # noqa: F811
    """A worker killed after a batch's write and before its decisions were delivered: the next owner finds
    the labelled documents applied (their offsets under the watermarks) and must still decide them."""
    from stream_winnow.stores.base import MODEL_PART
    from stream_winnow.stores.redis.keys import ModelKeys

    client = connect(service.redis_url)
    learner = open_learner(client, service.model, learner="multinomial-nb")
    docs = synthetic_stream(120, seed=40)
    keys = ModelKeys(service.model, shards=learner.store.n_parts)
    for part in [*range(keys.shards), MODEL_PART]:  # every record of the topic is applied already
        client.hset(keys.watermark_key(part), mapping={f"{service.topics['documents']}:{p}": 10_000 for p in range(4)})
    service.produce("documents", [document(d, with_labels=True) for d in docs])
    service.start_worker()
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs), timeout_s=60)
    assert {d.id for d in decisions} == {d.id for d in docs}, service.logs()[-2000:]
    assert learner.store.counters(DOCS_COUNTER).get("*", 0) == 0  # none learned again
