"""Subcommands that run the service: ``worker`` (and, with the embedded default, ``up`` / ``demo``).

Every flag of ``worker`` can also be set by the environment variable
``STREAM_WINNOW_<FLAG>`` (``--bootstrap-servers`` → ``STREAM_WINNOW_BOOTSTRAP_SERVERS``);
``WORKER_FLAGS`` lists them for the deploy check.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from stream_winnow.errors import ConfigError, ServiceUnavailable, TransportError
from stream_winnow.learners import LEARNERS
from stream_winnow.learners.base import Learner
from stream_winnow.models.named import connect, open_learner
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.stores.cached import CachedStore
from stream_winnow.wire.codec import CodecLimits
from workers.config import (
    DEFAULT_DECISION_SCORES,
    ENV_PREFIX,
    MAX_BATCH_LINGER_MS,
    Topics,
    WorkerConfig,
    default_worker_id,
    redact_url,
)
from workers.transport import COMPRESSIONS, Consumer, KafkaSettings, Producer, make_consumer, make_producer

T = TypeVar("T")


def env(flag: str) -> str:
    """The environment variable of a flag: ``--redis-url`` → ``STREAM_WINNOW_REDIS_URL``."""
    return f"{ENV_PREFIX}_{flag.lstrip('-').replace('-', '_').upper()}"


def option(flag: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click option that also reads ``STREAM_WINNOW_<FLAG>`` and shows it in --help."""
    return click.option(flag, envvar=env(flag), show_envvar=True, **kwargs)


class DecisionScores(click.ParamType):
    """``all`` (None) or a count of highest scores, at least 0."""

    name = "N|all"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text == "all":
            return None
        try:
            count = int(text)
        except ValueError:
            count = -1
        if count < 0:
            self.fail(f"{value!r} is neither 'all' nor a whole number >= 0", param, ctx)
        return count


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Where Redis is and which model (``STREAM_WINNOW_REDIS_URL``, ``STREAM_WINNOW_MODEL``)."""
    for decorator in reversed([
        option("--redis-url", default="redis://127.0.0.1:6379/0", show_default=True,
               help="redis://[:password@]host:port/db (a Cluster node's URL for a Cluster)."),
        option("--model", default="default", show_default=True, help="The model's name in Redis."),
    ]):  # fmt: skip
        command = decorator(command)
    return command


def connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Where the broker and Redis are, and the model's name (shared by every service command)."""
    bootstrap = option("--bootstrap-servers", default="127.0.0.1:9092", show_default=True,
                       help="Kafka host:port[,...].")  # fmt: skip
    return bootstrap(model_options(command))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("topic", "partition", "offset", "reason"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kafka-python logs every reconnect at WARNING/ERROR; the worker says what matters itself.
    logging.getLogger("kafka").setLevel(logging.CRITICAL if level.upper() != "DEBUG" else logging.DEBUG)


@click.command("worker")
@connection_options
@option("--kafka-client", type=click.Choice(["kafka-python", "confluent"]), default="kafka-python",
        show_default=True, help="confluent (librdkafka) is ~3.7x faster here; needs the 'fast' extra.")
@option("--security-protocol", type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
        default="PLAINTEXT", show_default=True)
@option("--sasl-mechanism", type=click.Choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), default=None)
@option("--sasl-username", default=None)
@option("--sasl-password", default=None, help="Prefer the environment variable or --sasl-password-file; never logged.")
@option("--sasl-password-file", type=click.Path(dir_okay=False), default=None,
        help="Read the SASL password from this file (a mounted Secret), instead of --sasl-password.")
@option("--redis-url-file", type=click.Path(dir_okay=False), default=None,
        help="Read the Redis URL (with its password) from this file (a mounted Secret), instead of --redis-url.")
@option("--ssl-cafile", default=None, type=click.Path(dir_okay=False))
@option("--group-id", default="stream-winnow", show_default=True, help="Consumer group of the workers.")
@option("--session-timeout-ms", type=click.IntRange(min=1000), default=10_000, show_default=True,
        help="A dead worker's partitions move to the others after this.")
@option("--documents-topic", default="documents", show_default=True)
@option("--labels-topic", default="labels", show_default=True)
@option("--decisions-topic", default="decisions", show_default=True)
@option("--dead-letters-topic", default="dead-letters", show_default=True)
@option("--learner", type=click.Choice(list(LEARNERS)), default="balanced-winnow", show_default=True,
        help="Learner of a model created by this worker (an existing model keeps its own).")
@option("--shards", type=click.IntRange(1, 16384), default=16, show_default=True,
        help="Feature shards of a new model (hash tags for a Redis Cluster).")
@option("--batch-max-docs", type=click.IntRange(min=1), default=2000, show_default=True,
        help="Records per batch at most: one Redis read for scoring, one script per shard for learning.")
@option("--batch-max-labels", type=click.IntRange(min=1), default=4000, show_default=True,
        help="Records per batch at most when a batch holds only labelled events (a backlog of them).")
@option("--peer-mixing", type=click.Choice(["sum", "average"]), default="sum", show_default=True,
        help="With other workers learning the same model, write each change whole (sum) or at 1/peers "
             "of its strength (average: fewer, larger rounds, less CPU; decisions learn more slowly).")
@option("--learn-staleness-events", type=click.IntRange(min=0), default=0, show_default=True,
        help="With other workers learning the same model, learn in rounds that miss at most this many "
             "of their events (smaller: closer to one learner, more Redis work an event); 0: 60 "
             "summed, 300 averaged.")
@option("--batch-linger-ms", type=click.IntRange(0, MAX_BATCH_LINGER_MS), default=0, show_default=True,
        help="How long a batch may wait for more records after its first (0: what one fetch brought); "
             "below saturation, fewer larger batches cost less CPU a document and add this to latency.")
@option("--fetch-max-wait-ms", type=click.IntRange(min=0), default=10, show_default=True,
        help="How long the broker may hold a fetch for data; latency floor on brokers without long polling.")
@option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True,
        help="How long decisions wait to fill a produce batch; it is in every decision's latency "
             "(longer: fewer, larger batches, less broker work).")
@option("--compression", type=click.Choice(COMPRESSIONS), default="none", show_default=True,
        help="Codec of the decision batches this worker produces (documents are read in any codec).")
@option("--max-batches-in-flight", type=click.IntRange(min=0), default=4, show_default=True,
        help="Batches whose decisions may await the broker's acknowledgement while the next is processed "
             "(0: wait for each); a crash repeats at most this many + 1.")
@option("--commit-interval-ms", type=click.IntRange(min=0), default=100, show_default=True,
        help="Commit acknowledged offsets at most this often while the stream flows (0: after every batch); "
             "a crash repeats up to this much input more, labels still apply once.")
@option("--decision-scores", type=DecisionScores(), default=str(DEFAULT_DECISION_SCORES), show_default=True,
        help="Scores per decision: the N highest and every assigned category's, or 'all' categories'.")
@option("--poll-timeout-ms", type=click.IntRange(min=1), default=500, show_default=True)
@option("--max-tokens-per-document", type=click.IntRange(min=1), default=10_000, show_default=True)
@option("--max-message-bytes", type=click.IntRange(min=64), default=1_048_576, show_default=True)
@option("--document-cache-ttl-s", type=click.IntRange(min=1), default=86_400, show_default=True)
@option("--max-categories", type=click.IntRange(min=1), default=1_000, show_default=True,
        help="Categories a model may have; a labelled event naming new ones past it is dead-lettered "
             "(too-many-categories). Each adds 4 bytes a feature a table in Redis.")
@option("--max-staleness-ms", type=click.IntRange(min=0), default=0, show_default=True,
        help="Once the model changed, still score with cached weights at most this old (0: exact, re-read).")
@option("--weight-cache-mib", type=click.IntRange(min=1), default=256, show_default=True,
        help="Memory for weight rows cached in the worker (exact while the model is unchanged).")
@option("--http-port", type=click.IntRange(0, 65535), default=9400, show_default=True,
        help="/metrics, /healthz and /readyz (0: off); when taken, the next free one of the 20 above it.")
@option("--http-host", default="127.0.0.1", show_default=True,
        help="Address the endpoints listen on; 0.0.0.0 in a pod, so probes and Prometheus reach them.")
@option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        default="INFO", show_default=True)
@option("--worker-id", default=None, help="Name in logs and decisions [default: host-pid].")
def worker(**flags: Any) -> None:
    """Join the consumer group: score documents, emit decisions, learn from labelled events."""
    config = worker_config(flags)
    setup_logging(config.log_format, config.log_level)
    run_worker(config)


# Flags of `worker`, for the check that deploy/ sets only variables the worker reads.
WORKER_ENV = sorted(env(p.opts[0]) for p in worker.params if isinstance(p, click.Option) and p.opts[0] != "--help")


def _secret_from_file(flags: dict[str, Any], name: str) -> None:
    """Replace ``flags[name]`` by the first line of the file ``flags[name + "_file"]`` when one is given."""
    path = flags.pop(name + "_file", None)
    if path is None:
        return
    flag = "--" + name.replace("_", "-")
    if name == "sasl_password" and flags.get(name) is not None:
        raise ConfigError(f"give {flag} or {flag}-file, not both")
    try:
        with open(path, encoding="utf-8") as source:
            value = source.readline().rstrip("\r\n")
    except OSError as error:
        raise ConfigError(f"cannot read {flag}-file {path}: {error.strerror or error}") from None
    if not value:
        raise ConfigError(f"{flag}-file {path} is empty")
    flags[name] = value


def worker_config(flags: dict[str, Any]) -> WorkerConfig:
    flags = dict(flags)
    for name in ("redis_url", "sasl_password"):
        _secret_from_file(flags, name)
    kafka = KafkaSettings(
        bootstrap_servers=flags["bootstrap_servers"],
        security_protocol=flags["security_protocol"],
        sasl_mechanism=flags["sasl_mechanism"],
        sasl_username=flags["sasl_username"],
        sasl_password=flags["sasl_password"],
        ssl_cafile=flags["ssl_cafile"],
        max_poll_records=flags["batch_max_docs"],
        session_timeout_ms=flags["session_timeout_ms"],
        fetch_max_wait_ms=flags["fetch_max_wait_ms"],
        linger_ms=flags["linger_ms"],
        compression=flags["compression"],
    )
    return WorkerConfig(
        kafka=kafka,
        redis_url=flags["redis_url"],
        model=flags["model"],
        kafka_client=flags["kafka_client"],
        group_id=flags["group_id"],
        topics=Topics(flags["documents_topic"], flags["labels_topic"], flags["decisions_topic"],
                      flags["dead_letters_topic"]),  # fmt: skip
        batch_max_docs=flags["batch_max_docs"],
        batch_max_labels=flags["batch_max_labels"],
        peer_mixing=flags["peer_mixing"],
        learn_staleness_events=flags["learn_staleness_events"] or None,
        batch_linger_ms=flags["batch_linger_ms"],
        poll_timeout_ms=flags["poll_timeout_ms"],
        max_batches_in_flight=flags["max_batches_in_flight"],
        commit_interval_ms=flags["commit_interval_ms"],
        decision_scores=flags["decision_scores"],
        limits=CodecLimits(max_tokens_per_document=flags["max_tokens_per_document"],
                           max_message_bytes=flags["max_message_bytes"]),  # fmt: skip
        learner=flags["learner"],
        shards=flags["shards"],
        document_cache_ttl_s=flags["document_cache_ttl_s"],
        max_categories=flags["max_categories"],
        max_staleness_ms=flags["max_staleness_ms"],
        weight_cache_mib=flags["weight_cache_mib"],
        http_port=flags["http_port"],
        http_host=flags["http_host"],
        log_format=flags["log_format"],
        log_level=flags["log_level"].upper(),
        worker_id=flags["worker_id"] or default_worker_id(),
    )


def run_worker(config: WorkerConfig) -> None:
    """Connect (retrying until Redis answers), serve health and metrics, and run the loop until SIGTERM."""
    from workers.health import serve_http
    from workers.metrics import WorkerMetrics
    from workers.worker import Worker

    log = logging.getLogger("stream_winnow.worker")
    log.info("starting worker %s: model %s, group %s, broker %s (%s), Redis %s; --log-level DEBUG shows every setting",
             config.worker_id, config.model, config.group_id, config.kafka.bootstrap_servers, config.kafka_client,
             redact_url(config.redis_url))  # fmt: skip
    log.debug("settings: %r", config)

    def open_model() -> tuple[Any, Learner]:
        client = connect(config.redis_url)
        learner = open_learner(client, config.model, learner=config.learner, shards=config.shards)
        learner.store = CachedStore(learner.store, config.max_staleness_ms, config.weight_cache_mib * 2**20)
        return client, learner

    def open_broker() -> tuple[Consumer, Producer]:
        consumer = make_consumer(config.kafka, config.kafka_client)
        try:
            return consumer, make_producer(config.kafka, config.kafka_client)
        except TransportError:
            consumer.close()
            raise

    client, learner = _until_up(f"Redis at {redact_url(config.redis_url)}", open_model, config, log)
    metrics = WorkerMetrics()
    consumer, producer = _until_up(f"broker at {config.kafka.bootstrap_servers}", open_broker, config, log)
    the_worker = Worker(
        config,
        consumer,
        producer,
        learner,
        DocumentCache(client, config.model, config.document_cache_ttl_s),
        metrics,
    )
    the_worker.state.redis_ok = True
    server = serve_http(config.http_port, metrics, the_worker.state, config.http_host) if config.http_port else None
    the_worker.install_signal_handlers()
    try:
        the_worker.run()
    finally:
        if server is not None:
            server.shutdown()


def _until_up(service: str, attempt: Callable[[], T], config: WorkerConfig, log: logging.Logger) -> T:
    """``attempt()``, retried with the worker's back-off (doubling, capped) while ``service`` is unavailable."""
    delay_s = config.retry_initial_ms / 1000
    while True:
        try:
            return attempt()
        except ServiceUnavailable as error:
            log.warning("%s unavailable (%s); retrying in %.1f s", service, error, delay_s)
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, config.retry_max_ms / 1000)


COMMANDS = [worker]
