"""The learning core's benchmarks on Reuters-21578 ModApte: accuracy, the paper's ablation, prequential speed.

    python -m benchmarks.learning accuracy --source ../shared/datasets/reuters21578.tar.gz
    python -m benchmarks.learning ablation --source ../shared/datasets/reuters21578.tar.gz
    python -m benchmarks.learning speed    --source ../shared/datasets/reuters21578.tar.gz
    python -m benchmarks.learning one-of   --source ../shared/datasets/reuters21578.tar.gz

``accuracy``: hold-out (train on the training split, score the test split), top
10 and 90 categories, for each learner at its defaults and for the project's
best settings. ``ablation``: Dagan, Karov & Roth's Table 1 rows (basic, + thick
threshold, + sqrt strength, + feature discarding) for the three linear rules,
then this project's two additions (length normalisation with averaged passes;
a wide thick threshold). ``speed``: prequential runs (predict, then learn, one
pass over training then test documents) of our learners next to Vowpal Wabbit
and River in the same process and run, docs/s and micro-F1. ``one-of``: accuracy on
R8 and R52 (the single-topic ModApte documents) for every rule in one-of mode, beside
scikit-learn's LinearSVC (tf-idf) and MultinomialNB (counts) on the same tokens when
scikit-learn is installed (the ``bench`` extra). Each prints a Markdown table (or JSON
with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from stream_winnow.datasets.reuters21578 import ModApteSplit, read_modapte, read_single_label
from stream_winnow.evaluation.runs import holdout, prequential
from stream_winnow.learners import LEARNERS, build_learner
from stream_winnow.learners.base import Learner
from stream_winnow.models.training import TrainingConfig
from stream_winnow.text.features import FeatureConfig

# The project's best settings: a wide thick threshold (a margin, as an SVM has) on raw sqrt strengths.
BEST_SETTINGS: dict[str, Any] = {"theta_minus": 0.2, "theta_plus": 3.0}
BEST_FEATURES = FeatureConfig(strength="sqrt", normalize=False)
BEST_FLAGS = "--no-normalize --theta-minus 0.2 --theta-plus 3"


@dataclass(frozen=True)
class Row:
    """One configuration to measure: how to build the learner and how to train it."""

    label: str
    make: Callable[[], Learner]
    training: TrainingConfig = TrainingConfig()


def _splits(source: str) -> dict[str, ModApteSplit]:
    full = read_modapte(source)
    return {"top 10": full.most_frequent(10), "90": full}


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def accuracy_rows() -> list[Row]:
    return [
        Row("balanced-winnow (defaults)", lambda: build_learner("balanced-winnow")),
        Row(f"balanced-winnow {BEST_FLAGS} (best)",
            lambda: build_learner("balanced-winnow", features=BEST_FEATURES, **BEST_SETTINGS)),
        Row("positive-winnow (defaults)", lambda: build_learner("positive-winnow")),
        Row("perceptron (defaults)", lambda: build_learner("perceptron")),
        Row("perceptron --no-idf", lambda: build_learner("perceptron", features=FeatureConfig())),
        Row(f"perceptron {BEST_FLAGS}", lambda: build_learner("perceptron", **BEST_SETTINGS)),
        Row("multinomial-nb (defaults)", lambda: build_learner("multinomial-nb")),
        Row("bernoulli-nb (defaults)", lambda: build_learner("bernoulli-nb")),
    ]  # fmt: skip


# The wide threshold on raw sqrt strengths with word pairs: Balanced Winnow's best one-of here (R8 0.9764, R52 0.9455),
# and the learner of the domain models' learning curves (benchmarks.domain).
PAIRS_FEATURES = FeatureConfig(strength="sqrt", normalize=False, bigrams=True)
PAIRS_FLAGS = "--no-normalize --bigrams --theta-minus 0.2 --theta-plus 3"


def one_of_rows() -> list[Row]:
    rows = [Row(f"{name} (defaults)", partial(build_learner, name, mode="one-of"))
            for name in ("balanced-winnow", "positive-winnow", "perceptron", "multinomial-nb")]  # fmt: skip
    for name in ("balanced-winnow", "perceptron"):
        # Each row as the CLI would build it: the rule's own idf default unless the label flips it.
        defaults = LEARNERS[name].default_features()
        idf = defaults.idf
        flip = "--no-idf" if idf else "--idf"
        rows.append(Row(f"{name} {flip}", partial(build_learner, name, mode="one-of",
                                                  features=replace(defaults, idf=not idf))))  # fmt: skip
        for features, flags in ((replace(BEST_FEATURES, idf=idf), BEST_FLAGS), (replace(PAIRS_FEATURES, idf=idf), PAIRS_FLAGS),
                                (replace(PAIRS_FEATURES, idf=not idf), f"{PAIRS_FLAGS} {flip}")):  # fmt: skip
            rows.append(Row(f"{name} {flags}", partial(build_learner, name, mode="one-of", features=features,
                                                       **BEST_SETTINGS)))  # fmt: skip
    counts = replace(BEST_FEATURES, strength="count", idf=True)  # the best here on R52
    rows.append(Row(f"perceptron --strength count {BEST_FLAGS}", partial(build_learner, "perceptron", mode="one-of",
                                                                        features=counts, **BEST_SETTINGS)))  # fmt: skip
    return rows


def _single_label_splits(source: str) -> dict[str, ModApteSplit]:
    r52 = read_single_label(source)
    return {"R8": r52.most_frequent(8), "R52": r52}


def scikit_learn_rows(splits: dict[str, ModApteSplit]) -> list[dict[str, Any]]:
    """LinearSVC and Perceptron on sublinear tf-idf, MultinomialNB on counts of the same tokens; [] without
    scikit-learn."""
    try:
        from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
        from sklearn.linear_model import Perceptron
        from sklearn.naive_bayes import MultinomialNB
        from sklearn.svm import LinearSVC
    except ImportError:
        return []
    tf_idf = partial(TfidfVectorizer, analyzer=list, sublinear_tf=True)
    systems: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
               ("scikit-learn LinearSVC, tf-idf", tf_idf, LinearSVC),
               ("scikit-learn Perceptron, tf-idf", tf_idf, partial(Perceptron, random_state=0)),
               ("scikit-learn MultinomialNB, counts", lambda: CountVectorizer(analyzer=list), MultinomialNB)]  # fmt: skip
    out = []
    for label, vectorizer, model in systems:
        row: dict[str, Any] = {"learner": label}
        for name, split in splits.items():
            vectors = vectorizer()
            train = vectors.fit_transform([list(d.tokens) for d in split.train])
            test = vectors.transform([list(d.tokens) for d in split.test])
            predicted = model().fit(train, [d.labels[0] for d in split.train]).predict(test)
            accuracy = sum(p == d.labels[0] for p, d in zip(predicted, split.test, strict=True)) / len(split.test)
            row[name] = {"accuracy": round(float(accuracy), 4)}
        out.append(row)
    return out


def run_one_of(splits: dict[str, ModApteSplit]) -> list[dict[str, Any]]:
    """Accuracy (= micro-F1: one category decided, one true) of every row on each single-label split."""
    results = []
    for row in one_of_rows():
        out: dict[str, Any] = {"learner": row.label}
        for name, split in splits.items():
            out[name] = {"accuracy": round(holdout(row.make(), split.train, split.test, row.training).report.micro_f1, 4)}
        results.append(out)
        print(json.dumps(out), flush=True) if _VERBOSE else None
    return results + scikit_learn_rows(splits)


def _wide_threshold(name: str) -> Learner:
    """``name`` with the wide threshold 0.2/3; without length normalisation, except Positive Winnow (which needs it)."""
    if name == "positive-winnow":
        return build_learner(name, **BEST_SETTINGS)
    return build_learner(name, features=BEST_FEATURES, **BEST_SETTINGS)


def ablation_rows(n_train: int) -> list[Row]:
    """Table 1 of the paper for each linear rule; training as the paper's: passes, no averaging, no shuffling."""
    paper = TrainingConfig(passes=30, average=False)
    # Discard once a pass makes mistakes on fewer than 2 % of the training documents.
    discard = TrainingConfig(passes=30, average=False, discard_below_mistakes=max(1, n_train // 50))
    rows: list[Row] = []
    for name in ("balanced-winnow", "positive-winnow", "perceptron"):
        normalize = name == "positive-winnow"  # required by Positive Winnow only (§4.1)

        def make(strength: str, thin: bool, name: str = name, normalize: bool = normalize) -> Callable[[], Learner]:
            settings: dict[str, Any] = {"theta_minus": 1.0, "theta_plus": 1.0} if thin else {}
            features = FeatureConfig(strength=strength, normalize=normalize)  # type: ignore[arg-type]
            return lambda: build_learner(name, features=features, **settings)

        rows += [
            Row(f"{name}: basic (binary, thin threshold)", make("binary", True), paper),
            Row(f"{name}: + threshold range 0.9/1.1", make("binary", False), paper),
            Row(f"{name}: + sqrt strength", make("sqrt", False), paper),
            Row(f"{name}: + feature discarding", make("sqrt", False), discard),
            Row(f"{name}: project defaults (+ averaged passes{', normalised' if name != 'perceptron' else ''})",
                partial(build_learner, name)),
            Row(f"{name}: + wide threshold 0.2/3" + (" (no normalisation)" if name != "positive-winnow" else ""),
                partial(_wide_threshold, name)),
        ]  # fmt: skip
    return rows


def run_holdout(rows: Sequence[Row], splits: dict[str, ModApteSplit]) -> list[dict[str, Any]]:
    results = []
    for row in rows:
        out: dict[str, Any] = {"learner": row.label}
        for name, split in splits.items():
            result = holdout(row.make(), split.train, split.test, row.training)
            out[name] = {
                "micro_f1": round(result.report.micro_f1, 4),
                "micro_bep": round(result.report.micro_bep or 0.0, 4),
                "macro_f1": round(result.report.macro_f1, 4),
                "passes": len(result.training.mistakes_per_pass) if result.training else 0,
                "discarded": round(result.training.discard.fraction, 3)
                if result.training and result.training.discard
                else None,
                "seconds": round(result.seconds, 1),
            }
        results.append(out)
        print(json.dumps(out), flush=True) if _VERBOSE else None
    return results


def holdout_table(results: list[dict[str, Any]], with_discard: bool = False) -> str:
    header = ["learner", "top-10 micro-F1", "top-10 BEP", "90 micro-F1", "90 BEP", "90 macro-F1"]
    if with_discard:
        header.append("features discarded (90)")
    rows = []
    for r in results:
        row = [r["learner"], r["top 10"]["micro_f1"], r["top 10"]["micro_bep"], r["90"]["micro_f1"],
               r["90"]["micro_bep"], r["90"]["macro_f1"]]  # fmt: skip
        if with_discard:
            row.append("" if r["90"]["discarded"] is None else f"{r['90']['discarded']:.0%}")
        rows.append(row)
    return _table(header, rows)


def run_speed(splits: dict[str, ModApteSplit], river_max_docs: int, repeats: int) -> list[dict[str, Any]]:
    """Prequential docs/s and micro-F1 of ours and the peers, interleaved so load hits all alike."""
    from benchmarks.peers import run_river_prequential, run_vw_prequential

    results: list[dict[str, Any]] = []
    ours = [
        ("stream-winnow balanced-winnow (defaults)", lambda: build_learner("balanced-winnow")),
        (f"stream-winnow balanced-winnow {BEST_FLAGS}",
         lambda: build_learner("balanced-winnow", features=BEST_FEATURES, **BEST_SETTINGS)),
        ("stream-winnow perceptron (defaults)", lambda: build_learner("perceptron")),
    ]  # fmt: skip
    for variant, split in splits.items():
        stream = split.train + split.test
        categories = split.categories
        best: dict[str, dict[str, Any]] = {}
        for _ in range(repeats):
            for label, make in ours:
                r = prequential(make(), stream)
                _keep_best(best, label, variant, len(stream), r.docs_per_second, r.report.micro_f1, r.report.macro_f1)
            vw = run_vw_prequential(stream, categories)
            _keep_best(best, f"{vw.system} ({vw.note})", variant, vw.n_documents, vw.docs_per_second, vw.micro_f1,
                       vw.macro_f1)  # fmt: skip
        river = run_river_prequential(stream, categories, max_docs=river_max_docs or None)
        _keep_best(best, f"{river.system} ({river.note})", variant, river.n_documents, river.docs_per_second,
                   river.micro_f1, river.macro_f1)  # fmt: skip
        results += best.values()
    return results


def _keep_best(
    best: dict[str, dict[str, Any]], label: str, variant: str, n: int, rate: float, micro: float, macro: float
) -> None:
    """Keep each system's fastest repeat (the least disturbed by other load); F1 does not vary."""
    if label not in best or rate > best[label]["docs_per_second"]:
        best[label] = {"system": label, "stream": variant, "documents": n, "docs_per_second": round(rate),
                       "micro_f1": round(micro, 4), "macro_f1": round(macro, 4)}  # fmt: skip
        if _VERBOSE:
            print(json.dumps(best[label]), flush=True)


_VERBOSE = False


def main(argv: Sequence[str] | None = None) -> None:
    global _VERBOSE
    parser = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["accuracy", "ablation", "speed", "one-of"])
    parser.add_argument("--source", required=True, help="reuters21578.tar.gz or a folder with the .sgm files")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    parser.add_argument("--repeats", type=int, default=3, help="speed: runs per system; the fastest is kept")
    parser.add_argument("--river-max-docs", type=int, default=2000, help="speed: River is timed on this prefix")
    parser.add_argument("--verbose", action="store_true", help="print each result as it comes")
    args = parser.parse_args(argv)
    _VERBOSE = args.verbose
    started = time.perf_counter()
    splits = _single_label_splits(args.source) if args.what == "one-of" else _splits(args.source)
    if args.what == "one-of":
        results = run_one_of(splits)
        table = _table(["learner (one-of)", "R8 accuracy", "R52 accuracy"],
                       [[r["learner"], r["R8"]["accuracy"], r["R52"]["accuracy"]] for r in results])  # fmt: skip
    elif args.what == "speed":
        results = run_speed(splits, args.river_max_docs, args.repeats)
        table = _table(
            ["system", "stream", "documents", "docs/s", "micro-F1", "macro-F1"],
            [[r["system"], r["stream"], r["documents"], r["docs_per_second"], r["micro_f1"], r["macro_f1"]]
             for r in results],
        )  # fmt: skip
    elif args.what == "accuracy":
        results = run_holdout(accuracy_rows(), splits)
        table = holdout_table(results)
    else:
        results = run_holdout(ablation_rows(len(splits["90"].train)), splits)
        table = holdout_table(results, with_discard=True)
    if args.json:
        for r in results:
            print(json.dumps(r))
    else:
        print(table)
        print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
