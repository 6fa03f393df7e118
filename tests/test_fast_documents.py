"""The compiled document parser accepts only what decode_document accepts, with the same features."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_winnow.errors import CodecError
from stream_winnow.text.features import FeatureConfig, Featurizer
from stream_winnow.text.hash_table import HashTable
from stream_winnow.wire.codec import CodecLimits, decode_document, decode_labelled_event
from stream_winnow.wire.fast_documents import parse_documents, token_hash

LIMITS = CodecLimits(max_tokens_per_document=50, max_token_chars=8, max_message_bytes=4096)
token_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=0, max_size=10) | st.sampled_from(
    ["oil", "prices", "é", "ölpreis", "日本", "😀x", "a" * 8, "a" * 9, ""]
)
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    fields: dict[Any, Any] = {}
    valid = draw(st.integers(0, 3)) > 0  # mostly well-formed, so the acceptance side is exercised too
    if valid:
        fields["id"] = draw(st.text(min_size=1, max_size=6))
        fields["tokens"] = draw(st.lists(token_text.filter(lambda t: 0 < len(t) <= 8), min_size=1, max_size=50))
        if draw(st.booleans()):
            fields["ts"] = draw(st.integers(min_value=0, max_value=2**63 - 1))
    else:
        if draw(st.integers(0, 5)):
            fields["id"] = draw(st.text(max_size=6) | st.binary(max_size=3) | ints)
        if draw(st.integers(0, 9)):
            fields["tokens"] = draw(st.lists(token_text | st.binary(max_size=3) | ints, max_size=60))
        if draw(st.booleans()):
            fields["ts"] = draw(ints | st.none() | st.floats() | st.booleans())
        if not draw(st.integers(0, 3)):
            fields["labels"] = draw(st.lists(st.text(max_size=3), max_size=2))
    if valid and not draw(st.integers(0, 3)):
        fields["labels"] = draw(st.lists(st.text(min_size=1, max_size=3), max_size=3, unique=True))
        if not draw(st.integers(0, 5)):
            fields[draw(st.sampled_from(["extra", "ids", "t"]))] = 1
    keys = list(fields)
    order = draw(st.permutations(keys))
    raw = msgpack.packb({k: fields[k] for k in order}, use_bin_type=True)
    mutation = draw(st.integers(0, 8))
    if mutation == 1 and raw:  # truncate
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif mutation == 2 and raw:  # corrupt one byte
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    elif mutation == 3:  # trailing bytes
        raw += b"\x00"
    return raw


def _python_path(raw: bytes) -> tuple[str, tuple[str, ...], Any, Any] | None:
    try:
        document = decode_document(raw, LIMITS)
    except CodecError:
        return None
    return document.id, document.tokens, document.ts_ms, document.labels


@settings(max_examples=600, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6))
def test_accepted_messages_decode_alike_and_featurize_alike(raws: list[bytes]) -> None:
    parsed = parse_documents(raws, LIMITS)
    fast, slow = Featurizer(FeatureConfig(strength="count")), Featurizer(FeatureConfig(strength="count"))
    batch = fast.transform_hashed(parsed)
    row = 0
    for i, raw in enumerate(raws):
        expected = _python_path(raw)
        if not parsed.ok[i]:
            continue
        assert expected is not None, f"fast path accepted what decode_document rejects: {raw!r}"
        document_id, tokens, ts_ms, labels = expected
        assert parsed.labels[i] == labels
        assert parsed.ids[i] == document_id
        assert parsed.ts_ms[i] == ts_ms
        reference = slow.transform_many([tokens])
        vector = batch.vector(row)
        np.testing.assert_array_equal(vector.ids, reference.ids)
        np.testing.assert_array_equal(vector.strengths, reference.strengths)
        row += 1
    assert row == len(batch)


def test_plain_documents_take_the_fast_path() -> None:
    raws = [
        msgpack.packb({"id": "d1", "tokens": ["oil", "prices", "oil"], "ts": 1732875000000}),
        msgpack.packb({"tokens": ["ölpreis", "日本"], "id": "d2"}),
        msgpack.packb({"id": "d3", "tokens": ["x"] * 20, "ts": 0}),
    ]
    parsed = parse_documents(raws)
    assert parsed.ok.tolist() == [True, True, True]
    assert parsed.ids == ["d1", "d2", "d3"]
    assert parsed.ts_ms == [1732875000000, None, 0]
    batch = Featurizer(FeatureConfig(strength="count")).transform_hashed(parsed)
    assert batch.indptr.tolist() == [0, 2, 4, 5]
    assert batch.strengths.tolist() == [2.0, 1.0, 1.0, 1.0, 20.0]


@pytest.mark.parametrize(
    "body",
    [
        {"id": "d", "tokens": ["a"], "labels": ["earn", "earn"]},  # duplicate-label
        {"id": "d", "tokens": ["a"], "labels": [""]},  # empty-string
        {"id": "d", "tokens": []},  # empty-tokens
        {"id": "", "tokens": ["a"]},  # empty id
        {"id": "d", "tokens": ["a"], "ts": -1},
        {"id": "d", "tokens": ["a"], "ts": 1.0},
        {"id": "d", "tokens": ["a"], "ts": 2**63},
        {"id": "d", "tokens": ["a" * 300]},
        {"id": "d", "tokens": ["a"], "extra": 1},
    ],
)
def test_declined_messages(body: dict[str, Any]) -> None:
    assert parse_documents([msgpack.packb(body)]).ok.tolist() == [False]


def test_invalid_utf8_and_surrogates_are_declined() -> None:
    good = msgpack.packb({"id": "d", "tokens": ["ab"]})
    for bad in (b"\xc3\x28", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80"):
        raw = good.replace(b"\xa2ab", bytes([0xA0 | len(bad)]) + bad)
        assert parse_documents([raw]).ok.tolist() == [False], bad


def test_the_hash_table_grows_and_keeps_every_entry() -> None:
    table = HashTable(capacity=16)
    hashes = np.array([token_hash(f"t{i}") for i in range(5000)], dtype=np.uint64)
    table.insert(hashes, np.arange(5000, dtype=np.int64))
    found, missing = table.lookup(hashes)
    assert missing == 0
    assert found.tolist() == list(range(5000))
    assert table.lookup(np.array([token_hash("unseen")], dtype=np.uint64))[1] == 1


def test_the_featurizer_memo_reset_also_resets_the_hash_table() -> None:
    featurizer = Featurizer(max_cached_tokens=3)
    first = featurizer.transform_hashed(parse_documents([msgpack.packb({"id": "a", "tokens": list("abcde")})]))
    second = featurizer.transform_hashed(parse_documents([msgpack.packb({"id": "b", "tokens": list("edcba")})]))
    assert sorted(first.ids.tolist()) == sorted(second.ids.tolist())


words = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.lists(st.sampled_from("abcdefghij") | words, min_size=1, max_size=12), max_size=6), max_size=8),
    st.integers(2, 40),
)
def test_batches_featurize_alike_across_memo_growth_and_resets(
    batches: list[list[list[str]]], memo_size: int
) -> None:
    """One featurizer over many batches (its scratch reused, grown and outlived by resets) agrees with a
    fresh one per document, and each batch's distinct ids are distinct and give back every entry."""
    featurizer = Featurizer(max_cached_tokens=memo_size)
    for number, documents in enumerate(batches):
        raws = [msgpack.packb({"id": f"{number}-{i}", "tokens": tokens}) for i, tokens in enumerate(documents)]
        batch = featurizer.transform_hashed(parse_documents(raws))
        assert len(batch) == len(documents)
        for i, tokens in enumerate(documents):
            reference = Featurizer().transform_many([tokens])
            got = batch.vector(i)
            assert dict(zip(got.ids.tolist(), got.strengths.tolist(), strict=True)) == dict(
                zip(reference.ids.tolist(), reference.strengths.tolist(), strict=True)
            )
        distinct, inverse = batch.distinct_ids()
        assert len(set(distinct.tolist())) == len(distinct)
        assert distinct[inverse].tolist() == batch.ids.tolist()


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """Labelled events, mostly well-formed, some broken the ways producers break them."""
    fields: dict[Any, Any] = {
        "event_id": draw(st.text(min_size=1, max_size=5)) if draw(st.integers(0, 5)) else draw(st.just("") | ints),
        "id": draw(st.text(min_size=1, max_size=5)) if draw(st.integers(0, 5)) else draw(st.binary(max_size=2)),
        "labels": draw(st.lists(st.text(min_size=1, max_size=3), max_size=4, unique=True))
        if draw(st.integers(0, 3))
        else draw(st.lists(st.text(min_size=0, max_size=3), max_size=4) | ints),
    }
    if draw(st.booleans()):
        fields["tokens"] = draw(st.lists(token_text.filter(lambda t: 0 < len(t) <= 8), min_size=0, max_size=20))
    if draw(st.booleans()):
        fields["ts"] = draw(st.integers(min_value=-5, max_value=2**63 + 5))
    for name in list(fields):
        if not draw(st.integers(0, 12)):
            del fields[name]
    raw = msgpack.packb(fields, use_bin_type=True)
    if not draw(st.integers(0, 8)) and raw:
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    return raw


@settings(max_examples=500, deadline=None)
@given(st.lists(events(), min_size=1, max_size=6))
def test_accepted_events_decode_alike_and_featurize_alike(raws: list[bytes]) -> None:
    parsed = parse_documents(raws, LIMITS, events=True)
    fast, slow = Featurizer(), Featurizer()
    batch = fast.transform_hashed(parsed)
    row = 0
    for i, raw in enumerate(raws):
        try:
            event = decode_labelled_event(raw, LIMITS)
        except CodecError:
            assert not parsed.ok[i], f"fast path accepted what decode_labelled_event rejects: {raw!r}"
            continue
        if not parsed.ok[i]:
            continue
        assert (parsed.event_ids[i], parsed.ids[i], parsed.labels[i], parsed.ts_ms[i]) == (
            event.event_id,
            event.id,
            event.labels,
            event.ts_ms,
        )
        assert bool(parsed.has_tokens[i]) == (event.tokens is not None)
        if event.tokens is not None:
            reference = slow.transform_many([event.tokens])
            np.testing.assert_array_equal(batch.vector(row).ids, reference.ids)
            np.testing.assert_array_equal(batch.vector(row).strengths, reference.strengths)
            row += 1
    assert row == len(batch)


def test_plain_events_take_the_fast_path() -> None:
    raws = [
        msgpack.packb({"event_id": "e1", "id": "d1", "labels": ["crude", "ship"]}),
        msgpack.packb({"event_id": "e2", "id": "d2", "labels": [], "tokens": ["oil"], "ts": 5}),
    ]
    parsed = parse_documents(raws, events=True)
    assert parsed.ok.tolist() == [True, True]
    assert parsed.event_ids == ["e1", "e2"] and parsed.labels == [("crude", "ship"), ()]
    assert parsed.has_tokens.tolist() == [False, True]
    assert len(Featurizer().transform_hashed(parsed)) == 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.lists(st.sampled_from("abcdefgh") | words, min_size=1, max_size=10),
                                          min_size=1, max_size=5)),
        max_size=8,
    ),
    st.integers(2, 30),
    st.randoms(use_true_random=False),
)
def test_both_paths_through_one_featurizer_agree(
    batches: list[tuple[bool, list[list[str]]]], memo_size: int, rng: Any
) -> None:
    """Batches by text (transform_many) and by hashes (transform_hashed, some documents left out, as the
    worker's plain ones are) through ONE featurizer: every document's features equal a fresh featurizer's.
    New tokens of the hashed path get their ids compiled from their bytes, never as text (feature_hash)."""
    featurizer = Featurizer(max_cached_tokens=memo_size)
    for number, (hashed, documents) in enumerate(batches):
        if hashed:
            raws = [msgpack.packb({"id": f"{number}-{i}", "tokens": tokens}) for i, tokens in enumerate(documents)]
            select = np.array([rng.random() < 0.7 for _ in documents])
            batch = featurizer.transform_hashed(parse_documents(raws), select)
            chosen = [tokens for tokens, keep in zip(documents, select.tolist(), strict=True) if keep]
        else:
            batch = featurizer.transform_many(documents)
            chosen = documents
        assert len(batch) == len(chosen)
        for i, tokens in enumerate(chosen):
            reference = Featurizer().transform(tokens)
            got = batch.vector(i)
            assert dict(zip(got.ids.tolist(), got.strengths.tolist(), strict=True)) == dict(
                zip(reference.ids.tolist(), reference.strengths.tolist(), strict=True)
            )
