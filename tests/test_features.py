"""From tokens to features: stable ids, strengths, normalisation, bigrams, one document vs many."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_winnow.errors import ConfigError
from stream_winnow.text import features as features_module
from stream_winnow.text.features import FIRST_TOKEN_ID, FeatureConfig, Featurizer, feature_id

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pinned: a change of hash function, digest size, byte order or mask changes these and splits every stored model.
PINNED = {
    "earn": 1916145107682998810,
    "information": 1703301118576727782,
    "retrieval": 6866158228685573688,
}


def test_pinned_feature_ids() -> None:
    assert {token: feature_id(token) for token in PINNED} == PINNED


def test_feature_id_is_blake2b_8_bytes_little_endian_masked_to_63_bits() -> None:
    for token in ["earn", "ü", "日本", "", "a\x1fb"]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little") & ((1 << 63) - 1)
        assert feature_id(token) == (value if value >= FIRST_TOKEN_ID else value + FIRST_TOKEN_ID)


@pytest.mark.parametrize("seed", ["12345"])
def test_feature_ids_are_stable_across_processes(seed: str) -> None:
    tokens = ["earn", "acq", "zürich", "日本", "information"]
    code = (
        "import json, sys\n"
        "from stream_winnow.text.features import Featurizer, feature_id\n"
        "tokens = json.loads(sys.argv[1])\n"
        "f = Featurizer()\n"
        "print(json.dumps({'ids': [feature_id(t) for t in tokens], 'hash': hash(tokens[0]),"
        " 'batch': f.transform_many([tokens]).ids.tolist()}))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(tokens)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    child = json.loads(out.stdout)
    assert child["ids"] == [feature_id(t) for t in tokens]
    assert child["batch"] == [feature_id(t) for t in tokens]
    assert child["ids"][0] == PINNED["earn"]


def test_python_hash_is_really_randomised_so_the_subprocess_check_means_something() -> None:
    code = "print(hash('earn'))"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, PYTHONHASHSEED=s),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for s in ("1", "2")
    }
    assert len(runs) == 2


# -- strengths ----------------------------------------------------------------------------------------------

DOC = ["information", "retrieval", "retrieval", "information", "retrieval", "retrieval", "retrieval", "retrieval", "x"]


def strengths_by_token(config: FeatureConfig, tokens: list[str]) -> dict[str, float]:
    f = Featurizer(config)
    vector = f.transform(tokens)
    by_id = dict(zip(vector.ids.tolist(), vector.strengths.tolist(), strict=True))
    return {t: by_id[feature_id(t)] for t in set(tokens)}


@pytest.mark.parametrize(
    ("strength", "expected"),
    [
        ("binary", {"information": 1.0, "retrieval": 1.0, "x": 1.0}),
        ("count", {"information": 2.0, "retrieval": 6.0, "x": 1.0}),
        ("sqrt", {"information": math.sqrt(2), "retrieval": math.sqrt(6), "x": 1.0}),
    ],
)
def test_strengths(strength: str, expected: dict[str, float]) -> None:
    got = strengths_by_token(FeatureConfig(strength=strength), DOC)  # type: ignore[arg-type]
    assert got == pytest.approx(expected)


def test_default_strength_is_sqrt() -> None:
    assert FeatureConfig().strength == "sqrt"


def test_bad_strength_is_a_config_error_listing_the_choices() -> None:
    with pytest.raises(ConfigError, match="binary, count, sqrt"):
        FeatureConfig(strength="log")  # type: ignore[arg-type]


@pytest.mark.parametrize("strength", ["binary", "count", "sqrt"])
def test_normalisation_sums_to_one(strength: str) -> None:
    config = FeatureConfig(strength=strength, normalize=True)  # type: ignore[arg-type]
    f = Featurizer(config)
    vector = f.transform(DOC)
    assert vector.total_strength == pytest.approx(1.0)
    raw = strengths_by_token(FeatureConfig(strength=strength), DOC)  # type: ignore[arg-type]
    normalised = strengths_by_token(config, DOC)
    total = sum(raw.values())
    assert normalised == pytest.approx({t: v / total for t, v in raw.items()})
    batch = f.transform_many([DOC, ["a"], [], ["b", "b", "c"]])
    sums = [batch.vector(i).total_strength for i in range(len(batch))]
    assert sums == pytest.approx([1.0, 1.0, 0.0, 1.0])


def test_bigrams_add_one_feature_per_distinct_adjacent_pair() -> None:
    tokens = ["new", "york", "new", "york", "city"]
    plain = Featurizer(FeatureConfig(strength="count")).transform(tokens)
    with_pairs = Featurizer(FeatureConfig(strength="count", bigrams=True)).transform(tokens)
    pairs = {"new\x1fyork": 2.0, "york\x1fnew": 1.0, "york\x1fcity": 1.0}
    assert set(with_pairs.ids.tolist()) == set(plain.ids.tolist()) | {feature_id(p) for p in pairs}
    by_id = dict(zip(with_pairs.ids.tolist(), with_pairs.strengths.tolist(), strict=True))
    assert {p: by_id[feature_id(p)] for p in pairs} == pairs
    # A pair never collides with the single tokens or with a token that merely contains both words.
    assert feature_id("new\x1fyork") not in {feature_id("newyork"), feature_id("new york")}


def test_bigrams_of_short_documents() -> None:
    f = Featurizer(FeatureConfig(bigrams=True))
    assert len(f.transform([])) == 0
    assert f.transform(["solo"]).ids.tolist() == [feature_id("solo")]


# -- one document vs many -----------------------------------------------------------------------------

TOKEN = st.one_of(
    st.sampled_from(["a", "b", "c", "earn", "ü", "日本", "e\u0301", "🙂"]),
    st.text(min_size=1, max_size=6),
)
DOCS = st.lists(st.lists(TOKEN, max_size=12), max_size=8)
CONFIGS = st.builds(
    FeatureConfig, strength=st.sampled_from(["binary", "count", "sqrt"]), normalize=st.booleans(), bigrams=st.booleans()
)


@PROPERTY
@given(docs=DOCS, config=CONFIGS)
def test_transform_equals_transform_many(docs: list[list[str]], config: FeatureConfig) -> None:
    one = Featurizer(config)
    many = Featurizer(config)
    batch = many.transform_many(docs)
    assert len(batch) == len(docs)
    assert batch.indptr[0] == 0 and batch.indptr[-1] == len(batch.ids) == len(batch.strengths)
    for i, tokens in enumerate(docs):
        expected = one.transform(tokens)
        got = batch.vector(i)
        np.testing.assert_array_equal(got.ids, expected.ids)  # same features, same (first-occurrence) order
        np.testing.assert_allclose(got.strengths, expected.strengths, rtol=1e-12)
        assert got.ids.dtype == np.int64 and got.strengths.dtype == np.float64
        assert len(set(got.ids.tolist())) == len(got)  # unique ids


@PROPERTY
@given(docs=DOCS, config=CONFIGS)
def test_features_match_token_counts(docs: list[list[str]], config: FeatureConfig) -> None:
    batch = Featurizer(config).transform_many(docs)
    for i, tokens in enumerate(docs):
        units = list(tokens)
        if config.bigrams:
            units += [a + "\x1f" + b for a, b in zip(tokens, tokens[1:], strict=False)]
        counts = Counter(units)
        raw = {feature_id(t): {"binary": 1.0, "count": float(n), "sqrt": math.sqrt(n)}[config.strength]
               for t, n in counts.items()}  # fmt: skip
        total = sum(raw.values())
        expected = {k: (v / total if config.normalize else v) for k, v in raw.items()}
        vector = batch.vector(i)
        got = dict(zip(vector.ids.tolist(), vector.strengths.tolist(), strict=True))
        assert got == pytest.approx(expected)


@PROPERTY
@given(tokens=st.lists(st.text(max_size=10), max_size=20))
def test_reserved_ids_are_never_produced(tokens: list[str]) -> None:
    f = Featurizer(FeatureConfig(bigrams=True))
    ids = np.concatenate([f.transform(tokens).ids, f.transform_many([tokens, tokens[::-1]]).ids])
    assert np.all(ids >= FIRST_TOKEN_ID)
    assert all(feature_id(t) >= FIRST_TOKEN_ID for t in tokens)


def test_a_digest_in_the_reserved_range_is_moved_out(monkeypatch: pytest.MonkeyPatch) -> None:
    class SmallDigest:
        def __init__(self, data: bytes, digest_size: int) -> None:
            self.value = len(data)  # tiny values: 0, 1, 2 ...

        def digest(self) -> bytes:
            return self.value.to_bytes(8, "little")

    class FakeHashlib:
        blake2b = SmallDigest

    monkeypatch.setattr(features_module, "hashlib", FakeHashlib)
    assert features_module.feature_id("") == FIRST_TOKEN_ID
    assert features_module.feature_id("abc") == FIRST_TOKEN_ID + 3
    assert all(features_module.feature_id("x" * n) >= FIRST_TOKEN_ID for n in range(50))


def test_token_id_memo_agrees_with_feature_id() -> None:
    f = Featurizer()
    for token in ["a", "b", "a", "日本"]:
        assert f.token_id(token) == feature_id(token)


MEMO_RESET = (
    "Featurizer.transform_many resets its token memo past max_cached_tokens (features.py:188-189) but not "
    "_id_array, and rebuilds that array only when its length differs (features.py:195): when the new batch "
    "has as many distinct tokens as the old memo, the stale array maps them to the OLD tokens' ids. "
    "Fix: also reset self._id_array = np.zeros(0, dtype=np.int64) on reset"
)


def test_transform_many_after_the_memo_is_reset() -> None:
    f = Featurizer(max_cached_tokens=2)
    f.transform_many([["a", "b", "c"]])  # 3 distinct tokens > 2: the next call starts afresh
    batch = f.transform_many([["x", "y", "z"]])  # 3 new distinct tokens: same memo size as before
    assert sorted(batch.ids.tolist()) == sorted(feature_id(t) for t in "xyz")


def test_memo_reset_with_a_different_vocabulary_size() -> None:
    f = Featurizer(max_cached_tokens=2)
    f.transform_many([["a", "b", "c"]])
    batch = f.transform_many([["x", "y", "z", "w"]])
    assert sorted(batch.ids.tolist()) == sorted(feature_id(t) for t in "xyzw")
