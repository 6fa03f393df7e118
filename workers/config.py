"""The worker's settings: one frozen object, built from flags and ``STREAM_WINNOW_*`` variables in one place.

Every flag ``--some-name`` has the environment variable ``STREAM_WINNOW_SOME_NAME``
(click's ``auto_envvar_prefix``); ``deploy/`` sets exactly these names and
``tests/test_deploy.py`` checks both lists agree. Secrets (the Redis URL's
password, the SASL password) are kept out of ``repr`` and logs.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, fields
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from stream_winnow.errors import ConfigError
from stream_winnow.shared.learning_peers import PeerMixing
from stream_winnow.wire.codec import CodecLimits
from workers.transport import Client, KafkaSettings

ENV_PREFIX = "STREAM_WINNOW"
LogFormat = Literal["text", "json"]
# The highest scores a decision carries by default (the assigned categories' always come too).
DEFAULT_DECISION_SCORES = 10
# The longest a batch may wait for more records (``batch_linger_ms``): a linger is in every latency,
# and a second is already ten times the p99 the service is built for.
MAX_BATCH_LINGER_MS = 1000


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``.

    >>> redact_url("redis://:s3cret@redis:6379/0")
    'redis://:***@redis:6379/0'
    >>> redact_url("redis://127.0.0.1:6379")
    'redis://127.0.0.1:6379'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def default_worker_id() -> str:
    """Host name and process id: unique per pod and per process on a machine."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Topics:
    """Topic names; the defaults are the contract in ``schemas/``."""

    documents: str = "documents"
    labels: str = "labels"
    decisions: str = "decisions"
    dead_letters: str = "dead-letters"


@dataclass(frozen=True)
class WorkerConfig:
    """Everything one worker process needs; see ``stream-winnow worker --help`` for each setting."""

    kafka: KafkaSettings
    redis_url: str = field(repr=False)
    model: str = "default"
    kafka_client: Client = "kafka-python"
    group_id: str = "stream-winnow"
    topics: Topics = field(default_factory=Topics)
    # One batch = one Redis read round trip for scoring and one script per shard for learning. At
    # saturation 2,000 documents are ~60 ms of scoring; learning gains most: 4,746 / 4,902 mistaken
    # events/s at 1,000, 6,830 / 6,336 at 2,000 (benchmarks.service --phases learning, two runs
    # each), while the longest script blocks Redis for up to 12.5 ms instead of 5.6
    # (benchmarks/profile_worker.py learn --batch 1000, then 2000). Below saturation batches stay
    # small whatever this is.
    batch_max_docs: int = 2000
    # A backlog of labelled events only (a relabelling job, a worker catching up) is learned in
    # batches of up to this many: each changed row is written once a batch, so larger batches write
    # fewer rows an event. Learning at 4,000: 5,310 / 5,166 mistaken events/s against 3,959 / 3,561
    # at 2,000 (benchmarks.service --phases learning). Documents keep batch_max_docs: with 4,000
    # for them too the p99 at 12,000 docs/s rose from 86-87 to 111-154 ms.
    batch_max_labels: int = 4000
    # How workers learning one model write their changes (stream_winnow/shared/learning_peers.py): whole
    # (sum), or at 1/peers of their strength (average). Balanced Winnow on the ModApte stream, 2 pods
    # (python -m benchmarks.scale, medians of 3): averaged, 271 against 497 Redis and 619 against 986
    # worker CPU µs an event, prequential micro-F1 0.7618 against 0.7760; at 4 pods 0.7413 against 0.7741.
    peer_mixing: PeerMixing = "sum"
    # With peers, a worker learns a batch in rounds, reading the rows again before each, so that a
    # round misses at most this many of the others' events: rounds of staleness / (peers - 1) events.
    # None: STALENESS_EVENTS of the mixing, 60 summed, 300 averaged (summed whole batches of 500 at
    # 4 pods left Balanced Winnow a test micro-F1 of 0.21: python -m benchmarks.peer_mixing).
    learn_staleness_events: int | None = None
    # How long a batch may wait for more records after its first ones, up to batch_max_docs (0:
    # take what one fetch brought). Below saturation it buys CPU with latency, more latency than the
    # linger itself: at 18,700 documents/s (half this machine's maximum that day), 15 ms took the
    # worker from 42.6-46.6 to 35.7-41.0 µs of CPU a document and the broker from 21.7-24.5 to
    # 19.2-21.3, the p50 from 34-40 ms to 66-84, the p99 from 59-118 to 130-169 (benchmarks.service
    # --phases latency --latency-rate 18700 --repeats 2, with --worker-arg=--batch-linger-ms=15 and
    # without, three pairs alternating; one invocation of each had a run over 1 s while the host stole
    # 10-20 % of the CPUs). Hence 0: the service is built for latency.
    batch_linger_ms: int = 0
    # How long a poll waits for the first record; bounds SIGTERM response and idle CPU.
    poll_timeout_ms: int = 500
    # Batches whose outputs may still await the broker's acknowledgement while the next one is
    # processed. Waiting for each (0) was 38 % of the loop at 12,000 documents/s, the commit
    # another 10 %; with 2 the acknowledgements (about 8 ms a batch) overlap the next batches' work.
    # With decisions lingering 20 ms (the default then) an acknowledgement took 2-3 batches at half the maximum load,
    # so 2 still made the loop wait (6 % of it, py-spy at 12,600 documents/s); with 4 the p99 there
    # was 55.7 / 70.9 / 68.2 ms against 73.0 / 82.4 / 82.0 (benchmarks.service --phases latency,
    # pairs alternating). A crash repeats at most this many + 1 batches (updates still apply once).
    max_batches_in_flight: int = 4
    # Acknowledged offsets are committed at most this often while the stream flows (0: after every
    # batch, one commit request for about every fetch); everything is committed at once when the
    # topics go quiet, on a rebalance and at stop. A crash repeats up to this much input more
    # (labels still apply once), as with Kafka's auto.commit.interval.ms (5 s by default). At 24,574
    # documents/s with confluent, 0 sent 83-86 commits a second, 100 ms 9.3-9.4 and 1,000 ms one
    # (benchmarks.service --phases latency --latency-rate 24574 --repeats 2 --worker-arg=
    # --commit-interval-ms=N, three pairs alternating for each); on the embedded broker the CPU
    # and the p99 did not move beyond the noise (the worker 26.1-29.3 µs a document with 0 and
    # 27.2-28.9 with 100; p99s 38.1-44.8 and 37.7-52.6 ms). 100 ms keeps a tenth of the commit
    # requests while the lag that KEDA scales on (committed offsets) stays within a tenth of a
    # second of input, not a second's.
    commit_interval_ms: int = 100
    limits: CodecLimits = field(default_factory=CodecLimits)
    # Scores a decision carries: the N highest plus any assigned category below them (None: every
    # category's). All 90 of the Reuters model make a decision ~1,500 bytes, 10 make it ~300; at
    # 25,000 documents/s on the embedded broker (--linger-ms 20) one worker's p99 latency was
    # 209-684 ms with every score and 75-85 ms with 10 (benchmarks.service --phases latency,
    # three runs each).
    decision_scores: int | None = DEFAULT_DECISION_SCORES
    # Learner used when the model does not exist yet (an existing model keeps its own).
    learner: str = "balanced-winnow"
    shards: int = 16
    # Categories a model may have: each adds 4 bytes to every feature's row of each table (Reuters'
    # 26,000 features, 2 tables: 0.2 MB), so a flood of new names could fill Redis unnoticed.
    max_categories: int = 1_000
    # Labelled events without tokens look the document up here; a day covers a newsroom's edit cycle.
    document_cache_ttl_s: int = 86_400
    # Rows cached in the worker are exact while the model's rows are unchanged; this much older
    # ones may score too once it changes (0: none, every changed row is read again).
    max_staleness_ms: int = 0
    # Memory for those cached rows (float64): 256 MiB holds ~185,000 rows at 90 categories.
    weight_cache_mib: int = 256
    http_port: int = 9400
    # Loopback unless told: the endpoints carry no secrets but should not face a network by accident.
    http_host: str = "127.0.0.1"
    log_format: LogFormat = "text"
    log_level: str = "INFO"
    worker_id: str = field(default_factory=default_worker_id)
    # Back-off between retries when Redis or the broker is down: starts here, doubles, caps at max.
    retry_initial_ms: int = 200
    retry_max_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.learn_staleness_events is not None and self.learn_staleness_events <= 0:
            raise ConfigError(f"learn_staleness_events must be positive; got {self.learn_staleness_events}")
        if self.peer_mixing not in ("sum", "average"):
            raise ConfigError(f"peer_mixing must be sum or average; got {self.peer_mixing!r}")
        for name in ("batch_max_docs", "batch_max_labels", "poll_timeout_ms", "shards", "document_cache_ttl_s", "max_categories",
                     "retry_initial_ms", "weight_cache_mib"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive; got {getattr(self, name)}")
        if self.max_batches_in_flight < 0:
            raise ConfigError(f"max_batches_in_flight must be >= 0; got {self.max_batches_in_flight}")
        if self.commit_interval_ms < 0:
            raise ConfigError(f"commit_interval_ms must be >= 0; got {self.commit_interval_ms}")
        if not 0 <= self.batch_linger_ms <= MAX_BATCH_LINGER_MS:
            raise ConfigError(f"batch_linger_ms must be 0 to {MAX_BATCH_LINGER_MS}; got {self.batch_linger_ms}")
        if self.max_staleness_ms < 0:
            raise ConfigError(f"max_staleness_ms must be >= 0; got {self.max_staleness_ms}")
        if self.decision_scores is not None and self.decision_scores < 0:
            raise ConfigError(f"decision_scores must be >= 0 or None (all); got {self.decision_scores}")
        if not self.model or any(c in self.model for c in "{}: "):
            raise ConfigError(f"model name must be non-empty without braces, colons or spaces; got {self.model!r}")
        if not urlsplit(self.redis_url).scheme.startswith("redis"):
            raise ConfigError(f"redis_url must start with redis:// or rediss://; got {redact_url(self.redis_url)}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"WorkerConfig({shown}, redis_url={redact_url(self.redis_url)!r})"
