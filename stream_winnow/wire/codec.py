"""The message contracts of the four topics and their msgpack codec.

Each topic carries msgpack maps whose fields are fixed by a JSON Schema in
``schemas/`` (packaged as ``stream_winnow/schemas/``, see :func:`load_schema`).
Decoding enforces exactly what the schema says, by hand-written checks rather
than a schema validator, because ``decode_document`` is on the hot path: about
9 microseconds for an 80-token document (~116,000 documents/s on one core), half
of it in msgpack.unpackb itself.

A message that breaks its contract raises :class:`CodecError` with one of these
reason codes (the metric label and dead-letter ``reason``):

=================  ============================================================
too-large          more than ``max_message_bytes`` (checked before unpacking)
not-msgpack        not one msgpack value, or bytes left over after it
not-a-map          the value is not a map
unknown-field      a field the schema does not name
missing-field      a required field is absent
wrong-type         e.g. ``ts`` is a float or a boolean, a token is an int
not-utf8           a str with invalid UTF-8, or bin where a str is expected
empty-tokens       ``tokens`` is an empty list
too-many-tokens    more than ``max_tokens_per_document`` tokens
too-many-labels    more than ``max_labels`` labels, categories or scores
empty-string       an id, label or token is ""
token-too-long     a token longer than ``max_token_chars`` characters
duplicate-label    the same label (or category) twice
out-of-range       a negative integer, or one beyond int64 (int32 for partitions)
=================  ============================================================

Encoders check their output with the matching decoder, so a producer built on
this module can never emit a message that consumers reject:

>>> raw = encode_document(DocumentMessage("d1", ("oil", "prices"), ("crude",), 1732875000000))
>>> len(raw)
52
>>> decode_document(raw)
DocumentMessage(id='d1', tokens=('oil', 'prices'), labels=('crude',), ts_ms=1732875000000)
>>> decode_document(encode_document(DocumentMessage("d1", ("oil",), None, None))[:-1])
Traceback (most recent call last):
...
stream_winnow.errors.CodecError: not-msgpack: not one complete msgpack value (Unpack failed: incomplete input)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, NoReturn

import msgpack
import numpy as np
from numba import njit

from stream_winnow.errors import CodecError, ConfigError
from stream_winnow.wire.top_scores import top_columns

__all__ = [
    "DEFAULT_LIMITS",
    "REASON_CODES",
    "CodecLimits",
    "DeadLetter",
    "Decision",
    "DocumentMessage",
    "LabelledEvent",
    "ReasonCode",
    "SchemaName",
    "dead_letter_fields",
    "decode_dead_letter",
    "decode_decision",
    "decode_document",
    "decode_labelled_event",
    "encode_dead_letter",
    "encode_decision",
    "encode_decisions",
    "encode_document",
    "encode_labelled_event",
    "load_schema",
]

ReasonCode = Literal[
    "too-large",
    "not-msgpack",
    "not-a-map",
    "unknown-field",
    "missing-field",
    "wrong-type",
    "not-utf8",
    "empty-tokens",
    "too-many-tokens",
    "too-many-labels",
    "empty-string",
    "token-too-long",
    "duplicate-label",
    "out-of-range",
]
REASON_CODES: tuple[ReasonCode, ...] = ReasonCode.__args__  # type: ignore[attr-defined]

SchemaName = Literal["document", "labelled-event", "decision", "dead-letter"]

_INT64_MAX = 2**63 - 1  # Kafka timestamps and offsets are int64
_INT32_MAX = 2**31 - 1  # Kafka partition numbers are int32
# Room for reason, detail, topic and numbers beside an original of up to
# max_message_bytes, so a rejected message of the largest allowed size fits.
_DEAD_LETTER_OVERHEAD_BYTES = 65_536
# Any msgpack str of more than 255 bytes starts with one of these headers
# (str16, str32); if neither byte occurs in the raw message, no token can be
# longer than 255 characters and the per-token length scan can be skipped.
_STR16, _STR32 = b"\xda", b"\xdb"
_SHORT_STR_MAX_BYTES = 255


@dataclass(frozen=True, slots=True)
class CodecLimits:
    """Bounds on one message; the defaults are the ``maxItems``/``maxLength`` of the schemas.

    >>> CodecLimits().max_message_bytes
    1048576
    """

    max_tokens_per_document: int = 10_000
    max_labels: int = 1_000
    max_message_bytes: int = 1_048_576
    max_token_chars: int = 256

    def __post_init__(self) -> None:
        for name in ("max_tokens_per_document", "max_labels", "max_message_bytes", "max_token_chars"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigError(f"CodecLimits.{name} must be a positive integer, got {value!r}")


DEFAULT_LIMITS = CodecLimits()


@dataclass(frozen=True, slots=True)
class DocumentMessage:
    """A document on topic ``documents``; with ``labels`` it is also a labelled event."""

    id: str
    tokens: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    ts_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LabelledEvent:
    """The true ``labels`` of document ``id`` on topic ``labels``; ``tokens`` if the producer had them."""

    event_id: str
    id: str
    labels: tuple[str, ...]
    tokens: tuple[str, ...] | None = None
    ts_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The categories assigned to document ``id``, on topic ``decisions``.

    ``scores`` holds every evaluated category's score; ``ts_ms`` is the
    document's own timestamp, ``decided_ts_ms`` when the decision was made.
    """

    id: str
    categories: tuple[str, ...]
    scores: dict[str, float] = field(hash=False)
    model_version: int
    model: str | None = None
    worker: str | None = None
    ts_ms: int | None = None
    decided_ts_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be processed, on topic ``dead-letters``.

    ``original`` is the message value byte for byte (msgpack bin on the wire).
    An original longer than ``max_message_bytes`` must be truncated by the
    caller, or the dead letter itself is ``too-large``.
    """

    reason: str
    detail: str
    source_topic: str
    source_partition: int
    source_offset: int
    original: bytes
    ts_ms: int
    worker: str | None = None


# ---------------------------------------------------------------- decoding


def decode_document(raw: bytes, limits: CodecLimits = DEFAULT_LIMITS) -> DocumentMessage:
    """Decode a message from topic ``documents``; raise :class:`CodecError` if it breaks the schema."""
    # The hot path: each check is one C-level operation on the common, valid
    # message; the helpers that name the exact problem run only on failure.
    obj = _unpack(raw, limits.max_message_bytes)
    if not (obj.keys() <= _DOCUMENT_FIELDS and "id" in obj and "tokens" in obj):
        _check_fields(obj, _DOCUMENT_FIELDS, _DOCUMENT_REQUIRED, "document")
    id_ = obj["id"]
    if type(id_) is not str or not id_:
        _nonempty_str(id_, "id")
    tokens = _tokens(obj["tokens"], "tokens", limits, raw)
    labels = _labels(obj["labels"], "labels", limits) if "labels" in obj else None
    ts_ms = obj.get("ts")
    if ts_ms is not None or "ts" in obj:
        if type(ts_ms) is not int or not 0 <= ts_ms <= _INT64_MAX:
            _int(ts_ms, "ts", _INT64_MAX)
    return DocumentMessage(id_, tokens, labels, ts_ms)


def decode_labelled_event(raw: bytes, limits: CodecLimits = DEFAULT_LIMITS) -> LabelledEvent:
    """Decode a message from topic ``labels``; raise :class:`CodecError` if it breaks the schema."""
    obj = _unpack(raw, limits.max_message_bytes)
    _check_fields(obj, _LABELLED_FIELDS, _LABELLED_REQUIRED, "labelled event")
    event_id = _nonempty_str(obj["event_id"], "event_id")
    id_ = _nonempty_str(obj["id"], "id")
    labels = _labels(obj["labels"], "labels", limits)
    tokens = _tokens(obj["tokens"], "tokens", limits, raw) if "tokens" in obj else None
    ts_ms = _int(obj["ts"], "ts", _INT64_MAX) if "ts" in obj else None
    return LabelledEvent(event_id, id_, labels, tokens, ts_ms)


def decode_decision(raw: bytes, limits: CodecLimits = DEFAULT_LIMITS) -> Decision:
    """Decode a message from topic ``decisions``; raise :class:`CodecError` if it breaks the schema."""
    obj = _unpack(raw, limits.max_message_bytes)
    _check_fields(obj, _DECISION_FIELDS, _DECISION_REQUIRED, "decision")
    return Decision(
        id=_nonempty_str(obj["id"], "id"),
        categories=_labels(obj["categories"], "categories", limits),
        scores=_scores(obj["scores"], "scores", limits),
        model_version=_int(obj["model_version"], "model_version", _INT64_MAX),
        model=_nonempty_str(obj["model"], "model") if "model" in obj else None,
        worker=_nonempty_str(obj["worker"], "worker") if "worker" in obj else None,
        ts_ms=_int(obj["ts"], "ts", _INT64_MAX) if "ts" in obj else None,
        decided_ts_ms=_int(obj["decided_ts"], "decided_ts", _INT64_MAX) if "decided_ts" in obj else None,
    )


def decode_dead_letter(raw: bytes, limits: CodecLimits = DEFAULT_LIMITS) -> DeadLetter:
    """Decode a message from topic ``dead-letters``; raise :class:`CodecError` if it breaks the schema.

    The size bound is ``max_message_bytes`` plus 64 KiB, room for the fields
    beside an original of the largest size a document may have.
    """
    obj = _unpack(raw, limits.max_message_bytes + _DEAD_LETTER_OVERHEAD_BYTES)
    _check_fields(obj, _DEAD_LETTER_FIELDS, _DEAD_LETTER_REQUIRED, "dead letter")
    detail = obj["detail"]
    if type(detail) is not str:
        _wrong_str(detail, "detail")
    original = obj["original"]
    if type(original) is not bytes:
        _fail("wrong-type", f"'original' must be msgpack bin, got {_kind(original)}")
    return DeadLetter(
        reason=_nonempty_str(obj["reason"], "reason"),
        detail=detail,
        source_topic=_nonempty_str(obj["source_topic"], "source_topic"),
        source_partition=_int(obj["source_partition"], "source_partition", _INT32_MAX),
        source_offset=_int(obj["source_offset"], "source_offset", _INT64_MAX),
        original=original,
        ts_ms=_int(obj["ts"], "ts", _INT64_MAX),
        worker=_nonempty_str(obj["worker"], "worker") if "worker" in obj else None,
    )


# ---------------------------------------------------------------- encoding


def encode_document(m: DocumentMessage, limits: CodecLimits = DEFAULT_LIMITS) -> bytes:
    """Encode a document for topic ``documents``; raise :class:`CodecError` if consumers would reject it."""
    obj: dict[str, Any] = {"id": m.id, "tokens": m.tokens}
    if m.labels is not None:
        obj["labels"] = m.labels
    if m.ts_ms is not None:
        obj["ts"] = m.ts_ms
    raw = _pack(obj)
    decode_document(raw, limits)
    return raw


def encode_labelled_event(e: LabelledEvent, limits: CodecLimits = DEFAULT_LIMITS) -> bytes:
    """Encode a labelled event for topic ``labels``; raise :class:`CodecError` if consumers would reject it."""
    obj: dict[str, Any] = {"event_id": e.event_id, "id": e.id, "labels": e.labels}
    if e.tokens is not None:
        obj["tokens"] = e.tokens
    if e.ts_ms is not None:
        obj["ts"] = e.ts_ms
    raw = _pack(obj)
    decode_labelled_event(raw, limits)
    return raw


def encode_decision(d: Decision, limits: CodecLimits = DEFAULT_LIMITS, *, check: bool = True) -> bytes:
    """Encode a decision for topic ``decisions``; raise :class:`CodecError` if consumers would reject it.

    ``check=False`` skips decoding the result again: for a producer (the worker) that builds
    decisions only from values it has already validated, where the check costs about 45 us each.

    >>> encode_decision(Decision("d1", ("crude",), {"crude": 1.6}, 7))[:12]
    b'\\x84\\xa2id\\xa2d1\\xaacate'
    """
    obj: dict[str, Any] = {
        "id": d.id,
        "categories": d.categories,
        "scores": d.scores,
        "model_version": d.model_version,
    }
    if d.model is not None:
        obj["model"] = d.model
    if d.worker is not None:
        obj["worker"] = d.worker
    if d.ts_ms is not None:
        obj["ts"] = d.ts_ms
    if d.decided_ts_ms is not None:
        obj["decided_ts"] = d.decided_ts_ms
    raw = _pack(obj)
    if check:
        decode_decision(raw, limits)
    return raw


def encode_decisions(
    ids: Sequence[str],
    categories: Sequence[tuple[str, ...]],
    scores: np.ndarray,
    names: Sequence[str],
    model_version: int | Sequence[int],
    model: str | None = None,
    worker: str | None = None,
    ts_ms: Sequence[int | None] | None = None,
    decided_ts_ms: int | None = None,
    *,
    top: int | None = None,
) -> list[bytes]:
    """Encode a batch of decisions over the same category ``names``, byte for byte as :func:`encode_decision`.

    Message ``i`` equals ``encode_decision(Decision(ids[i], tuple(categories[i]),
    dict(zip(names, scores[i].tolist())), version_i, model, worker, ts_ms[i],
    decided_ts_ms), check=False)``, where ``version_i`` is ``model_version`` or
    ``model_version[i]`` and ``ts_ms`` None means no ``ts`` at all. Like
    ``check=False`` it does not decode the result again: the caller passes
    validated values, finite scores (row ``i`` of ``scores`` in the column
    order of ``names``, which must be unique) and non-negative integers.

    The scores maps are the bulk of a decision and are built for all documents
    at once with numpy, into a byte matrix whose constant columns hold the keys;
    only ids, categories and timestamps go through msgpack one by one. For 1,000
    documents and 90 categories that is 0.7 us a document, against 8.4 us for
    ``encode_decision`` with ``check=False`` (``python -m benchmarks.stages``); the layout of the keys is
    built once for each list of names (about 40 us) and cached.

    >>> scores = np.array([[1.6, -0.25], [0.0, 2.5]])
    >>> raws = encode_decisions(["d1", "d2"], [("crude",), ("oil",)], scores, ["crude", "oil"], 7, ts_ms=[None, 5])
    >>> raws[1] == encode_decision(Decision("d2", ("oil",), {"crude": 0.0, "oil": 2.5}, 7, ts_ms=5), check=False)
    True
    >>> decode_decision(raws[0]).scores
    {'crude': 1.6, 'oil': -0.25}

    ``top`` K keeps, of each row, the K highest scores, highest first (ties to the earlier
    name), and the scores of its categories that are not among them
    (:func:`stream_winnow.wire.top_scores.top_columns`); None keeps every score in the order of
    ``names``. Ten of 90 scores take a decision from about 1,500 to 300 bytes; their maps cost
    1.4 µs a document to build, every score's 0.4 µs (1,000 documents of 90 categories).

    >>> raws = encode_decisions(["d1"], [("oil",)], np.array([[3.0, -0.5, 0.25]]), ["crude", "oil", "ship"], 7, top=1)
    >>> decode_decision(raws[0]).scores
    {'crude': 3.0, 'oil': -0.5}
    """
    n, k = len(ids), len(names)
    if len(categories) != n:
        raise ValueError(f"{len(categories)} category tuples for {n} ids")
    if scores.shape != (n, k):
        raise ValueError(f"scores has shape {scores.shape}, expected ({n}, {k}) for {n} ids and {k} names")
    if scores.dtype.kind != "f" or scores.dtype.itemsize > 8:
        raise ValueError(f"scores must be float64 (or float32/float16), got {scores.dtype}")
    if not isinstance(model_version, int) and len(model_version) != n:
        raise ValueError(f"{len(model_version)} model versions for {n} ids")
    if ts_ms is not None and len(ts_ms) != n:
        raise ValueError(f"{len(ts_ms)} timestamps for {n} ids")
    if top is not None and top < 0:
        raise ValueError(f"top must be >= 0 or None; got {top}")
    names = tuple(names)
    if len(set(names)) != k:
        raise ValueError("names must be unique")
    if not n:
        return []
    try:
        rows = _score_rows(categories, scores, names) if top is None or top >= k else _top_score_rows(
            categories, scores, names, top
        )
        return _encode_decisions(ids, categories, rows, model_version, model, worker, ts_ms, decided_ts_ms)
    except UnicodeEncodeError as exc:
        _fail("not-utf8", f"a string cannot be encoded as UTF-8 ({exc})")
    except (TypeError, OverflowError) as exc:
        _fail("wrong-type", f"a value cannot be encoded as msgpack ({exc})")


def _score_rows(
    categories: Sequence[tuple[str, ...]], scores: np.ndarray, names: tuple[str, ...]
) -> Sequence[bytes | memoryview]:
    """Per document, the bytes from ``"scores"`` up to the value of ``"model_version"``: every score."""
    n = len(categories)
    template, dtypes = _score_map_layout(names)
    width = template.shape[0]
    if dtypes is None:  # no names: every scores map is the empty map
        return [template.tobytes()] * n
    matrix = np.empty((n, width), dtype=np.uint8)
    matrix[:] = template
    # A cast between structured dtypes copies field by field in C, from the
    # packed big-endian scores into the float slots after each 0xcb marker.
    slots, packed = dtypes
    matrix.view(slots)[:, 0] = np.ascontiguousarray(scores, dtype=">f8").view(packed)[:, 0]
    # b"".join reads the rows in place: slices of a memoryview copy nothing.
    flat = matrix.reshape(-1).data
    return [flat[i : i + width] for i in range(0, n * width, width)]


def _top_score_rows(
    categories: Sequence[tuple[str, ...]], scores: np.ndarray, names: tuple[str, ...], top: int
) -> list[bytes]:
    """As :func:`_score_rows` with the ``top`` highest scores and those of each document's categories."""
    n = len(categories)
    column_of = _column_of(names)
    assigned = np.zeros(scores.shape, dtype=np.bool_)
    for row, cats in enumerate(categories):
        for name in cats:
            column = column_of.get(name)
            if column is not None:
                assigned[row, column] = True
    indptr, columns = top_columns(scores, top, assigned)
    # Every reported (name, score) entry of the batch in one byte array, in one compiled pass: each
    # column's packed name and float64 marker copied from the layout, its big-endian score after.
    layout, starts, lengths = _entry_layout(names)
    values = np.ascontiguousarray(scores[np.repeat(np.arange(n), np.diff(indptr)), columns], dtype=">f8")
    ends = np.cumsum(lengths[columns])
    entries = _pack_entries(layout, starts, lengths, columns, values.view(np.uint8), ends).tobytes()
    bounds = np.concatenate(([0], ends))[indptr].tolist()
    counts = np.diff(indptr).tolist()
    before, after = _SCORES_KEY, _MODEL_VERSION_KEY
    header = _map_header
    return [
        before + header(count) + entries[a:b] + after
        for count, a, b in zip(counts, bounds[:-1], bounds[1:], strict=True)
    ]


@njit(cache=True)
def _pack_entries(
    layout: np.ndarray, starts: np.ndarray, lengths: np.ndarray, columns: np.ndarray, values: np.ndarray,
    ends: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """The entries of ``columns`` side by side, the 8 bytes of ``values[e]`` closing entry ``e``."""
    out = np.empty(ends[-1] if len(ends) else 0, dtype=np.uint8)
    at = 0
    for e in range(len(columns)):
        c = columns[e]
        size = lengths[c]
        out[at : at + size - 8] = layout[starts[c] : starts[c] + size - 8]
        out[at + size - 8 : at + size] = values[8 * e : 8 * e + 8]
        at += size
    return out


_SCORES_KEY = msgpack.packb("scores")
_MODEL_VERSION_KEY = msgpack.packb("model_version")


@lru_cache(maxsize=1024)
def _map_header(count: int) -> bytes:
    return msgpack.Packer().pack_map_header(count)


@lru_cache(maxsize=16)
def _entry_layout(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per name, the bytes of a scores entry with its float left zero: the packed name, 0xcb, 8 bytes.

    Returns the entries side by side (uint8) and each one's start and length in them.
    """
    entries = [msgpack.packb(name, use_bin_type=True) + b"\xcb" + bytes(8) for name in names]
    lengths = np.array([len(e) for e in entries], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    layout = np.frombuffer(b"".join(entries), dtype=np.uint8)
    layout.flags.writeable = False  # shared by calls: gathers copy out of it
    return layout, starts, lengths


@lru_cache(maxsize=16)
def _column_of(names: tuple[str, ...]) -> dict[str, int]:
    return {name: column for column, name in enumerate(names)}


def _encode_decisions(
    ids: Sequence[str],
    categories: Sequence[tuple[str, ...]],
    rows: Sequence[bytes | memoryview],
    model_version: int | Sequence[int],
    model: str | None,
    worker: str | None,
    ts_ms: Sequence[int | None] | None,
    decided_ts_ms: int | None,
) -> list[bytes]:
    """:func:`encode_decisions` after its argument checks, given each document's scores bytes."""
    n = len(ids)
    packer = msgpack.Packer(use_bin_type=True)
    pack = packer.pack
    # The map fields after "model_version", constant over the batch but for "ts".
    optional = b""
    if model is not None:
        optional += pack("model") + pack(model)
    if worker is not None:
        optional += pack("worker") + pack(worker)
    decided = b"" if decided_ts_ms is None else pack("decided_ts") + pack(decided_ts_ms)
    n_fields = 4 + (model is not None) + (worker is not None) + (decided_ts_ms is not None)
    start_without_ts = packer.pack_map_header(n_fields) + pack("id")
    start_with_ts = packer.pack_map_header(n_fields + 1) + pack("id")
    before_ts = optional + pack("ts")
    after_no_ts = optional + decided
    versions = [pack(model_version)] * n if isinstance(model_version, int) else [pack(v) for v in model_version]
    stamps = ts_ms if ts_ms is not None else [None] * n
    join = b"".join
    out: list[bytes] = []
    append = out.append
    for id_, cats, row, version, ts in zip(ids, categories, rows, versions, stamps, strict=True):
        if type(cats) is not tuple:
            cats = tuple(cats)
        # One C call packs id, the "categories" key and the categories; [1:] drops the array header.
        head = pack((id_, "categories", cats))[1:]
        if ts is None:
            append(join((start_without_ts, head, row, version, after_no_ts)))
        else:
            append(join((start_with_ts, head, row, version, before_ts, pack(ts), decided)))
    return out


@lru_cache(maxsize=16)
def _score_map_layout(names: tuple[str, ...]) -> tuple[np.ndarray, tuple[np.dtype[Any], np.dtype[Any]] | None]:
    """The bytes of ``"scores": {name: 0.0, ...}, "model_version"`` and the dtypes that fill in the floats.

    Returns the bytes as a read-only uint8 array and two structured dtypes with
    a big-endian float64 field per name: one as wide as the bytes, its fields
    at the float slots, and one with the fields side by side (a row of
    big-endian scores viewed as a record); None instead of the dtypes when
    there are no names.
    """
    packer = msgpack.Packer(use_bin_type=True)
    layout = bytearray(packer.pack("scores") + packer.pack_map_header(len(names)))
    offsets = []
    for name in names:
        layout += packer.pack(name)
        layout.append(0xCB)  # msgpack float64, followed by its 8 big-endian bytes
        offsets.append(len(layout))
        layout += bytes(8)
    layout += packer.pack("model_version")
    template = np.frombuffer(bytes(layout), dtype=np.uint8)  # read-only: it is shared by calls
    if not names:
        return template, None
    fields = [f"f{i}" for i in range(len(names))]
    formats = [">f8"] * len(names)
    slots = np.dtype({"names": fields, "formats": formats, "offsets": offsets, "itemsize": len(layout)})
    packed = np.dtype({"names": fields, "formats": formats})
    return template, (slots, packed)


def encode_dead_letter(d: DeadLetter, limits: CodecLimits = DEFAULT_LIMITS) -> bytes:
    """Encode a dead letter for topic ``dead-letters``, ``original`` as msgpack bin."""
    raw = _pack(dead_letter_fields(d))
    decode_dead_letter(raw, limits)
    return raw


def dead_letter_fields(d: DeadLetter) -> dict[str, Any]:
    """The dead letter as its schema's map (``original`` as bytes; a JSON rendering base64-encodes it)."""
    obj: dict[str, Any] = {
        "reason": d.reason,
        "detail": d.detail,
        "source_topic": d.source_topic,
        "source_partition": d.source_partition,
        "source_offset": d.source_offset,
        "original": d.original,
        "ts": d.ts_ms,
    }
    if d.worker is not None:
        obj["worker"] = d.worker
    return obj


def load_schema(name: SchemaName) -> dict[str, Any]:
    """The JSON Schema of one message, read from the package (works from a checkout and a wheel).

    >>> load_schema("document")["properties"]["tokens"]["maxItems"]
    10000
    """
    text = resources.files("stream_winnow").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


# ---------------------------------------------------------------- checks

_DOCUMENT_FIELDS = frozenset({"id", "tokens", "labels", "ts"})
_DOCUMENT_REQUIRED = ("id", "tokens")
_LABELLED_FIELDS = frozenset({"event_id", "id", "labels", "tokens", "ts"})
_LABELLED_REQUIRED = ("event_id", "id", "labels")
_DECISION_FIELDS = frozenset({"id", "categories", "scores", "model_version", "model", "worker", "ts", "decided_ts"})
_DECISION_REQUIRED = ("id", "categories", "scores", "model_version")
_DEAD_LETTER_FIELDS = frozenset(
    {"reason", "detail", "source_topic", "source_partition", "source_offset", "original", "ts", "worker"}
)
_DEAD_LETTER_REQUIRED = (
    "reason",
    "detail",
    "source_topic",
    "source_partition",
    "source_offset",
    "original",
    "ts",
)


def _fail(code: ReasonCode, detail: str) -> NoReturn:
    raise CodecError(code, detail)


def _kind(value: object) -> str:
    """How a decoded msgpack value is named in error details."""
    if isinstance(value, tuple):
        return "array"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, bytes):
        return "bin"
    if value is None:
        return "nil"
    return type(value).__name__


def _pack(obj: dict[str, Any]) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except UnicodeEncodeError as exc:
        _fail("not-utf8", f"a string cannot be encoded as UTF-8 ({exc})")
    except (TypeError, OverflowError) as exc:
        _fail("wrong-type", f"a value cannot be encoded as msgpack ({exc})")


def _unpack(raw: bytes, max_bytes: int) -> dict[Any, Any]:
    """One msgpack map from ``raw``; every length is bounded by ``len(raw)``.

    msgpack preallocates arrays and maps from their declared length, so the
    bounds stop a 5-byte header from claiming 4 billion elements.
    """
    if type(raw) is not bytes:
        raw = bytes(raw)
    n = len(raw)
    if n > max_bytes:
        _fail("too-large", f"message is {n} bytes, at most {max_bytes} allowed")
    try:
        obj = msgpack.unpackb(
            raw,
            raw=False,
            use_list=False,
            strict_map_key=True,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=n,
            max_map_len=n,
            max_ext_len=n,
        )
    except UnicodeDecodeError as exc:
        _fail("not-utf8", f"a msgpack str is not valid UTF-8 ({exc})")
    except msgpack.ExtraData:
        _fail("not-msgpack", "bytes left over after the first msgpack value")
    except (msgpack.FormatError, msgpack.StackError) as exc:
        _fail("not-msgpack", f"not valid msgpack ({type(exc).__name__})")
    except ValueError as exc:
        _classify_value_error(raw, exc)
    if type(obj) is not dict:
        _fail("not-a-map", f"message must be a msgpack map, got {_kind(obj)}")
    return obj


def _classify_value_error(raw: bytes, exc: ValueError) -> NoReturn:
    """Tell a map key that is not a str (valid msgpack, wrong type) from broken input.

    msgpack reports both as a plain ValueError; unpacking again without
    ``strict_map_key`` separates them. Only rejected messages get here.
    """
    n = len(raw)
    try:
        msgpack.unpackb(
            raw,
            raw=False,
            use_list=False,
            strict_map_key=False,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=n,
            max_map_len=n,
            max_ext_len=n,
        )
    except TypeError:  # a map or other unhashable value used as a map key
        pass
    except ValueError:
        _fail("not-msgpack", f"not one complete msgpack value ({exc})")
    _fail("wrong-type", f"map keys must be msgpack str ({exc})")


def _check_fields(obj: dict[Any, Any], allowed: frozenset[str], required: tuple[str, ...], what: str) -> None:
    if not obj.keys() <= allowed:
        for key in obj:
            if key not in allowed:
                if type(key) is bytes:
                    _fail("not-utf8", f"field name {key!r} is msgpack bin, must be str")
                _fail("unknown-field", f"{what} has unknown field {key!r}; allowed: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in obj:
            _fail("missing-field", f"{what} lacks required field {key!r}")


def _wrong_str(value: object, name: str) -> NoReturn:
    if type(value) is bytes:
        _fail("not-utf8", f"{name!r} is msgpack bin, must be str")
    _fail("wrong-type", f"{name!r} must be a string, got {_kind(value)}")


def _nonempty_str(value: object, name: str) -> str:
    if type(value) is str:
        if value:
            return value
        _fail("empty-string", f"{name!r} must not be empty")
    _wrong_str(value, name)


def _int(value: object, name: str, maximum: int) -> int:
    if type(value) is int:  # excludes bool, a subclass of int
        if 0 <= value <= maximum:
            return value
        _fail("out-of-range", f"{name!r} is {value}, must be between 0 and {maximum}")
    _fail("wrong-type", f"{name!r} must be an integer, got {_kind(value)}")


def _str_items(items: tuple[Any, ...], name: str) -> None:
    """Every item is a non-empty str; C-speed checks first, the culprit is searched only on failure."""
    try:
        "".join(items)
    except TypeError:
        for i, item in enumerate(items):
            if type(item) is not str:
                _wrong_str(item, f"{name}[{i}]")
        raise  # unreachable: join fails only on a non-str item
    if "" in items:
        _fail("empty-string", f"{name}[{items.index('')}] must not be empty")


def _tokens(value: object, name: str, limits: CodecLimits, raw: bytes) -> tuple[str, ...]:
    if type(value) is not tuple:
        _fail("wrong-type", f"{name!r} must be an array of strings, got {_kind(value)}")
    n = len(value)
    if not n:
        _fail("empty-tokens", f"{name!r} must hold at least one token")
    if n > limits.max_tokens_per_document:
        _fail("too-many-tokens", f"{name!r} has {n} items, at most {limits.max_tokens_per_document} allowed")
    _str_items(value, name)
    max_chars = limits.max_token_chars
    # Skip the per-token length scan when no str in raw can be that long.
    if (max_chars < _SHORT_STR_MAX_BYTES or _STR16 in raw or _STR32 in raw) and max(map(len, value)) > max_chars:
        i = next(i for i, t in enumerate(value) if len(t) > max_chars)
        _fail("token-too-long", f"{name}[{i}] has {len(value[i])} characters, at most {max_chars} allowed")
    return value


def _labels(value: object, name: str, limits: CodecLimits) -> tuple[str, ...]:
    if type(value) is not tuple:
        _fail("wrong-type", f"{name!r} must be an array of strings, got {_kind(value)}")
    n = len(value)
    if n > limits.max_labels:
        _fail("too-many-labels", f"{name!r} has {n} items, at most {limits.max_labels} allowed")
    if n:
        _str_items(value, name)
        if n > 1 and len(set(value)) != n:
            seen: set[str] = set()
            dup = next(x for x in value if x in seen or seen.add(x))  # type: ignore[func-returns-value]
            _fail("duplicate-label", f"{name!r} holds {dup!r} more than once")
    return value


def _scores(value: object, name: str, limits: CodecLimits) -> dict[str, float]:
    if type(value) is not dict:
        _fail("wrong-type", f"{name!r} must be a map of category to number, got {_kind(value)}")
    if len(value) > limits.max_labels:
        _fail("too-many-labels", f"{name!r} has {len(value)} entries, at most {limits.max_labels} allowed")
    scores: dict[str, float] = {}
    for key, score in value.items():
        if type(key) is not str:
            _wrong_str(key, f"{name} key")
        if not key:
            _fail("empty-string", f"{name!r} has an empty category name")
        if type(score) is float:
            scores[key] = score
        elif type(score) is int:
            scores[key] = float(score)
        else:
            _fail("wrong-type", f"{name}[{key!r}] must be a number, got {_kind(score)}")
    return scores
