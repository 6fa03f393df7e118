"""Profile one worker's batch processing in process: ``python -m benchmarks.profile_worker learn|score``.

Starts the embedded broker and Redis, trains the default Balanced Winnow on the ModApte training split,
loads it into Redis, and runs ``Worker.process`` over 40 batches (``--batches``) of 500 prepared records under cProfile:
``score`` feeds unlabelled documents, ``learn`` labelled events with tokens whose label is a category the
document does not have (mostly mistakes). Offsets are not committed (there is no consumer), everything
else is the real path: decoding, Redis reads and scripts, decisions produced to the broker. Prints
records/s under the profiler and the top functions by own time, then how long Redis ran each script
(its ``SLOWLOG``, every command logged): while one runs, Redis serves no other worker.

``--batch 1000`` and ``--batch 2000`` show the trade of the worker's ``--batch-max-docs`` for learning.
``learn --labels true`` sends each document's own categories instead: the model (trained on these very
training documents) is then mostly right, the everyday case where a batch's rows mostly do not change.

``--profiler off`` times the same batches without a profiler, ``--rounds`` times over: wall ms and the
process's CPU µs (every thread's, the Kafka client's included) a batch. Scoring in
batches of 10 / 50 / 200 / 2,000 takes about 0.67 / 1.37 / 3.60 / 25.99 ms a batch and 69.0 / 30.7 / 20.4 /
14.2 µs of CPU a document (median of 5, 5, 5 and 3 rounds): roughly 0.5-1 ms of every batch is the
batch's own, whatever its size (a paced worker at 20,000 documents/s takes batches of ~200).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from stream_winnow.datasets import read_modapte
from stream_winnow.learners import build_learner, describe
from stream_winnow.models.named import connect, open_learner
from stream_winnow.models.snapshot import copy_model
from stream_winnow.models.training import fit
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.stores.cached import CachedStore
from stream_winnow.stores.redis import RedisStore
from workers.config import WorkerConfig
from workers.embedded import create_topics, start_broker, start_redis
from workers.transport import KafkaSettings, Record, make_producer
from workers.worker import Worker

BATCH = 500
BATCHES = 40


class _NoCommit:
    """Stands in for the consumer: the profile is about processing, not the group protocol."""

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_worker", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["learn", "score"])
    parser.add_argument("--source", default="../shared/datasets/reuters21578.tar.gz")
    parser.add_argument("--client", choices=["kafka-python", "confluent"], default="confluent")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--profiler", choices=["cprofile", "off"], default="cprofile",
                        help="off: no profiler; print the wall ms and the process's CPU µs (every thread, "
                             "the Kafka client's included) a batch, for each of --rounds rounds "
                             "[default: %(default)s].")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5, help="Rounds over the batches with --profiler off "
                        "[default: %(default)s].")  # fmt: skip
    parser.add_argument("--domain-dimensions", type=int, default=0,
                        help="Score words and a domain model of this many domains fitted on the training split.")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"Records per batch [default: {BATCH}].")
    parser.add_argument("--batches", type=int, default=BATCHES,
                        help=f"Batches timed or profiled, after one of warm-up [default: {BATCHES}].")
    parser.add_argument("--labels", choices=["wrong", "true", "mistaken"], default="wrong",
                        help="learn: a category each document does not have (mostly mistakes), its own "
                             "categories (mostly right), or the service benchmark's learning events (each one "
                             "a mistake of the model as it stands; ~5 s more set-up) [default: %(default)s].")  # fmt: skip
    args = parser.parse_args()
    if args.domain_dimensions < 0:
        parser.error(f"--domain-dimensions must be 0 (words only) or more; got {args.domain_dimensions}")
    if args.batch < 1:
        parser.error(f"--batch must be at least 1; got {args.batch}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1; got {args.rounds}")
    split = read_modapte(args.source)
    with start_broker() as broker, start_redis() as server:
        create_topics(broker.bootstrap_servers, {"decisions": 4, "dead-letters": 1})
        learner = build_learner("balanced-winnow")
        if args.domain_dimensions:
            from stream_winnow.text.domain import DomainFeatures, fit_domain_model

            domain = fit_domain_model([d.tokens for d in split.train], args.domain_dimensions)
            learner.use_domain(DomainFeatures(domain, "both"))
        fit(learner, split.train)
        learner.store.set_metadata({**describe(learner), "shards": "16"})
        client = connect(server.url)
        copy_model(learner.store, RedisStore(client, "profile", learner.table_specs(), 16), replace=True)
        config = WorkerConfig(KafkaSettings(broker.bootstrap_servers), server.url, model="profile",
                              kafka_client=args.client)  # fmt: skip
        fitted, learner = learner, open_learner(client, "profile")  # the in-memory model is free to learn on
        learner.store = CachedStore(learner.store, config.max_staleness_ms, config.weight_cache_mib * 2**20)  # as run
        learner.store.prefetch()
        worker = Worker(config, _NoCommit(), make_producer(config.kafka, args.client),  # type: ignore[arg-type]
                        learner, DocumentCache(client, "profile"))  # fmt: skip
        docs = (split.train + split.test) * 2
        categories = list(split.categories)
        batches = []
        while len(docs) < args.batch * (args.batches + 1):
            docs += docs
        mistaken: list[str] = []
        if args.what == "learn" and args.labels == "mistaken":
            from benchmarks.service.model import mistaken_labels

            mistaken = mistaken_labels(fitted, docs[: args.batch * (args.batches + 1)])[0]
        for start in range(0, args.batch * (args.batches + 1), args.batch):
            records = []
            for i, doc in enumerate(docs[start : start + args.batch]):
                n = start + i
                if args.what == "score":
                    body = {"id": f"d{n}", "tokens": list(doc.tokens)}
                    records.append(Record("documents", 0, n, msgpack.packb(body)))
                else:
                    if args.labels == "mistaken":
                        labels = [mistaken[n]]
                    elif args.labels == "true":
                        labels = list(doc.labels)
                    else:
                        labels = [c for c in categories if c not in doc.labels][:1]
                    body = {"event_id": f"e{n}", "id": f"d{n}", "labels": labels, "tokens": list(doc.tokens)}
                    records.append(Record("labels", 0, n, msgpack.packb(body)))
            batches.append(records)
        worker.process(batches[0])  # warm-up: compiled code, connections
        # As Worker.run does after its warm-up: what the set-up made (the training split, the fitted
        # twin, the prepared batches) stays out of the collector's full passes. Without it a full pass
        # took 99-117 ms every second batch of 4,000 learning events, and cProfile charged it to
        # whichever line was allocating (two list comprehensions of the learning path, here).
        gc.collect()
        gc.freeze()
        if args.profiler == "off":
            _time_rounds(worker, batches[1:], args.rounds, args.what, args.client)
            return
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        client.slowlog_reset()
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for records in batches[1:]:
            worker.process(records)
        profiler.disable()
        seconds = time.perf_counter() - started
        what = f"{args.what} ({args.labels} labels)" if args.what == "learn" else args.what
        print(f"{what}: {args.batch * args.batches / seconds:,.0f} records/s under cProfile ({args.client}), "
              f"batches of {args.batch}")  # fmt: skip
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
        log = client.slowlog_get(1_000_000)
        scripts = [e["duration"] for e in log if bytes(e["command"]).upper().startswith((b"EVALSHA ", b"EVAL ", b"FCALL "))]
        if scripts:
            p50, p99 = np.percentile(scripts, [50, 99])
            print(f"Redis scripts: {len(scripts):,} ({len(scripts) / args.batches:.1f} a batch), µs each: p50 {p50:,.0f}, "
                  f"p99 {p99:,.0f}, max {max(scripts):,}; {sum(scripts) / args.batches / 1000:.1f} ms a batch")
        print("Redis ms a batch by command: " + _by_command(log, args.batches))


def _by_command(log: list[dict[str, Any]], batches: int) -> str:
    """The SLOWLOG's time a batch per command name, largest first.

    Redis logs the commands a script or a transaction runs one by one; a script's entry also holds
    theirs (EXEC's does not), so the names add up to more than the time Redis was busy.

    >>> _by_command([{"command": b"MSET k v", "duration": 3000}, {"command": b"exec", "duration": 10}], 2)
    'MSET 1.5, EXEC 0.0'
    """
    totals: dict[str, int] = {}
    for entry in log:
        name = bytes(entry["command"]).split(b" ", 1)[0].upper().decode(errors="replace")
        totals[name] = totals.get(name, 0) + int(entry["duration"])
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {us / batches / 1000:.1f}" for name, us in ranked)


def _time_rounds(worker: Worker, batches: list[list[Record]], rounds: int, what: str, client: str) -> None:
    """Wall ms and process CPU µs a batch, each round over every batch; the median round last."""
    walls, cpus = [], []
    for round_ in range(1, rounds + 1):
        worker.producer.flush()
        cpu_started, started = time.process_time(), time.perf_counter()
        for records in batches:
            worker.process(records)
        worker.producer.flush()  # the sends are part of the cost
        wall_ms = (time.perf_counter() - started) * 1000 / len(batches)
        cpu_us = (time.process_time() - cpu_started) * 1e6 / len(batches)
        walls.append(wall_ms)
        cpus.append(cpu_us)
        print(f"round {round_}: {wall_ms:.2f} ms a batch, CPU {cpu_us / len(batches[0]):.2f} µs a record")
    print(f"{what} ({client}), batches of {len(batches[0])}, median of {rounds}: "
          f"{float(np.median(walls)):.2f} ms a batch, CPU {float(np.median(cpus)) / len(batches[0]):.2f} µs a record")


if __name__ == "__main__":
    main()
