"""The one-machine commands end to end: ``produce`` → a worker → ``tail``, ``demo`` and ``up``."""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaProducer

from stream_winnow.datasets import write_labelled_jsonl
from stream_winnow.datasets.synthetic import synthetic_stream
from stream_winnow.models.named import connect, open_learner
from workers.cli import main

pytestmark = [pytest.mark.integration]

# A worker's first group join on Tansu takes about 5 s; the rest allows for a loaded 2-core machine.
JOIN_S = 60.0


def _clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without STREAM_WINNOW_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_WINNOW_")}
    env.update({f"STREAM_WINNOW_{k.upper()}": v for k, v in settings.items()})
    return env


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workers.cli", *args], text=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_clean_env())  # fmt: skip


@pytest.fixture
def worker_topics(topic_factory: Callable[..., str]) -> dict[str, str]:
    return {
        "documents_topic": topic_factory(4, "docs"),
        "labels_topic": topic_factory(4, "labels"),
        "decisions_topic": topic_factory(4, "decisions"),
        "dead_letters_topic": topic_factory(1, "dead"),
    }


@pytest.fixture
def worker(kafka_bootstrap: str, redis_url: str, worker_topics: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """One `stream-winnow worker` process on the test topics; yields its model name."""
    model = f"cli-{uuid.uuid4().hex[:10]}"
    env = _clean_env(bootstrap_servers=kafka_bootstrap, redis_url=redis_url, model=model,
                     group_id=f"group-{model}", http_port="0", **worker_topics)  # fmt: skip
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "workers.cli", "worker"], env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield model
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
        print(log_path.read_text(errors="replace")[-3000:])  # shown when the test fails
    assert code == 0


@pytest.mark.timeout(150)
def test_produce_worker_tail_round_trip(
    kafka_bootstrap: str, redis_url: str, worker_topics: dict[str, str], worker: str, tmp_path: Path
) -> None:
    docs = synthetic_stream(100, seed=5)
    path = tmp_path / "docs.jsonl"
    write_labelled_jsonl(path, docs)
    runner = CliRunner()
    connection = ["--bootstrap-servers", kafka_bootstrap]

    produced = runner.invoke(main, ["produce", "--input", str(path), "--labels-delay", "10", "--quiet",
                                    "--topic", worker_topics["documents_topic"],
                                    "--labels-topic", worker_topics["labels_topic"], *connection])  # fmt: skip
    assert produced.exit_code == 0, produced.output
    assert "100 documents to" in produced.output and "100 labelled events to" in produced.output

    # One message the worker cannot read: it must come out on the dead-letter topic.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(worker_topics["documents_topic"], b"not msgpack", key=b"bad").get(10)
    producer.close()

    tailed = runner.invoke(main, ["tail", "decisions", "--from-beginning", "--max", "100", "--timeout-s", str(JOIN_S),
                                  "--decisions-topic", worker_topics["decisions_topic"], *connection])  # fmt: skip
    assert tailed.exit_code == 0, tailed.output
    decisions = [json.loads(line) for line in tailed.output.splitlines()]
    assert {d["id"] for d in decisions} == {doc.id for doc in docs}
    first = decisions[0]
    assert first["model"] == worker and isinstance(first["categories"], list) and "decided_ts" in first

    letters = runner.invoke(main, ["tail", "dead-letters", "--from-beginning", "--max", "1", "--timeout-s", "30",
                                   "--dead-letters-topic", worker_topics["dead_letters_topic"], *connection])  # fmt: skip
    assert letters.exit_code == 0, letters.output
    (letter,) = [json.loads(line) for line in letters.output.splitlines()]
    assert letter["reason"] == "not-msgpack"
    assert base64.b64decode(letter["original"]) == b"not msgpack"

    # The labelled events (no tokens: the worker's document cache has them) taught the model.
    client = connect(redis_url)
    try:
        deadline = time.monotonic() + 30
        while open_learner(client, worker, create=False).store.version == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert open_learner(client, worker, create=False).store.version > 0
    finally:
        client.close()


def test_tail_of_a_missing_topic_says_so(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(main, ["tail", "decisions", "--decisions-topic", f"none-{uuid.uuid4().hex[:8]}",
                                       "--timeout-s", "1", "--bootstrap-servers", kafka_bootstrap])  # fmt: skip
    assert result.exit_code == 2
    assert "no topic" in result.output


@pytest.mark.timeout(180)
def test_demo_end_to_end_on_a_small_synthetic_stream() -> None:
    process = _cli("demo", "--documents", "400", "--workers", "2", "--timeout-s", "120")
    try:
        out, err = process.communicate(timeout=170)
    except subprocess.TimeoutExpired:
        process.terminate()  # the demo stops its workers and services on SIGTERM
        out, err = process.communicate(timeout=60)
        pytest.fail(f"demo did not finish; stderr:\n{err}")
    assert process.returncode == 0, err
    assert "synthetic stream (400 documents" in out
    assert re.search(r"decisions\s+400\b", out), out
    micro_f1 = float(re.search(r"micro-F1\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    assert micro_f1 > 0.6, out
    assert re.search(r"dead letters\s+0\b", out), out
    assert "micro-F1" in err  # the live progress line


@pytest.mark.timeout(60)
def test_up_prints_exports_and_stops_on_sigterm() -> None:
    process = _cli("up", "--broker-port", "0", "--redis-port", "0", "--partitions", "2")
    try:
        exports = _read_lines(process, 2, timeout_s=30)
        settings = dict(line.removeprefix("export ").split("=", 1) for line in exports)
        assert set(settings) == {"STREAM_WINNOW_BOOTSTRAP_SERVERS", "STREAM_WINNOW_REDIS_URL"}
        bootstrap, url = settings["STREAM_WINNOW_BOOTSTRAP_SERVERS"], settings["STREAM_WINNOW_REDIS_URL"]

        client = redis.Redis.from_url(url)
        assert client.ping()
        client.close()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        assert {"documents", "labels", "decisions", "dead-letters"} <= set(admin.list_topics())
        admin.close()

        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 143  # the shell's code for SIGTERM, after stopping both services
    finally:
        if process.poll() is None:  # SIGTERM first: a killed `up` would leave its broker and Redis behind
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()


def _read_lines(process: subprocess.Popen[str], n: int, timeout_s: float) -> list[str]:
    """The first ``n`` lines of the process's stdout (a thread reads them: select() misses buffered lines)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        try:
            got.append(lines.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            pytest.fail(f"{n} lines expected within {timeout_s} s, got {got} (exit code {process.poll()})")
    return got


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_demo_stops_within_seconds_on_ctrl_c_and_sigterm(signum: int, code: int) -> None:
    before = set(_worker_pids())
    process = _cli("demo", "--documents", "20000", "--workers", "2", "--timeout-s", "120")
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 100
        for line in process.stderr:  # until it streams: the broker, Redis and workers are all up
            if line.startswith("streaming") or time.monotonic() > deadline:
                break
        time.sleep(2.0)
        process.send_signal(signum)
        started = time.monotonic()
        assert process.wait(20) == code
        assert time.monotonic() - started < 10
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    left = set(_worker_pids()) - before
    assert not left, f"workers left running: {sorted(left)}"


def _worker_pids() -> list[str]:
    return subprocess.run(["pgrep", "-f", "workers.cli worker"], capture_output=True, text=True).stdout.split()
