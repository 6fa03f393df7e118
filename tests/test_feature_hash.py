"""The compiled feature ids equal ``feature_id`` (hashlib's BLAKE2b) on any token, whatever its length."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_winnow.text.feature_hash import feature_ids
from stream_winnow.text.features import FIRST_TOKEN_ID, feature_id


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=20))
def test_equal_to_hashlib(tokens: list[str]) -> None:
    encoded = [t.encode("utf-8") for t in tokens]
    lengths = np.array([len(e) for e in encoded], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    got = feature_ids(b"".join(encoded), starts, lengths, FIRST_TOKEN_ID)
    assert got.tolist() == [feature_id(t) for t in tokens]


def test_block_boundaries() -> None:
    """Lengths around BLAKE2b's 128-byte blocks, where the last block's padding and counter matter."""
    tokens = ["x" * n for n in (0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 257, 1000)]
    data = "".join(tokens).encode()
    lengths = np.array([len(t) for t in tokens])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    assert feature_ids(data, starts, lengths, FIRST_TOKEN_ID).tolist() == [feature_id(t) for t in tokens]
    assert all(i >= FIRST_TOKEN_ID for i in feature_ids(data, starts, lengths, FIRST_TOKEN_ID).tolist())
