"""The embedded broker's own CPU under a paced stream: ``python -m benchmarks.broker_cost``.

Starts a Tansu broker, one producer paced at ``--rate`` messages/s of 600 bytes and one consumer
reading them (confluent-kafka, fetch wait 10 ms, the worker's), and prints, each second, the
broker's CPU (% of one core, from ``/proc``), the consumer's fetch requests and how far it lags.

Tansu 0.6's memory engine keeps each produce batch as one object and lists every object of a
partition on each fetch (its ``dynostore.rs``), so its CPU grows with the batches a topic holds. On
these machines, 20,000 msg/s over 4 partitions took it from 25 % to 45 % of a core in 11 s with
keys (librdkafka hashes them: a batch per partition per linger) and held it at 15-25 % without
(``--no-keys``: one batch per linger). That is why the service benchmark's latency depends on how
many produce batches the worker and the load send. The worker's produce linger is in every decision's
latency: 5 ms rather than 20 takes the p50 of the part after the decision from a median of 27.8 ms to
15.9 at 20,000-25,000 documents/s, for about 8 % more broker CPU a document (the service benchmark's
``--worker-arg=--linger-ms=20``, then ``=5``), so the worker lingers 5 ms. Idempotence makes no clear
difference (``--no-idempotence``: 24 % to 42 %), nor does what earlier work leaves behind
(``--history-producers 60 --seconds 8``: 18 % to 46 %, against 16 % to 42 % on a fresh broker).
``--compression lz4`` (25,000 msg/s, 1 partition, 8 s) holds it at 6-14 % against 13-26 % uncompressed;
these 600-byte messages of one letter compress far better than documents do (in the service benchmark
lz4 takes the broker from 25 to 19 µs a document).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from workers.embedded import create_topics, start_broker
from workers.transport import COMPRESSIONS

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_MESSAGE = b"x" * 600  # about a tokenised Reuters document


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def machine_ticks() -> tuple[int, int, int]:
    """The machine's clock ticks so far, over all its CPUs: (all, busy, stolen by the host) (``/proc/stat``).

    Busy is everything but idle, I/O wait and steal; steal is the time the hypervisor ran something
    else while this machine's CPUs wanted to run.
    """
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return sum(fields[:8]), user + nice + system + irq + softirq, steal


def tasks_started() -> int:
    """Processes and threads the machine has started since it booted (``/proc/stat``'s ``processes``).

    A short-lived process uses CPU that no long-lived pid's counters show (a neighbouring service that
    starts a helper VM now and then, say: some 30 tasks and 0.15 s of CPU at once); this count shows it.
    """
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("processes "):
                return int(line.split()[1])
    raise ValueError("/proc/stat has no processes line")


def leave_history(bootstrap: str, producers: int, partitions: int) -> None:
    """What earlier work leaves on a broker: ``producers`` idempotent producers, each its own topic, 400 messages."""
    import confluent_kafka

    topics = {f"history-{i}": partitions for i in range(producers)}
    if topics:
        create_topics(bootstrap, topics)
    for topic in topics:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for n in range(400):
            producer.produce(topic, _MESSAGE, key=str(n).encode())
        producer.flush()


def run(
    rate: int, seconds: int, partitions: int, keyed: bool, linger_ms: int, idempotent: bool, history: int = 0,
    compression: str = "none",
) -> list[dict[str, Any]]:
    """One paced run; a row per second: broker CPU %, fetch requests, consumer lag."""
    import confluent_kafka

    rows: list[dict[str, Any]] = []
    with start_broker() as broker:
        bootstrap = broker.bootstrap_servers
        leave_history(bootstrap, history, partitions)
        create_topics(bootstrap, {"paced": partitions})
        fetches = [0]

        def on_stats(raw: str) -> None:
            for b in json.loads(raw)["brokers"].values():
                if b.get("nodeid", -1) >= 0:
                    fetches[0] = b["req"].get("Fetch", 0)

        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": "broker-cost", "enable.auto.commit": False,
            "fetch.wait.max.ms": 10, "statistics.interval.ms": 1000, "stats_cb": on_stats,
        })  # fmt: skip
        consumer.assign([
            confluent_kafka.TopicPartition("paced", p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)
        ])  # fmt: skip
        received = [0]
        halt = threading.Event()

        def consume() -> None:
            while not halt.is_set():
                if consumer.poll(0.1) is not None:
                    received[0] += 1 + len(consumer.consume(10_000, 0))

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "linger.ms": linger_ms, "enable.idempotence": idempotent, "acks": "all",
            "compression.type": compression,
        })  # fmt: skip
        pid = broker.pid
        started = last = time.perf_counter()
        cpu_last, fetches_last, sent = cpu_seconds(pid), 0, 0
        while (now := time.perf_counter()) - started < seconds:
            due = int((now - started) * rate)
            while sent < due:
                producer.produce("paced", _MESSAGE, key=str(sent).encode() if keyed else None)
                sent += 1
            producer.poll(0)
            if now - last >= 1.0:
                cpu = cpu_seconds(pid)
                rows.append({
                    "t_s": round(now - started, 1), "broker_cpu_percent": round(100 * (cpu - cpu_last) / (now - last), 1),
                    "fetches": fetches[0] - fetches_last, "lag": sent - received[0],
                })  # fmt: skip
                cpu_last, fetches_last, last = cpu, fetches[0], now
            time.sleep(0.001)
        producer.flush()
        halt.set()
        reader.join()
        consumer.close()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20_000, help="Messages/s offered [default: 20,000].")
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--no-keys", action="store_true", help="Send without keys: one batch per linger.")
    parser.add_argument("--linger-ms", type=int, default=10)
    parser.add_argument("--no-idempotence", action="store_true")
    parser.add_argument("--history-producers", type=int, default=0,
                        help="First leave this many idempotent producers, each with its own topic, on the broker.")
    parser.add_argument("--compression", choices=COMPRESSIONS, default="none",
                        help="The producer's batch compression [default: none].")
    args = parser.parse_args(argv)
    for name in ("rate", "seconds", "partitions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1; got {getattr(args, name)}")
    for name in ("linger_ms", "history_producers"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0; got {getattr(args, name)}")
    rows = run(args.rate, args.seconds, args.partitions, not args.no_keys, args.linger_ms, not args.no_idempotence,
               args.history_producers, args.compression)  # fmt: skip
    print("| s | broker CPU % of a core | fetches | consumer lag |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['t_s']} | {row['broker_cpu_percent']} | {row['fetches']} | {row['lag']:,} |")


if __name__ == "__main__":
    main()
