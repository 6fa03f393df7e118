"""End-to-end service benchmark: the worker on a real broker and Redis, beside a bare pipe and in-process peers.

    python -m benchmarks.service --source ../shared/datasets/reuters21578.tar.gz --client both \\
        --documents 50000 --worker-arg=--max-staleness-ms=1000 --json

The same command runs the subprocesses that a run starts: ``_pipe <json>`` (the bare pipe) and
``_profiled_worker <file> <worker flags>`` (the worker under cProfile).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence

from benchmarks.service.config import LATENCY_BROKERS, LOAD_LINGER_MS, PARTITIONS, BenchConfig
from benchmarks.service.pipe import _pipe_main
from benchmarks.service.report import markdown
from benchmarks.service.run import run_benchmark
from benchmarks.service.scoring import _profiled_worker
from workers.transport import COMPRESSIONS


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_pipe"]:
        _pipe_main(json.loads(argv[1]))
        return
    if argv[:1] == ["_profiled_worker"]:
        _profiled_worker(argv[1], argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="Reuters-21578 .tar.gz or folder.")
    parser.add_argument("--synthetic", type=int, default=None, help="Use N synthetic documents instead (tests).")
    parser.add_argument("--client", choices=["kafka-python", "confluent", "both"], default="confluent")
    parser.add_argument("--documents", type=int, default=100_000, help="Documents per phase (the stream repeats).")
    parser.add_argument("--kafka-python-documents", type=int, default=0,
                        help="Cap for kafka-python, whose phases run ~3x longer; 0: no cap [default].")
    parser.add_argument("--learn-events", type=int, default=BenchConfig.learn_events,
                        help="Labelled events in the learning phase, at most --documents [default: %(default)s].")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="Length of the paced latency phase.")
    parser.add_argument("--latency-rate", type=float, default=None,
                        help="Offered docs/s in the latency phase [default: half the measured scoring rate].")
    parser.add_argument("--load-linger-ms", type=int, default=LOAD_LINGER_MS,
                        help="The latency phase's producer linger (it counts in every latency) [default: %(default)s].")
    parser.add_argument("--load-compression", choices=COMPRESSIONS, default="none",
                        help="Codec of the documents' and labels' producers (a worker's own is --worker-arg="
                             "--compression=...) [default: %(default)s].")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help="Partitions of every topic a run creates [default: %(default)s].")
    parser.add_argument("--latency-broker", choices=LATENCY_BROKERS, default="fresh",
                        help="fresh: each latency run on an embedded broker of its own; shared: on the one every "
                             "other phase used [default: %(default)s].")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1,
                        help="Runs of pipe, scoring and latency; the median run is reported [default: %(default)s].")
    parser.add_argument("--phases", default=",".join(BenchConfig.phases),
                        help="Comma-separated subset of: " + ", ".join(BenchConfig.phases) + ".")
    parser.add_argument("--worker-arg", action="append", default=[], metavar="FLAG",
                        help="A flag for every worker, e.g. --worker-arg=--max-staleness-ms=1000 (repeatable).")
    parser.add_argument("--no-peers", action="store_true", help="Skip the in-process peers.")
    parser.add_argument("--profile", action="store_true", help="Profile one more scoring pass (cProfile).")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="Give up on a phase after this.")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON after the table.")
    args = parser.parse_args(argv)
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = sorted(set(phases) - set(BenchConfig.phases))
    if args.partitions < 1:
        parser.error(f"--partitions must be at least 1; got {args.partitions}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    if unknown or not phases:
        parser.error(f"--phases: {', '.join(unknown) or '(none)'} not allowed; choose from {', '.join(BenchConfig.phases)}")
    if "latency" in phases and "scoring" not in phases and args.latency_rate is None:
        parser.error("--phases latency without scoring needs --latency-rate (the rate is half of scoring's)")
    clients = ("confluent", "kafka-python") if args.client == "both" else (args.client,)
    config = BenchConfig(
        source=args.source,
        synthetic=args.synthetic,
        clients=clients,
        documents=args.documents,
        kafka_python_documents=args.kafka_python_documents or None,
        learn_events=args.learn_events,
        latency_seconds=args.latency_seconds,
        latency_rate=args.latency_rate,
        load_linger_ms=args.load_linger_ms,
        load_compression=args.load_compression,
        partitions=args.partitions,
        repeats=args.repeats,
        latency_broker=args.latency_broker,
        phases=phases,
        worker_args=tuple(args.worker_arg),
        peers=not args.no_peers,
        profile=args.profile,
        timeout_s=args.timeout_s,
        command="python -m benchmarks.service " + shlex.join(argv),
    )
    results = run_benchmark(config, say=lambda text: print(text, file=sys.stderr, flush=True))
    print(markdown(results))
    if args.json:
        print(json.dumps(results, default=str))
