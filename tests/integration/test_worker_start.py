"""A worker's start on a busy machine: its metrics port taken, the broker not up yet."""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests.integration.test_worker import Service, http_get
from tests.integration.test_worker import service as service  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def _log_line(service: Service, pattern: str, timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, service.logs())
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"no log line like {pattern!r}:\n{service.logs()[-2000:]}")


def test_a_second_worker_on_a_taken_port_serves_on_the_next_free_one(service: Service) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service.start_worker(STREAM_WINNOW_HTTP_PORT=str(port))
        found = _log_line(service, rf"port {port} is taken; serving /metrics, /healthz and /readyz on 127.0.0.1:(\d+)",
                          timeout_s=60)  # fmt: skip
        other = int(found.group(1))
        assert port < other <= port + 20
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and http_get(other, "/readyz")[0] != 200:
            time.sleep(0.5)
        assert http_get(other, "/readyz")[0] == 200, service.logs()[-2000:]


@pytest.mark.slow
def test_a_worker_started_before_the_broker_says_so_and_keeps_trying(service: Service) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]
    process = service.start_worker(STREAM_WINNOW_BOOTSTRAP_SERVERS=f"127.0.0.1:{nobody}", STREAM_WINNOW_HTTP_PORT="0",
                                   STREAM_WINNOW_RETRY_MAX_MS="1000")  # fmt: skip
    _log_line(service, rf"broker at 127\.0\.0\.1:{nobody} unavailable .*; retrying in", timeout_s=90)
    assert process.poll() is None, service.logs()[-2000:]
