"""Feature ids of many tokens at once, in compiled code: the same ids as ``features.feature_id``.

A feature id is the first 8 bytes of the token's BLAKE2b digest (RFC 7693, unkeyed, 8-byte
digest), masked to 63 bits and moved above the reserved ids. ``feature_id`` asks hashlib, one
Python call per token; a worker meets a token's text there only the first time it sees the
token, but right after it starts everything is new: the Reuters stream's first 10,789
documents hold 31,060 distinct tokens, and featurising them cold took 204-236 ms against
27-33 ms warm (batches of 2,000). That is the backlog a worker joining under load must catch
up. Here the digests of every new token of a batch come from one compiled pass over the
batch's bytes (``tests/test_feature_hash.py`` holds them equal to hashlib's).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["feature_ids"]

_IV = np.array(
    [
        0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
        0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179,
    ],
    dtype=np.uint64,
)  # fmt: skip
_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ],
    dtype=np.int64,
)
# Parameter block word 0 for an unkeyed 8-byte digest: digest length, key length 0, fanout 1, depth 1.
_PARAM = np.uint64(0x01010000 ^ 8)
_ID_MASK = np.uint64((1 << 63) - 1)
_BLOCK = 128


@njit(cache=True, inline="always")
def _rotr(x: np.uint64, n: int) -> np.uint64:  # pragma: no cover - compiled
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


# The state words each of a round's eight G calls mixes: four columns, then four diagonals.
_G = np.array(
    [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15],
     [0, 5, 10, 15], [1, 6, 11, 12], [2, 7, 8, 13], [3, 4, 9, 14]],
    dtype=np.int64,
)  # fmt: skip


@njit(cache=True)
def _compress(  # noqa: PLR0913 - a compiled kernel takes flat arrays
    h: np.ndarray, m: np.ndarray, t: int, last: bool, v: np.ndarray, iv: np.ndarray, sigma: np.ndarray, g: np.ndarray
) -> None:  # pragma: no cover - compiled
    """BLAKE2b's compression F of block ``m`` (16 words) into state ``h``, ``t`` bytes so far; ``v`` is scratch."""
    v[:8] = h
    v[8:] = iv
    v[12] ^= np.uint64(t)
    if last:
        v[14] = ~v[14]
    for r in range(12):
        s = sigma[r % 10]
        for i in range(8):
            a, b, c, d = g[i, 0], g[i, 1], g[i, 2], g[i, 3]
            v[a] = v[a] + v[b] + m[s[2 * i]]
            v[d] = _rotr(v[d] ^ v[a], 32)
            v[c] = v[c] + v[d]
            v[b] = _rotr(v[b] ^ v[c], 24)
            v[a] = v[a] + v[b] + m[s[2 * i + 1]]
            v[d] = _rotr(v[d] ^ v[a], 16)
            v[c] = v[c] + v[d]
            v[b] = _rotr(v[b] ^ v[c], 63)
    for i in range(8):
        h[i] ^= v[i] ^ v[i + 8]


@njit(cache=True, nogil=True)
def _feature_ids(  # noqa: PLR0913 - a compiled kernel takes flat arrays
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, iv: np.ndarray, sigma: np.ndarray, g: np.ndarray,
    first_id: int,
) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(starts.shape[0], dtype=np.int64)
    h = np.empty(8, dtype=np.uint64)
    m = np.empty(16, dtype=np.uint64)
    v = np.empty(16, dtype=np.uint64)
    block = np.empty(_BLOCK, dtype=np.uint8)
    for k in range(starts.shape[0]):
        start, n = starts[k], lengths[k]
        h[:] = iv
        h[0] ^= _PARAM
        done = 0
        while True:
            size = min(n - done, _BLOCK)
            last = done + size >= n
            block[:] = 0
            block[:size] = buf[start + done : start + done + size]
            for w in range(16):
                word = np.uint64(0)
                for byte in range(8):
                    word |= np.uint64(block[8 * w + byte]) << np.uint64(8 * byte)
                m[w] = word
            done += size
            _compress(h, m, done, last, v, iv, sigma, g)
            if last:
                break
        value = np.int64(h[0] & _ID_MASK)
        out[k] = value if value >= first_id else value + first_id
    return out


def feature_ids(buffer: bytes | np.ndarray, starts: np.ndarray, lengths: np.ndarray, first_id: int) -> np.ndarray:
    """``feature_id`` of each token ``buffer[starts[k] : starts[k] + lengths[k]]`` (UTF-8 bytes), as int64.

    ``first_id`` is ``features.FIRST_TOKEN_ID`` (ids below it are moved up by it, as ``feature_id`` does).

    >>> from stream_winnow.text.features import FIRST_TOKEN_ID, feature_id
    >>> data = "earn" + "crude"
    >>> ids = feature_ids(data.encode(), np.array([0, 4]), np.array([4, 5]), FIRST_TOKEN_ID)
    >>> ids.tolist() == [feature_id("earn"), feature_id("crude")]
    True
    """
    buf = np.frombuffer(buffer, dtype=np.uint8) if isinstance(buffer, bytes) else buffer
    return _feature_ids(
        buf, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lengths, dtype=np.int64),
        _IV, _SIGMA, _G, first_id,
    )  # fmt: skip
