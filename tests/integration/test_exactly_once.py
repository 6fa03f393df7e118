"""The oracle test: three workers, SIGKILLs at random moments and resent duplicates, and yet every
labelled event is applied exactly once.

Multinomial Naive Bayes is the oracle rule: its counts are a function of the *set* of events
applied, not of their order, so the model the service learned must equal, count for count, one
trained once in this process on the same events. Plain documents are scored meanwhile, and each
must get a decision.
"""

from __future__ import annotations

import random
import signal
import time

import msgpack
import numpy as np
import pytest

from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.learners.naive_bayes import DOCS_COUNTER, TOKENS_COUNTER
from stream_winnow.learners.registry import describe, from_metadata
from stream_winnow.models.named import connect, open_learner
from stream_winnow.stores import MemoryStore
from tests.integration.test_worker import Service, service  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

KILLS = 10
N_EVENTS, N_DUPLICATES, N_PLAIN = 2_400, 300, 600


def _settled(learner: object, store_version: object, quiet_s: float = 4.0, timeout_s: float = 180.0) -> int:
    """Wait until the model's version has not moved for ``quiet_s``; returns it."""
    deadline = time.monotonic() + timeout_s
    version, since = store_version(), time.monotonic()  # type: ignore[operator]
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = store_version()  # type: ignore[operator]
        if now != version:
            version, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return int(version)
    raise AssertionError(f"the model kept changing for {timeout_s} s")


def test_killed_workers_and_resent_events_leave_the_model_as_if_each_event_came_once(service: Service) -> None:  # noqa: F811
    rng = random.Random(35)
    client = connect(service.redis_url)
    learner = open_learner(client, service.model, learner="multinomial-nb")
    docs = synthetic_stream(N_EVENTS + N_PLAIN, seed=35)
    labelled, plain = docs[:N_EVENTS], docs[N_EVENTS:]
    events = [
        (msgpack.packb({"event_id": f"e-{d.id}", "id": d.id, "labels": list(d.labels), "tokens": list(d.tokens)}),
         d.id.encode())
        for d in labelled
    ]  # fmt: skip
    resent = rng.sample(events, N_DUPLICATES)  # a producer's retries: same event id, a later offset
    stream = events + resent
    rng.shuffle(stream[N_EVENTS // 2 :])  # the resends interleave with the second half
    workers = [service.start_worker(STREAM_WINNOW_BATCH_MAX_LABELS="200") for _ in range(3)]
    for start in range(0, len(stream), 300):
        service.produce("labels", stream[start : start + 300])
        if start // 300 < len(plain) // 75:
            part = plain[(start // 300) * 75 : (start // 300 + 1) * 75]
            service.produce("documents", [(msgpack.packb({"id": d.id, "tokens": list(d.tokens)}), d.id.encode())
                                          for d in part])  # fmt: skip
        time.sleep(0.3)
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.5, 2.5))
        victim = rng.randrange(len(workers))
        workers[victim].send_signal(signal.SIGKILL)
        workers[victim].wait(timeout=10)
        workers[victim] = service.start_worker(STREAM_WINNOW_BATCH_MAX_LABELS="200")
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(plain), timeout_s=180)
    assert {d.id for d in plain} <= {d.id for d in decisions}, service.logs()[-3000:]
    # A killed worker's partitions wait for the session timeout and a rejoin (6 + ~3 s here), longer
    # than a quiet spell: wait for every event to be counted, then for any late (double) application.
    deadline = time.monotonic() + 180
    while learner.store.counters(DOCS_COUNTER).get("*", 0) < N_EVENTS and time.monotonic() < deadline:
        time.sleep(0.5)
    _settled(learner, lambda: learner.store.version)
    assert all(w.poll() is None for w in workers), service.logs()[-3000:]

    oracle = from_metadata(describe(learner), store=MemoryStore(learner.table_specs()))
    for d in labelled:
        oracle.learn_one(d.tokens, d.labels)
    assert set(learner.store.categories()) == set(oracle.store.categories())
    for name in (DOCS_COUNTER, TOKENS_COUNTER):
        assert learner.store.counters(name) == oracle.store.counters(name)
    ids = np.array(sorted({oracle.featurizer.token_id(t) for d in labelled for t in d.tokens}), dtype=np.int64)
    assert learner.store.n_features() == oracle.store.n_features()
    got, want = learner.store.read(ids), oracle.store.read(ids)
    order = [learner.store.categories().index(c) for c in oracle.store.categories()]
    np.testing.assert_array_equal(got["total"], want["total"])
    np.testing.assert_array_equal(got["counts"][:, order], want["counts"])
