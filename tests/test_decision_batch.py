"""``encode_decisions``, the batch encoder, against ``encode_decision`` message by message.

Every message of a batch must be byte-identical to what the per-decision encoder
gives for the same decision, so consumers cannot tell which one a worker used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_winnow.errors import CodecError
from stream_winnow.wire.codec import Decision, decode_decision, encode_decision, encode_decisions

_INT64_MAX = 2**63 - 1


def _one_by_one(
    ids: Sequence[str],
    categories: Sequence[Sequence[str]],
    scores: np.ndarray,
    names: Sequence[str],
    model_version: int | Sequence[int],
    model: str | None = None,
    worker: str | None = None,
    ts_ms: Sequence[int | None] | None = None,
    decided_ts_ms: int | None = None,
) -> list[bytes]:
    """What a worker did before the batch encoder: one ``encode_decision`` per document."""
    out = []
    for i, id_ in enumerate(ids):
        version = model_version if isinstance(model_version, int) else model_version[i]
        ts = None if ts_ms is None else ts_ms[i]
        decision = Decision(
            id_,
            tuple(categories[i]),
            dict(zip(names, scores[i].tolist(), strict=True)),
            version,
            model,
            worker,
            ts,
            decided_ts_ms,
        )
        out.append(encode_decision(decision, check=False))
    return out


_text = st.text(min_size=1, max_size=12)  # unicode, no surrogates
_int64 = st.integers(min_value=0, max_value=_INT64_MAX)
_score = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308]
    ),
)


@st.composite
def _batches(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(_text, unique=True, max_size=40))
    n = draw(st.integers(min_value=0, max_value=6))
    ids = draw(st.lists(_text, min_size=n, max_size=n))
    if names:
        categories = [tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=5))) for _ in range(n)]
    else:
        categories = [() for _ in range(n)]
    values = draw(st.lists(_score, min_size=n * len(names), max_size=n * len(names)))
    scores = np.array(values, dtype=np.float64).reshape(n, len(names))
    model_version = draw(st.one_of(_int64, st.lists(_int64, min_size=n, max_size=n)))
    ts_ms = draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), _int64), min_size=n, max_size=n)))
    return {
        "ids": ids,
        "categories": categories,
        "scores": scores,
        "names": names,
        "model_version": model_version,
        "model": draw(st.one_of(st.none(), _text)),
        "worker": draw(st.one_of(st.none(), _text)),
        "ts_ms": ts_ms,
        "decided_ts_ms": draw(st.one_of(st.none(), _int64)),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches())
def test_batch_is_byte_identical_to_encode_decision(batch: dict[str, Any]) -> None:
    assert encode_decisions(**batch) == _one_by_one(**batch)


def _fixed_batch(n: int, k: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    names = [f"cat-{j}" for j in range(k)]
    scores = np.round(rng.normal(scale=3.0, size=(n, k)), 4)
    return {
        "ids": [f"doc-{i}" for i in range(n)],
        "categories": [tuple(names[j] for j in range(k) if scores[i, j] > 2.0) for i in range(n)],
        "scores": scores,
        "names": names,
        "model_version": 12,
        "model": "balanced-winnow",
        "worker": "worker-0",
        "ts_ms": [1732875000000 + i if i % 3 else None for i in range(n)],
        "decided_ts_ms": 1732875009000,
    }


def test_zero_documents() -> None:
    assert encode_decisions([], [], np.empty((0, 3)), ["a", "b", "c"], 1) == []
    assert encode_decisions([], [], np.empty((0, 0)), [], [], ts_ms=[]) == []


def test_zero_names_is_an_empty_scores_map() -> None:
    batch = _fixed_batch(3, 0)
    raws = encode_decisions(**batch)
    assert raws == _one_by_one(**batch)
    for raw in raws:
        assert b"\xa6scores\x80\xadmodel_version" in raw
        assert decode_decision(raw).scores == {}


@pytest.mark.parametrize("n", [1, 7, 500])
def test_ninety_names(n: int) -> None:
    batch = _fixed_batch(n, 90)
    raws = encode_decisions(**batch)
    assert raws == _one_by_one(**batch)
    assert b"\xa6scores\xde\x00\x5a" in raws[0]  # map16 header for 90 entries


@pytest.mark.parametrize("k", [15, 16, 65_535, 65_536])
def test_map_header_sizes(k: int) -> None:
    """fixmap up to 15 entries, map16 up to 65,535, map32 beyond."""
    batch = _fixed_batch(2, k)
    assert encode_decisions(**batch) == _one_by_one(**batch)


def test_decode_decision_accepts_the_output() -> None:
    batch = _fixed_batch(20, 90)
    for i, raw in enumerate(encode_decisions(**batch)):
        decision = decode_decision(raw)
        assert decision == Decision(
            batch["ids"][i],
            batch["categories"][i],
            dict(zip(batch["names"], batch["scores"][i].tolist(), strict=True)),
            batch["model_version"],
            batch["model"],
            batch["worker"],
            batch["ts_ms"][i],
            batch["decided_ts_ms"],
        )
        assert decision.scores == dict(zip(batch["names"], batch["scores"][i].tolist(), strict=True))


def test_negative_zero_and_non_ascii() -> None:
    names = ["négatif", "零", "🛢️ oil"]
    scores = np.array([[-0.0, 0.0, 1e-300], [1e300, -2.5, -0.0]])
    ids = ["d-é", "文書"]
    categories = [("零",), ("🛢️ oil", "négatif")]
    raws = encode_decisions(ids, categories, scores, names, [1, 2**63 - 1], ts_ms=[None, 0])
    assert raws == _one_by_one(ids, categories, scores, names, [1, 2**63 - 1], ts_ms=[None, 0])
    assert b"\xcb\x80\x00\x00\x00\x00\x00\x00\x00" in raws[0]
    assert msgpack.unpackb(raws[1])["scores"]["négatif"] == 1e300


def test_other_float_layouts() -> None:
    """float32 scores and scores that are not C-contiguous give the same bytes as their rows' tolist()."""
    batch = _fixed_batch(9, 20)
    for scores in (batch["scores"].astype(np.float32), np.asfortranarray(batch["scores"]), batch["scores"][:, ::-1]):
        changed = dict(batch, scores=scores)
        assert encode_decisions(**changed) == _one_by_one(**changed)


def test_categories_as_lists() -> None:
    batch = _fixed_batch(5, 10)
    as_lists = dict(batch, categories=[list(c) for c in batch["categories"]])
    assert encode_decisions(**as_lists) == _one_by_one(**batch)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"scores": np.zeros((4, 10))}, "shape"),
        ({"scores": np.zeros((5, 9))}, "shape"),
        ({"scores": np.zeros(50)}, "shape"),
        ({"categories": [()] * 4}, "category"),
        ({"model_version": [1, 2, 3]}, "model versions"),
        ({"ts_ms": [None]}, "timestamps"),
        ({"names": ["a"] * 10}, "unique"),
        ({"scores": np.zeros((5, 10), dtype=np.int64)}, "float"),
    ],
)
def test_bad_arguments_raise_value_error(change: dict[str, Any], match: str) -> None:
    batch = dict(_fixed_batch(5, 10), **change)
    with pytest.raises(ValueError, match=match):
        encode_decisions(**batch)


def test_unencodable_string_raises_codec_error_like_encode_decision() -> None:
    batch = dict(_fixed_batch(2, 3), ids=["ok", "bad\ud800"])
    with pytest.raises(CodecError) as batch_error:
        encode_decisions(**batch)
    with pytest.raises(CodecError) as single_error:
        _one_by_one(**batch)
    assert batch_error.value.code == single_error.value.code == "not-utf8"


def _reported(scores: np.ndarray, names: Sequence[str], categories: Sequence[str], top: int) -> dict[str, float]:
    """The scores map a decision reports with ``top``, by a plain sort: highest first, then the assigned rest."""
    order = sorted(range(len(names)), key=lambda j: (-scores[j], j))[:top]
    order += [j for j, name in enumerate(names) if name in categories and j not in order]
    return {names[j]: float(scores[j]) for j in order}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches(), st.integers(min_value=0, max_value=45))
def test_top_is_byte_identical_to_encode_decision_of_the_reported_scores(batch: dict[str, Any], top: int) -> None:
    raws = encode_decisions(**batch, top=top)
    if top >= len(batch["names"]):
        assert raws == _one_by_one(**batch)  # every score, in the order of the names
        return
    for i, raw in enumerate(raws):
        scores = _reported(batch["scores"][i], batch["names"], batch["categories"][i], top)
        version = batch["model_version"] if isinstance(batch["model_version"], int) else batch["model_version"][i]
        ts = None if batch["ts_ms"] is None else batch["ts_ms"][i]
        decision = Decision(batch["ids"][i], tuple(batch["categories"][i]), scores, version, batch["model"],
                            batch["worker"], ts, batch["decided_ts_ms"])  # fmt: skip
        assert raw == encode_decision(decision, check=False)


def test_top_keeps_every_assigned_category_and_shrinks_the_message() -> None:
    batch = _fixed_batch(200, 90, seed=3)
    names, scores = batch["names"], batch["scores"]
    # About one category a document, as on Reuters (1.2), and two of whatever rank on the first.
    batch["categories"] = [tuple(names[j] for j in range(90) if scores[i, j] > 7.0) for i in range(200)]
    batch["categories"][0] = ("cat-5", "cat-60")
    raws = encode_decisions(**batch, top=10)
    every = encode_decisions(**batch)
    for raw, cats in zip(raws, batch["categories"], strict=True):
        scores = decode_decision(raw).scores
        assert set(cats) <= set(scores) and 10 <= len(scores) <= 10 + len(cats)
        values = list(scores.values())[:10]
        assert values == sorted(values, reverse=True)
    assert sum(map(len, raws)) < 0.3 * sum(map(len, every))


def test_top_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="top must be >= 0"):
        encode_decisions(**_fixed_batch(2, 3), top=-1)
