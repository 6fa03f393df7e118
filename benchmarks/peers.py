"""Peers on the same stream: Vowpal Wabbit and River, run prequentially.

Prequential means one pass over the documents in the given order: predict each
document, record the prediction, then learn from it. The clock
(``time.perf_counter``) runs around that loop only; turning tokens into the
peer's input (VW's text format, River's feature dict) happens inside it,
because our own learners hash tokens inside theirs. Building the model before
and scoring after are outside.

Run on the ModApte stream (training documents, then test documents, in file
order)::

    python -m benchmarks.peers --source /work/shared/datasets/reuters21578.tar.gz --top 10
    python -m benchmarks.peers --source /work/shared/datasets/reuters21578.tar.gz --top none \\
        --river-max-docs 2000 --json

Micro- and macro-F1 are computed with :mod:`stream_winnow.evaluation.metrics`
over every prequential prediction of the stream (or of the timed prefix when
``max_docs`` cuts it short), against the split's categories.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

import numpy as np

from stream_winnow.documents import LabelledDocument
from stream_winnow.evaluation.metrics import classification_report, label_matrix

__all__ = ["PeerResult", "VW_DEFAULT_ARGS", "main", "run_river_prequential", "run_vw_prequential"]

# Options tried on the 90-category ModApte stream (one pass, prequential micro-F1 / macro-F1):
#   -b 18 (VW's default): squared loss 0.793/0.322 · logistic 0.765/0.266 · hinge 0.790/0.313
#   -b 20: squared 0.807/0.340 · logistic 0.782/0.279 · hinge 0.805/0.332
#   -b 22: squared 0.811/0.342 · logistic 0.788/0.288 · hinge 0.810/0.334
#   -b 24: squared 0.813/0.344 · logistic 0.789/0.289 · hinge 0.811/0.335
# The K one-against-all models seem to share one table of 2^b weights (the process stays at about 270 MB
# resident at 24 bits, not K times that), so at the default 18 bits 90 categories over the stream's 31,060
# distinct tokens collide; more bits helped up to 24. Squared loss, VW's default, beat logistic and hinge
# at every size.
VW_DEFAULT_ARGS = "-b 24"
# River scores one dict at a time per category (160-310 docs/s at 90 categories here), so it runs on
# this prefix of the stream by default.
RIVER_MAX_DOCS = 2_000

# How River sees a document: token counts, or 1 for each distinct token.
RiverFeatures = Literal["count", "binary"]

# ':' separates a feature from its value and '|' starts a namespace in VW's text format; '%' is escaped
# too so that the mapping stays one-to-one.
_VW_ESCAPES = str.maketrans({"%": "%25", ":": "%3A", "|": "%7C"})


@dataclass(frozen=True)
class PeerResult:
    """One peer's prequential run: throughput and accuracy on the same documents."""

    system: str
    n_documents: int
    seconds: float
    docs_per_second: float
    micro_f1: float
    macro_f1: float
    note: str


def _result(
    system: str,
    docs: Sequence[LabelledDocument],
    categories: Sequence[str],
    predicted: np.ndarray,
    seconds: float,
    note: str,
) -> PeerResult:
    true = label_matrix([doc.labels for doc in docs], categories)
    report = classification_report(true, predicted)
    n_documents = len(docs)
    return PeerResult(
        system=system,
        n_documents=n_documents,
        seconds=seconds,
        docs_per_second=n_documents / seconds if seconds > 0 else float("inf"),
        micro_f1=report.micro_f1,
        macro_f1=report.macro_f1,
        note=note,
    )


def run_vw_prequential(
    docs: Sequence[LabelledDocument], categories: Sequence[str], vw_args: str = VW_DEFAULT_ARGS
) -> PeerResult:
    """Vowpal Wabbit ``--multilabel_oaa K`` (pyvw), predict-then-learn on each document.

    Each document is formatted as ``0,3,7 | tok1 tok2 ...`` (label indices into
    ``categories``; ``:`` ``|`` ``%`` in tokens escaped); the prediction is made
    on the same text without labels, then the labelled example is learned.
    Repeated tokens are repeated features, so VW sees token counts. A document
    with no label among ``categories`` is predicted but not learned from (VW's
    text format has no empty label set).
    """
    from vowpalwabbit import pyvw

    index = {category: j for j, category in enumerate(categories)}
    predicted = np.zeros((len(docs), len(categories)), dtype=bool)
    workspace = pyvw.Workspace(f"--multilabel_oaa {len(categories)} --quiet {vw_args}".strip())
    try:
        start = time.perf_counter()
        for i, doc in enumerate(docs):
            features = "| " + " ".join(doc.tokens).translate(_VW_ESCAPES)
            labels = ",".join(str(index[label]) for label in doc.labels if label in index)
            for j in workspace.predict(features):
                predicted[i, j] = True
            if labels:
                workspace.learn(labels + " " + features)
        seconds = time.perf_counter() - start
    finally:
        workspace.finish()
    return _result(
        "vowpalwabbit --multilabel_oaa",
        docs,
        categories,
        predicted,
        seconds,
        f"options: {vw_args or '(defaults)'}",
    )


def run_river_prequential(
    docs: Sequence[LabelledDocument],
    categories: Sequence[str],
    max_docs: int | None = None,
    features: RiverFeatures = "count",
) -> PeerResult:
    """River ``linear_model.Perceptron``, one per category (binary relevance), on token-count dicts.

    River scores one dict at a time per model, so with 90 categories it is
    slow; ``max_docs`` runs (and scores) only the first ``max_docs`` documents
    of the stream, and the note says so. ``features="binary"`` gives each
    distinct token the value 1 instead of its count (on the ModApte stream
    it scores higher: 0.750 vs 0.679 micro-F1 at 90 categories, 0.878 vs
    0.845 at the top 10).
    """
    from river import linear_model

    stream = docs if max_docs is None else docs[:max_docs]
    models = [linear_model.Perceptron() for _ in categories]
    predicted = np.zeros((len(stream), len(categories)), dtype=bool)
    start = time.perf_counter()
    for i, doc in enumerate(stream):
        # River's type hints want dict[Hashable, Any]; a Counter is one at run time.
        x = cast(dict[Hashable, Any], Counter(doc.tokens) if features == "count" else dict.fromkeys(doc.tokens, 1))
        labels = set(doc.labels)
        for j, (category, model) in enumerate(zip(categories, models, strict=True)):
            if model.predict_one(x):
                predicted[i, j] = True
            model.learn_one(x, category in labels)
    seconds = time.perf_counter() - start
    if len(stream) < len(docs):
        note = f"{features} features; first {len(stream)} of {len(docs)} documents (timed and scored on that prefix)"
    else:
        note = f"{features} features; whole stream"
    return _result("river linear_model.Perceptron (one per category)", stream, categories, predicted, seconds, note)


def _parse_optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def _table(results: Sequence[PeerResult], title: str) -> str:
    lines = [
        title,
        f"| {'system':<50} | {'docs':>6} | {'seconds':>8} | {'docs/s':>8} | {'micro-F1':>8} | {'macro-F1':>8} | note",
        f"|{'-' * 52}|{'-' * 8}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 10}|------",
    ]
    for r in results:
        lines.append(
            f"| {r.system:<50} | {r.n_documents:>6} | {r.seconds:>8.2f} | {r.docs_per_second:>8,.0f} "
            f"| {r.micro_f1:>8.3f} | {r.macro_f1:>8.3f} | {r.note}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run both peers prequentially on the ModApte stream (training then test documents)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=main.__doc__)
    parser.add_argument("--source", required=True, help="reuters21578.tar.gz or a folder with the .sgm files")
    parser.add_argument(
        "--top",
        type=_parse_optional_int,
        default=None,
        help="keep the N most frequent categories, or 'none' for all 90 (default: none)",
    )
    parser.add_argument(
        "--river-max-docs",
        type=_parse_optional_int,
        default=RIVER_MAX_DOCS,
        help=f"time and score River on this prefix of the stream, or 'none' (default: {RIVER_MAX_DOCS})",
    )
    parser.add_argument(
        "--river-features",
        choices=["count", "binary"],
        default="count",
        help="River feature values: token counts or 1 per distinct token (default: count)",
    )
    parser.add_argument("--vw-args", default=VW_DEFAULT_ARGS, help=f"extra VW options (default: {VW_DEFAULT_ARGS!r})")
    parser.add_argument("--skip", choices=["vw", "river"], action="append", default=[], help="leave a peer out")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    from stream_winnow.datasets.reuters21578 import read_modapte

    split = read_modapte(args.source, top=args.top)
    stream = [*split.train, *split.test]
    results = []
    if "vw" not in args.skip:
        results.append(run_vw_prequential(stream, split.categories, args.vw_args))
    if "river" not in args.skip:
        results.append(run_river_prequential(stream, split.categories, args.river_max_docs, args.river_features))

    description = (
        f"ModApte stream: {len(split.train)} training then {len(split.test)} test documents, "
        f"{len(split.categories)} categories, prequential single pass"
    )
    if args.json:
        payload = {
            "stream": description,
            "top": args.top,
            "n_categories": len(split.categories),
            "results": [asdict(result) for result in results],
        }
        print(json.dumps(payload, indent=2))
    else:
        print(_table(results, description))


if __name__ == "__main__":
    main()
