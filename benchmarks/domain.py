"""Learning curves with domain models: micro-F1 against the fraction of labels, words vs domains vs both.

    python -m benchmarks.domain --source ../shared/datasets/reuters21578.tar.gz [--plot curves.png] [--json]

The domain model (400 domains unless ``--dimensions``) is fitted on the 9,603 ModApte
training documents without their labels (the fit is timed ``--fit-repeats`` times:
median, min and max). Then, on ModApte top 10 and on all 90 categories, a learner is
trained on a random ``f`` of the labelled training documents and scored on the whole
test split, for each fraction and for each feature set. Below 25 % of the labels
the figure is the mean over ``--seeds`` samples (a 1 % sample of the top 10 is 65
documents, and which ones matters). The learner is the project's best online rule,
Balanced Winnow with a wide thick threshold on raw sqrt strengths with word pairs
(``--no-normalize --bigrams --theta-minus 0.2 --theta-plus 3``); ``--learner`` picks another.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.learning import BEST_SETTINGS, PAIRS_FEATURES, PAIRS_FLAGS
from stream_winnow.datasets.reuters21578 import ModApteSplit, read_modapte, read_modapte_unlabelled
from stream_winnow.documents import LabelledDocument
from stream_winnow.evaluation.runs import holdout
from stream_winnow.learners import build_learner
from stream_winnow.learners.base import Learner
from stream_winnow.text.domain import FEATURE_SETS, DomainFeatures, DomainModel, fit_domain_model

FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.25, 1.0)
# Samples this small vary with the draw; from a quarter of the labels on one draw is enough.
FEW_LABELS_BELOW = 0.25
BEST_FLAGS = PAIRS_FLAGS
BEST_LABEL = "Balanced Winnow, wide threshold, word pairs"


def make_learner(name: str, feature_set: str, domain: DomainModel) -> Learner:
    if name == "best":
        learner = build_learner("balanced-winnow", features=PAIRS_FEATURES, **BEST_SETTINGS)
    else:
        learner = build_learner(name)
    if feature_set != "words":
        learner.use_domain(DomainFeatures(domain, feature_set))  # type: ignore[arg-type]
    return learner


def labelled_sample(train: Sequence[LabelledDocument], fraction: float, seed: int) -> list[LabelledDocument]:
    """``fraction`` of ``train`` (at least one document), drawn with ``seed``, in stream order."""
    if fraction >= 1.0:
        return list(train)
    n = max(1, round(fraction * len(train)))
    picked = np.sort(np.random.default_rng(seed).permutation(len(train))[:n])
    return [train[i] for i in picked]


def curve(split: ModApteSplit, domain: DomainModel, learner: str, fractions: Sequence[float],
          seeds: int) -> list[dict[str, Any]]:  # fmt: skip
    rows = []
    for fraction in fractions:
        row: dict[str, Any] = {"fraction": fraction, "labelled": len(labelled_sample(split.train, fraction, 0))}
        draws = range(seeds if fraction < FEW_LABELS_BELOW else 1)
        for feature_set in FEATURE_SETS:
            scores = [holdout(make_learner(learner, feature_set, domain), labelled_sample(split.train, fraction, s),
                              split.test).report.micro_f1 for s in draws]  # fmt: skip
            row[feature_set] = {"micro_f1": round(statistics.fmean(scores), 4), "draws": [round(x, 4) for x in scores]}
        rows.append(row)
        print(json.dumps(row), flush=True) if _VERBOSE else None
    return rows


def table(name: str, rows: Sequence[dict[str, Any]]) -> str:
    header = "| features | " + " | ".join(f"{r['fraction']:.0%} ({r['labelled']:,})" for r in rows) + " |"
    lines = [f"{name}:", "", header, "|" + "---|" * (len(rows) + 1)]
    for feature_set in FEATURE_SETS:
        lines.append(f"| {feature_set} | " + " | ".join(f"{r[feature_set]['micro_f1']:.4f}" for r in rows) + " |")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: str, learner: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(11, 4), sharey=True)
    for ax, (name, rows) in zip(np.atleast_1d(axes), results.items(), strict=True):
        for feature_set in FEATURE_SETS:
            ax.plot([100 * r["fraction"] for r in rows], [r[feature_set]["micro_f1"] for r in rows], marker="o",
                    label=feature_set)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xticks([100 * r["fraction"] for r in rows], [f"{100 * r['fraction']:g}" for r in rows])
        ax.set_xlabel("labelled training documents (% of ModApte's)")
        ax.set_title(f"ModApte, {name} categories")
        ax.grid(alpha=0.3)
        ax.legend()
    np.atleast_1d(axes)[0].set_ylabel("test micro-F1 (0 to 1)")
    figure.suptitle(f"{learner}: words, domains (LSA on the unlabelled documents) or both")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


_VERBOSE = False


def main(argv: Sequence[str] | None = None) -> None:
    global _VERBOSE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="reuters21578.tar.gz or a folder with the .sgm files")
    parser.add_argument("--dimensions", type=int, default=400, help="domains of the model [400]")
    parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS),
                        help="label fractions, comma-separated [%(default)s]")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=3, help="samples averaged below 25 %% of the labels [3]")
    parser.add_argument("--fit-repeats", type=int, default=3, help="times the fit is timed [3]")
    parser.add_argument("--learner", default="best", help=f"'best' ({BEST_FLAGS}) or a learner's name")
    parser.add_argument("--plot", help="draw the curves into this PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--verbose", action="store_true", help="print each row as it comes")
    args = parser.parse_args(argv)
    _VERBOSE = args.verbose
    fractions = [float(f) for f in args.fractions.split(",")]
    if not all(0 < f <= 1 for f in fractions):
        parser.error(f"--fractions must be in (0, 1]; got {args.fractions}")
    unlabelled = [d.tokens for d in read_modapte_unlabelled(args.source)]
    fit_seconds = []
    for _ in range(args.fit_repeats):
        started = time.perf_counter()
        domain = fit_domain_model(unlabelled, args.dimensions)
        fit_seconds.append(time.perf_counter() - started)
    full = read_modapte(args.source)
    splits = {"top 10": full.most_frequent(10), "90": full}
    results = {name: curve(split, domain, args.learner, fractions, args.seeds) for name, split in splits.items()}
    fit = {"documents": len(unlabelled), "dimensions": domain.dimensions, "words": len(domain.term_ids),
           "seconds_median": round(statistics.median(fit_seconds), 2), "seconds_min": round(min(fit_seconds), 2),
           "seconds_max": round(max(fit_seconds), 2)}  # fmt: skip
    if args.plot:
        plot(results, args.plot, BEST_LABEL if args.learner == "best" else args.learner)
    if args.json:
        print(json.dumps({"fit": fit, "learner": args.learner, "curves": results}))
        return
    print(f"domain model: {fit['dimensions']} domains over {fit['words']:,} words of {fit['documents']:,} unlabelled "
          f"documents, fitted in {fit['seconds_median']} s (min {fit['seconds_min']}, max {fit['seconds_max']}, "
          f"{args.fit_repeats} runs)")  # fmt: skip
    print(f"learner: {'balanced-winnow ' + BEST_FLAGS if args.learner == 'best' else args.learner}; test micro-F1 "
          f"by share of labelled training documents (mean of {args.seeds} draws below 25 %)\n")  # fmt: skip
    for name, rows in results.items():
        print(table(f"ModApte {name}", rows) + "\n")


if __name__ == "__main__":
    main()
