"""Featurising cost against the size of the worker's token memo: ``python -m benchmarks.vocabulary``.

A worker's ``Featurizer`` remembers every distinct token it has seen (up to 2,000,000, then it
starts afresh), and a live news stream keeps bringing new ones: names, numbers, typos. This
featurises the Reuters ModApte documents in batches, each batch with a few tokens never seen
before, after the memo was filled with ``--vocabulary`` other tokens, and prints µs per document
of ``parse_documents + transform_hashed`` (best of ``--repeats`` passes) per memo size and batch
size. Work that grows with the memo, not with the batch, shows as a cost that rises down a column.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import msgpack

from stream_winnow.datasets import read_modapte
from stream_winnow.text.features import Featurizer
from stream_winnow.wire.fast_documents import parse_documents

NEW_TOKENS_PER_BATCH = 5  # never-seen tokens in each batch, as a live stream has


def featurise_us(raw_docs: list[dict[str, Any]], vocabulary: int, batch: int, repeats: int) -> float:
    """Best pass, µs per document, over ``raw_docs`` in batches of ``batch`` after ``vocabulary`` other tokens."""
    best = float("inf")
    for repeat in range(repeats):
        featurizer = Featurizer()
        for start in range(0, vocabulary, 100_000):  # fill the memo outside the clock
            featurizer.transform_many([[f"seen-{i}" for i in range(start, min(vocabulary, start + 100_000))]])
        batches = []
        for number, start in enumerate(range(0, len(raw_docs) - batch + 1, batch)):
            docs = raw_docs[start : start + batch]
            fresh = [f"new-{repeat}-{number}-{k}" for k in range(NEW_TOKENS_PER_BATCH)]
            docs = [{**docs[0], "tokens": [*docs[0]["tokens"], *fresh]}, *docs[1:]]
            batches.append([msgpack.packb(d) for d in docs])
        parse_documents(batches[0][:1])  # compile outside the clock
        started = time.perf_counter()
        for raws in batches:
            featurizer.transform_hashed(parse_documents(raws))
        best = min(best, (time.perf_counter() - started) / (len(batches) * batch) * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vocabulary", description=__doc__.split("\n")[0])
    parser.add_argument("--source", default="../shared/datasets/reuters21578.tar.gz")
    parser.add_argument("--vocabulary", type=int, nargs="+", default=[0, 100_000, 1_000_000])
    parser.add_argument("--batch", type=int, nargs="+", default=[170, 2000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    split = read_modapte(args.source)
    raw_docs: list[dict[str, object]] = [
        {"id": f"d{i}", "tokens": list(d.tokens), "ts": 0} for i, d in enumerate(split.train + split.test)
    ]
    print(f"`python -m benchmarks.vocabulary --source {args.source} --repeats {args.repeats}`\n")
    print("| tokens already in the memo | " + " | ".join(f"µs/document, batches of {b}" for b in args.batch) + " |")
    print("|---|" + "---|" * len(args.batch))
    for vocabulary in args.vocabulary:
        costs = [featurise_us(raw_docs, vocabulary, b, args.repeats) for b in args.batch]
        print(f"| {vocabulary:,} | " + " | ".join(f"{c:.2f}" for c in costs) + " |")


if __name__ == "__main__":
    main()
