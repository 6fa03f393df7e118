"""One run: the stream and the model, every phase asked for on each client in turn, then the peers."""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.service.config import LATENCY_BROKERS, BenchConfig, worker_settings
from benchmarks.service.latency import latency_documents, phase_latency
from benchmarks.service.learning import phase_learning
from benchmarks.service.load import load_stream, repeat_stream
from benchmarks.service.mixed import MIXED_LABEL_EVERY, phase_mixed
from benchmarks.service.model import (
    marker_memory,
    mistaken_labels,
    model_memory,
    train_domain_model,
    train_model,
    write_model,
)
from benchmarks.service.peers import run_peers
from benchmarks.service.pipe import phase_pipe
from benchmarks.service.report import _split
from benchmarks.service.scoring import phase_scoring, profile_top
from benchmarks.service.services import Environment
from stream_winnow.wire.codec import DocumentMessage, LabelledEvent, encode_document, encode_labelled_event

MODEL = "bench"


def median_run(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose ``key`` is the median (the lower middle of an even number), with every run's ``key``.

    >>> median_run([{"p99_ms": 90.0}, {"p99_ms": 70.0}, {"p99_ms": 200.0}], "p99_ms")
    {'p99_ms': 90.0, 'of_runs': [70.0, 90.0, 200.0]}
    """
    ordered = sorted(runs, key=lambda run: run[key])
    return {**ordered[(len(ordered) - 1) // 2], "of_runs": [run[key] for run in ordered]}


def run_benchmark(config: BenchConfig, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    from workers.embedded import start_broker, start_redis

    if config.latency_broker not in LATENCY_BROKERS:
        raise ValueError(f"latency_broker {config.latency_broker!r}: choose from {', '.join(LATENCY_BROKERS)}")
    settings = worker_settings(config.worker_args)
    train, base, corpus = load_stream(config)
    say(f"stream: {corpus}")
    model = train_model(train)
    say(f"trained in {model.train_seconds:.1f} s: {len(model.categories)} categories")
    domain_model = train_domain_model(train) if "domain-scoring" in config.phases else None
    domains = domain_model.learner.domain.model.dimensions if domain_model is not None else 0
    if domain_model is not None:
        say(f"with {domains} domains (fitted on the training documents): {domain_model.train_seconds:.1f} s")
    largest = max(config.documents_for(c) for c in config.clients)
    stream = repeat_stream(base, largest)
    encoded = [(d.id.encode(), encode_document(DocumentMessage(d.id, d.tokens, None, None))) for d in stream]
    learned = stream[: min(config.learn_events, largest)] if "learning" in config.phases else []
    wrong, mistakes = mistaken_labels(copy.deepcopy(model.learner), learned) if learned else ([], 0)
    if learned:
        say(f"learning events: {mistakes:,} of {len(learned):,} mistakes in process")
    learn_events = [
        (d.id.encode(), encode_labelled_event(LabelledEvent(f"learn:{d.id}", d.id, (label,), d.tokens, None)))
        for d, label in zip(learned, wrong, strict=True)
    ]
    label_of = {
        d.id.encode(): encode_labelled_event(LabelledEvent(f"label:{d.id}", d.id, d.labels, None, None))
        for i, d in enumerate(stream)
        if i % MIXED_LABEL_EVERY == 0 and d.labels
    }
    results: dict[str, Any] = {
        "command": config.command,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "corpus": corpus,
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg()[0],
        "batch_max_docs": settings.batch_max_docs,
        "batch_max_labels": settings.batch_max_labels,
        "repeats": config.repeats,
        "load_linger_ms": config.load_linger_ms,
        "load_compression": config.load_compression,
        "compression": settings.kafka.compression,
        "partitions": config.partitions,
        "latency_broker": config.latency_broker,
        "worker_args": list(config.worker_args),
        "domain_dimensions": domains,
        "clients": {},
    }
    log_dir = Path(tempfile.mkdtemp(prefix="stream-winnow-bench-"))
    results["log_dir"] = str(log_dir)
    with start_broker() as broker, start_redis() as redis_server:
        env = Environment(broker.bootstrap_servers, redis_server.url, log_dir, config.worker_args,
                          settings.batch_max_docs, settings.shards, config.timeout_s,
                          fetch_max_wait_ms=settings.kafka.fetch_max_wait_ms,
                          linger_ms=settings.kafka.linger_ms,
                          max_batches_in_flight=settings.max_batches_in_flight,
                          commit_interval_ms=settings.commit_interval_ms,
                          load_linger_ms=config.load_linger_ms, partitions=config.partitions,
                          compression=settings.kafka.compression, load_compression=config.load_compression,
                          broker_pid=broker.pid, redis_pid=redis_server.pid)  # fmt: skip
        write_s = write_model(model, env.redis_url, MODEL, settings.shards, len(train))
        results["model_write_s"] = write_s
        results["memory"] = model_memory(env.redis_url, MODEL, settings.shards, model.learner.table_specs())
        say(f"model in Redis: {results['memory']['bytes'] / 2**20:.1f} MiB")
        for client in config.clients:
            n = config.documents_for(client)
            docs = encoded[:n]
            out: dict[str, Any] = {"documents": n}
            results["clients"][client] = out
            repeats = range(config.repeats)
            # Pipe and scoring alternate, so a quiet or busy spell of the machine touches both alike.
            for repeat in repeats:
                if "pipe" in config.phases:
                    say(f"[{client}] pipe, {n:,} messages")
                    out.setdefault("pipe_runs", []).append(phase_pipe(env, client, docs))
                    say(f"[{client}] pipe: {out['pipe_runs'][-1]['per_s']:,.0f}/s")
                if "scoring" in config.phases:
                    scoring_model = f"{MODEL}-s-{client}-{repeat}"
                    write_model(model, env.redis_url, scoring_model, settings.shards, len(train))
                    out.setdefault("scoring_runs", []).append(phase_scoring(env, client, scoring_model, docs))
                    say(f"[{client}] scoring: {out['scoring_runs'][-1]['per_s']:,.0f}/s")
                if domain_model is not None:
                    domain_scoring_model = f"{MODEL}-d-{client}-{repeat}"
                    write_model(domain_model, env.redis_url, domain_scoring_model, settings.shards, len(train))
                    out.setdefault("domain_scoring_runs", []).append(
                        phase_scoring(env, client, domain_scoring_model, docs)
                    )
                    say(f"[{client}] scoring with domain features: {out['domain_scoring_runs'][-1]['per_s']:,.0f}/s")
            for phase in ("pipe", "scoring", "domain_scoring"):
                if f"{phase}_runs" in out:
                    out[phase] = median_run(out[f"{phase}_runs"], "per_s")
            if "learning" in config.phases:
                learn_model = f"{MODEL}-l-{client}"
                write_model(model, env.redis_url, learn_model, settings.shards, len(train))
                events = learn_events[: min(len(learn_events), n)]
                out["learning"] = phase_learning(env, client, learn_model, events)
                out["learning"]["markers"] = marker_memory(env.redis_url, learn_model, settings.shards,
                                                           model.learner.table_specs())  # fmt: skip
                say(f"[{client}] learning: {out['learning']['per_s']:,.0f}/s")
            if "mixed" in config.phases:
                mixed_model = f"{MODEL}-m-{client}"
                write_model(model, env.redis_url, mixed_model, settings.shards, len(train))
                keys = {key for key, _ in docs}
                out["mixed"] = phase_mixed(env, client, mixed_model, docs,
                                           {k: v for k, v in label_of.items() if k in keys})  # fmt: skip
                say(f"[{client}] mixed: {out['mixed']['per_s']:,.0f}/s")
            if "latency" in config.phases:
                rate = config.latency_rate or out["scoring"]["per_s"] / 2
                # The paced load runs its whole warm-up and seconds: the stream repeats as far as that
                # takes (at 25,000 docs/s, 275,000 documents), not only as far as the other phases'.
                paced = repeat_stream(base, latency_documents(rate, config.latency_seconds))
                fresh_broker = config.latency_broker == "fresh"
                for repeat in repeats:
                    latency_model = f"{MODEL}-t-{client}-{repeat}"
                    write_model(model, env.redis_url, latency_model, settings.shards, len(train))
                    measured = phase_latency(env, client, latency_model, paced, rate, config.latency_seconds,
                                             fresh_broker=fresh_broker)
                    out.setdefault("latency_runs", []).append(measured)
                    say(f"[{client}] latency p99: {measured['p99_ms']:.1f} ms (ts → decided_ts / after, p50 / p99: "
                        f"{_split(measured)}); the bare pipe at the same load")
                    floor = phase_latency(env, client, None, paced, rate, config.latency_seconds,
                                          fresh_broker=fresh_broker)
                    out.setdefault("pipe_latency_runs", []).append(floor)
                    say(f"[{client}] bare pipe latency p99: {floor['p99_ms']:.1f} ms")
                out["latency"] = median_run(out["latency_runs"], "p99_ms")
                out["pipe_latency"] = median_run(out["pipe_latency_runs"], "p99_ms")
            if "pipe" in out and "scoring" in out:
                out["scoring_over_pipe"] = out["scoring"]["per_s"] / out["pipe"]["per_s"]
            if "domain_scoring" in out and "scoring" in out:
                out["domain_over_words"] = out["domain_scoring"]["per_s"] / out["scoring"]["per_s"]
        if config.profile:
            client = config.clients[0]
            n = config.documents_for(client)
            profile_path = log_dir / "scoring.prof"
            profile_model = f"{MODEL}-p-{client}"
            write_model(model, env.redis_url, profile_model, settings.shards, len(train))
            say(f"[{client}] profile: scoring again under cProfile (untimed)")
            profiled = phase_scoring(env, client, profile_model, encoded[:n], profile_out=profile_path)
            results["profile"] = {
                "client": client,
                "documents": n,
                "per_s_under_cprofile": profiled["per_s"],
                "file": str(profile_path),
                "top": profile_top(profile_path, config.profile_top),
            }
    if config.peers:
        say("peers: in-process prequential on the stream (not repeated)")
        results["peers"] = run_peers(base)
    results["load_average_end"] = os.getloadavg()[0]
    return results
