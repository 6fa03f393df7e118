"""The bare pipe: consume -> msgpack decode -> msgpack encode -> produce, committing as the worker does; the floor
under the worker's throughput and latency. It runs as ``python -m benchmarks.service _pipe <json>``."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import msgpack

from benchmarks.service.config import SESSION_TIMEOUT_MS, _settings
from benchmarks.service.load import preload
from benchmarks.service.measure import _rate
from benchmarks.service.services import _LOG_TAIL_CHARS, Environment, Topics
from stream_winnow.errors import TransportError


def phase_pipe(env: Environment, client: str, docs: Sequence[tuple[bytes, bytes]]) -> dict[str, Any]:
    name = env.name("pipe", client)
    topics = env.topics(name)
    preload_s = preload(env.bootstrap, topics.documents, docs, env.load_compression)
    collector = env.collector([topics.decisions]).start_and_wait()
    started = time.monotonic()
    process = subprocess.run(
        _pipe_command(env, client, topics, name, len(docs)),
        capture_output=True, text=True, timeout=env.timeout_s, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if process.returncode != 0:
        collector.stop()
        raise TransportError(f"the pipe failed ({process.returncode}):\n{process.stderr[-_LOG_TAIL_CHARS:]}")
    collector.wait_for(len(docs), env.timeout_s)
    collector.stop()
    own = json.loads(process.stdout.strip().splitlines()[-1])
    own_s = own["last_ack_s"] - own["first_consume_s"]
    # A short run can reach the collector in a single fetch (a span of 0 s): then the pipe's own clock,
    # first consume to last acknowledgement, is the only measure there is.
    span_s = collector.span_s() if collector.span_s() > 0 else own_s
    return {
        "messages": len(docs),
        "seconds": span_s,
        "per_s": _rate(len(docs), span_s),
        "self_timed_per_s": _rate(len(docs), own_s),
        "process_wall_s": wall,
        "preload_per_s": _rate(len(docs), preload_s),
    }


def _pipe_command(
    env: Environment, client: str, topics: Topics, group: str, expected: int, *, announce: bool = False
) -> list[str]:
    """The bare pipe's command line: documents -> decisions with the worker's batch settings."""
    spec = {
        "bootstrap": env.bootstrap, "client": client, "in_topic": topics.documents, "out_topic": topics.decisions,
        "group": group, "batch": env.batch, "expected": expected, "session_timeout_ms": SESSION_TIMEOUT_MS,
        "fetch_max_wait_ms": env.fetch_max_wait_ms, "linger_ms": env.linger_ms, "announce": announce,
        "max_batches_in_flight": env.max_batches_in_flight, "commit_interval_ms": env.commit_interval_ms,
        "compression": env.compression,
    }  # fmt: skip
    return [sys.executable, "-m", "benchmarks.service", "_pipe", json.dumps(spec)]


def _pipe_main(spec: dict[str, Any]) -> None:
    """consume -> msgpack decode -> encode -> produce; commits as the worker does (``InFlight``)."""
    from workers.transport import make_consumer, make_producer
    from workers.transport.in_flight import InFlight

    settings = _settings(spec["bootstrap"], "bench-pipe", spec["batch"], spec.get("compression", "none"))
    settings = replace(settings, session_timeout_ms=spec["session_timeout_ms"],
                       fetch_max_wait_ms=spec.get("fetch_max_wait_ms", settings.fetch_max_wait_ms),
                       linger_ms=spec.get("linger_ms", settings.linger_ms))  # fmt: skip
    consumer = make_consumer(settings, spec["client"])
    producer = make_producer(settings, spec["client"])

    def pipe(records: Sequence[Any]) -> Any:
        for record in records:
            producer.send(spec["out_topic"], msgpack.packb(msgpack.unpackb(record.value)), key=record.key)
        return producer.checkpoint()

    in_flight = InFlight(consumer, spec.get("max_batches_in_flight", 0), redo=pipe,
                         commit_interval_ms=spec.get("commit_interval_ms", 0))
    # As the worker does before it joins: what is alive now (modules, compiled code, the clients)
    # lives as long as the process, and full collections over it would stop this loop every few
    # seconds. Freezing it takes kafka-python's bare pipe p99 at 11,848 documents/s from 60-79 ms to
    # 35-46 (--client kafka-python --phases latency --latency-rate 11848 --repeats 2).
    gc.collect()
    gc.freeze()
    consumer.subscribe([spec["in_topic"]], spec["group"])
    done = 0
    first = last = None
    announced = not spec.get("announce")
    try:
        while done < spec["expected"] or not in_flight.settled:
            records = consumer.poll_batch(spec["batch"], 100 if not announced else 500)
            if not announced and consumer.assignment():
                print("ready", flush=True)  # the latency phase starts its load only now
                announced = True
            if records:
                if first is None:
                    first = time.time()
                in_flight.add(records, pipe(records))
                done += len(records)
            if not in_flight.settled and in_flight.settle(wait=not records or done >= spec["expected"]):
                last = time.time()
    finally:
        producer.close()
        consumer.close()
    print(json.dumps({"records": done, "first_consume_s": first, "last_ack_s": last}))
