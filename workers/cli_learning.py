"""Subcommands that learn and measure in process: ``dataset`` and ``evaluate``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stream_winnow.datasets import read_labelled_jsonl, read_modapte, read_single_label, write_modapte
from stream_winnow.errors import ConfigError
from stream_winnow.evaluation.runs import EvaluationResult, holdout, prequential
from stream_winnow.learners import DECISION_MODES, LEARNERS, Learner, build_learner
from stream_winnow.models.training import TrainingConfig
from stream_winnow.text.domain import FEATURE_SETS, DomainFeatures, DomainModel
from stream_winnow.text.features import STRENGTHS, FeatureConfig


def learner_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags that choose a learner and its settings (shared by ``evaluate`` and ``train``)."""
    options = [
        click.option("--learner", type=click.Choice(list(LEARNERS)), default="balanced-winnow", show_default=True),
        click.option("--mode", type=click.Choice(DECISION_MODES), default="any-of", show_default=True,
                     help="any-of: every category over its threshold; one-of: the best category."),
        click.option("--strength", type=click.Choice(STRENGTHS), default=None,
                     help="Feature strength from counts [default: sqrt; multinomial-nb count, bernoulli-nb binary]."),
        click.option("--normalize/--no-normalize", default=None,
                     help="Length-normalise strengths [default: on for the Winnows, off for the others]."),
        click.option("--bigrams/--no-bigrams", default=False, show_default=True, help="Add adjacent word pairs."),
        click.option("--idf/--no-idf", default=None,
                     help="Weigh strengths by the document frequencies the model counts [default: on for "
                          "perceptron on words, off otherwise; mistake-driven rules]."),
        click.option("--features", "feature_set", type=click.Choice(FEATURE_SETS), default="words", show_default=True,
                     help="What the learner sees: words, the domains of --domain, or both."),
        click.option("--domain", "domain_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="A domain model from `stream-winnow domain fit` (for --features domain or both)."),
        click.option("--alpha", type=float, help="Promotion factor (Winnow) or step (Perceptron)."),
        click.option("--beta", type=float, help="Demotion factor (Winnow)."),
        click.option("--theta", type=float, help="Threshold used for prediction [default: 1]."),
        click.option("--theta-minus", type=float, help="Lower edge of the thick threshold in training [0.9]."),
        click.option("--theta-plus", type=float, help="Upper edge of the thick threshold in training [1.1]."),
        click.option("--smoothing", type=float, help="Additive smoothing of Naive Bayes [1]."),
        click.option("--passes", type=click.IntRange(min=1), default=30, show_default=True,
                     help="Training passes at most (stops early on a pass without mistakes)."),
        click.option("--average/--no-average", default=True, show_default=True,
                     help="Use the mean of the weights after each training pass."),
        click.option("--discard-below", type=click.IntRange(min=0), default=None,
                     help="Discard unused features after the first pass with fewer mistakes than this."),
        click.option("--shuffle-seed", type=int, default=None,
                     help="Shuffle the training set between passes [default: keep its order]."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def make_learner(options: dict[str, Any]) -> tuple[Learner, TrainingConfig]:
    """Build the learner and training settings from ``learner_options`` values (popped from ``options``)."""
    name = options.pop("learner")
    defaults = LEARNERS[name].default_features()
    features = FeatureConfig(
        strength=options.pop("strength") or defaults.strength,
        normalize=defaults.normalize if options.get("normalize") is None else options["normalize"],
        bigrams=options.pop("bigrams"),
        idf=defaults.idf if options.get("idf") is None else options["idf"],
    )
    options.pop("normalize")
    if options.pop("idf") and options.get("feature_set", "words") != "words":
        raise ConfigError("--idf weighs words only: with --features domain or both, the domain model weighs them")
    training = TrainingConfig(
        passes=options.pop("passes"),
        discard_below_mistakes=options.pop("discard_below"),
        shuffle_seed=options.pop("shuffle_seed"),
        average=options.pop("average"),
    )
    settings = {
        key: options.pop(key)
        for key in ("alpha", "beta", "theta", "theta_minus", "theta_plus", "smoothing")
        if options.get(key) is not None
    }
    for key in ("alpha", "beta", "theta", "theta_minus", "theta_plus", "smoothing"):
        options.pop(key, None)
    learner = build_learner(name, mode=options.pop("mode"), features=features, **settings)
    feature_set, domain_path = options.pop("feature_set", "words"), options.pop("domain_path", None)
    if feature_set == "words":
        if domain_path is not None:
            raise ConfigError("--domain is for --features domain or --features both")
    elif domain_path is None:
        raise ConfigError(f"--features {feature_set} needs --domain DOMAIN.npz (make one with `stream-winnow domain fit`)")
    else:
        learner.use_domain(DomainFeatures(DomainModel.load(domain_path), feature_set))
    return learner, training


@click.group("dataset")
def dataset() -> None:
    """Turn a public corpus into the labelled JSON Lines format."""


@dataset.command("reuters21578")
@click.option("--source", type=click.Path(exists=True, path_type=Path), required=True,
              help="The distribution: a folder with reut2-*.sgm or the .tar.gz.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Output folder.")
@click.option("--top", type=click.IntRange(min=1), default=None, help="Keep the N most frequent categories.")
@click.option("--single-label", is_flag=True,
              help="Only documents with exactly one topic, for one-of work: R52 (52 categories, 6,532 / 2,569); "
                   "with --top 8, R8 (5,567 / 2,208).")
def reuters21578(source: Path, out: Path, top: int | None, single_label: bool) -> None:
    """Write train.jsonl and test.jsonl of the ModApte split (7,770 / 3,019 documents, 90 categories)."""
    split = read_single_label(source, top=top) if single_label else read_modapte(source, top=top)
    train_path, test_path = write_modapte(split, out)
    click.echo(f"{train_path}: {len(split.train)} documents")
    click.echo(f"{test_path}: {len(split.test)} documents")
    click.echo(f"categories: {len(split.categories)}")


def _progress(total: int, quiet: bool, label: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="doc", disable=quiet or not sys.stderr.isatty(), file=sys.stderr)


def _plot(result: EvaluationResult, path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.UsageError("--plot needs matplotlib: pip install 'stream-winnow[plots]'") from None
    seen, f1 = zip(*result.curve, strict=True)
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(seen, f1, marker="o", markersize=3)
    axes.set_xlabel("documents seen (predicted, then learned)")
    axes.set_ylabel("running micro-F1 (0 to 1)")
    axes.set_ylim(0, 1)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


@click.command("evaluate")
@click.option("--train", "train_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Labelled JSON Lines to train on.")
@click.option("--test", "test_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Labelled JSON Lines to score.")
@click.option("--prequential", is_flag=True, help="One pass over --stream: predict each document, then learn it.")
@click.option("--stream", "stream_paths", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              multiple=True, help="The stream for --prequential (repeat to concatenate files in order).")
@learner_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Draw the prequential learning curve.")
def evaluate(
    train_path: Path | None,
    test_path: Path | None,
    prequential: bool,
    stream_paths: tuple[Path, ...],
    as_json: bool,
    quiet: bool,
    plot: Path | None,
    **options: Any,
) -> None:
    """Measure a learner: hold-out (--train, --test) or prequential (--prequential --stream)."""
    if plot is not None:  # before the run, so a bad path costs nothing
        if not prequential:
            raise click.UsageError("--plot draws the prequential learning curve; add --prequential")
        if not plot.parent.is_dir():
            raise click.BadParameter(f"folder {plot.parent} does not exist; create it first", param_hint="--plot")
    learner, training = make_learner(options)
    if prequential:
        if not stream_paths or train_path or test_path:
            raise click.UsageError("--prequential takes --stream FILE (repeatable), not --train/--test")
        stream = [d for path in stream_paths for d in read_labelled_jsonl(path)]
        with _progress(len(stream), quiet, "prequential") as bar:
            result = _run_prequential(learner, stream, bar)
    else:
        if not (train_path and test_path) or stream_paths:
            raise click.UsageError("hold-out evaluation takes --train FILE and --test FILE (or use --prequential)")
        train = list(read_labelled_jsonl(train_path))
        test = list(read_labelled_jsonl(test_path))
        with _progress(len(test), quiet, "scoring") as bar:
            result = holdout(learner, train, test, training, on_progress=bar.update)
    if plot is not None:
        _plot(result, plot, f"Prequential learning curve of {learner.name}")
    out = {"learner": learner.name, "mode": learner.mode, **result.as_dict()}
    if as_json:
        click.echo(json.dumps(out))
        return
    for key, value in out.items():
        click.echo(f"{key:>20}  {value:.4f}" if isinstance(value, float) else f"{key:>20}  {value}")


def _run_prequential(learner: Learner, stream: list[Any], bar: Any) -> EvaluationResult:
    return prequential(learner, stream, on_progress=bar.update)


COMMANDS = [dataset, evaluate]
