"""Subcommands that manage a model in Redis: ``train``, ``export``, ``import``, ``explain``,
``categories``, ``status`` and ``compact``.

Every command takes ``--redis-url`` and ``--model`` (also ``STREAM_WINNOW_REDIS_URL`` and
``STREAM_WINNOW_MODEL``). ``train`` learns in this process (the compiled, averaged
multi-pass path, which needs an in-memory model) and then writes the result into
Redis in bulk; workers that open the model pick up its settings from its metadata.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace as replace_fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import numpy as np
from redis.cluster import RedisCluster
from scipy import sparse

from stream_winnow.datasets import read_labelled_jsonl
from stream_winnow.errors import ConfigError, DataError
from stream_winnow.learners import Learner, describe, from_metadata
from stream_winnow.learners.base import UPDATES_COUNTER
from stream_winnow.learners.mistake_driven import KEEP_TABLE, MistakeDriven
from stream_winnow.learners.naive_bayes import DOCS_COUNTER, NaiveBayes
from stream_winnow.models.named import RedisClient, connect, open_learner
from stream_winnow.models.snapshot import (
    SNAPSHOT_FORMATS,
    copy_model,
    export_model,
    is_empty,
    read_snapshot,
    restore_snapshot,
)
from stream_winnow.models.training import fit
from stream_winnow.shared.outcomes import mistake_rates, recent_outcomes
from stream_winnow.stores.base import TableSpec
from stream_winnow.stores.redis import RedisStore
from stream_winnow.text.features import _BIGRAM_JOIN, FIRST_TOKEN_ID, feature_id
from stream_winnow.text.tokenize import tokenize
from workers.cli_learning import learner_options, make_learner
from workers.cli_service import model_options, option
from workers.config import redact_url

# MEMORY USAGE is one command per key; past this many keys `status` measures a random sample and
# scales it up (rows of one model have one size, so a 2,000-key sample is within a few percent).
_MEMORY_SAMPLE_KEYS = 2_000
# Keys per SCAN call when looking for models.
_SCAN_COUNT = 1_000
_METADATA_PATTERN = b"sw:{*}:metadata"
# A table spec that lets a RedisStore read a model's metadata whatever its learner (no rows are touched).
_ANY_TABLE = TableSpec("any", 0.0)


def json_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(command)


@contextmanager
def _client(url: str) -> Iterator[RedisClient]:
    client = connect(url)
    try:
        yield client
    finally:
        client.close()


def list_models(client: RedisClient) -> list[str]:
    """Names of the models in this Redis (every ``sw:{<model>}:metadata`` key), sorted."""
    nodes = (
        [client.get_redis_connection(node) for node in client.get_primaries()]
        if isinstance(client, RedisCluster)
        else [client]
    )
    names: set[str] = set()
    for node in nodes:
        for key in node.scan_iter(match=_METADATA_PATTERN, count=_SCAN_COUNT):
            raw = key if isinstance(key, bytes) else key.encode()
            name = raw[len(b"sw:{") : -len(b"}:metadata")]
            if b":" not in name and b"{" not in name and b"}" not in name:
                names.add(name.decode())
    return sorted(names)


def _open(client: RedisClient, url: str, model: str) -> Learner:
    """The learner of an existing model; a missing one is refused with the names that exist."""
    if "learner" not in RedisStore(client, model, [_ANY_TABLE]).metadata():
        models = list_models(client)
        there = f"models there: {', '.join(models)}" if models else "it holds no models"
        raise ConfigError(f"no model {model!r} in Redis at {redact_url(url)} ({there}); create it with `train`")
    return open_learner(client, model, create=False)


def _store(learner: Learner) -> RedisStore:
    assert isinstance(learner.store, RedisStore)
    return learner.store


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- train -----------------------------------------------------------------------------------------------
@click.command("train")
@model_options
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Labelled JSON Lines to train on.",
)
@learner_options
@option(
    "--shards",
    type=click.IntRange(1, 16384),
    default=16,
    show_default=True,
    help="Feature shards of the model (hash tags for a Redis Cluster).",
)
@click.option("--replace", is_flag=True, help="Overwrite a model of that name (default: refuse).")
@json_option
def train(redis_url: str, model: str, input_path: Path, shards: int, replace: bool, as_json: bool,
          **options: Any) -> None:  # fmt: skip
    """Train a model in this process (iterative passes, averaged) and write it into Redis as --model."""
    learner, training = make_learner(options)
    with _client(redis_url) as client:
        target = RedisStore(client, model, learner.table_specs(), shards)
        if not replace and not is_empty(target):
            raise ConfigError(f"model {model!r} already exists in Redis; pass --replace to overwrite it")
        docs = list(read_labelled_jsonl(input_path))
        if not docs:
            raise DataError(f"{input_path}: no documents to train on")
        report = fit(learner, docs, training)
        learner.store.set_metadata({
            **describe(learner), "shards": str(shards), "updated_at": _now(), "trained_documents": str(len(docs)),
        })  # fmt: skip
        started = time.perf_counter()
        copy_model(learner.store, target, replace=replace)
        write_s = time.perf_counter() - started
        out: dict[str, Any] = {
            "model": model,
            "learner": learner.name,
            "documents": len(docs),
            "categories": len(target.categories()),
            "passes": len(report.mistakes_per_pass),
            "mistakes_per_pass": list(report.mistakes_per_pass),
            "features": target.n_features(),
            "discarded": None if report.discard is None else report.discard.discarded,
            "train_seconds": round(report.seconds, 3),
            "write_seconds": round(write_s, 3),
        }
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"trained {out['learner']} on {out['documents']} documents, {out['categories']} categories")
    click.echo(f"passes: {out['passes']}")
    click.echo(f"mistakes per pass: {' '.join(map(str, out['mistakes_per_pass']))}")
    if out["discarded"] is not None:
        click.echo(f"discarded features: {out['discarded']}")
    click.echo(f"features stored: {out['features']} (model {model!r})")
    click.echo(f"seconds: {out['train_seconds']:.2f} training, {out['write_seconds']:.2f} writing to Redis")


# -- export / import -------------------------------------------------------------------------------------
@click.command("export")
@model_options
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    required=True,
    help="Snapshot file: *.msgpack or *.npz.",
)
@click.option(
    "--format",
    "snapshot_format",
    type=click.Choice(SNAPSHOT_FORMATS),
    default=None,
    help="File format [default: from the suffix of --out].",
)
def export(redis_url: str, model: str, out: Path, snapshot_format: str | None) -> None:
    """Write a model (settings, categories, counters, every row) to a snapshot file."""
    with _client(redis_url) as client:
        store = _store(_open(client, redis_url, model))
        snapshot = export_model(store, out, snapshot_format)  # type: ignore[arg-type]
    click.echo(f"{out}: model {model!r}, {snapshot.n_features} features, {len(snapshot.categories)} categories, "
               f"version {snapshot.version}")  # fmt: skip


@click.command("import")
@model_options
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Snapshot file written by `export` (*.msgpack or *.npz).",
)
@click.option("--replace", is_flag=True, help="Overwrite a model of that name (default: refuse).")
@option("--shards", type=click.IntRange(1, 16384), default=None, help="Shards of the model [default: the snapshot's].")
def import_(redis_url: str, model: str, input_path: Path, replace: bool, shards: int | None) -> None:
    """Load a snapshot file into Redis as --model."""
    snapshot = read_snapshot(input_path)
    if "learner" in snapshot.metadata:
        expected = [t.name for t in from_metadata(snapshot.metadata).table_specs()]
        if expected != [t.name for t in snapshot.tables]:
            raise DataError(f"{input_path}: tables {[t.name for t in snapshot.tables]} do not fit "
                            f"{snapshot.metadata['learner']} ({expected})")  # fmt: skip
    chosen = shards or int(snapshot.metadata.get("shards", 16))
    if snapshot.metadata.get("shards") != str(chosen):
        snapshot = replace_fields(snapshot, metadata={**snapshot.metadata, "shards": str(chosen)})
    with _client(redis_url) as client:
        store = RedisStore(client, model, snapshot.tables, chosen)
        if not replace and not is_empty(store):
            raise ConfigError(f"model {model!r} already exists in Redis; pass --replace to overwrite it")
        restore_snapshot(snapshot, store, replace=replace)
    click.echo(f"model {model!r}: {snapshot.n_features} features, {len(snapshot.categories)} categories, "
               f"version {snapshot.version}, {chosen} shards")  # fmt: skip


# -- explain ---------------------------------------------------------------------------------------------
def contributions(learner: Learner, values: dict[str, np.ndarray], strengths: np.ndarray,
                  total_strength: float) -> np.ndarray:  # fmt: skip
    """(features x categories): what each feature alone, at its strength, adds to each category's margin.

    The margin of a one-feature document minus that of an empty one, so one formula serves every
    learner; for the linear rules it is exact: Balanced Winnow's is unit * s * keep * (w+ - w-).
    """
    n = len(strengths)
    if n == 0:
        return np.zeros((0, len(learner.store.categories())))
    positions = np.arange(n)
    alone = sparse.csr_matrix((strengths, (positions, positions)), shape=(n, n))
    empty = sparse.csr_matrix((1, n))
    with_feature = learner.margins_from(values, alone, np.full((n, 1), total_strength))
    without = learner.margins_from(values, empty, np.full((1, 1), total_strength))
    return np.asarray(with_feature) - np.asarray(without)


def _names_of(token_lists: Sequence[Sequence[str]], bigrams: bool) -> dict[int, str]:
    """feature id -> token (bigrams shown as "a b") for the tokens of these documents."""
    names: dict[int, str] = {}
    for tokens in token_lists:
        for token in tokens:
            names.setdefault(feature_id(token), token)
        if bigrams:
            for a, b in zip(tokens, tokens[1:], strict=False):
                names.setdefault(feature_id(a + _BIGRAM_JOIN + b), f"{a} {b}")
    return names


def _domain_names(learner: Learner) -> dict[int, str]:
    """feature id -> "domain 17+" / "domain 17-" for the domain features of ``learner`` (none without them)."""
    return {} if learner.domain is None else learner.domain.names()


def _weight_formula(learner: Learner) -> str:
    if isinstance(learner, MistakeDriven):
        rows = "(w+ - w-)" if learner.name == "balanced-winnow" else "w"
        idf = "; a document's strengths are idf-weighted" if learner.counts_terms else ""
        return f"unit * keep * {rows}, unit = theta/d{idf}"
    return "change in log-odds from one occurrence"


def _feature_entry(fid: int, weight: float, names: dict[int, str]) -> dict[str, Any]:
    return {"feature_id": fid, "token": names.get(fid), "weight": weight}


def _show(entry: dict[str, Any]) -> str:
    token = entry["token"] if entry["token"] is not None else f"#{entry['feature_id']}"
    return f"    {entry['weight']:+.6f}  {token}"


def _explain_category(learner: Learner, category: str, top: int, names: dict[int, str]) -> dict[str, Any]:
    store = learner.store
    column = store.categories().index(category)
    ids_parts: list[np.ndarray] = []
    weight_parts: list[np.ndarray] = []
    for ids, values in store.iter_rows():
        tokens = ids >= FIRST_TOKEN_ID  # statistics rows are not features
        weights = contributions(learner, values, np.ones(len(ids)), 1.0)[:, column]
        ids_parts.append(ids[tokens])
        weight_parts.append(weights[tokens])
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int64)
    weights = np.concatenate(weight_parts) if weight_parts else np.zeros(0)
    order = np.lexsort((ids, -weights))  # by weight, ties by id: stable output
    best = order[:top].tolist()
    worst = [i for i in order[::-1][:top].tolist() if i not in set(best)]
    return {
        "category": category,
        "features_examined": len(ids),
        "weight": _weight_formula(learner),
        "top": [_feature_entry(int(ids[i]), float(weights[i]), names) for i in best],
        "bottom": [_feature_entry(int(ids[i]), float(weights[i]), names) for i in worst],
    }


def _explain_document(learner: Learner, tokens: Sequence[str], top: int, only: str | None) -> dict[str, Any]:
    vector = learner.transform(tokens)
    prediction = learner.predict_one(vector)
    names_in_order = learner.store.categories()
    margins = prediction.margins
    if only is not None:
        shown = [names_in_order.index(only)]
    else:
        shown = [names_in_order.index(c) for c in prediction.categories]
        others = [i for i in np.argsort(-margins).tolist() if names_in_order[i] not in prediction.categories]
        shown += others[:1]  # the best category not chosen: why not it?
    values = learner.store.read(vector.ids)
    contributed = contributions(learner, values, vector.strengths, vector.total_strength)
    names = _names_of([tokens], learner.features.bigrams) | _domain_names(learner)
    explained = []
    for column in shown:
        weights = contributed[:, column]
        order = np.lexsort((vector.ids, -np.abs(weights)))[:top].tolist()
        explained.append({
            "category": names_in_order[column],
            "predicted": names_in_order[column] in prediction.categories,
            "margin": float(margins[column]),
            "features": [_feature_entry(int(vector.ids[i]), float(weights[i]), names) for i in order],
        })  # fmt: skip
    return {
        "decision": list(prediction.categories),
        "model_version": prediction.model_version,
        "features": len(vector),
        "weight": _weight_formula(learner),
        "categories": explained,
    }


@click.command("explain")
@model_options
@click.option("--category", default=None, help="Explain this category (alone: its top features).")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="Features to show.")
@click.option("--text", default=None, help="A document to decide and explain (tokenized like `text` in JSONL).")
@click.option("--tokens", "tokens_flag", is_flag=True, help="The document is the TOKENS arguments, as given.")
@click.option(
    "--vocabulary",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Labelled JSON Lines whose tokens name feature ids (ids are hashes; repeatable).",
)
@json_option
@click.argument("tokens", nargs=-1)
def explain(redis_url: str, model: str, category: str | None, top: int, text: str | None, tokens_flag: bool,
            vocabulary: tuple[Path, ...], as_json: bool, tokens: tuple[str, ...]) -> None:  # fmt: skip
    """Why a model decides as it does: a category's top features, or a document's decision.

    \b
    stream-winnow explain --category earn --vocabulary train.jsonl
    stream-winnow explain --text "Profit rose 5 pct"
    stream-winnow explain --tokens profit rose pct
    """
    if tokens and not tokens_flag:
        raise click.UsageError(f"unexpected arguments {' '.join(tokens)!r}: put --tokens before a document's tokens")
    if tokens_flag and text is not None:
        raise click.UsageError("give the document either as --text or as --tokens, not both")
    if tokens_flag and not tokens:
        raise click.UsageError("--tokens needs the document's tokens after it: --tokens tok1 tok2 ...")
    document = tokenize(text) if text is not None else list(tokens) if tokens_flag else None
    if document is None and category is None:
        raise click.UsageError('say what to explain: --category C, --text "..." or --tokens tok1 tok2 ...')
    with _client(redis_url) as client:
        learner = _open(client, redis_url, model)
        known = learner.store.categories()
        if category is not None and category not in known:
            shown = ", ".join(known[:30]) + (" ..." if len(known) > 30 else "")
            raise ConfigError(f"model {model!r} has no category {category!r}; it has {shown or 'none'}")
        header = {"model": model, "learner": learner.name, "mode": learner.mode}
        if document is not None:
            out = {**header, **_explain_document(learner, document, top, category)}
        else:
            assert category is not None
            names = _names_of(
                [d.tokens for path in vocabulary for d in read_labelled_jsonl(path)], learner.features.bigrams
            ) | _domain_names(learner)
            out = {**header, **_explain_category(learner, category, top, names)}
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"model {model!r} ({out['learner']}, {out['mode']}); weight = {out['weight']}")
    if document is None:
        click.echo(f"category {out['category']}: {out['features_examined']} features")
        click.echo(f"  top {len(out['top'])} (for):")
        for entry in out["top"]:
            click.echo(_show(entry))
        click.echo(f"  bottom {len(out['bottom'])} (against):")
        for entry in out["bottom"]:
            click.echo(_show(entry))
        if not vocabulary:
            click.echo("  (ids are token hashes: add --vocabulary FILE.jsonl to show tokens)")
        return
    click.echo(f"decision: {', '.join(out['decision']) or '(none)'}  ({out['features']} features, "
               f"model version {out['model_version']})")  # fmt: skip
    for part in out["categories"]:
        status = "predicted" if part["predicted"] else "not predicted"
        click.echo(f"{part['category']}: margin {part['margin']:+.4f} ({status}); top features:")
        for entry in part["features"]:
            click.echo(_show(entry))


# -- categories / status ---------------------------------------------------------------------------------
def _category_rows(learner: Learner) -> list[dict[str, Any]]:
    updates = learner.store.counters(UPDATES_COUNTER)
    documents = learner.store.counters(DOCS_COUNTER) if isinstance(learner, NaiveBayes) else None
    rows = []
    for column, name in enumerate(learner.store.categories()):
        row: dict[str, Any] = {"column": column, "name": name, "updates": int(updates.get(name, 0))}
        if documents is not None:
            row["documents"] = int(documents.get(name, 0))
        rows.append(row)
    return rows


@click.command("categories")
@model_options
@json_option
def categories(redis_url: str, model: str, as_json: bool) -> None:
    """A model's categories in column order, with their update counts (and documents, for Naive Bayes)."""
    with _client(redis_url) as client:
        learner = _open(client, redis_url, model)
        rows = _category_rows(learner)
        total = int(learner.store.counters(UPDATES_COUNTER).get("*", 0))
    if as_json:
        click.echo(json.dumps({"model": model, "learner": learner.name, "updates": total, "categories": rows}))
        return
    with_docs = isinstance(learner, NaiveBayes)
    width = max([len("category"), *(len(r["name"]) for r in rows)])
    click.echo(f"{'column':>6}  {'category':<{width}}  {'updates':>8}" + ("  documents" if with_docs else ""))
    for r in rows:
        line = f"{r['column']:>6}  {r['name']:<{width}}  {r['updates']:>8}"
        click.echo(line + (f"  {r['documents']:>9}" if with_docs else ""))
    click.echo(f"{len(rows)} categories; {total} documents updated the model (model {model!r}, {learner.name})")


def memory_usage(client: RedisClient, keys: Sequence[bytes], sample: int = _MEMORY_SAMPLE_KEYS) -> tuple[int, bool]:
    """Bytes used by ``keys`` (MEMORY USAGE), and whether it was estimated from a random sample."""
    if not keys:
        return 0, False
    sampled = len(keys) > sample
    chosen = random.Random(0).sample(list(keys), sample) if sampled else list(keys)
    pipe = client.pipeline(transaction=False) if not isinstance(client, RedisCluster) else client.pipeline()
    for key in chosen:
        pipe.memory_usage(key)
    used = sum(int(n or 0) for n in pipe.execute())
    return (round(used * len(keys) / len(chosen)) if sampled else used), sampled


def _model_status(client: RedisClient, model: str) -> dict[str, Any]:
    metadata = RedisStore(client, model, [_ANY_TABLE]).metadata()
    out: dict[str, Any] = {"model": model, "learner": metadata.get("learner"), "mode": metadata.get("mode"),
                           "shards": int(metadata.get("shards", 16)), "updated_at": metadata.get("updated_at"),
                           "feature_set": metadata.get("feature_set", "words"),
                           "domain_version": metadata.get("domain_version")}  # fmt: skip
    try:
        learner = open_learner(client, model, create=False)
    except (ConfigError, DataError) as error:  # no learner recorded, unreadable settings, a missing domain model
        return {**out, "error": str(error)}
    store = _store(learner)
    keys = store.model_keys()
    used, sampled = memory_usage(client, keys)
    rows = _category_rows(learner)
    out.update({
        "categories": len(rows),
        "features": store.n_features(),
        "version": store.version,
        "keys": len(keys),
        "memory_bytes": used,
        "memory_sampled": sampled,
        "updates": int(store.counters(UPDATES_COUNTER).get("*", 0)),
        "updates_per_category": {r["name"]: r["updates"] for r in rows},
    })  # fmt: skip
    window = recent_outcomes(client, model)
    out["recent_events"] = len(window)
    out["mistake_rate_per_category"] = {
        name: round(wrong / involved, 4) for name, (wrong, involved) in mistake_rates(window).items()
    }
    return out


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"


@click.command("status")
@option(
    "--redis-url",
    default="redis://127.0.0.1:6379/0",
    show_default=True,
    help="redis://[:password@]host:port/db (a Cluster node's URL for a Cluster).",
)
@json_option
def status(redis_url: str, as_json: bool) -> None:
    """Every model in this Redis: learner, categories, features, memory, version, last training, updates."""
    with _client(redis_url) as client:
        models = [_model_status(client, name) for name in list_models(client)]
    if as_json:
        click.echo(json.dumps({"redis": redact_url(redis_url), "models": models}))
        return
    click.echo(f"{redact_url(redis_url)}: {len(models)} model(s)")
    for m in models:
        click.echo(f"model {m['model']!r}")
        if "error" in m:
            click.echo(f"  error: {m['error']}")
            continue
        estimate = f" (estimated from {_MEMORY_SAMPLE_KEYS} of {m['keys']} keys)" if m["memory_sampled"] else ""
        click.echo(f"  learner     {m['learner']} ({m['mode']}), {m['shards']} shards")
        click.echo(f"  categories  {m['categories']}")
        if m["domain_version"]:
            click.echo(f"  sees        {m['feature_set']} (domain model {m['domain_version']})")
        click.echo(f"  features    {m['features']}")
        click.echo(f"  memory      {_bytes(m['memory_bytes'])} in {m['keys']} keys{estimate}")
        click.echo(f"  version     {m['version']}")
        if m["updated_at"]:  # set by train and import; a model a worker created is dated by its version only
            click.echo(f"  trained at  {m['updated_at']}")
        counts = ", ".join(f"{name} {n}" for name, n in m["updates_per_category"].items())
        click.echo(f"  updates     {m['updates']} documents" + (f"; per category: {counts}" if counts else ""))
        rates = ", ".join(f"{name} {rate:.0%}" for name, rate in m["mistake_rate_per_category"].items())
        click.echo(f"  mistakes    over the last {m['recent_events']} labelled events: {rates or 'none yet'}")


# -- compact ---------------------------------------------------------------------------------------------
@click.command("compact")
@model_options
@click.option(
    "--min-mistakes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Skip unless the model has learned from at least this many mistakes (its update count): "
    "a young model's features have not moved yet and would all be discarded.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be discarded; change nothing.")
@json_option
def compact(redis_url: str, model: str, min_mistakes: int, dry_run: bool, as_json: bool) -> None:
    """Discard the features whose weights never moved more than one step (switched off; §4.4 of the paper)."""
    with _client(redis_url) as client:
        learner = _open(client, redis_url, model)
        if not isinstance(learner, MistakeDriven):
            raise ConfigError(f"compact discards features of the mistake-driven learners (balanced-winnow, "
                              f"positive-winnow, perceptron); model {model!r} is {learner.name}")  # fmt: skip
        mistakes = int(learner.store.counters(UPDATES_COUNTER).get("*", 0))
        out: dict[str, Any] = {"model": model, "mistakes": mistakes, "dry_run": dry_run, "skipped": False}
        if mistakes < min_mistakes:
            out.update(skipped=True, reason=f"{mistakes} mistakes learned, fewer than --min-mistakes {min_mistakes}")
            out.update(examined=0, discarded=0, fraction=0.0)
        elif dry_run:
            examined = discarded = 0
            for _, values in learner.store.iter_rows():
                live = values[KEEP_TABLE][:, 0] > 0
                examined += int(live.sum())
                discarded += int((live & learner.discardable(values)).sum())
            out.update(examined=examined, discarded=discarded, fraction=discarded / examined if examined else 0.0)
        else:
            report = learner.discard()
            out.update(examined=report.examined, discarded=report.discarded, fraction=report.fraction)
            learner.store.set_metadata({"compacted_at": _now()})
    if as_json:
        click.echo(json.dumps(out))
        return
    if out["skipped"]:
        click.echo(f"model {model!r}: skipped ({out['reason']})")
        return
    verb = "would discard" if dry_run else "discarded"
    click.echo(f"model {model!r}: {verb} {out['discarded']} of {out['examined']} live features "
               f"(fraction {out['fraction']:.3f})")  # fmt: skip


COMMANDS = [train, export, import_, explain, categories, status, compact]
