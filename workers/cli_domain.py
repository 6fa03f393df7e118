"""``stream-winnow domain``: fit a domain model (LSA) on unlabelled documents, and describe one.

A domain model is fitted once on text like the stream's (a file, or the documents
the workers cached in Redis over the last day) and given to ``train`` or
``evaluate`` with ``--domain DOMAIN.npz --features domain|both``; a model trained
with it keeps it in Redis, and every worker serving that model uses it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from stream_winnow.datasets import read_jsonl_documents
from stream_winnow.errors import ConfigError, DataError
from stream_winnow.models.named import connect
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.text.domain import DEFAULT_DIMENSIONS, DEFAULT_MIN_DOCUMENT_FREQUENCY, DomainModel, fit_domain_model
from stream_winnow.text.features import STRENGTHS
from workers.cli_service import model_options


@click.group("domain")
def domain() -> None:
    """Domain models: LSA fitted on unlabelled documents, so that a few labels go a long way."""


@domain.command("fit")
@click.option("--input", "input_paths", type=click.Path(exists=True, dir_okay=False, path_type=Path), multiple=True,
              help="JSON Lines of documents (labels, if any, are ignored); repeat to add files.")
@click.option("--from-cache", is_flag=True,
              help="Fit on the documents the workers of --model cached in Redis (the last day's, by default).")
@model_options
@click.option("--document-cache-ttl-s", type=click.IntRange(min=1), default=86_400, show_default=True,
              help="The workers' --document-cache-ttl-s (it sets the cache's layout).")
@click.option("--max-documents", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="Fit on at most this many documents.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="The .npz to write.")
@click.option("--dimensions", type=click.IntRange(min=1), default=DEFAULT_DIMENSIONS, show_default=True,
              help="Domains (the SVD's rank).")
@click.option("--min-df", type=click.IntRange(min=1), default=DEFAULT_MIN_DOCUMENT_FREQUENCY, show_default=True,
              help="Keep the words of at least this many documents.")
@click.option("--strength", type=click.Choice(STRENGTHS), default="sqrt", show_default=True,
              help="A word's weight in a document from its count (times its idf).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the SVD's random start vector (ARPACK).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def fit(input_paths: tuple[Path, ...], from_cache: bool, redis_url: str, model: str, document_cache_ttl_s: int,
        max_documents: int, out: Path, dimensions: int, min_df: int, strength: str, seed: int,
        as_json: bool) -> None:  # fmt: skip
    """Fit a domain model on unlabelled documents and write it to --out."""
    if bool(input_paths) == from_cache:
        raise ConfigError("give --input FILE (repeatable) or --from-cache, one of them")
    if not out.parent.is_dir():
        raise ConfigError(f"folder {out.parent} does not exist; create it first (--out)")
    started = time.perf_counter()
    token_lists = (_from_cache(redis_url, model, document_cache_ttl_s, max_documents) if from_cache
                   else _from_files(input_paths, max_documents))  # fmt: skip
    if not token_lists:
        raise DataError("no documents to fit on" + (f" in the cache of model {model!r}" if from_cache else ""))
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    fitted = fit_domain_model(token_lists, dimensions, min_document_frequency=min_df, strength=strength,  # type: ignore[arg-type]
                              seed=seed)  # fmt: skip
    fit_s = time.perf_counter() - started
    fitted.save(out)
    summary = {**describe_domain(fitted), "out": str(out), "read_seconds": round(read_s, 2),
               "fit_seconds": round(fit_s, 2)}  # fmt: skip
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(f"domain model {fitted.version}: {fitted.dimensions} domains over {len(fitted.term_ids)} words "
               f"of {fitted.documents} documents, fitted in {fit_s:.1f} s; written to {out}")  # fmt: skip
    click.echo(f"use it: stream-winnow train --input LABELLED.jsonl --domain {out} --features both --model NAME")


@domain.command("show")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(path: Path, as_json: bool) -> None:
    """Describe a domain model file: its version, domains, words and documents."""
    summary = describe_domain(DomainModel.load(path))
    if as_json:
        click.echo(json.dumps(summary))
        return
    for key, value in summary.items():
        click.echo(f"{key:>12}  {value}")


def describe_domain(model: DomainModel) -> dict[str, Any]:
    return {"version": model.version, "dimensions": model.dimensions, "words": len(model.term_ids),
            "documents": model.documents, "strength": model.strength}  # fmt: skip


def _from_files(paths: tuple[Path, ...], max_documents: int) -> list[tuple[str, ...]]:
    token_lists: list[tuple[str, ...]] = []
    for path in paths:
        for document in read_jsonl_documents(path):
            token_lists.append(document.doc.tokens)
            if len(token_lists) >= max_documents:
                return token_lists
    return token_lists


def _from_cache(redis_url: str, model: str, ttl_s: int, max_documents: int) -> list[tuple[str, ...]]:
    client = connect(redis_url)
    try:
        return [tokens for _, tokens in DocumentCache(client, model, ttl_s).sample(max_documents)]
    finally:
        client.close()


COMMANDS = [domain]
