"""End-to-end service benchmark: the worker on a real broker and Redis, beside a bare pipe and in-process peers.

One run starts its own embedded Tansu broker and redis-server, trains a model in memory
on the ModApte training split (balanced-winnow, default settings) and writes it to Redis
with ``snapshot.copy_model``, then, for each Kafka client asked for, measures on the
ModApte token stream (training then test documents, repeated with unique ids up to
``--documents``)::

    pipe      consume -> msgpack decode -> msgpack encode -> produce; commits as the worker does
    scoring   the worker on unlabelled documents only (pre-loaded topic)
    domain-scoring
              the same with words and 400 domains (a domain model fitted on the training documents'
              tokens, ``--features both``), alternating with scoring run by run
    learning  the worker on labelled events with tokens, each one a mistake of the model as it
              stands when the event arrives (``mistaken_labels``)
    mixed     documents, plus labelled events (no tokens) for 10 % of them, sent once decided
    latency   documents paced at half the scoring rate, ts = send time; ts -> decision arrival
              over --latency-seconds (10) after a 1 s warm-up, the stream repeated as far as
              that takes; then the bare pipe at the same load (the transport's own latency)

Throughput is counted at a consumer in this process from the first output message to the
last, which leaves out the group join (3-5 s on Tansu);
the learning phase, which emits nothing, from its first event sent to the worker's /metrics
counting the last one learned.

The modules, in the order a run uses them::

    config      what a run measures (BenchConfig), and the settings of the clients it starts
    load        the document stream, pre-loading a topic, the latency phase's producer
    model       the model: trained in memory, written into Redis, its memory there
    services    the topics, the worker as a subprocess, the environment every phase runs in
    collector   the consumer that counts and times what a phase puts out
    measure     clocks, rates and CPU (/proc), saturated stretches, gc pauses
    pipe, scoring, learning, mixed, latency, peers
                one phase each (scoring also profiles the worker)
    run         every phase in turn (run_benchmark)
    report      the results as a markdown table
    cli         the command line, ``python -m benchmarks.service``
"""

from benchmarks.service.cli import main
from benchmarks.service.collector import Collector
from benchmarks.service.config import BenchConfig
from benchmarks.service.config import _helper_client as _helper_client
from benchmarks.service.config import _settings as _settings
from benchmarks.service.load import repeat_stream
from benchmarks.service.measure import cpu_seconds
from benchmarks.service.model import _memory_usage as _memory_usage
from benchmarks.service.model import mistaken_labels
from benchmarks.service.report import markdown
from benchmarks.service.run import run_benchmark
from benchmarks.service.services import Topics, WorkerProcess

__all__ = [
    "BenchConfig",
    "Collector",
    "Topics",
    "WorkerProcess",
    "cpu_seconds",
    "main",
    "markdown",
    "mistaken_labels",
    "repeat_stream",
    "run_benchmark",
]
