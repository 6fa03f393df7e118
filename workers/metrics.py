"""The worker's Prometheus metrics, in a registry of its own (several workers can live in one test process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Batch sizes a worker sees: from a trickle (1) to a full poll (500 by default) and beyond.
_BATCH_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)
# Seconds: a Redis round trip is ~0.1-1 ms on loopback, a batch 1-100 ms.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WorkerMetrics:
    """Counters, gauges and histograms named ``stream_winnow_*``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.documents = Counter("stream_winnow_documents_scored", "Documents scored.", registry=r)
        self.decisions = Counter("stream_winnow_decisions_emitted", "Decisions produced.", registry=r)
        self.labelled = Counter(
            "stream_winnow_labelled_events", "Labelled events and labelled documents learned (redeliveries included).",
            registry=r,
        )
        self.mistakes = Counter(
            "stream_winnow_mistakes", "Categories a labelled event found mistaken, once its update is applied.", ["category"], registry=r
        )
        self.updates = Counter("stream_winnow_updates_applied", "Updates applied to the model.", registry=r)
        self.duplicates = Counter(
            "stream_winnow_duplicate_events", "Labelled records skipped: already applied (redeliveries) or resent with a seen event id.", registry=r
        )
        self.stale_watermarks = Counter(
            "stream_winnow_stale_watermarks",
            "Learning writes refused because another worker had applied records of the partition since "
            "(a partition that moved during a rebalance); the batch's learning was redone.",
            registry=r,
        )
        self.watermark_rollbacks = Counter(
            "stream_winnow_watermark_rollbacks",
            "Watermarks found behind what this worker had written: Redis lost applied writes (a restart "
            "without its last writes, a failover to a replica behind); logged with the offsets lost.",
            registry=r,
        )
        self.partial_redeliveries = Counter(
            "stream_winnow_partial_redeliveries",
            "Labelled records that only some parts of the model had applied (a Cluster write cut short), "
            "learned again for the parts behind.",
            registry=r,
        )
        self.dead_letters = Counter(
            "stream_winnow_dead_letters", "Messages sent to the dead-letter topic.", ["reason"], registry=r
        )
        self.commits = Counter(
            "stream_winnow_offset_commits", "Offset commit requests sent to the broker (async while the stream flows, "
            "sync when it goes quiet, on a rebalance and at stop).", ["mode"], registry=r,
        )
        self.retries = Counter("stream_winnow_retries", "Batches retried after a service error.", ["service"], registry=r)
        self.batch_size = Histogram(
            "stream_winnow_batch_size", "Records per batch.", buckets=_BATCH_BUCKETS, registry=r
        )
        self.batch_seconds = Histogram(
            "stream_winnow_batch_seconds", "Time to process a batch.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.redis_seconds = Histogram(
            "stream_winnow_redis_read_seconds", "Redis weight reads per batch.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.lag = Gauge("stream_winnow_consumer_lag", "Records behind, per partition.", ["topic", "partition"],
                         registry=r)  # fmt: skip
        self.learning_peers = Gauge(
            "stream_winnow_learning_peers", "Workers learning this model, this one included (their heartbeats in Redis).",
            registry=r,
        )
        self.learning_rounds = Counter(
            "stream_winnow_learning_rounds", "Reads of the model's rows to learn on: one a batch alone, more with peers.",
            registry=r,
        )
        self.model_version = Gauge("stream_winnow_model_version", "Model version last seen.", registry=r)
        self.staleness = Gauge("stream_winnow_cache_staleness_seconds", "Age of the weights used to score.", registry=r)
