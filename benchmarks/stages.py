"""Per-document cost of the worker's stages, in process, old way beside new: ``python -m benchmarks.stages``.

On the Reuters ModApte stream (training then test documents) in batches of ``--batch`` (1,000), best of
``--repeats`` passes, µs per document:

    decode + featurise   decode_document + transform_many  vs  parse_documents + transform_hashed
    ... cold             the same, each pass from a featurizer that has seen no token (a worker
                         that just started: 31,060 distinct tokens, each new once)
    margins              rows gathered, w and keep derived  vs  scoring rows kept in the CachedStore
                         (Learner.margins_many)                 (MistakeDriven.margins_many), the
                                                                default Balanced Winnow trained on
                                                                the training split, cache prefetched
    encode decisions     encode_decision per document      vs  encode_decisions per batch
    ... 10 highest       encode_decision of the 10 highest  vs  encode_decisions(top=10), the
                         scores and the assigned category       worker's default
    cache documents      one SET per document (pipelined)  vs  DocumentCache.put_many (embedded Redis)

Each row is the old way of a stage beside the worker's, to show what each change to a stage buys.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import msgpack
import numpy as np

from stream_winnow.datasets import read_modapte
from stream_winnow.learners import build_learner
from stream_winnow.learners.base import Learner
from stream_winnow.models.named import connect
from stream_winnow.models.training import fit
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.stores.cached import CachedStore
from stream_winnow.text.features import Featurizer
from stream_winnow.wire.codec import Decision, decode_document, encode_decision, encode_decisions
from stream_winnow.wire.fast_documents import parse_documents
from workers.embedded import start_redis

BATCH = 1000


def _best_us(run: Callable[[list[bytes]], object], batches: list[list[bytes]], repeats: int) -> float:
    """Best pass over all batches, in µs per document."""
    documents = sum(len(b) for b in batches)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for batch in batches:
            run(batch)
        best = min(best, time.perf_counter() - started)
    return best / documents * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stages", description=__doc__.split("\n")[0])
    parser.add_argument("--source", default="../shared/datasets/reuters21578.tar.gz")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=BATCH,
                        help=f"Documents per batch; a paced worker at 15,000 docs/s sees about 170 [default: {BATCH}].")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch must be at least 1; got {args.batch}")
    batch_size = args.batch
    split = read_modapte(args.source)
    docs = split.train + split.test
    raws = [msgpack.packb({"id": f"d{i}", "tokens": list(d.tokens), "ts": 1_732_875_000_000 + i})
            for i, d in enumerate(docs)]  # fmt: skip
    batches = [raws[i : i + batch_size] for i in range(0, len(raws) - batch_size + 1, batch_size)]
    names = [f"category-{c}" for c in range(90)]
    rng = np.random.default_rng(0)
    rows: list[tuple[str, float, float]] = []

    text, hashed = Featurizer(), Featurizer()
    parse_documents(batches[0])  # compile outside the clock
    rows.append((
        "decode + featurise",
        _best_us(lambda b: text.transform_many([decode_document(r).tokens for r in b]), batches, args.repeats),
        _best_us(lambda b: hashed.transform_hashed(parse_documents(b)), batches, args.repeats),
    ))  # fmt: skip

    fresh: dict[str, Featurizer] = {}  # a featurizer that has seen nothing, for each way's every pass

    def cold(way: str, run: Callable[[Featurizer, list[bytes]], object]) -> Callable[[list[bytes]], object]:
        def step(batch: list[bytes]) -> object:
            if batch is batches[0]:
                fresh[way] = Featurizer()
            return run(fresh[way], batch)

        return step

    rows.append((
        "decode + featurise, every token new at first (a worker just started)",
        _best_us(cold("text", lambda f, b: f.transform_many([decode_document(r).tokens for r in b])), batches,
                 args.repeats),
        _best_us(cold("hashed", lambda f, b: f.transform_hashed(parse_documents(b))), batches, args.repeats),
    ))  # fmt: skip

    learner = build_learner("balanced-winnow")
    fit(learner, split.train)
    learner.store = CachedStore(learner.store)
    learner.store.prefetch()
    featurised = [hashed.transform_hashed(parse_documents(b)) for b in batches]
    at = {id(b): i for i, b in enumerate(batches)}
    rows.append((
        "margins (90 categories, cached rows)",
        _best_us(lambda b: Learner.margins_many(learner, featurised[at[id(b)]]), batches, args.repeats),
        _best_us(lambda b: learner.margins_many(featurised[at[id(b)]]), batches, args.repeats),
    ))  # fmt: skip

    scores = np.round(rng.normal(size=(batch_size, len(names))), 6)
    ids = [f"d{i}" for i in range(batch_size)]
    chosen = [(names[i % 90],) for i in range(batch_size)]

    def one_by_one(_: list[bytes]) -> None:
        for i, row in enumerate(scores.tolist()):
            decision = Decision(ids[i], chosen[i], dict(zip(names, row, strict=True)), 7, "m", "w", 1, 2)
            encode_decision(decision, check=False)

    rows.append((
        "encode decisions (90 categories)",
        _best_us(one_by_one, batches, args.repeats),
        _best_us(lambda _: encode_decisions(ids, chosen, scores, names, 7, "m", "w", [1] * batch_size, 2), batches,
                 args.repeats),
    ))  # fmt: skip

    def top_one_by_one(_: list[bytes]) -> None:
        for i, row in enumerate(scores.tolist()):
            best = sorted(range(len(names)), key=lambda j: -row[j])[:10]
            best += [j for j in range(len(names)) if names[j] in chosen[i] and j not in best]
            decision = Decision(ids[i], chosen[i], {names[j]: row[j] for j in best}, 7, "m", "w", 1, 2)
            encode_decision(decision, check=False)

    rows.append((
        "encode decisions (10 highest of 90 and the assigned)",
        _best_us(top_one_by_one, batches, args.repeats),
        _best_us(lambda _: encode_decisions(ids, chosen, scores, names, 7, "m", "w", [1] * batch_size, 2, top=10), batches,
                 args.repeats),
    ))  # fmt: skip

    with start_redis() as server:
        client = connect(server.url)
        cache = DocumentCache(client, "stages")

        def set_each(batch: list[bytes]) -> None:
            pipe = client.pipeline(transaction=False)
            for i, raw in enumerate(batch):
                pipe.set(f"sw:stages:doc:{i}", raw, ex=86_400)
            pipe.execute()

        rows.append((
            "cache documents (Redis)",
            _best_us(set_each, batches, args.repeats),
            _best_us(lambda b: cache.put_many({f"d{i}": raw for i, raw in enumerate(b)}), batches, args.repeats),
        ))  # fmt: skip
        client.close()

    print(f"`python -m benchmarks.stages --source {args.source} --repeats {args.repeats} --batch {batch_size}`\n")
    print("| stage | µs/document, old way | µs/document, now |")
    print("|---|---|---|")
    for stage, old, new in rows:
        print(f"| {stage} | {old:.1f} | {new:.1f} |")


if __name__ == "__main__":
    main()
