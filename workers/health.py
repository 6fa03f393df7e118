"""The worker's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz`` (loop turning), ``/readyz`` (serving)."""

from __future__ import annotations

import errno
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from stream_winnow.errors import ConfigError
from workers.metrics import WorkerMetrics
from workers.worker import WorkerState

# /healthz fails when the loop has not turned for this long (a batch retrying Redis still turns it).
STALL_S = 60.0

log = logging.getLogger("stream_winnow.worker")


# Ports tried above a taken one, so a second worker on one machine serves its own endpoints.
PORTS_TRIED = 20


def serve_http(port: int, metrics: WorkerMetrics, state: WorkerState, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve in a daemon thread on ``port`` or, when taken, the next free one of ``PORTS_TRIED`` above it
    (logged); ``shutdown()`` stops it. Raises ``ConfigError`` when all are taken."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            if self.path == "/metrics":
                self._reply(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                ok = state.alive(STALL_S)
                self._reply(200 if ok else 503, b"ok\n" if ok else b"stalled\n")
            elif self.path == "/readyz":
                ok = state.ready()
                detail = (
                    f"broker={'ok' if state.broker_ok else 'down'} redis={'ok' if state.redis_ok else 'down'} "
                    f"partitions={len(state.assigned)}\n"
                )
                self._reply(200 if ok else 503, detail.encode())
            else:
                self._reply(404, b"not found\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet access logs
            return

    server = _bind(host, port, Handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


def _bind(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    for candidate in range(port, min(port + PORTS_TRIED, 65535) + 1):
        try:
            server = ThreadingHTTPServer((host, candidate), handler)
        except OSError as error:
            if error.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise ConfigError(f"cannot serve /metrics on {host}:{port}: {error.strerror}") from None
            continue
        if candidate != port:
            log.warning("port %d is taken; serving /metrics, /healthz and /readyz on %s:%d", port, host, candidate)
        return server
    raise ConfigError(f"ports {port}-{port + PORTS_TRIED} on {host} are all taken; give --http-port another (0: off)")
