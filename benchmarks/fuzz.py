"""Fuzz every message decoder: Python (``wire.codec``) and compiled (``wire.fast_documents``), side by side.

    python -m benchmarks.fuzz [--inputs 1000000] [--seed 0] [--batch 1000]

A seeded generator makes messages of each topic's kind, most of them nearly right
(each field drawn from good and bad values: wrong types, empty and oversize strings and
lists, NaN and infinite numbers, invalid UTF-8, key-syntax category names, unknown
fields) and then, one in two, damaged (truncated, a byte changed, bytes inserted or
appended), plus random bytes and msgpack values that are not maps. Every input goes
through the decoder of its topic, and documents and labelled events also through the
compiled batch parser. It checks, and prints counts of:

- a decoder raising anything but ``CodecError`` (a crash a dead letter would not catch);
- the compiled parser accepting what the Python decoder refuses, or decoding other values
  (it may decline more: a declined message is decoded in Python);
- the slowest batch (a hang shows as a batch that never ends; ``--batch`` inputs a batch).

The test suite runs the same generator on 20,000 inputs (``tests/test_fuzz.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from stream_winnow.errors import CodecError
from stream_winnow.wire.codec import (
    CodecLimits,
    decode_dead_letter,
    decode_decision,
    decode_document,
    decode_labelled_event,
)
from stream_winnow.wire.fast_documents import parse_documents

# Small limits, so that inputs reach them: the same checks as at the defaults, at a fraction of the bytes.
LIMITS = CodecLimits(max_tokens_per_document=40, max_labels=8, max_message_bytes=2048, max_token_chars=12)
KINDS = ("document", "labelled-event", "decision", "dead-letter")
DECODERS: dict[str, Callable[[bytes, CodecLimits], Any]] = {
    "document": decode_document, "labelled-event": decode_labelled_event,
    "decision": decode_decision, "dead-letter": decode_dead_letter,
}  # fmt: skip
_BAD_UTF8 = b"\xa3\xff\xfe\xfd"  # a msgpack str of 3 bytes that are not UTF-8
# The chance that a field takes a bad value: 0 for a third of the messages (so acceptance is exercised
# as much as refusal), 0.25 for the others; set per message by ``generate``.
_BAD = [0.25]


class _Raw:
    """Bytes spliced into a message as they are (invalid UTF-8 under a str header)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 8)))


def _text(rng: random.Random) -> Any:
    if rng.random() >= _BAD[0]:
        return _word(rng)
    choice = rng.randrange(6)
    if choice == 0:
        return ""
    if choice == 1:
        return "x" * rng.choice((LIMITS.max_token_chars, LIMITS.max_token_chars + 1, 300))
    if choice == 2:
        return rng.choice(["{news}", "a:b", "sw:{m}:f:1", "*", "\x00", "é", "日本", "😀", " ", "\ud800"[:0] + "ok"])
    if choice == 3:
        return _Raw(_BAD_UTF8)
    if choice == 4:
        return rng.choice([b"bytes", 7, -1, 2**64 - 1, 1.5, math.nan, math.inf, None, True, [], {}])
    return _word(rng)


def _texts(rng: random.Random, limit: int) -> Any:
    if rng.random() >= _BAD[0]:
        return list(dict.fromkeys(_word(rng) for _ in range(rng.randint(1, min(limit, 12)))))
    choice = rng.randrange(6)
    if choice == 0:
        return []
    if choice == 1:
        return [_text(rng)] * (limit + 1)
    if choice == 2:
        return rng.choice(["oil", 3, None, {"a": 1}, b"x"])
    if choice == 3:
        word = _text(rng)
        return [word, word]  # duplicate (a label twice)
    return [_text(rng) for _ in range(rng.randint(1, min(limit, 12)))]


def _number(rng: random.Random) -> Any:
    if rng.random() >= _BAD[0]:
        return rng.randrange(2**31)  # fits every integer field, the 32-bit partition too
    return rng.choice([0, 1, 1764412800000, -5, 2**63, 2**64 - 1, -(2**63), 1.5, math.nan, math.inf, -math.inf,
                       None, True, "1", b"\x01"])  # fmt: skip


def _scores(rng: random.Random) -> Any:
    if rng.random() >= _BAD[0]:
        return {f"c{i}": rng.uniform(-3, 3) for i in range(rng.randint(0, 4))}
    if rng.randrange(4) == 0:
        return rng.choice([[], "x", {1: 2.0}, {"a": "b"}, {"a": math.nan}, {"a": math.inf}])
    names = [_text(rng) if rng.randrange(3) == 0 else f"c{i}" for i in range(rng.randint(0, 4))]
    return {name if isinstance(name, str | bytes | int | float | _Raw) or name is None else str(name):
            rng.choice([0.5, -1.0, 3, math.nan, 1e308]) for name in names}  # fmt: skip


def _original(rng: random.Random) -> Any:
    return b"\x81\xa2id\xa1x" if rng.random() >= _BAD[0] else rng.choice([b"", "s", 3])


def _named(prefix: str) -> Callable[[random.Random], Any]:
    return lambda rng: _text(rng) if rng.random() < 0.3 else f"{prefix}{rng.randrange(10**6)}"


def _labels(rng: random.Random) -> Any:
    return _texts(rng, LIMITS.max_labels)


def _tokens(rng: random.Random) -> Any:
    return _texts(rng, LIMITS.max_tokens_per_document)


# Per topic, its fields in the order drawn: (name, the chance it is present, how its value is drawn).
_FIELDS: dict[str, tuple[tuple[str, float, Callable[[random.Random], Any]], ...]] = {
    "document": (("id", 0.95, _named("doc-")), ("tokens", 0.95, _tokens), ("labels", 0.3, _labels),
                 ("ts", 0.5, _number)),
    "labelled-event": (("id", 0.95, _named("doc-")), ("event_id", 0.95, _named("label:")), ("labels", 0.95, _labels),
                       ("tokens", 0.4, _tokens), ("ts", 0.5, _number)),
    "decision": (("id", 0.95, _named("doc-")), ("categories", 0.9, _labels), ("scores", 0.9, _scores),
                 ("model_version", 0.9, _number), ("model", 0.4, _text), ("worker", 0.4, _text), ("ts", 0.4, _number),
                 ("decided_ts", 0.4, _number)),
    "dead-letter": (("reason", 0.9, _text), ("detail", 0.9, _text), ("source_topic", 0.9, _text),
                    ("source_partition", 0.9, _number), ("source_offset", 0.9, _number), ("original", 0.9, _original),
                    ("ts", 0.9, _number), ("worker", 0.9, _text)),
}  # fmt: skip


def _fields(kind: str, rng: random.Random) -> dict[Any, Any]:
    def maybe(probability: float) -> bool:  # a clean message (no bad values) has every required field
        return rng.random() < (1.0 if _BAD[0] == 0 and probability >= 0.9 else probability)

    fields: dict[Any, Any] = {name: draw(rng) for name, chance, draw in _FIELDS[kind] if maybe(chance)}
    if maybe(0.05):
        fields[rng.choice(["extra", "ids", "Tokens", 1, b"id"])] = 1
    keys = list(fields)
    rng.shuffle(keys)
    return {key: fields[key] for key in keys}


def _pack(value: Any) -> bytes:
    """msgpack of ``value``, with any ``_Raw`` spliced in as a str of its bytes."""
    marker = "\x01raw\x01"
    raws: list[bytes] = []

    def replace(v: Any) -> Any:
        if isinstance(v, _Raw):
            raws.append(v.data)
            return marker
        if isinstance(v, dict):
            return {replace(k): replace(x) for k, x in v.items()}
        if isinstance(v, list):
            return [replace(x) for x in v]
        return v

    packed = msgpack.packb(replace(value), use_bin_type=True)
    encoded_marker = msgpack.packb(marker)
    for data in raws:
        packed = packed.replace(encoded_marker, data, 1)
    return packed


def _damage(raw: bytes, rng: random.Random) -> bytes:
    choice = rng.randrange(8)
    if choice == 0 and raw:
        return raw[: rng.randrange(len(raw))]
    if choice == 1 and raw:
        at = rng.randrange(len(raw))
        return raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1 :]
    if choice == 2:
        at = rng.randrange(len(raw) + 1)
        return raw[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))) + raw[at:]
    if choice == 3:
        return raw + b"\x00"
    return raw


def generate(seed: int) -> Iterator[tuple[str, bytes]]:
    """Endless (kind, message bytes), the same for the same seed."""
    rng = random.Random(seed)
    while True:
        kind = KINDS[rng.randrange(len(KINDS))]
        _BAD[0] = 0.0 if rng.randrange(3) == 0 else 0.25
        choice = rng.randrange(20)
        if choice == 0:
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(48)))
        elif choice == 1:
            raw = msgpack.packb(rng.choice([[1, 2], "doc", 7, None, b"\x00", [{"id": "a"}]]), use_bin_type=True)
        elif choice == 2:
            raw = _pack(_fields(kind, rng)) + b"\x00" * rng.choice([0, LIMITS.max_message_bytes])
        else:
            raw = _pack(_fields(kind, rng))
        if rng.randrange(3) == 0:
            raw = _damage(raw, rng)
        yield kind, raw


@dataclass
class Findings:
    """What a fuzz run found; ``clean`` when nothing crashed or disagreed."""

    inputs: int = 0
    accepted: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # by reason code
    crashes: list[tuple[str, str, bytes]] = field(default_factory=list)  # (decoder, error, input)
    disagreements: list[tuple[str, str, bytes]] = field(default_factory=list)
    compiled_declined: int = 0
    slowest_batch_s: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.crashes or self.disagreements)


def _python(kind: str, raw: bytes, findings: Findings) -> Any:
    try:
        value = DECODERS[kind](raw, LIMITS)
    except CodecError as error:
        findings.refused[error.code] += 1
        return None
    except Exception as error:  # noqa: BLE001 - what the fuzzer is for
        findings.crashes.append((kind, repr(error), raw))
        return None
    findings.accepted[kind] += 1
    return value


def _compiled(kind: str, batch: Sequence[bytes], decoded: Sequence[Any], findings: Findings) -> None:
    events = kind == "labelled-event"
    try:
        parsed = parse_documents(batch, LIMITS, events=events)
    except Exception as error:  # noqa: BLE001
        findings.crashes.extend((f"compiled {kind}", repr(error), raw) for raw in batch)
        return
    for i, raw in enumerate(batch):
        if not parsed.ok[i]:
            findings.compiled_declined += 1
            continue
        expected = decoded[i]
        if expected is None:
            findings.disagreements.append((kind, "compiled accepted what Python refused", raw))
            continue
        first, last = int(parsed.token_indptr[i]), int(parsed.token_indptr[i + 1])
        tokens = tuple(parsed.buffer[a : a + n].decode("utf-8") for a, n in
                       zip(parsed.token_start[first:last].tolist(), parsed.token_bytes[first:last].tolist(),
                           strict=True)) if parsed.has_tokens[i] else None  # fmt: skip
        got = (parsed.ids[i], parsed.ts_ms[i], parsed.labels[i], tokens, parsed.event_ids[i] if events else None)
        want = (expected.id, expected.ts_ms, expected.labels, expected.tokens, expected.event_id if events else None)
        if got != want:
            findings.disagreements.append((kind, f"decoded values differ: {got!r} != {want!r}", raw))


def fuzz(inputs: int, seed: int = 0, batch: int = 1_000) -> Findings:
    """Run ``inputs`` generated messages through every decoder; see the module docstring."""
    findings = Findings()
    source = generate(seed)
    pending: dict[str, tuple[list[bytes], list[Any]]] = {k: ([], []) for k in ("document", "labelled-event")}
    started = time.perf_counter()

    def flush(kind: str) -> None:
        raws, decoded = pending[kind]
        if raws:
            _compiled(kind, raws, decoded, findings)
            pending[kind] = ([], [])

    for _ in range(inputs):
        kind, raw = next(source)
        findings.inputs += 1
        decoded = _python(kind, raw, findings)
        if kind in pending:
            pending[kind][0].append(raw)
            pending[kind][1].append(decoded)
            if len(pending[kind][0]) >= batch:
                flush(kind)
        if findings.inputs % batch == 0:
            now = time.perf_counter()
            findings.slowest_batch_s = max(findings.slowest_batch_s, now - started)
            started = now
    for kind in pending:
        flush(kind)
    return findings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000, help="generated messages [1,000,000]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=1_000, help="inputs a batch (the compiled parser's) [1,000]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    found = fuzz(args.inputs, args.seed, args.batch)
    seconds = time.perf_counter() - started
    summary = {
        "inputs": found.inputs, "seed": args.seed, "seconds": round(seconds, 1),
        "accepted": dict(found.accepted), "refused_by_reason": dict(found.refused.most_common()),
        "compiled_declined_to_python": found.compiled_declined, "crashes": len(found.crashes),
        "disagreements": len(found.disagreements), "slowest_batch_s": round(found.slowest_batch_s, 3),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>28}  {value}")
    for decoder, error, raw in (found.crashes + found.disagreements)[:10]:
        print(f"  {decoder}: {error}: {raw!r}", file=sys.stderr)
    return 0 if found.clean else 1


if __name__ == "__main__":
    sys.exit(main())
