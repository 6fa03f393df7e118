"""The worker end to end: real broker, real Redis, worker processes started as operators start them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from stream_winnow.documents import LabelledDocument
from stream_winnow.evaluation.metrics import classification_report, label_matrix
from stream_winnow.evaluation.runs import prequential
from stream_winnow.learners import build_learner
from stream_winnow.learners.term_weights import DF_TABLE, DOCUMENTS_COUNTER
from stream_winnow.models.named import connect, open_learner
from stream_winnow.text.features import FeatureConfig
from stream_winnow.wire.codec import decode_dead_letter, decode_decision
from workers.transport import KafkaSettings, make_consumer, make_producer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TEST_SESSION_TIMEOUT_MS = 6_000


@dataclass
class Service:
    """Topics and a model of one test, and the worker processes started on them."""

    bootstrap: str
    redis_url: str
    tmp: Path
    model: str = field(default_factory=lambda: f"m{uuid.uuid4().hex[:10]}")
    group: str = field(default_factory=lambda: f"g{uuid.uuid4().hex[:10]}")
    topics: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            STREAM_WINNOW_BOOTSTRAP_SERVERS=self.bootstrap,
            STREAM_WINNOW_REDIS_URL=self.redis_url,
            STREAM_WINNOW_MODEL=self.model,
            STREAM_WINNOW_GROUP_ID=self.group,
            STREAM_WINNOW_DOCUMENTS_TOPIC=self.topics["documents"],
            STREAM_WINNOW_LABELS_TOPIC=self.topics["labels"],
            STREAM_WINNOW_DECISIONS_TOPIC=self.topics["decisions"],
            STREAM_WINNOW_DEAD_LETTERS_TOPIC=self.topics["dead_letters"],
            STREAM_WINNOW_SESSION_TIMEOUT_MS=str(TEST_SESSION_TIMEOUT_MS),
            STREAM_WINNOW_HTTP_PORT="0",
            STREAM_WINNOW_BATCH_MAX_DOCS="100",
        )
        env.update(extra)
        return env

    def start_worker(self, **extra: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"worker-{len(self.processes)}.log", "wb")  # noqa: SIM115 - lives with the process
        process = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "worker"], env=self.env(**extra), stdout=log, stderr=log, cwd=REPO
        )
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("worker-*.log")))

    def produce(self, topic: str, values: list[tuple[bytes, bytes | None]]) -> None:
        producer = make_producer(KafkaSettings(self.bootstrap))
        try:
            for value, key in values:
                producer.send(self.topics[topic], value, key=key)
            producer.flush()
        finally:
            producer.close()

    def collect(self, topic: str, until: Callable[[list[Any]], bool], timeout_s: float = 90.0) -> list[Any]:
        """Read ``topic`` from the beginning until ``until(messages)`` or the timeout."""
        consumer = make_consumer(KafkaSettings(self.bootstrap, session_timeout_ms=TEST_SESSION_TIMEOUT_MS))
        consumer.subscribe([self.topics[topic]], f"reader-{uuid.uuid4().hex[:8]}")
        decode = decode_decision if topic == "decisions" else decode_dead_letter
        messages: list[Any] = []
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and not until(messages):
                messages += [decode(r.value) for r in consumer.poll_batch(1000, 500)]
        finally:
            consumer.close()
        return messages


@pytest.fixture
def service(kafka_bootstrap: str, redis_url: str, topic_factory: Callable[..., str], tmp_path: Path) -> Iterator[Service]:
    """``service``: fresh topics (4 partitions) and model; worker processes are stopped afterwards."""
    s = Service(kafka_bootstrap, redis_url, tmp_path)
    s.topics = {
        "documents": topic_factory(4, "documents"),
        "labels": topic_factory(4, "labels"),
        "decisions": topic_factory(4, "decisions"),
        "dead_letters": topic_factory(1, "dead-letters"),
    }
    yield s
    for process in s.processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def reuters_docs() -> list[LabelledDocument]:
    """The first 800 ModApte top-10 training documents (synthetic-free: the real thing, when present)."""
    path = Path(os.environ.get("STREAM_WINNOW_REUTERS", REPO / "../shared/datasets/reuters21578.tar.gz"))
    if not path.exists():
        pytest.skip(f"Reuters-21578 archive not found at {path}")
    from stream_winnow.datasets import read_modapte

    return read_modapte(path, top=10).train[:800]


def document(doc: LabelledDocument, with_labels: bool) -> tuple[bytes, bytes]:
    body: dict[str, Any] = {"id": doc.id, "tokens": list(doc.tokens)}
    if with_labels:
        body["labels"] = list(doc.labels)
    return msgpack.packb(body), doc.id.encode()


def http_get(port: int, path: str) -> tuple[int, str]:
    """A worker's ``/metrics``, ``/healthz`` or ``/readyz``: (status, body); (0, "") while it does not answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def metric(text: str, name: str) -> float:
    """The value of the unlabelled (or fully spelled) sample ``name`` in a ``/metrics`` text; 0 if absent."""
    lines = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(lines[0].split()[-1]) if lines else 0.0


def metrics_once(service: Service, port: int, name: str, reaches: float, timeout_s: float = 90.0) -> str:
    """The worker's ``/metrics`` text once counter ``name`` reaches ``reaches`` (asserted, within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    text = http_get(port, "/metrics")[1]
    while time.monotonic() < deadline and metric(text, name) < reaches:
        time.sleep(0.5)
        text = http_get(port, "/metrics")[1]
    assert metric(text, name) == reaches, service.logs()[-2000:]
    return text


def wait_ready(service: Service, port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and http_get(port, "/readyz")[0] != 200:
        time.sleep(0.5)
    assert http_get(port, "/readyz")[0] == 200, service.logs()[-2000:]


def test_two_workers_decide_every_document(service: Service, reuters_docs: list[LabelledDocument]) -> None:
    docs = reuters_docs[:600]
    service.start_worker(STREAM_WINNOW_WORKER_ID="w1")
    service.start_worker(STREAM_WINNOW_WORKER_ID="w2")
    service.produce("documents", [document(d, with_labels=True) for d in docs])
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs))
    assert {d.id for d in decisions} == {d.id for d in docs}, service.logs()[-3000:]
    assert {d.worker for d in decisions} == {"w1", "w2"}, "both workers should have taken partitions"
    learner = open_learner(connect(service.redis_url), service.model)
    assert learner.store.version > 0
    assert set(learner.store.categories()) == {label for d in docs for label in d.labels}


def test_two_workers_count_the_frequencies_of_an_idf_model_once_per_document(
    service: Service, reuters_docs: list[LabelledDocument]
) -> None:
    docs = reuters_docs[:400]
    client = connect(service.redis_url)
    learner = open_learner(client, service.model, mode="one-of", features=FeatureConfig(idf=True))
    service.start_worker(STREAM_WINNOW_WORKER_ID="w1")
    service.start_worker(STREAM_WINNOW_WORKER_ID="w2")
    labelled = [document(replace(d, labels=d.labels[:1]), with_labels=True) for d in docs]
    service.produce("documents", labelled)
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs))
    assert {d.worker for d in decisions} == {"w1", "w2"}, service.logs()[-3000:]
    service.produce("documents", labelled[:100])  # sent again: decided again, not counted again
    assert len(service.collect("decisions", lambda m: len(m) >= len(docs) + 100)) >= len(docs) + 100

    def counted() -> float:
        return learner.store.counters(DOCUMENTS_COUNTER).get("*", 0.0)

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and counted() < len(docs):
        time.sleep(0.5)
    time.sleep(3.0)  # a write of the resent documents, were it to come, comes now
    assert counted() == len(docs)
    df = Counter(learner.featurizer.token_id(t) for d in docs for t in set(d.tokens))
    ids = np.array(sorted(df), dtype=np.int64)
    stored = learner.store.read(ids)[DF_TABLE][:, 0]
    np.testing.assert_array_equal(stored, [float(df[i]) for i in ids.tolist()])


def test_prequential_through_the_service_matches_in_process(
    service: Service, reuters_docs: list[LabelledDocument], topic_factory: Callable[..., str]
) -> None:
    # One partition keeps the stream's order, as the in-process run sees it.
    service.topics["documents"] = topic_factory(1, "documents")
    docs = reuters_docs
    service.start_worker()
    service.produce("documents", [document(d, with_labels=True) for d in docs])
    decisions = {d.id: d for d in service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs))}
    assert len(decisions) == len(docs), service.logs()[-3000:]
    categories = sorted({label for d in docs for label in d.labels})
    true = label_matrix([d.labels for d in docs], categories)
    served = classification_report(true, label_matrix([decisions[d.id].categories for d in docs], categories))
    local = prequential(build_learner("balanced-winnow"), docs)
    assert abs(served.micro_f1 - local.report.micro_f1) <= 0.01, (served.micro_f1, local.report.micro_f1)


def test_labelled_events_sent_twice_change_the_weights_once(
    service: Service, reuters_docs: list[LabelledDocument]
) -> None:
    docs = reuters_docs[:150]
    service.start_worker()
    service.produce("documents", [document(d, with_labels=False) for d in docs])
    assert len(service.collect("decisions", lambda m: len(m) >= len(docs))) >= len(docs)
    events = [
        (msgpack.packb({"event_id": f"label:{d.id}", "id": d.id, "labels": list(d.labels)}), d.id.encode())
        for d in docs
    ]
    client = connect(service.redis_url)
    learner = open_learner(client, service.model)

    def settled() -> tuple[int, dict[str, np.ndarray]]:
        version = -1
        while version != learner.store.version:  # wait until the worker stops changing the model
            version = learner.store.version
            time.sleep(2.0)
        ids = np.array(sorted({learner.featurizer.token_id(t) for d in docs for t in d.tokens}), dtype=np.int64)
        return version, learner.store.read(ids)

    from stream_winnow.shared.outcomes import mistake_rates, recent_outcomes

    service.produce("labels", events)
    deadline = time.monotonic() + 90  # every event learned once (a quiet model alone can be a slow batch)
    while time.monotonic() < deadline and len(recent_outcomes(client, service.model)) < len(docs):
        time.sleep(0.5)
    version_once, weights_once = settled()
    assert version_once > 0
    window = recent_outcomes(client, service.model)
    assert len(window) == len(docs)  # one outcome per labelled event, for `status`
    assert any(wrong for wrong, _ in mistake_rates(window).values())
    service.produce("labels", events)  # the same events again: a redelivery, or a producer retry
    version_twice, weights_twice = settled()
    assert version_twice == version_once
    for table in weights_once:
        np.testing.assert_array_equal(weights_once[table], weights_twice[table])


def test_a_backlog_of_labels_is_learned_in_batches_up_to_batch_max_labels(
    service: Service, reuters_docs: list[LabelledDocument]
) -> None:
    """Labelled events waiting when the worker starts: batches grow past batch_max_docs (100), to 250 at most."""
    from workers.embedded import free_port

    events = [
        (msgpack.packb({"event_id": f"label:{d.id}", "id": d.id, "labels": list(d.labels), "tokens": list(d.tokens)}),
         d.id.encode())
        for d in reuters_docs
    ]  # fmt: skip
    service.produce("labels", events)
    port = free_port()
    service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port), STREAM_WINNOW_BATCH_MAX_LABELS="250")
    text = metrics_once(service, port, "stream_winnow_labelled_events_total", len(events))
    batches = metric(text, "stream_winnow_batch_size_count")
    up_to_100 = metric(text, 'stream_winnow_batch_size_bucket{le="100.0"}')
    up_to_250 = metric(text, 'stream_winnow_batch_size_bucket{le="250.0"}')
    assert up_to_250 == batches  # never more than batch_max_labels
    assert up_to_100 < batches  # some batch took more than batch_max_docs
    assert batches < len(events) / 100  # fewer batches than batch_max_docs alone would make


# Classes of malformed or hostile input on `documents`: (the message, the reason it is dead-lettered with).
BAD_INPUTS: dict[str, tuple[bytes, str]] = {
    "not msgpack": (b"\xc1\x00not msgpack", "not-msgpack"),
    "a list, not a map": (msgpack.packb(["id", "tokens"]), "not-a-map"),
    "no id": (msgpack.packb({"tokens": ["a"]}), "missing-field"),
    "tokens as one string": (msgpack.packb({"id": "d1", "tokens": "a b c"}), "wrong-type"),
    "no tokens": (msgpack.packb({"id": "d2", "tokens": []}), "empty-tokens"),
    "20,001 tokens": (msgpack.packb({"id": "d3", "tokens": ["t"] * 20_001}), "too-many-tokens"),
    "a field the schema lacks": (msgpack.packb({"id": "d4", "tokens": ["a"], "colour": "red"}), "unknown-field"),
    "a schema version": (msgpack.packb({"id": "d4v", "tokens": ["a"], "schema_version": 2}), "unknown-field"),
    "invalid UTF-8": (b"\x82\xa2id\xa2d5\xa6tokens\x91\xa2\xff\xfe", "not-utf8"),
    "160 KB document": (msgpack.packb({"id": "d6", "tokens": ["x" * 200] * 800}), "too-large"),
    "NaN ts": (msgpack.packb({"id": "d7", "tokens": ["a"], "ts": float("nan")}), "wrong-type"),
    "infinite ts": (msgpack.packb({"id": "d8", "tokens": ["a"], "ts": float("inf")}), "wrong-type"),
    "negative ts": (msgpack.packb({"id": "d9", "tokens": ["a"], "ts": -5}), "out-of-range"),
    "ts past int64": (msgpack.packb({"id": "d10", "tokens": ["a"], "ts": 2**64 - 1}), "out-of-range"),
    "a 300-character token": (msgpack.packb({"id": "d11", "tokens": ["y" * 300]}), "token-too-long"),
    "an empty id": (msgpack.packb({"id": "", "tokens": ["a"]}), "empty-string"),
    "a label twice": (msgpack.packb({"id": "d12", "tokens": ["a"], "labels": ["x", "x"]}), "duplicate-label"),
    "1,001 labels": (msgpack.packb({"id": "d13", "tokens": ["a"], "labels": [f"c{i}" for i in range(1001)]}),
                     "too-many-labels"),
}  # fmt: skip


def test_every_bad_input_is_dead_lettered_and_the_worker_goes_on(service: Service) -> None:
    service.start_worker(STREAM_WINNOW_MAX_TOKENS_PER_DOCUMENT="20000", STREAM_WINNOW_MAX_MESSAGE_BYTES="100000")
    good = [msgpack.packb({"id": f"ok{i}", "tokens": ["grain", "wheat", "tonnes"]}) for i in range(3)]
    values = [(raw, None) for raw, _ in BAD_INPUTS.values()] + [(v, None) for v in good]
    service.produce("documents", values)
    letters = service.collect("dead_letters", lambda m: len(m) >= len(BAD_INPUTS))
    by_original = {letter.original: letter for letter in letters}
    assert len(letters) == len(BAD_INPUTS), [(letter.reason, letter.detail) for letter in letters]
    for name, (raw, reason) in BAD_INPUTS.items():
        assert raw in by_original, f"{name}: no dead letter"
        letter = by_original[raw]
        assert (letter.reason, letter.source_topic) == (reason, service.topics["documents"]), (name, letter.detail)
        assert letter.detail
    decisions = service.collect("decisions", lambda m: len(m) >= 3)
    assert {d.id for d in decisions} == {"ok0", "ok1", "ok2"}
    assert service.processes[0].poll() is None, "the worker must still run"


def test_a_flood_of_new_categories_stops_at_max_categories(service: Service) -> None:
    service.start_worker(STREAM_WINNOW_MAX_CATEGORIES="5")
    docs = topic_documents(30, seed=4)
    flood = [LabelledDocument(f"f{i}", d.tokens, (f"new-{i}",)) for i, d in enumerate(docs)]
    service.produce("documents", [document(d, with_labels=True) for d in flood])
    letters = service.collect("dead_letters", lambda m: len(m) >= len(flood) - 5)
    assert {letter.reason for letter in letters} == {"too-many-categories"}
    assert len(letters) == len(flood) - 5 and "at most 5 (--max-categories)" in letters[0].detail
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(flood))
    assert {d.id for d in decisions} == {d.id for d in flood}, "documents are still decided"
    time.sleep(1)
    assert len(open_learner(connect(service.redis_url), service.model, create=False).store.categories()) == 5
    assert service.processes[0].poll() is None


def test_category_names_in_key_syntax_are_just_names(service: Service) -> None:
    names = ("{news}", "sw:{news:1}:f:21", "a*b?[c]", "with space", "日本", "\\x00")
    service.start_worker()
    docs = [LabelledDocument(f"k{i}", ("oil", f"w{i}"), (names[i % len(names)],)) for i in range(24)]
    service.produce("documents", [document(d, with_labels=True) for d in docs])
    service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs))
    client = connect(service.redis_url)
    deadline = time.monotonic() + 30
    while set(open_learner(client, service.model, create=False).store.categories()) != set(names):
        assert time.monotonic() < deadline, open_learner(client, service.model, create=False).store.categories()
        time.sleep(0.2)
    # Names live inside the model's keys (list items, hash fields), never in key names: no key of
    # another model, and none outside the model's patterns, appeared.
    assert not list(client.scan_iter(match="sw:{news*"))
    assert not service.collect("dead_letters", lambda m: False, timeout_s=2)


def test_a_labelled_event_for_an_unknown_document_is_dead_lettered(service: Service) -> None:
    service.start_worker()
    service.produce("labels", [(msgpack.packb({"event_id": "e1", "id": "never-seen", "labels": ["grain"]}), None)])
    letters = service.collect("dead_letters", lambda m: len(m) >= 1)
    assert [letter.reason for letter in letters] == ["document-not-cached"]


def test_a_worker_killed_mid_stream_and_restarted_leaves_no_document_undecided(
    service: Service, reuters_docs: list[LabelledDocument]
) -> None:
    docs = reuters_docs[:800]
    worker = service.start_worker()
    service.produce("documents", [document(d, with_labels=True) for d in docs])
    seen = service.collect("decisions", lambda m: len(m) >= 150)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert len({d.id for d in seen}) < len(docs), "the kill should land mid-stream"
    service.start_worker()
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs), timeout_s=120)
    assert {d.id for d in decisions} == {d.id for d in docs}, service.logs()[-3000:]


def test_sigterm_finishes_commits_and_exits_zero(service: Service, reuters_docs: list[LabelledDocument]) -> None:
    worker = service.start_worker()
    service.produce("documents", [document(d, with_labels=False) for d in reuters_docs[:50]])
    service.collect("decisions", lambda m: len(m) >= 50)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert "stopped" in service.logs()


def test_secrets_from_files_never_reach_logs_ps_metrics_or_status(service: Service, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from workers.cli import main
    from workers.embedded import free_port, start_redis

    redis_secret, kafka_secret = "hunter2-s3cret", "kafka-pa55word"
    with start_redis(password=redis_secret) as secured:
        (tmp_path / "redis-url").write_text(secured.url + "\n")
        (tmp_path / "sasl-password").write_text(kafka_secret + "\n")
        port = free_port()
        # The variable points nowhere: the worker must take its URL from the file.
        worker = service.start_worker(
            STREAM_WINNOW_LOG_LEVEL="DEBUG", STREAM_WINNOW_REDIS_URL="redis://127.0.0.1:9/0",
            STREAM_WINNOW_REDIS_URL_FILE=str(tmp_path / "redis-url"),
            STREAM_WINNOW_SASL_PASSWORD_FILE=str(tmp_path / "sasl-password"), STREAM_WINNOW_HTTP_PORT=str(port),
        )  # fmt: skip
        service.produce("documents", [(msgpack.packb({"id": "a", "tokens": ["x"]}), None)])
        assert service.collect("decisions", lambda m: len(m) >= 1), service.logs()[-3000:]
        status, metrics = http_get(port, "/metrics")
        command_line = Path(f"/proc/{worker.pid}/cmdline").read_bytes().decode(errors="replace")
        shown = CliRunner().invoke(main, ["status", "--redis-url", secured.url])
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    logs = service.logs()
    assert "starting" in logs and status == 200 and "stream_winnow_documents_scored_total 1.0" in metrics
    assert shown.exit_code == 0 and "redis://:***@" in shown.output, shown.output
    for secret in (redis_secret, kafka_secret):
        for where, text in (("logs", logs), ("ps", command_line), ("metrics", metrics), ("status", shown.output)):
            assert secret not in text, f"{secret!r} in {where}"


def test_health_readiness_metrics_and_json_logs(service: Service) -> None:
    import json

    from workers.embedded import free_port

    port = free_port()
    worker = service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port), STREAM_WINNOW_LOG_FORMAT="json")
    wait_ready(service, port)
    assert http_get(port, "/healthz")[0] == 200
    service.produce("documents", [(b"\xc1", None), (msgpack.packb({"id": "a", "tokens": ["x", "y"]}), None)])
    service.collect("decisions", lambda m: len(m) >= 1)
    status, text = http_get(port, "/metrics")
    assert status == 200
    assert "stream_winnow_documents_scored_total 1.0" in text
    assert 'stream_winnow_dead_letters_total{reason="not-msgpack"} 1.0' in text
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    lines = [json.loads(line) for line in service.logs().splitlines() if line.startswith("{")]
    dead = [line for line in lines if line.get("reason") == "not-msgpack"]
    assert dead and dead[0]["topic"] == service.topics["documents"] and "offset" in dead[0]


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_a_batch_lingers_for_more_documents_up_to_batch_linger_ms(service: Service, client: str) -> None:
    """Documents trickling in one a send, 50 ms apart: without a linger each fetch would be a batch (30);
    with 1,000 ms the worker gathers them into a few, and decides every one."""
    if client == "confluent":
        pytest.importorskip("confluent_kafka")
    from workers.embedded import free_port

    port = free_port()
    service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port), STREAM_WINNOW_KAFKA_CLIENT=client,
                         STREAM_WINNOW_BATCH_LINGER_MS="1000")  # fmt: skip
    wait_ready(service, port)
    sends = 30
    producer = make_producer(KafkaSettings(service.bootstrap, linger_ms=0))
    try:
        for i in range(sends):
            producer.send(service.topics["documents"], msgpack.packb({"id": f"t{i}", "tokens": ["grain", "wheat"]}))
            producer.flush()
            time.sleep(0.05)
    finally:
        producer.close()
    text = metrics_once(service, port, "stream_winnow_documents_scored_total", sends)
    batches = metric(text, "stream_winnow_batch_size_count")
    assert 1 <= batches <= sends / 3, f"{batches:.0f} batches for {sends} documents sent 50 ms apart"
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= sends)
    assert {d.id for d in decisions} == {f"t{i}" for i in range(sends)}


@pytest.mark.parametrize("client", ["confluent"])
def test_the_fast_client_decides_and_dead_letters_alike(
    service: Service, reuters_docs: list[LabelledDocument], client: str
) -> None:
    pytest.importorskip("confluent_kafka")
    docs = reuters_docs[:300]
    service.start_worker(STREAM_WINNOW_KAFKA_CLIENT=client, STREAM_WINNOW_WORKER_ID="w1")
    service.start_worker(STREAM_WINNOW_KAFKA_CLIENT=client, STREAM_WINNOW_WORKER_ID="w2")
    service.produce("documents", [document(d, with_labels=True) for d in docs] + [(b"\xc1", None)])
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs))
    assert {d.id for d in decisions} == {d.id for d in docs}, service.logs()[-3000:]
    assert [letter.reason for letter in service.collect("dead_letters", lambda m: len(m) >= 1)] == ["not-msgpack"]


def test_switching_workers_to_an_imported_model_loses_no_document(
    service: Service, reuters_docs: list[LabelledDocument], tmp_path: Path
) -> None:
    from stream_winnow.models.snapshot import export_model, import_model

    first, second = reuters_docs[:200], reuters_docs[200:400]
    old = service.start_worker(STREAM_WINNOW_WORKER_ID="old")
    service.produce("documents", [document(d, with_labels=True) for d in first])
    service.collect("decisions", lambda m: len({d.id for d in m}) >= len(first))
    # The operator's procedure: snapshot, import under a new name, start workers on it, stop the old ones.
    client = connect(service.redis_url)
    export_model(open_learner(client, service.model).store, tmp_path / "model.msgpack")
    new_model = service.model + "-v2"
    target = open_learner(client, new_model)
    import_model(tmp_path / "model.msgpack", target.store, replace=True)
    service.start_worker(STREAM_WINNOW_MODEL=new_model, STREAM_WINNOW_WORKER_ID="new")
    service.produce("documents", [document(d, with_labels=False) for d in second[:100]])
    old.send_signal(signal.SIGTERM)
    assert old.wait(timeout=30) == 0
    service.produce("documents", [document(d, with_labels=False) for d in second[100:]])
    wanted = {d.id for d in first + second}
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(wanted), timeout_s=120)
    assert {d.id for d in decisions} == wanted, service.logs()[-3000:]
    late = [d for d in decisions if d.id in {x.id for x in second[100:]}]
    assert {d.model for d in late} == {new_model}
    assert open_learner(client, new_model).store.categories() == open_learner(client, service.model).store.categories()


def test_a_redis_outage_is_retried_and_the_worker_resumes_by_itself(
    service: Service, reuters_docs: list[LabelledDocument]
) -> None:
    from workers.embedded import start_redis

    redis_server = start_redis()
    port = redis_server.port
    service.redis_url = redis_server.url
    worker = service.start_worker(STREAM_WINNOW_LOG_LEVEL="INFO")
    before, during = reuters_docs[:50], reuters_docs[50:100]
    service.produce("documents", [document(d, with_labels=True) for d in before])
    service.collect("decisions", lambda m: len({d.id for d in m}) >= len(before))
    redis_server.stop()
    service.produce("documents", [document(d, with_labels=False) for d in during])
    time.sleep(4)  # the worker polls the batch, fails to reach Redis, backs off and retries it
    assert worker.poll() is None, "the worker must not exit while Redis is down"
    assert "redis unavailable" in service.logs()
    redis_again = start_redis(port=port)
    try:
        decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= 100, timeout_s=60)
        assert {d.id for d in decisions} >= {d.id for d in during}, service.logs()[-3000:]
        assert worker.poll() is None
    finally:
        redis_again.stop()


def test_decisions_carry_the_highest_scores_and_every_assigned_category(
    service: Service, reuters_docs: list[LabelledDocument]
) -> None:
    docs = reuters_docs[:300]
    service.start_worker(STREAM_WINNOW_DECISION_SCORES="2")
    service.produce("documents", [document(d, with_labels=True) for d in docs])
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(docs))
    assert len({d.id for d in decisions}) == len(docs), service.logs()[-3000:]
    learned = [d for d in decisions if d.model_version > 0 and len(d.scores) > 0]
    assert learned, "the model learned categories, so decisions carry scores"
    for d in decisions:
        assert set(d.categories) <= set(d.scores)
        assert len(d.scores) <= 2 + len(d.categories)
        best = list(d.scores.values())[: min(2, len(d.scores))]
        assert best == sorted(best, reverse=True)
    assert max(len(d.scores) for d in decisions) >= 2


def topic_documents(n: int, seed: int = 0) -> list[LabelledDocument]:
    """Documents of one of three topics: 4 of the topic's 8 words and 4 of 30 shared ones."""
    rng = np.random.default_rng(seed)
    topics = {t: [f"{t}{i}" for i in range(8)] for t in ("oil", "grain", "money")}
    common = [f"w{i}" for i in range(30)]
    docs = []
    for i in range(n):
        topic = list(topics)[i % 3]
        tokens = [*rng.choice(topics[topic], size=4), *rng.choice(common, size=4)]
        docs.append(LabelledDocument(f"t{i}", tuple(str(t) for t in tokens), (topic,)))
    return docs


def test_two_workers_serve_and_learn_a_model_trained_with_a_domain_model(service: Service, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from stream_winnow.datasets import write_labelled_jsonl
    from stream_winnow.text.domain import DomainModel
    from workers.cli import main

    docs = topic_documents(400)
    write_labelled_jsonl(tmp_path / "all.jsonl", docs)
    write_labelled_jsonl(tmp_path / "train.jsonl", docs[:60])
    runner = CliRunner()
    fitted = runner.invoke(main, ["domain", "fit", "--input", str(tmp_path / "all.jsonl"), "--dimensions", "6",
                                  "--out", str(tmp_path / "domain.npz")])  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    trained = runner.invoke(main, ["train", "--input", str(tmp_path / "train.jsonl"), "--redis-url", service.redis_url,
                                   "--model", service.model, "--learner", "perceptron", "--features", "both",
                                   "--domain", str(tmp_path / "domain.npz"), "--passes", "4"])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    client = connect(service.redis_url)
    served = open_learner(client, service.model, create=False)
    assert served.domain is not None and served.domain.model.version == DomainModel.load(tmp_path / "domain.npz").version
    scored = docs[100:250]
    expected = {d.id: served.predict_one(d.tokens).categories for d in scored}
    service.start_worker(STREAM_WINNOW_WORKER_ID="w1")
    service.start_worker(STREAM_WINNOW_WORKER_ID="w2")
    service.produce("documents", [document(d, with_labels=False) for d in scored])
    decisions = {d.id: d for d in service.collect("decisions", lambda m: len({d.id for d in m}) >= len(scored))}
    assert set(decisions) == set(expected), service.logs()[-3000:]
    assert {d.worker for d in decisions.values()} == {"w1", "w2"}, "both workers score with the domain model"
    agree = np.mean([decisions[i].categories == expected[i] for i in expected])
    assert agree >= 0.98, agree  # float32 weights in Redis against the same weights read in this process
    assert np.mean([decisions[d.id].categories == d.labels for d in scored]) >= 0.9
    # Labelled events are learned with the same domain features: rows of domain features move.
    positive, negative = served.domain.model.feature_ids()
    domain_ids = np.concatenate([positive, negative])
    before = served.store.read(domain_ids)["weight"].copy()
    version = served.store.version
    labelled = docs[250:400]
    service.produce("documents", [document(d, with_labels=True) for d in labelled])
    service.collect("decisions", lambda m: len({d.id for d in m}) >= len(scored) + len(labelled))
    deadline = time.monotonic() + 30
    while served.store.version == version and time.monotonic() < deadline:
        time.sleep(0.2)
    assert served.store.version > version
    assert not np.array_equal(served.store.read(domain_ids)["weight"], before)
    # The workers' cached documents are the sample `domain fit --from-cache` fits on.
    sampled = runner.invoke(main, ["domain", "fit", "--from-cache", "--redis-url", service.redis_url, "--model",
                                   service.model, "--dimensions", "4", "--out", str(tmp_path / "again.npz"),
                                   "--json"])  # fmt: skip
    assert sampled.exit_code == 0, sampled.output
    assert json.loads(sampled.output)["documents"] == len(scored) + len(labelled)


def test_a_worker_works_with_a_redis_user_limited_to_its_model(service: Service, tmp_path: Path) -> None:
    import redis as redis_py
    from click.testing import CliRunner

    from stream_winnow.datasets import write_labelled_jsonl
    from stream_winnow.stores.redis.acl import worker_acl_rules
    from workers.cli import main

    docs = topic_documents(300, seed=2)
    write_labelled_jsonl(tmp_path / "train.jsonl", docs[:60])
    trained = CliRunner().invoke(main, ["train", "--input", str(tmp_path / "train.jsonl"), "--redis-url",
                                        service.redis_url, "--model", service.model, "--passes", "2"])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    admin = connect(service.redis_url)
    user, password = f"sw-{service.model}", uuid.uuid4().hex
    server = tuple(int(part) for part in str(admin.info("server")["redis_version"]).split(".")[:2])
    rules = worker_acl_rules(service.model, server=server)  # type: ignore[arg-type]
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)
    limited_url = service.redis_url.replace("redis://", f"redis://{user}:{password}@", 1)
    service.start_worker(STREAM_WINNOW_REDIS_URL=limited_url, STREAM_WINNOW_WORKER_ID="w1")
    service.start_worker(STREAM_WINNOW_REDIS_URL=limited_url, STREAM_WINNOW_WORKER_ID="w2")  # peers, heartbeats
    version = open_learner(admin, service.model, create=False).store.version
    scored, labelled = docs[60:160], docs[160:300]
    service.produce("documents", [document(d, with_labels=False) for d in scored])
    service.produce("documents", [document(d, with_labels=True) for d in labelled])
    decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(scored) + len(labelled))
    assert {d.id for d in decisions} == {d.id for d in scored + labelled}, service.logs()[-3000:]
    deadline = time.monotonic() + 30
    while open_learner(admin, service.model, create=False).store.version == version and time.monotonic() < deadline:
        time.sleep(0.2)
    assert open_learner(admin, service.model, create=False).store.version > version, service.logs()[-3000:]
    refused = [entry for entry in admin.acl_log(count=100) if entry.get("username") == user]
    assert not refused, refused  # every command the workers sent was within their rules
    assert password not in service.logs()
    limited = redis_py.Redis.from_url(limited_url)
    for forbidden in (lambda: limited.get("other-application:key"), lambda: limited.get("sw:{another-model}:version"),
                      limited.flushall, lambda: limited.config_get("*"), lambda: limited.keys("*")):  # fmt: skip
        with pytest.raises(redis_py.exceptions.NoPermissionError):
            forbidden()
    admin.execute_command("ACL", "DELUSER", user)


def _tls_files(folder: Path) -> dict[str, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1 signed by it (openssl)."""
    files = {name: folder / name for name in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt", "san.cnf")}
    files["san.cnf"].write_text("subjectAltName=IP:127.0.0.1\n")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", files["ca.key"], "-out", files["ca.crt"],
         "-days", "2", "-subj", "/CN=stream-winnow test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", files["server.key"], "-out", files["server.csr"],
         "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", files["server.csr"], "-CA", files["ca.crt"], "-CAkey", files["ca.key"],
         "-CAcreateserial", "-out", files["server.crt"], "-days", "2", "-extfile", files["san.cnf"]],
    ]  # fmt: skip
    for step in steps:
        subprocess.run(["openssl", *map(str, step)], check=True, capture_output=True)
    return files


def test_a_worker_reaches_redis_over_tls(service: Service, tmp_path: Path) -> None:
    import shutil

    import redis as redis_py
    from click.testing import CliRunner

    from stream_winnow.datasets import write_labelled_jsonl
    from workers.cli import main
    from workers.embedded import _redis_binary, free_port

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test's certificates")
    files = _tls_files(tmp_path)
    port = free_port()
    (tmp_path / "redis.conf").write_text("\n".join([
        "port 0", f"tls-port {port}", "bind 127.0.0.1", f"tls-cert-file {files['server.crt']}",
        f"tls-key-file {files['server.key']}", f"tls-ca-cert-file {files['ca.crt']}", "tls-auth-clients no",
        'save ""', "appendonly no", f"dir {tmp_path}",
    ]) + "\n")  # fmt: skip
    server = subprocess.Popen([_redis_binary(), str(tmp_path / "redis.conf")], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)  # fmt: skip
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={files['ca.crt']}"
    try:
        deadline = time.monotonic() + 10
        while True:
            if server.poll() is not None:
                output = server.stdout.read().decode(errors="replace") if server.stdout else ""
                if "tls" in output.lower():
                    pytest.skip(f"this redis-server was built without TLS: {output.strip()[-200:]}")
                raise AssertionError(output)
            try:
                if redis_py.Redis.from_url(url, socket_timeout=1).ping():
                    break
            except redis_py.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        docs = topic_documents(200, seed=3)
        write_labelled_jsonl(tmp_path / "train.jsonl", docs[:60])
        trained = CliRunner().invoke(main, ["train", "--input", str(tmp_path / "train.jsonl"), "--redis-url", url,
                                            "--model", service.model, "--passes", "2"])  # fmt: skip
        assert trained.exit_code == 0, trained.output
        client = connect(url)
        version = open_learner(client, service.model, create=False).store.version
        service.start_worker(STREAM_WINNOW_REDIS_URL=url)
        rest = docs[60:]
        service.produce("documents", [document(d, with_labels=True) for d in rest])
        decisions = service.collect("decisions", lambda m: len({d.id for d in m}) >= len(rest))
        assert {d.id for d in decisions} == {d.id for d in rest}, service.logs()[-3000:]
        deadline = time.monotonic() + 30
        while open_learner(client, service.model, create=False).store.version == version:
            assert time.monotonic() < deadline, service.logs()[-3000:]
            time.sleep(0.2)
        with pytest.raises(redis_py.exceptions.ConnectionError):  # the server speaks TLS only
            redis_py.Redis(host="127.0.0.1", port=port, socket_timeout=2).ping()
    finally:
        server.kill()
        server.wait(timeout=10)
