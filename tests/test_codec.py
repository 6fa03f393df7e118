"""The msgpack codec against its contracts, the JSON Schemas in ``schemas/``.

The property tests generate good and bad messages for each topic and check,
message by message, that the codec accepts exactly what the schema accepts.
msgpack and JSON differ in three ways the comparison has to bridge:

* msgpack tells int from float; JSON Schema calls 1.0 an integer. The schemas
  say "never floats, even 1.0", so the validator here counts only Python ints
  (not bools) as integers.
* msgpack bin has no JSON form. A dead letter's ``original`` is rendered as a
  base64 string (the schema's ``contentEncoding``); bin anywhere else, a str in
  ``original``, a non-str map key, an ext value or invalid UTF-8 have no JSON
  rendering, so the schema is taken to reject them.
* The whole-message size bound is not expressible in JSON Schema; generated
  messages stay far below it and it is tested on its own.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, validators

from stream_winnow.errors import CodecError, ConfigError, DataError
from stream_winnow.wire.codec import (
    DEFAULT_LIMITS,
    REASON_CODES,
    CodecLimits,
    DeadLetter,
    Decision,
    DocumentMessage,
    LabelledEvent,
    decode_dead_letter,
    decode_decision,
    decode_document,
    decode_labelled_event,
    encode_dead_letter,
    encode_decision,
    encode_document,
    encode_labelled_event,
    load_schema,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = ROOT / "schemas"
PACKAGED_SCHEMA_DIR = ROOT / "stream_winnow" / "schemas"
NAMES = ("document", "labelled-event", "decision", "dead-letter")


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text("utf-8"))
    return schema


def _is_msgpack_int(checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


StrictValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_msgpack_int),
)
VALIDATORS = {name: StrictValidator(_schema(name)) for name in NAMES}


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def code_of(decode: Callable[[bytes], object], raw: bytes) -> str:
    with pytest.raises(CodecError) as info:
        decode(raw)
    return info.value.code


DOC = {"id": "reuters-14826", "tokens": ["oil", "prices", "rose", "oil"], "labels": ["crude"], "ts": 1732875000000}
EVENT = {"event_id": "ev-1", "id": "reuters-14826", "labels": ["crude", "ship"]}
DECISION = {"id": "reuters-14826", "categories": ["crude"], "scores": {"crude": 1.6, "ship": 0.95}, "model_version": 7}
DEAD = {
    "reason": "not-msgpack",
    "detail": "not valid msgpack",
    "source_topic": "documents",
    "source_partition": 3,
    "source_offset": 120456,
    "original": b"\xc1\x00",
    "ts": 1732875000042,
}


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if value is _ABSENT:
            out.pop(key, None)
        else:
            out[key] = value
    return out


_ABSENT = object()

# ------------------------------------------------------------------ round trips


def test_document_round_trip() -> None:
    full = DocumentMessage("reuters-14826", ("oil", "prices", "oil"), ("crude", "ship"), 1732875000000)
    bare = DocumentMessage("d2", ("x",), None, None)
    for m in (full, bare):
        assert decode_document(encode_document(m)) == m
    assert decode_document(pack(DOC)) == DocumentMessage(
        "reuters-14826", ("oil", "prices", "rose", "oil"), ("crude",), 1732875000000
    )


def test_document_with_empty_labels_is_a_labelled_negative_example() -> None:
    assert decode_document(pack(with_(DOC, labels=[]))).labels == ()


def test_labelled_event_round_trip() -> None:
    for e in (
        LabelledEvent("ev-1", "d1", ("crude",), ("oil", "rose"), 1732875000000),
        LabelledEvent("ev-2", "d1", (), None, None),
    ):
        assert decode_labelled_event(encode_labelled_event(e)) == e


def test_decision_round_trip() -> None:
    full = Decision("d1", ("crude",), {"crude": 1.6, "ship": 0.95}, 48213, "winnow", "classify-0", 1, 2)
    bare = Decision("d1", (), {}, 0)
    for d in (full, bare):
        assert decode_decision(encode_decision(d)) == d


def test_decision_int_score_decodes_as_float() -> None:
    d = decode_decision(pack(with_(DECISION, scores={"crude": 2})))
    assert d.scores == {"crude": 2.0} and type(d.scores["crude"]) is float


def test_dead_letter_round_trip_keeps_original_bytes() -> None:
    for original in (b"", b"\xc1\xff\x00 not msgpack", bytes(range(256))):
        d = DeadLetter("not-msgpack", "bad", "documents", 3, 120456, original, 1732875000042, "classify-0")
        raw = encode_dead_letter(d)
        assert decode_dead_letter(raw) == d
        assert msgpack.unpackb(raw, raw=True)[b"original"] == original  # bin on the wire, not str


def test_dead_letter_holds_an_original_of_the_largest_allowed_size() -> None:
    original = b"\x00" * DEFAULT_LIMITS.max_message_bytes
    d = DeadLetter("wrong-type", "x" * 1000, "documents", 0, 0, original, 0)
    assert decode_dead_letter(encode_dead_letter(d)).original == original


def test_encoded_fields_are_exactly_the_schema_properties() -> None:
    messages = {
        "document": encode_document(DocumentMessage("d", ("t",), ("l",), 1)),
        "labelled-event": encode_labelled_event(LabelledEvent("e", "d", ("l",), ("t",), 1)),
        "decision": encode_decision(Decision("d", ("c",), {"c": 1.0}, 1, "m", "w", 1, 2)),
        "dead-letter": encode_dead_letter(DeadLetter("r", "d", "documents", 0, 0, b"", 1, "w")),
    }
    for name, raw in messages.items():
        schema = _schema(name)
        assert set(msgpack.unpackb(raw)) == set(schema["properties"]), name


# ------------------------------------------------------------------ one test per bad-input class


def test_too_large_is_checked_before_unpacking() -> None:
    limits = CodecLimits(max_message_bytes=64)
    raw = pack(with_(DOC, tokens=["token"] * 20))
    assert code_of(lambda r: decode_document(r, limits), raw) == "too-large"
    # Garbage over the bound is too-large, not not-msgpack: the size is checked first.
    assert code_of(decode_document, b"\xc1" * (DEFAULT_LIMITS.max_message_bytes + 1)) == "too-large"
    assert code_of(decode_document, b"\x00" * DEFAULT_LIMITS.max_message_bytes) == "not-msgpack"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1",  # the one byte msgpack never uses
        pack(DOC)[:-1],  # truncated
        pack(DOC) + b"\x00",  # trailing bytes
        pack(DOC) + pack(DOC),
        b"\x91" * 5000 + b"\xc0",  # nested deeper than msgpack's stack
    ],
    ids=["empty", "reserved-byte", "truncated", "trailing", "two-values", "too-deep"],
)
def test_not_msgpack(raw: bytes) -> None:
    assert code_of(decode_document, raw) == "not-msgpack"


def test_declared_length_beyond_the_message_is_rejected_without_allocating() -> None:
    # A 4-billion-element array header in 5 bytes: bounded by len(raw), never preallocated.
    for header in (b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff"):
        raw = b"\x82\xa2id\xa1x\xa6tokens" + header
        assert code_of(decode_document, raw) == "not-msgpack"


@pytest.mark.parametrize("value", [[DOC], "doc", 1, None, b"\x80"], ids=["array", "str", "int", "nil", "bin"])
def test_not_a_map(value: object) -> None:
    assert code_of(decode_document, pack(value)) == "not-a-map"


def test_unknown_field() -> None:
    assert code_of(decode_document, pack(with_(DOC, lang="en"))) == "unknown-field"
    assert code_of(decode_labelled_event, pack(with_(EVENT, scores={}))) == "unknown-field"
    assert code_of(decode_decision, pack(with_(DECISION, decided_at=1))) == "unknown-field"
    assert code_of(decode_dead_letter, pack(with_(DEAD, partition=1))) == "unknown-field"
    # A document field that labelled events do not have:
    assert code_of(decode_document, pack(with_(DOC, event_id="ev-1"))) == "unknown-field"


@pytest.mark.parametrize(
    ("decode", "base", "field"),
    [
        (decode_document, DOC, "id"),
        (decode_document, DOC, "tokens"),
        (decode_labelled_event, EVENT, "event_id"),
        (decode_labelled_event, EVENT, "labels"),
        (decode_decision, DECISION, "scores"),
        (decode_decision, DECISION, "model_version"),
        (decode_dead_letter, DEAD, "original"),
        (decode_dead_letter, DEAD, "ts"),
    ],
)
def test_missing_field(decode: Callable[[bytes], object], base: dict[str, Any], field: str) -> None:
    assert code_of(decode, pack(with_(base, **{field: _ABSENT}))) == "missing-field"


@pytest.mark.parametrize(
    "changes",
    [
        {"ts": True},  # bool where an int is expected
        {"ts": 1732875000000.0},  # a float, even a whole one
        {"ts": None},  # an optional field present as nil
        {"ts": "1732875000000"},
        {"id": 14826},
        {"tokens": "oil prices"},  # a str, not an array
        {"tokens": ["oil", 7]},
        {"tokens": ["oil", ["prices"]]},
        {"tokens": {"oil": 1}},
        {"labels": "crude"},
        {"labels": [None]},
        {"tokens": ["oil", msgpack.ExtType(1, b"x")]},
    ],
)
def test_wrong_type(changes: dict[str, Any]) -> None:
    assert code_of(decode_document, pack(with_(DOC, **changes))) == "wrong-type"


def test_wrong_type_in_other_messages() -> None:
    assert code_of(decode_decision, pack(with_(DECISION, model_version=False))) == "wrong-type"
    assert code_of(decode_decision, pack(with_(DECISION, scores={"crude": "1.6"}))) == "wrong-type"
    assert code_of(decode_decision, pack(with_(DECISION, scores={"crude": True}))) == "wrong-type"
    assert code_of(decode_decision, pack(with_(DECISION, scores=[["crude", 1.6]]))) == "wrong-type"
    assert code_of(decode_dead_letter, pack(with_(DEAD, original="\u00c1"))) == "wrong-type"  # str, not bin
    assert code_of(decode_dead_letter, pack(with_(DEAD, source_offset=1.0))) == "wrong-type"


def test_non_str_map_keys_are_wrong_type() -> None:
    assert code_of(decode_document, pack({1: "x", "id": "d", "tokens": ["t"]})) == "wrong-type"
    assert code_of(decode_decision, pack(with_(DECISION, scores={1: 1.0}))) == "wrong-type"
    # A map used as a map key: valid msgpack that no Python dict can hold.
    assert code_of(decode_document, b"\x81\x81\x01\x02\x03") == "wrong-type"


def _bad_utf8(obj: dict[str, Any], marker: str = "@@BADUTF8@@") -> bytes:
    """Pack ``obj`` and overwrite the bytes of ``marker`` with invalid UTF-8 of the same length."""
    raw = pack(obj)
    assert raw.count(marker.encode()) == 1
    return raw.replace(marker.encode(), b"\xff" * len(marker))


@pytest.mark.parametrize(
    "raw",
    [
        _bad_utf8(with_(DOC, id="@@BADUTF8@@")),
        _bad_utf8(with_(DOC, tokens=["oil", "@@BADUTF8@@"])),
        _bad_utf8(with_(DOC, labels=["@@BADUTF8@@"])),
        _bad_utf8({"@@BADUTF8@@": 1, "id": "d", "tokens": ["t"]}),  # a field name
        pack(with_(DOC, id=b"reuters-14826")),  # bin where a str is expected
        pack(with_(DOC, tokens=["oil", b"prices"])),
        pack(with_(DOC, labels=[b"crude"])),
        pack({b"id": "d", "tokens": ["t"]}),  # a field name as bin
    ],
    ids=["id", "token", "label", "field-name", "bin-id", "bin-token", "bin-label", "bin-field-name"],
)
def test_not_utf8(raw: bytes) -> None:
    assert code_of(decode_document, raw) == "not-utf8"


def test_not_utf8_in_other_messages() -> None:
    assert code_of(decode_decision, pack(with_(DECISION, scores={b"crude": 1.0}))) == "not-utf8"
    assert code_of(decode_dead_letter, pack(with_(DEAD, detail=b"x"))) == "not-utf8"
    assert code_of(decode_labelled_event, _bad_utf8(with_(EVENT, event_id="@@BADUTF8@@"))) == "not-utf8"


def test_empty_tokens() -> None:
    assert code_of(decode_document, pack(with_(DOC, tokens=[]))) == "empty-tokens"
    assert code_of(decode_labelled_event, pack(with_(EVENT, tokens=[]))) == "empty-tokens"


def test_too_many_tokens() -> None:
    n = DEFAULT_LIMITS.max_tokens_per_document
    assert decode_document(pack(with_(DOC, tokens=["t"] * n))).tokens == ("t",) * n
    assert code_of(decode_document, pack(with_(DOC, tokens=["t"] * (n + 1)))) == "too-many-tokens"
    assert code_of(decode_labelled_event, pack(with_(EVENT, tokens=["t"] * (n + 1)))) == "too-many-tokens"
    small = CodecLimits(max_tokens_per_document=3)
    assert code_of(lambda r: decode_document(r, small), pack(DOC)) == "too-many-tokens"


def test_too_many_labels() -> None:
    n = DEFAULT_LIMITS.max_labels
    labels = [f"cat-{i}" for i in range(n + 1)]
    assert len(decode_document(pack(with_(DOC, labels=labels[:n]))).labels or ()) == n
    assert code_of(decode_document, pack(with_(DOC, labels=labels))) == "too-many-labels"
    assert code_of(decode_labelled_event, pack(with_(EVENT, labels=labels))) == "too-many-labels"
    assert code_of(decode_decision, pack(with_(DECISION, categories=labels))) == "too-many-labels"
    scores = dict.fromkeys(labels, 0.5)
    assert code_of(decode_decision, pack(with_(DECISION, scores=scores))) == "too-many-labels"


@pytest.mark.parametrize(
    ("decode", "base", "changes"),
    [
        (decode_document, DOC, {"id": ""}),
        (decode_document, DOC, {"tokens": ["oil", ""]}),
        (decode_document, DOC, {"labels": ["crude", ""]}),
        (decode_labelled_event, EVENT, {"event_id": ""}),
        (decode_decision, DECISION, {"categories": [""]}),
        (decode_decision, DECISION, {"scores": {"": 1.0}}),
        (decode_decision, DECISION, {"model": ""}),
        (decode_dead_letter, DEAD, {"reason": ""}),
        (decode_dead_letter, DEAD, {"source_topic": ""}),
    ],
)
def test_empty_string(decode: Callable[[bytes], object], base: dict[str, Any], changes: dict[str, Any]) -> None:
    assert code_of(decode, pack(with_(base, **changes))) == "empty-string"


def test_empty_detail_and_original_are_allowed() -> None:
    assert decode_dead_letter(pack(with_(DEAD, detail="", original=b""))).original == b""


@pytest.mark.parametrize("char", ["x", "\u00e9", "\u20ac", "\U0001f600"], ids=["1-byte", "2-byte", "3-byte", "4-byte"])
def test_token_too_long_counts_characters_not_bytes(char: str) -> None:
    limit = DEFAULT_LIMITS.max_token_chars
    assert decode_document(pack(with_(DOC, tokens=["oil", char * limit]))).tokens[1] == char * limit
    assert code_of(decode_document, pack(with_(DOC, tokens=["oil", char * (limit + 1)]))) == "token-too-long"


def test_token_too_long_with_a_limit_below_the_short_str_size() -> None:
    small = CodecLimits(max_token_chars=3)
    assert decode_document(pack(with_(DOC, tokens=["oil"])), small).tokens == ("oil",)
    assert code_of(lambda r: decode_document(r, small), pack(DOC)) == "token-too-long"


def test_token_length_is_checked_when_an_unrelated_byte_looks_like_a_str16_header() -> None:
    # 0xda occurs inside the ts; the long token must still be found, and short ones pass.
    raw = pack(with_(DOC, ts=0xDADADA))
    assert b"\xda" in raw and decode_document(raw).ts_ms == 0xDADADA
    assert code_of(decode_document, pack(with_(DOC, ts=0xDADADA, tokens=["x" * 300]))) == "token-too-long"


def test_duplicate_label() -> None:
    assert code_of(decode_document, pack(with_(DOC, labels=["crude", "ship", "crude"]))) == "duplicate-label"
    assert code_of(decode_labelled_event, pack(with_(EVENT, labels=["a", "a"]))) == "duplicate-label"
    assert code_of(decode_decision, pack(with_(DECISION, categories=["c", "c"]))) == "duplicate-label"


@pytest.mark.parametrize(
    ("decode", "base", "changes"),
    [
        (decode_document, DOC, {"ts": -1}),
        (decode_document, DOC, {"ts": 2**63}),
        (decode_document, DOC, {"ts": 2**64 - 1}),
        (decode_decision, DECISION, {"model_version": -1}),
        (decode_decision, DECISION, {"decided_ts": -5}),
        (decode_dead_letter, DEAD, {"source_partition": 2**31}),
        (decode_dead_letter, DEAD, {"source_offset": -1}),
    ],
)
def test_out_of_range(decode: Callable[[bytes], object], base: dict[str, Any], changes: dict[str, Any]) -> None:
    assert code_of(decode, pack(with_(base, **changes))) == "out-of-range"


def test_boundary_integers_are_accepted() -> None:
    assert decode_document(pack(with_(DOC, ts=0))).ts_ms == 0
    assert decode_document(pack(with_(DOC, ts=2**63 - 1))).ts_ms == 2**63 - 1
    assert decode_dead_letter(pack(with_(DEAD, source_partition=2**31 - 1))).source_partition == 2**31 - 1


def test_codec_error_is_a_data_error_and_not_retriable() -> None:
    with pytest.raises(CodecError) as info:
        decode_document(b"\xc1")
    assert isinstance(info.value, DataError) and not info.value.retriable
    assert info.value.detail and str(info.value).startswith("not-msgpack: ")


# ------------------------------------------------------------------ encoders refuse what decoders reject


@pytest.mark.parametrize(
    ("encode", "message", "code"),
    [
        (encode_document, DocumentMessage("d", ()), "empty-tokens"),
        (encode_document, DocumentMessage("", ("t",)), "empty-string"),
        (encode_document, DocumentMessage("d", ("t",), ("a", "a")), "duplicate-label"),
        (encode_document, DocumentMessage("d", ("\ud800",)), "not-utf8"),  # a lone surrogate
        (encode_document, DocumentMessage("d", ("t",), None, -1), "out-of-range"),
        (encode_document, DocumentMessage("d", ("t",), None, 2**64), "wrong-type"),  # beyond msgpack
        (encode_labelled_event, LabelledEvent("e", "d", ("l",), ("x" * 257,)), "token-too-long"),
        (encode_decision, Decision("d", (), {}, True), "wrong-type"),  # bool is not an int on the wire
        (encode_decision, Decision("d", (), {"c": 1.0}, 1, ts_ms=1.5), "wrong-type"),  # type: ignore[arg-type]
        (encode_decision, Decision("d", ({"c"},), {}, 1), "wrong-type"),  # type: ignore[arg-type]
        (encode_dead_letter, DeadLetter("r", "d", "t", 0, 0, "text", 0), "wrong-type"),  # type: ignore[arg-type]
        (
            encode_dead_letter,
            DeadLetter("r", "d", "t", 0, 0, b"\x00" * (DEFAULT_LIMITS.max_message_bytes + 65_536), 0),
            "too-large",
        ),
    ],
)
def test_encoders_refuse_what_decoders_reject(encode: Callable[[Any], bytes], message: object, code: str) -> None:
    with pytest.raises(CodecError) as info:
        encode(message)
    assert info.value.code == code


def test_codec_limits_must_be_positive_integers() -> None:
    for bad in ({"max_labels": 0}, {"max_token_chars": -1}, {"max_message_bytes": 1.5}, {"max_labels": True}):
        with pytest.raises(ConfigError):
            CodecLimits(**bad)


# ------------------------------------------------------------------ the schemas themselves


@pytest.mark.parametrize("name", NAMES)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = _schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] and schema["title"] and schema["description"]
    assert schema["additionalProperties"] is False
    for prop in schema["properties"].values():
        assert prop["description"], prop


def test_schema_limits_match_codec_limit_defaults() -> None:
    limits = CodecLimits()
    for name in ("document", "labelled-event"):
        props = _schema(name)["properties"]
        assert props["tokens"]["minItems"] == 1
        assert props["tokens"]["maxItems"] == limits.max_tokens_per_document
        assert props["tokens"]["items"]["maxLength"] == limits.max_token_chars
        assert props["labels"]["maxItems"] == limits.max_labels
    decision = _schema("decision")["properties"]
    assert decision["categories"]["maxItems"] == limits.max_labels
    assert decision["scores"]["maxProperties"] == limits.max_labels
    assert limits == DEFAULT_LIMITS == CodecLimits(10_000, 1_000, 1_048_576, 256)


def test_packaged_schemas_are_byte_identical_copies() -> None:
    canonical = sorted(p.name for p in SCHEMA_DIR.glob("*.json"))
    assert canonical == sorted(f"{n}.schema.json" for n in NAMES)
    assert sorted(p.name for p in PACKAGED_SCHEMA_DIR.glob("*.json")) == canonical, (
        "copy schemas/*.json to stream_winnow/schemas/"
    )
    for name in canonical:
        assert (PACKAGED_SCHEMA_DIR / name).read_bytes() == (SCHEMA_DIR / name).read_bytes(), (
            f"stream_winnow/schemas/{name} differs from schemas/{name}: cp schemas/*.json stream_winnow/schemas/"
        )


@pytest.mark.parametrize("name", NAMES)
def test_load_schema_reads_the_packaged_copy(name: str) -> None:
    assert load_schema(name) == _schema(name)  # type: ignore[arg-type]


# ------------------------------------------------------------------ property tests: codec ⇔ schema


class _NoJson:
    """Stands for a msgpack value with no JSON rendering: every schema type rejects it."""

    def __repr__(self) -> str:
        return "<no JSON form>"


def to_json(value: object, *, in_original: bool = False) -> object:
    """The JSON rendering of a decoded msgpack value (see the module docstring)."""
    if in_original:
        return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else _NoJson()
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return _NoJson()
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return _NoJson()  # bin, ext, timestamp


def schema_accepts(name: str, raw: bytes) -> bool:
    try:
        obj = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, TypeError):  # not msgpack, invalid UTF-8, unhashable key: no JSON form
        return False
    if isinstance(obj, dict) and name == "dead-letter" and "original" in obj and all(isinstance(k, str) for k in obj):
        doc: object = {k: to_json(v, in_original=(k == "original")) for k, v in obj.items()}
    else:
        doc = to_json(obj)
    return bool(VALIDATORS[name].is_valid(doc))


BAD_UTF8 = "@@BADUTF8@@"  # replaced by invalid UTF-8 of the same length after packing

msgpack_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
scalars = (
    st.none()
    | st.booleans()
    | msgpack_ints
    | st.floats()
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=3))
)
any_value = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 3) | st.binary(max_size=2), inner, max_size=3)
    ),
    max_leaves=6,
)
name_str = st.text(min_size=1, max_size=8)
BAD_STRS: list[Any] = ["", b"id", BAD_UTF8, 5, None, True, 1.5, ["x"], {"x": "y"}]
bad_str = st.one_of(*[st.sampled_from(BAD_STRS)] * 3, any_value)
ints_good = st.integers(min_value=0, max_value=2**63 - 1)
EDGE_INTS: list[Any] = [
    0,
    -1,
    2**31 - 1,
    2**31,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -(2**63),
    True,
    False,
    0.0,
    1.0,
    1.5,
    "1",
    None,
    b"1",
]
ints_bad = st.one_of(*[st.sampled_from(EDGE_INTS)] * 3, any_value)


def _big(n: int, unique: bool) -> list[str]:
    return [f"t{i}" for i in range(n)] if unique else ["t"] * n


token = name_str | st.sampled_from(["x" * 256, "\u00e9" * 256, "\U0001f600" * 256])
tokens_good = st.one_of(*[st.lists(token, min_size=1, max_size=12)] * 4, st.just(_big(10_000, False)))


def _with_one(items: st.SearchStrategy[list[Any]], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A good list with one bad item inserted somewhere: the defect is the only one."""
    return st.tuples(items, bad, st.integers(0, 12)).map(lambda t: t[0][: t[2]] + [t[1]] + t[0][t[2] :])


BAD_TOKENS: list[Any] = ["", "x" * 257, "\u00e9" * 257, "\U0001f600" * 257, b"tok", BAD_UTF8, 1, None, 1.5, True, ["t"]]
bad_token = st.sampled_from(BAD_TOKENS)
tokens_bad: st.SearchStrategy[Any] = st.one_of(
    st.just([]),
    st.just(_big(10_001, False)),
    _with_one(st.lists(token, max_size=8), bad_token),
    _with_one(st.lists(token, max_size=8), bad_token),
    st.sampled_from(["oil", b"oil", {"oil": 1}, None, 3, ("oil",)]),
    any_value,
)
BAD_LABELS: list[Any] = ["", b"lab", BAD_UTF8, 0, None, True, 1.5, ["l"]]
BAD_SCORES: list[Any] = [True, False, "1", None, b"x", [1.0], {"a": 1.0}, msgpack.ExtType(1, b"")]
labels_good = st.lists(name_str, unique=True, max_size=6) | st.just(_big(1_000, True))
labels_bad: st.SearchStrategy[Any] = st.one_of(
    st.lists(name_str, min_size=1, max_size=4, unique=True).map(lambda xs: xs + xs[:1]),
    st.just(_big(1_001, True)),
    _with_one(st.lists(name_str, max_size=4, unique=True), st.sampled_from(BAD_LABELS)),
    st.sampled_from(["crude", b"crude", {"crude": 1}, None]),
    any_value,
)
score = st.floats(allow_nan=False) | st.integers(-(2**63), 2**64 - 1)
scores_good = st.dictionaries(name_str, score, max_size=5)
scores_bad: st.SearchStrategy[Any] = st.one_of(
    st.tuples(scores_good, st.sampled_from(["", b"cat", 3]), score).map(lambda t: {**t[0], t[1]: t[2]}),
    st.tuples(scores_good, name_str, st.sampled_from(BAD_SCORES)).map(lambda t: {**t[0], t[1]: t[2]}),
    st.just({f"c{i}": 0.5 for i in range(1_001)}),
    st.sampled_from([[["crude", 1.6]], "crude", None]),
    any_value,
)

FieldSpec = tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]
SPECS: dict[str, tuple[dict[str, FieldSpec], frozenset[str]]] = {
    "document": (
        {"id": (name_str, bad_str), "tokens": (tokens_good, tokens_bad), "labels": (labels_good, labels_bad),
         "ts": (ints_good, ints_bad)},
        frozenset({"id", "tokens"}),
    ),
    "labelled-event": (
        {"event_id": (name_str, bad_str), "id": (name_str, bad_str), "labels": (labels_good, labels_bad),
         "tokens": (tokens_good, tokens_bad), "ts": (ints_good, ints_bad)},
        frozenset({"event_id", "id", "labels"}),
    ),
    "decision": (
        {"id": (name_str, bad_str), "categories": (labels_good, labels_bad), "scores": (scores_good, scores_bad),
         "model_version": (ints_good, ints_bad), "model": (name_str, bad_str), "worker": (name_str, bad_str),
         "ts": (ints_good, ints_bad), "decided_ts": (ints_good, ints_bad)},
        frozenset({"id", "categories", "scores", "model_version"}),
    ),
    "dead-letter": (
        {"reason": (name_str, bad_str), "detail": (st.text(max_size=8), bad_str),
         "source_topic": (name_str, bad_str),
         "source_partition": (st.integers(0, 2**31 - 1), ints_bad | st.just(2**31)),
         "source_offset": (ints_good, ints_bad), "original": (st.binary(max_size=16), st.text(max_size=4) | any_value),
         "ts": (ints_good, ints_bad), "worker": (name_str, bad_str)},
        frozenset({"reason", "detail", "source_topic", "source_partition", "source_offset", "original", "ts"}),
    ),
}  # fmt: skip


@st.composite
def messages(draw: st.DrawFn, name: str) -> bytes:
    """msgpack bytes of a message for ``name``: valid, with exactly one defect, or with several.

    One-defect messages are the sharp ones: a check the codec forgets shows up
    as an accepted message the schema rejects, not hidden behind another defect.
    """
    fields, required = SPECS[name]
    obj: dict[Any, Any] = {}
    for field, (good, _) in fields.items():
        if field in required or draw(st.booleans()):
            obj[field] = draw(good)
    mode = draw(st.sampled_from(["valid", "one-defect", "one-defect", "several-defects"]))
    defects = {"valid": 0, "one-defect": 1, "several-defects": draw(st.integers(2, 4))}[mode]
    top_level: object = None
    corrupt = False
    for _ in range(defects):
        kind = draw(st.sampled_from(["bad-value"] * 6 + ["drop", "unknown", "not-a-map", "corrupt"]))
        if kind == "bad-value":
            field = draw(st.sampled_from(sorted(fields)))
            obj[field] = draw(fields[field][1])
        elif kind == "drop":
            obj.pop(draw(st.sampled_from(sorted(required))), None)
        elif kind == "unknown":
            unknown = name_str.filter(lambda k: k not in fields) | st.sampled_from([b"id", 1, b"ts", BAD_UTF8])
            obj[draw(unknown)] = draw(any_value)
        elif kind == "not-a-map":
            top_level = draw(any_value | st.just([obj]))
        else:
            corrupt = True
    raw = pack(obj if top_level is None else top_level)
    if BAD_UTF8.encode() in raw:
        raw = raw.replace(BAD_UTF8.encode(), b"\xff" * len(BAD_UTF8))
    if corrupt:
        cut = draw(st.integers(0, len(raw)))
        raw = draw(st.sampled_from([raw[:cut], raw + raw[cut:], raw[:cut] + b"\xc1" + raw[cut + 1 :]]))
    return raw


DECODERS: dict[str, Callable[[bytes], Any]] = {
    "document": decode_document,
    "labelled-event": decode_labelled_event,
    "decision": decode_decision,
    "dead-letter": decode_dead_letter,
}
ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "document": encode_document,
    "labelled-event": encode_labelled_event,
    "decision": encode_decision,
    "dead-letter": encode_dead_letter,
}


def _agrees_with_schema(name: str, raw: bytes) -> None:
    expected = schema_accepts(name, raw)
    try:
        message = DECODERS[name](raw)
    except CodecError as exc:
        assert exc.code in REASON_CODES
        assert not expected, f"codec rejected ({exc}) what the schema accepts"
        return
    assert expected, f"codec accepted {message!r} which the schema rejects"
    again = ENCODERS[name](message)  # the encoder accepts whatever the decoder returned ...
    assert ENCODERS[name](DECODERS[name](again)) == again  # ... and the round trip is stable


_PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPERTY
@given(messages("document"))
def test_document_codec_agrees_with_schema(raw: bytes) -> None:
    _agrees_with_schema("document", raw)


@_PROPERTY
@given(messages("labelled-event"))
def test_labelled_event_codec_agrees_with_schema(raw: bytes) -> None:
    _agrees_with_schema("labelled-event", raw)


@_PROPERTY
@given(messages("decision"))
def test_decision_codec_agrees_with_schema(raw: bytes) -> None:
    _agrees_with_schema("decision", raw)


@_PROPERTY
@given(messages("dead-letter"))
def test_dead_letter_codec_agrees_with_schema(raw: bytes) -> None:
    _agrees_with_schema("dead-letter", raw)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NAMES), st.binary(max_size=64) | any_value.map(pack))
def test_arbitrary_bytes_agree_with_schema(name: str, raw: bytes) -> None:
    _agrees_with_schema(name, raw)


def test_generated_messages_hit_both_sides() -> None:
    """Guard against a generator that only ever produces rejects (or accepts)."""
    seen: dict[str, set[bool]] = {n: set() for n in NAMES}

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        for name in NAMES:
            seen[name].add(schema_accepts(name, data.draw(messages(name))))

    run()
    assert all(sides == {True, False} for sides in seen.values()), seen


def test_nan_scores_are_numbers_in_both() -> None:
    raw = pack(with_(DECISION, scores={"c": math.nan}))
    assert schema_accepts("decision", raw)
    assert math.isnan(decode_decision(raw).scores["c"])


def _catalogue() -> list[object]:
    """Edge values, good and bad, for every field; each is tried in every field of every message."""
    values: list[object] = [*BAD_STRS, *EDGE_INTS, "x", "x" * 300, b"", [], (), {}]
    values += [["oil", bad] for bad in BAD_TOKENS] + [["x" * 256], ["\U0001f600" * 256]]
    values += [["crude", bad] for bad in BAD_LABELS] + [["a", "a"], ["a", "b"]]
    values += [_big(10_000, False), _big(10_001, False), _big(1_000, True), _big(1_001, True)]
    values += [{"c": bad} for bad in BAD_SCORES] + [{"": 1.0}, {b"c": 1.0}, {3: 1.0}, {"c": 1}, {"c": 2**64 - 1}]
    values += [{f"c{i}": 0.5 for i in range(n)} for n in (1_000, 1_001)]
    return values


CATALOGUE = _catalogue()
BASES: dict[str, dict[str, Any]] = {"document": DOC, "labelled-event": EVENT, "decision": DECISION, "dead-letter": DEAD}


@pytest.mark.parametrize("name", NAMES)
def test_every_catalogued_edge_value_in_every_field_agrees_with_schema(name: str) -> None:
    """Deterministic single-defect cases: each catalogued value replaces one field of a valid message."""
    fields, _ = SPECS[name]
    for field in fields:
        for value in CATALOGUE:
            raw = pack(with_(BASES[name], **{field: value}))
            _agrees_with_schema(name, raw.replace(BAD_UTF8.encode(), b"\xff" * len(BAD_UTF8)))
        _agrees_with_schema(name, pack(with_(BASES[name], **{field: _ABSENT})))
