"""What queueing a worker's decisions costs the producer: ``python -m benchmarks.send_cost``.

Starts the embedded broker, and with each client sends decisions of 300 bytes keyed by document id
the way a worker at 10,000 documents/s does: ``--batch`` (170) at once, then a pause of 12 ms, for
``--cycles`` (60) batches. Prints µs per message spent in the sending call, ``send`` one message
at a time beside ``send_many`` (what the worker calls), alternating, best of ``--repeats``.

kafka-python's default partitioner hashes every key in pure Python; its ``send_many`` hashes the
batch in one compiled pass (``workers/transport/partitioner.py``) and names the partition.
"""

from __future__ import annotations

import argparse
import time

from workers.embedded import create_topics, start_broker
from workers.transport import KafkaSettings, Producer, make_producer

VALUE = b"d" * 300  # about a decision with its 10 highest scores


def sending_us(producer: Producer, topic: str, keys: list[bytes], batch: int, bulk: bool) -> float:
    """µs per message inside the sending calls, over ``keys`` in batches with a 12 ms pause between."""
    spent = 0.0
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        values = [VALUE] * len(chunk)
        started = time.perf_counter()
        if bulk:
            producer.send_many(topic, values, chunk)
        else:
            for value, key in zip(values, chunk, strict=True):
                producer.send(topic, value, key=key)
        spent += time.perf_counter() - started
        producer.checkpoint()
        time.sleep(0.012)
    producer.flush()
    return spent / len(keys) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.send_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--client", choices=["kafka-python", "confluent", "both"], default="both")
    parser.add_argument("--batch", type=int, default=170)
    parser.add_argument("--cycles", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    clients = ["kafka-python", "confluent"] if args.client == "both" else [args.client]
    keys = [f"reuters-{i}-r3".encode() for i in range(args.batch * args.cycles)]
    print(f"`python -m benchmarks.send_cost --batch {args.batch} --cycles {args.cycles} --repeats {args.repeats}`\n")
    print("| client | `send` each, µs/message | `send_many`, µs/message |")
    print("|---|---|---|")
    with start_broker() as broker:
        for client in clients:
            topic = f"send-cost-{client}"
            create_topics(broker.bootstrap_servers, {topic: 4})
            with make_producer(KafkaSettings(broker.bootstrap_servers, linger_ms=20), client) as producer:  # type: ignore[arg-type]
                producer.send_many(topic, [VALUE], [b"warm-up"])  # metadata, compiled code
                producer.flush()
                best = {False: float("inf"), True: float("inf")}
                for _ in range(args.repeats):
                    for bulk in (False, True):
                        best[bulk] = min(best[bulk], sending_us(producer, topic, keys, args.batch, bulk))
            print(f"| {client} | {best[False]:.1f} | {best[True]:.1f} |")


if __name__ == "__main__":
    main()
