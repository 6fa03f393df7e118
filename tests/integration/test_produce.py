"""``produce`` as the README uses it: every label applied, score-only lines, labels for documents sent earlier."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from stream_winnow.datasets import write_labelled_jsonl
from stream_winnow.datasets.synthetic import synthetic_stream
from tests.integration.test_worker import REPO, Service, http_get, metric
from tests.integration.test_worker import service as service  # noqa: F401 - the fixture
from workers.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def own_broker(redis_url: str, tmp_path: Path) -> Iterator[Service]:
    """A service on a broker of its own: Tansu keeps topics in memory and slows as they fill, so the full
    ModApte stream on the session's broker would slow every later test."""
    from workers.embedded import create_topics, start_broker

    with start_broker() as broker:
        s = Service(broker.bootstrap_servers, redis_url, tmp_path)
        s.topics = {"documents": "documents", "labels": "labels", "decisions": "decisions",
                    "dead_letters": "dead-letters"}  # fmt: skip
        create_topics(broker.bootstrap_servers, {"documents": 4, "labels": 4, "decisions": 4, "dead-letters": 1})
        try:
            yield s
        finally:
            for process in s.processes:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=10)


def _produce(service: Service, *args: str) -> str:
    result = CliRunner().invoke(main, ["produce", "--quiet", "--bootstrap-servers", service.bootstrap,
                                       "--topic", service.topics["documents"],
                                       "--labels-topic", service.topics["labels"], *args])  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def _workers_ready(service: Service, n: int, **extra: str) -> list[int]:
    from workers.embedded import free_port

    ports = [free_port() for _ in range(n)]
    for port in ports:
        service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port), STREAM_WINNOW_BATCH_MAX_DOCS="2000", **extra)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all(http_get(port, "/readyz")[0] == 200 for port in ports):
        time.sleep(0.5)
    return ports


def _counted(ports: list[int], name: str, reaches: float, timeout_s: float = 180.0) -> float:
    deadline = time.monotonic() + timeout_s
    total = 0.0
    while time.monotonic() < deadline:
        total = sum(metric(http_get(port, "/metrics")[1], name) for port in ports)
        if total >= reaches:
            break
        time.sleep(0.5)
    return total


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("delay", [0, 50])
def test_the_readme_recipe_applies_every_label_with_two_workers(own_broker: Service, tmp_path: Path, delay: int) -> None:
    """The full ModApte training file, produced as the README says, with two workers: 100 % learned."""
    archive = Path(os.environ.get("STREAM_WINNOW_REUTERS", REPO / "../shared/datasets/reuters21578.tar.gz"))
    if not archive.exists():
        pytest.skip(f"Reuters-21578 archive not found at {archive}")
    from stream_winnow.datasets import read_modapte

    train = read_modapte(archive).train
    path = tmp_path / "train.jsonl"
    write_labelled_jsonl(path, train)
    service = own_broker
    ports = _workers_ready(service, 2)
    output = _produce(service, "--input", str(path), "--labels-delay", str(delay))
    assert f"{len(train):,} labelled events to" in output
    learned = _counted(ports, "stream_winnow_labelled_events_total", len(train))
    letters = sum(metric(http_get(port, "/metrics")[1], 'stream_winnow_dead_letters_total{reason="document-not-cached"}')
                  for port in ports)  # fmt: skip
    assert (learned, letters) == (len(train), 0), service.logs()[-3000:]


def test_lines_without_labels_are_only_scored_and_empty_labels_are_learned(service: Service, tmp_path: Path) -> None:
    docs = synthetic_stream(30, seed=36)
    path = tmp_path / "mixed.jsonl"
    lines = [{"id": d.id, "tokens": list(d.tokens)} | ({"labels": list(d.labels)} if i % 3 else {})
             for i, d in enumerate(docs)]  # fmt: skip
    lines[1]["labels"] = []  # belongs to no category, said explicitly
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    ports = _workers_ready(service, 1)
    output = _produce(service, "--input", str(path), "--wait-s", "90", "--decisions-topic", service.topics["decisions"],
                      "--dead-letters-topic", service.topics["dead_letters"])  # fmt: skip
    assert "30 documents to" in output and "(10 to be scored only)" in output and "20 labelled events to" in output
    assert "30 of 30 documents decided within 90 s; 0 dead letters" in output
    assert _counted(ports, "stream_winnow_labelled_events_total", 20) == 20
    assert _counted(ports, "stream_winnow_decisions_emitted_total", 30) == 30

    labels_only = tmp_path / "labels.jsonl"
    never_sent = json.dumps({"id": "never-sent", "labels": ["x"]}) + "\n"
    labels_only.write_text("".join(json.dumps({"id": d.id, "labels": list(d.labels)}) + "\n" for d in docs[:10])
                           + never_sent, encoding="utf-8")  # fmt: skip
    output = _produce(service, "--input", str(labels_only), "--labels-only", "--wait-s", "20",
                      "--dead-letters-topic", service.topics["dead_letters"],
                      "--decisions-topic", service.topics["decisions"])  # fmt: skip
    assert "11 labelled events to" in output
    assert "1 dead letter (1 document-not-cached; `tail dead-letters` shows them)" in output
    assert _counted(ports, "stream_winnow_labelled_events_total", 30) == 30  # tokens from the document cache


def test_a_bad_line_stops_produce_before_anything_is_sent(service: Service, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "a", "tokens": ["grain"], "labels": ["grain"]})
    path.write_text(good + "\n" + good.replace('"a"', '"b"') + "\n" + '{"id": "c", "tokens": "grain"}\n')
    result = CliRunner().invoke(main, ["produce", "--quiet", "--input", str(path), "--bootstrap-servers",
                                       service.bootstrap, "--topic", service.topics["documents"]])  # fmt: skip
    assert result.exit_code != 0
    assert f"{path}:3: 'tokens' must be a list of strings" in result.output
    assert "Traceback" not in result.output
    from workers.transport import KafkaSettings, make_consumer

    consumer = make_consumer(KafkaSettings(service.bootstrap))
    consumer.subscribe([service.topics["documents"]], "bad-line-reader")
    try:
        records = [r for _ in range(6) for r in consumer.poll_batch(100, 500)]
    finally:
        consumer.close()
    assert [msgpack.unpackb(r.value)["id"] for r in records] == []
