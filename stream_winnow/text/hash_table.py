"""An open-addressing hash table from 64-bit keys to int64 values, probed in compiled code.

A batch of 1,000 Reuters documents has about 12,000 distinct features, each looked up
twice (token hash -> feature, feature id -> cached row); through dicts that was a fifth of
a worker's scoring profile, and probing this table for all of them at once took scoring
from 22,470 to 29,807 documents/s in a one-off run. Keys must be well mixed in their low bits (token hashes, BLAKE2b-derived
feature ids); key 0 marks an empty slot, so a key 0 always reads as absent.

>>> table = HashTable()
>>> table.insert(np.array([7, 9], dtype=np.uint64), np.array([1, 2]))
>>> table.lookup(np.array([9, 7, 8], dtype=np.uint64))
(array([ 2,  1, -1]), 1)
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["HashTable"]


@njit(cache=True)
def _probe(keys: np.ndarray, hashes: np.ndarray, values: np.ndarray, out: np.ndarray) -> int:
    """``out[k]`` = the value of ``hashes[k]`` in the table, -1 if absent; returns how many were absent.

    The table is open addressing with linear probing; key 0 marks an empty slot (a token
    whose hash is 0 is looked up through the Python dict instead).
    """
    mask = np.uint64(keys.shape[0] - 1)
    missing = 0
    for k in range(hashes.shape[0]):
        h = hashes[k]
        if h == 0:
            out[k] = -1
            missing += 1
            continue
        slot = h & mask
        while True:
            key = keys[slot]
            if key == h:
                out[k] = values[slot]
                break
            if key == 0:
                out[k] = -1
                missing += 1
                break
            slot = (slot + np.uint64(1)) & mask
    return missing


@njit(cache=True)
def _insert(keys: np.ndarray, values: np.ndarray, hashes: np.ndarray, indices: np.ndarray) -> None:
    mask = np.uint64(keys.shape[0] - 1)
    for k in range(hashes.shape[0]):
        h = hashes[k]
        if h == 0:
            continue
        slot = h & mask
        while keys[slot] != 0 and keys[slot] != h:
            slot = (slot + np.uint64(1)) & mask
        keys[slot] = h
        values[slot] = indices[k]


class HashTable:
    """Token hash -> featurizer-local index, open addressing, kept under half full."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        size = 1 << max(int(capacity - 1).bit_length(), 4)
        self.keys = np.zeros(size, dtype=np.uint64)
        self.values = np.zeros(size, dtype=np.int64)
        self.size = 0

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.empty(hashes.shape[0], dtype=np.int64)
        missing = _probe(self.keys, hashes, self.values, out)
        return out, missing

    def insert(self, hashes: np.ndarray, indices: np.ndarray) -> None:
        if 2 * (self.size + len(hashes)) > len(self.keys):
            used = self.keys != 0
            old_keys, old_values = self.keys[used], self.values[used]
            size = len(self.keys)
            while 2 * (self.size + len(hashes)) > size:
                size *= 2
            self.keys = np.zeros(size, dtype=np.uint64)
            self.values = np.zeros(size, dtype=np.int64)
            _insert(self.keys, self.values, old_keys, old_values)
        _insert(self.keys, self.values, hashes, indices)
        self.size += len(hashes)
