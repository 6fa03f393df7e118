"""The model every worker starts from: trained in memory, written into Redis, and the Redis memory it takes there
(its weights, and the markers that learning keeps besides them)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from stream_winnow.documents import LabelledDocument
from stream_winnow.learners.base import Learner


@dataclass
class Model:
    """The trained in-memory learner and what the benchmark derives from it."""

    learner: Any
    categories: tuple[str, ...]
    train_seconds: float


def train_model(train: Sequence[LabelledDocument]) -> Model:
    """Fit balanced-winnow with default settings (as ``stream-winnow train`` does) in memory."""
    from stream_winnow.learners import build_learner
    from stream_winnow.models.training import fit

    learner = build_learner("balanced-winnow")
    started = time.perf_counter()
    fit(learner, train)
    seconds = time.perf_counter() - started
    return Model(learner, tuple(learner.store.categories()), seconds)


def train_domain_model(train: Sequence[LabelledDocument], dimensions: int = 400) -> Model:
    """The same learner seeing words and domains (``--features both``), its domain model fitted on ``train``'s
    tokens without their labels; a stream of fewer than 1,600 documents (the tests' synthetic one) gets a
    quarter as many domains as documents."""
    from stream_winnow.learners import build_learner
    from stream_winnow.models.training import fit
    from stream_winnow.text.domain import DomainFeatures, fit_domain_model

    learner = build_learner("balanced-winnow")
    started = time.perf_counter()
    dimensions = min(dimensions, max(1, len(train) // 4))
    learner.use_domain(DomainFeatures(fit_domain_model([d.tokens for d in train], dimensions), "both"))
    fit(learner, train)
    seconds = time.perf_counter() - started
    return Model(learner, tuple(learner.store.categories()), seconds)


def mistaken_labels(learner: Learner, events: Sequence[LabelledDocument]) -> tuple[list[str], int]:
    """For each of ``events`` in order, the one category to label it with so that it is a mistake, and how many are.

    ``learner`` learns every event (pass a copy of the model the worker starts from: a deep copy of
    the Reuters model takes 0.04 s, training it again 2.5 s). The label is the document's
    lowest-scoring category under the model *as it stands when the event arrives*: the copy learns
    every event before the next is labelled, as one worker does (it decides and learns exactly as the in-process learner;
    the model's version moves once a mistaken event, and moved by the same count). Labelling a
    document with that category alone is a promotion mistake, and a demotion for every category the
    model predicts. A label fixed per document (the lowest under the trained model) would not do: on
    the Reuters stream repeated, the second time a document comes its label has often been learned
    (only about 81 % of 20,000 such events are mistakes; labelled this way all of them are, with 2.0
    mistaken categories an event against 1.4). It takes ~5 s for 20,000 events, ~25 s for 100,000.
    """
    categories = learner.store.categories()
    labels: list[str] = []
    mistakes = 0
    for doc in events:
        vector = learner.transform(doc.tokens)
        margins = learner.margins(vector)
        label = categories[int(np.argmin(np.where(np.isfinite(margins), margins, np.inf)))]
        labels.append(label)
        mistakes += learner.learn_one(vector, (label,)).mistake
    return labels, mistakes


def write_model(model: Model, redis_url: str, name: str, shards: int, trained_documents: int) -> float:
    """Write the trained model into Redis as ``name`` (metadata as ``stream-winnow train`` records it)."""
    from stream_winnow.learners import describe
    from stream_winnow.models.named import connect
    from stream_winnow.models.snapshot import copy_model
    from stream_winnow.stores.redis import RedisStore

    learner = model.learner
    learner.store.set_metadata({
        **describe(learner), "shards": str(shards), "trained_documents": str(trained_documents),
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    })  # fmt: skip
    client = connect(redis_url)
    try:
        started = time.perf_counter()
        copy_model(learner.store, RedisStore(client, name, learner.table_specs(), shards), replace=True)
        return time.perf_counter() - started
    finally:
        client.close()


def model_memory(redis_url: str, name: str, shards: int, table_specs: Any) -> dict[str, Any]:
    """MEMORY USAGE summed over every key of the model, and bytes per stored weight."""
    from stream_winnow.models.named import connect
    from stream_winnow.stores.redis import RedisStore

    client = connect(redis_url)
    try:
        store = RedisStore(client, name, table_specs, shards)
        keys = store.model_keys()
        total = _memory_usage(client, keys)
        features = store.n_features()
        categories = len(store.categories())
        tables = sum(1 for spec in store.tables.values() if spec.per_category)
        weights = features * categories * tables
        return {
            "keys": len(keys),
            "bytes": total,
            "features": features,
            "categories": categories,
            "per_category_tables": tables,
            "bytes_per_weight": total / weights if weights else float("nan"),
        }
    finally:
        client.close()


# Keys a model holds for exactly-once learning: each part's watermarks (``wm``) and each input
# partition's ring of seen event ids (``seen:``). Their number does not grow with the events.
_MARKER_PARTS = (b":wm", b":seen:")


def marker_memory(redis_url: str, name: str, shards: int, table_specs: Any) -> dict[str, int]:
    """MEMORY USAGE summed over the model's watermarks and seen-event rings: what learning keeps besides the weights."""
    from stream_winnow.models.named import connect
    from stream_winnow.stores.redis import RedisStore

    client = connect(redis_url)
    try:
        keys = [k for k in RedisStore(client, name, table_specs, shards).model_keys() if any(p in k for p in _MARKER_PARTS)]
        return {"keys": len(keys), "bytes": _memory_usage(client, keys)}
    finally:
        client.close()


def _memory_usage(client: Any, keys: Sequence[bytes]) -> int:
    """MEMORY USAGE of ``keys`` summed (every member of a set counted: no sampling)."""
    total = 0
    for start in range(0, len(keys), 1_000):
        pipe = client.pipeline(transaction=False)
        for key in keys[start : start + 1_000]:
            pipe.execute_command("MEMORY USAGE", key, "SAMPLES", "0")
        total += sum(int(n or 0) for n in pipe.execute())
    return total


def _model_version(redis_url: str, model: str) -> int:
    from stream_winnow.models.named import connect, open_learner

    client = connect(redis_url)
    try:
        return int(open_learner(client, model, create=False).store.version)
    finally:
        client.close()
