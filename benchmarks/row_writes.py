"""What one learned row costs Redis: ``python -m benchmarks.row_writes``.

Starts a redis-server and a Balanced Winnow model of 90 categories (rows of 181 float32), then
applies deltas of ``--rows`` (200) rows, each changing ``k`` values (k/2 categories, both
tables), through the store's own write path (``RedisStore.apply_delta``: one script a shard and
one on the model keys, in one ``MULTI``), ``--calls`` (50) times per k. Prints Redis CPU
(``INFO cpu``) per row written, and beside it the floor of any write of a whole row: a ``SET``
of the same 724 bytes per row from a pipeline, with nothing read or computed.

A learning batch's Redis CPU is about its rows written times this figure (the scale benchmark's
per-command split shows ``evalsha`` at 85-90 % of Redis time). Measured here (median of 3): 7.2 /
12.7 / 27.4 µs a row at k = 2 / 8 / 30, where a plain ``SET`` costs 1.7: inside the script each row
costs two commands called from Lua (``GET``, ``SET``) and the unpacking, arithmetic and
packing of each changed value.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from stream_winnow.learners import build_learner
from stream_winnow.models.named import connect
from stream_winnow.stores.delta import RowDelta
from stream_winnow.stores.redis import RedisStore
from workers.embedded import start_redis

CATEGORIES = 90


def redis_cpu_s(client: object) -> float:
    info = client.info("cpu")  # type: ignore[attr-defined]
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def delta_of(rows: int, changed: int, rng: np.random.Generator, first_id: int) -> RowDelta:
    """A Balanced Winnow delta over ``rows`` rows, ``changed`` values each (both tables of changed // 2 categories)."""
    positive, negative = np.ones((rows, CATEGORIES)), np.ones((rows, CATEGORIES))
    for row in range(rows):
        columns = rng.choice(CATEGORIES, max(changed // 2, 1), replace=False)
        positive[row, columns], negative[row, columns] = 1.3, 0.7
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    return RowDelta(ids, {"positive": positive, "negative": negative, "keep": np.ones((rows, 1))}, {}, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.row_writes", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200, help="Rows a delta writes [default: %(default)s].")
    parser.add_argument("--calls", type=int, default=50, help="Deltas applied per k [default: %(default)s].")
    parser.add_argument("--changed", default="2,8,30", help="Values changed a row, comma-separated [2,8,30].")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per k; median, min and max [3].")
    args = parser.parse_args(argv)
    changed = [int(k) for k in args.changed.split(",")]
    rng = np.random.default_rng(0)
    print(f"`python -m benchmarks.row_writes --rows {args.rows} --calls {args.calls} --changed {args.changed}`\n")
    print("| values changed a row | Redis CPU µs a row, the store's write (median, min–max) | a plain `SET` of the row |")
    print("|---|---|---|")
    with start_redis() as server:
        client = connect(server.url)
        learner = build_learner("balanced-winnow")
        store = RedisStore(client, "row-writes", learner.table_specs(), 16)
        store.ensure_categories([f"c{i}" for i in range(CATEGORIES)])
        row = np.ones(1 + 2 * CATEGORIES, dtype="<f4").tobytes()
        keys = [f"row-writes-set:{i}".encode() for i in range(args.rows)]
        for k in changed:
            deltas = [delta_of(args.rows, k, rng, 1 << 20) for _ in range(args.calls)]
            store.apply_delta(deltas[0])  # every row exists: the steady state of a learned model
            script, plain = [], []
            for _ in range(args.repeats):
                before = redis_cpu_s(client)
                for delta in deltas:
                    store.apply_delta(delta)
                script.append(1e6 * (redis_cpu_s(client) - before) / (args.calls * args.rows))
                before = redis_cpu_s(client)
                for _ in range(args.calls):
                    pipe = client.pipeline(transaction=False)
                    for key in keys:
                        pipe.set(key, row)
                    pipe.execute()
                plain.append(1e6 * (redis_cpu_s(client) - before) / (args.calls * args.rows))
            print(f"| {k} | {statistics.median(script):.1f} ({min(script):.1f}–{max(script):.1f}) | "
                  f"{statistics.median(plain):.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
