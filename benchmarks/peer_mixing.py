"""How pods learning one model should share their changes: ``python -m benchmarks.peer_mixing``.

An in-process model of what ``--peer-mixing`` and ``--learn-staleness-events`` decide, without a
broker or Redis, so that a rule's default can be chosen on accuracy alone (a minute a rule). The
ModApte training stream is learned in lock-step rounds: each round, ``peers`` copies of the shared
model each learn ``round`` events, every event going to a peer drawn at random (as keys spread over
partitions), one by one as a worker learns a batch on its local copy; then each copy's change
(``stores.delta.delta_between``) is written to the shared model whole (``sum``) or at ``1 / peers``
of its strength (``average``: ``stores.delta.shared``), as the workers write theirs. Reported, as
the mean (min–max) over ``--seeds`` draws:

- **test micro-F1**: the shared model at the end on the ModApte test split;
- **prequential micro-F1**: each training document decided by the shared model as it stood at the
  start of its window of 2,000 documents (the scale benchmark's window: a decision lacks up to that
  many labels at every N), from the second window on. A round longer than the window lags more.

``1:2000:sum`` is one learner with the same lag. Balanced Winnow, 3 seeds, test / prequential
micro-F1 (means): one learner 0.7965 / 0.7910; 4 peers summing rounds of 20 0.7957 / 0.7849;
summing batches of 500 0.2099 / 0.2686; averaging batches of 500 0.8147 / 0.7747. In process the
peers' rounds are in lock-step; real workers' are not, and ``benchmarks.scale`` measures those.

    python -m benchmarks.peer_mixing --source ../shared/datasets/reuters21578.tar.gz \\
        --learner balanced-winnow 1:2000:sum 4:20:sum 4:500:sum 4:500:average
"""

from __future__ import annotations

import argparse
import copy
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.scale import ScaleConfig, Stream, load_stream, micro_f1, reference_learner
from stream_winnow.learners.base import UPDATES_COUNTER, Learner
from stream_winnow.learners.term_weights import DOCUMENTS_COUNTER
from stream_winnow.stores.delta import RowDelta, delta_between, shared

#: The scale benchmark's window: a decision lacks at most this many earlier labels.
WINDOW_DOCS = 2000
COUNTERS = (UPDATES_COUNTER, DOCUMENTS_COUNTER)


@dataclass(frozen=True)
class Setting:
    """Peers, events a peer learns a round, and how their changes are written."""

    peers: int
    round_events: int
    mixing: str

    @classmethod
    def parse(cls, text: str) -> Setting:
        try:
            peers, round_events, mixing = text.split(":")
            setting = cls(int(peers), int(round_events), mixing)
        except ValueError:
            raise SystemExit(f"a setting is PEERS:ROUND:MIXING, e.g. 4:500:average; got {text!r}") from None
        if setting.peers < 1 or setting.round_events < 1 or mixing not in ("average", "sum"):
            raise SystemExit(f"need PEERS >= 1, ROUND >= 1 and MIXING average or sum; got {text!r}")
        return setting


def _change(local: Learner, before: Learner, ids: np.ndarray, share: float) -> RowDelta:
    """What ``local`` learned since it was copied from ``before``, over ``ids``, at ``share`` of its strength."""
    specs = local.table_specs()
    values = delta_between(before.store.read(ids), local.store.read(ids), specs)
    counters = {}
    for name in COUNTERS:
        old = before.store.counters(name)
        counters[name] = {key: amount - old.get(key, 0.0) for key, amount in local.store.counters(name).items()}
    return shared(RowDelta(ids, values, counters, 1), specs, share)


def run(learner: str, stream: Stream, setting: Setting, seed: int) -> tuple[float, float]:
    """Test and prequential micro-F1 of one stream learned by ``setting``'s peers."""
    model = reference_learner(learner, stream)
    docs, rng = stream.docs, np.random.default_rng(seed)
    share = 1.0 / setting.peers if setting.mixing == "average" else 1.0
    decided: list[tuple[str, ...]] = [()] * len(docs)
    decided_to = 0
    span = setting.peers * setting.round_events
    for start in range(0, len(docs), span):
        members = list(range(start, min(start + span, len(docs))))
        while decided_to <= members[-1]:  # the windows this round reaches are decided by the model before it
            end = min(decided_to + WINDOW_DOCS, len(docs))
            for i in range(decided_to, end):
                decided[i] = model.predict_one(docs[i].tokens).categories
            decided_to = end
        # Categories go to the shared model first, as ensure_categories does in Redis, so every copy's columns agree.
        model.store.ensure_categories(list(dict.fromkeys(label for i in members for label in docs[i].labels)))
        owner = rng.integers(0, setting.peers, len(members))
        changes = []
        for peer in range(setting.peers):
            mine = [i for i, o in zip(members, owner.tolist(), strict=True) if o == peer]
            if not mine:
                continue
            local = copy.deepcopy(model)
            features = [local.transform(docs[i].tokens) for i in mine]  # weighed by the counts before the round
            for vector, i in zip(features, mine, strict=True):
                local.learn_one(vector, docs[i].labels)
            changes.append(_change(local, model, np.unique(np.concatenate([v.ids for v in features])), share))
        for change in changes:
            model.store.apply_delta(change)
    test = micro_f1([d.labels for d in stream.test], [model.predict_one(d.tokens).categories for d in stream.test],
                    stream.categories)  # fmt: skip
    prequential = micro_f1([d.labels for d in docs[WINDOW_DOCS:]], decided[WINDOW_DOCS:], stream.categories)
    return test, prequential


def _spread(values: Sequence[float]) -> str:
    return f"{statistics.mean(values):.4f} ({min(values):.4f}–{max(values):.4f})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_mixing", description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="The Reuters-21578 .tar.gz.")
    parser.add_argument("--learner", default="balanced-winnow", help="A mistake-driven rule [default: %(default)s].")
    parser.add_argument("--seeds", type=int, default=3, help="Draws of events to peers [default: %(default)s].")
    parser.add_argument("--documents", type=int, default=None, help="Cut the stream to its first N documents.")
    parser.add_argument("settings", nargs="+", metavar="PEERS:ROUND:MIXING",
                        help="e.g. 1:2000:sum (one learner) 4:20:sum 4:500:average.")  # fmt: skip
    args = parser.parse_args(argv)
    settings = [Setting.parse(text) for text in args.settings]
    stream = load_stream(ScaleConfig(source=args.source, documents=args.documents))
    print(f"{args.learner} on {stream.description}; decisions lag a window of {WINDOW_DOCS:,}; {args.seeds} seeds\n")
    print("| peers | events a round | mixing | test micro-F1 | prequential micro-F1 |")
    print("|---|---|---|---|---|")
    for setting in settings:
        seeds = range(1 if setting.peers == 1 else args.seeds)  # one learner draws nothing
        results = [run(args.learner, stream, setting, seed) for seed in seeds]
        print(f"| {setting.peers} | {setting.round_events:,} | {setting.mixing} | {_spread([r[0] for r in results])} "
              f"| {_spread([r[1] for r in results])} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
