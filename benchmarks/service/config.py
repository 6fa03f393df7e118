"""What one run measures (:class:`BenchConfig`), and the settings of the clients it starts: the worker's and the harness's own.

The helper clients (pre-loading, the load generator, the collector) use confluent-kafka when it
is installed, whatever client is measured, so that they are never the bottleneck.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Partitions of every topic a run creates: one, as each pod of a group with as many partitions as pods
# consumes (``--partitions 4`` gives one worker four pods' partitions). Tansu 0.6 lists every batch a
# partition holds on each fetch that finds data, and a keyed producer makes a batch per partition per
# linger, so on it the broker's cost grows with partitions x batches: one paced producer of 29,000
# msg/s and one consumer took it from 32 to 75-81 % of a core in 10 s on 4 partitions and from 22 to
# 41-42 % on 1 (``python -m benchmarks.broker_cost --rate 29000 --seconds 11 --partitions 4``, then
# ``1``, twice each). A Kafka broker finds an offset in its segment index whatever the partitions.
PARTITIONS = 1
# Tansu answers a JoinGroup after about half the session timeout; 6 s keeps each join near 3 s
# (only the join is shortened: it is outside every timed span). A --worker-arg overrides it.
SESSION_TIMEOUT_MS = 6_000
# Where the latency runs happen: "fresh", each run (the worker's and the bare pipe's alike) on an
# embedded broker of its own, started for it; "shared", on the broker every other phase used. Tansu's
# memory engine gets slower over an invocation, for a reason not known: neither 1.2 GB, nor 20,000
# batches, nor 150 idempotent producers left on a broker beforehand change its CPU under a paced
# stream (``benchmarks.broker_cost``). On one shared broker, the bare pipe's later run of
# ``--phases latency --latency-rate 24000 --repeats 2 --no-peers`` (the fourth latency run on that
# broker) often has a p99 over 150 ms where a fresh broker gives 44-92 ms. The worker's p99 does not
# tell the two apart. "fresh" is the default because it keeps each run independent of the ones before
# it (a Kafka broker does not slow down with what it served), not for a measured gain.
LATENCY_BROKERS = ("fresh", "shared")
# How long the latency phase's producer lets documents gather into a request (it counts in every
# latency, which starts at send time). Tansu 0.6 spends CPU per produce request in proportion to
# what the topic already holds: with 5 ms one producer of 17,000 msg/s took it from 25 % to 104 %
# of a core in 30 s, with 25 ms it stayed at 12-22 %; at 26,000 docs/s on this 2-core machine
# the worker's p99 was 238 ms with 5, 60 with 10 and 50 with 20 (its bare pipe's 55, 64, 110).
LOAD_LINGER_MS = 10


@dataclass(frozen=True)
class BenchConfig:
    """What one run measures."""

    source: str | None = None
    synthetic: int | None = None
    clients: tuple[str, ...] = ("confluent",)
    documents: int = 100_000
    kafka_python_documents: int | None = None
    # As many as the other phases' documents (100,000). With 20,000 the phase lasts ~3 s, and its
    # first 0.8 s (a small first batch, learned while the rest are still being sent) is a quarter of
    # it, which understates the steady rate; over 100,000 that first batch is a fifteenth.
    learn_events: int = 100_000
    latency_seconds: float = 10.0
    worker_args: tuple[str, ...] = ()
    peers: bool = True
    profile: bool = False
    profile_top: int = 10
    timeout_s: float = 600.0
    command: str = ""
    phases: tuple[str, ...] = ("pipe", "scoring", "domain-scoring", "learning", "mixed", "latency")
    latency_rate: float | None = None  # offered docs/s in the latency phase; None: half the scoring rate
    load_linger_ms: int = LOAD_LINGER_MS
    load_compression: str = "none"  # codec of the documents' and labels' producers (pre-loading, the load)
    partitions: int = PARTITIONS
    repeats: int = 1  # pipe, scoring and latency are run this many times; the median run is reported
    latency_broker: str = "fresh"  # one of LATENCY_BROKERS

    def documents_for(self, client: str) -> int:
        if client == "kafka-python" and self.kafka_python_documents is not None:
            return min(self.documents, self.kafka_python_documents)
        return self.documents


def worker_settings(worker_args: Sequence[str]) -> Any:
    """The WorkerConfig the worker will build from ``worker_args`` (and the environment): batch size, shards."""
    from workers.cli_service import worker, worker_config

    context = worker.make_context("worker", list(worker_args))
    return worker_config(context.params)


def _helper_client() -> str:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "kafka-python"
    return "confluent"


def _settings(bootstrap: str, client_id: str, batch: int = 500, compression: str = "none") -> Any:
    from workers.transport import KafkaSettings

    # The measuring side never adds latency of its own: fetches return after at most 5 ms.
    return KafkaSettings(bootstrap, client_id=client_id, max_poll_records=batch, session_timeout_ms=SESSION_TIMEOUT_MS,
                         fetch_max_wait_ms=5, compression=compression)  # type: ignore[arg-type]
