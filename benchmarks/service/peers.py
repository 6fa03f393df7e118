"""The in-process peers: prequential docs/s of our learner and of Vowpal Wabbit on the 90-category stream (not
repeated), and of River on its first 2,000 documents (one Perceptron per category scores a dict at a time: 160-310
docs/s at 90 categories, so the whole stream would take up to a minute)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from stream_winnow.documents import LabelledDocument

VW_PEER = "vowpalwabbit --multilabel_oaa"  # its name among the peers, and the machine's yardstick (against_vw)


def run_peers(stream: Sequence[LabelledDocument]) -> dict[str, Any]:
    """In-process prequential docs/s of our learner and of VW on the (not repeated) stream, and of River
    on its first ``RIVER_MAX_DOCS`` documents (as ``python -m benchmarks.peers`` runs it)."""
    from benchmarks.peers import RIVER_MAX_DOCS, run_river_prequential, run_vw_prequential
    from stream_winnow.evaluation.runs import categories_of, prequential
    from stream_winnow.learners import build_learner

    out: dict[str, Any] = {}
    result = prequential(build_learner("balanced-winnow"), stream)
    out["stream_winnow balanced-winnow"] = {"per_s": result.docs_per_second, "micro_f1": result.report.micro_f1}
    categories = categories_of(stream)
    peers = {
        VW_PEER: partial(run_vw_prequential, stream, categories),
        f"river linear_model.Perceptron, one per category (first {RIVER_MAX_DOCS:,} documents)": partial(
            run_river_prequential, stream, categories, max_docs=RIVER_MAX_DOCS
        ),
    }
    for name, run in peers.items():
        try:
            peer = run()
            out[name] = {"per_s": peer.docs_per_second, "micro_f1": peer.micro_f1}
        except ImportError as error:  # the extra `bench` is not installed
            out[name] = {"per_s": float("nan"), "micro_f1": float("nan"), "note": str(error)}
    return out
