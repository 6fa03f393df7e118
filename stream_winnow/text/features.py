"""From tokens to features: stable ids, strengths and length normalisation.

A feature id is the first 8 bytes of the token's BLAKE2b digest, masked to 63
bits, so the same token maps to the same id in every process and on every
machine (Python's ``hash()`` is randomised per process and would split one model
across workers). Ids below ``FIRST_TOKEN_ID`` are reserved for per-model
statistics rows (Naive Bayes counts); a token never hashes there.

Strength follows Dagan, Karov & Roth (1997, §4.3): a token occurring ``n`` times
in a document has strength ``1`` (binary), ``n`` (count) or ``sqrt(n)`` (sqrt,
their best and our default).

>>> f = Featurizer(FeatureConfig(strength="count"))
>>> v = f.transform(["information", "retrieval", "retrieval"])
>>> sorted(v.strengths.tolist())
[1.0, 2.0]
>>> feature_id("earn") == feature_id("earn")
True
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np
from numba import njit

from stream_winnow.errors import ConfigError
from stream_winnow.text.feature_hash import feature_ids
from stream_winnow.text.hash_table import HashTable
from stream_winnow.wire.fast_documents import ParsedDocuments

if TYPE_CHECKING:
    from stream_winnow.text.domain import DomainFeatures

Strength = Literal["binary", "count", "sqrt"]
STRENGTHS: tuple[str, ...] = get_args(Strength)

# Ids 0..FIRST_TOKEN_ID-1 name statistics rows, never tokens.
FIRST_TOKEN_ID = 1 << 16
_ID_MASK = (1 << 63) - 1
# Bigram features are the two tokens joined by a character no tokenizer emits.
_BIGRAM_JOIN = "\x1f"


def strengths_of(counts: np.ndarray, strength: Strength) -> np.ndarray:
    """Feature strengths (float64) from token counts: 1, ``n`` or ``sqrt(n)`` (§4.3).

    >>> strengths_of(np.array([1.0, 4.0]), "sqrt").tolist()
    [1.0, 2.0]
    """
    if strength == "binary":
        return np.ones(len(counts))
    counts = np.asarray(counts, dtype=np.float64)
    return np.sqrt(counts) if strength == "sqrt" else counts


def feature_id(token: str) -> int:
    """The stable 63-bit id of ``token``; ids of real tokens are ≥ ``FIRST_TOKEN_ID``."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little") & _ID_MASK
    return value if value >= FIRST_TOKEN_ID else value + FIRST_TOKEN_ID


@dataclass(frozen=True, slots=True)
class FeatureConfig:
    """How a document's tokens become feature strengths.

    ``normalize`` divides strengths by their sum, so every document has total
    strength 1 (required by Positive Winnow, §4.1; optional for the others).
    ``bigrams`` adds one feature per adjacent token pair. ``idf`` weighs strengths by the
    inverse document frequencies the model counts as it learns (``learners.term_weights``;
    mistake-driven rules; with a domain model it does nothing, the domain model weighs words).
    """

    strength: Strength = "sqrt"
    normalize: bool = False
    bigrams: bool = False
    idf: bool = False

    def __post_init__(self) -> None:
        if self.strength not in STRENGTHS:
            raise ConfigError(f"strength must be one of {', '.join(STRENGTHS)}; got {self.strength!r}")


@dataclass(frozen=True, slots=True)
class FeatureVector:
    """A document's active features: unique ids and their strengths (same length)."""

    ids: np.ndarray  # int64, unique
    strengths: np.ndarray  # float64, > 0

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def total_strength(self) -> float:
        return float(self.strengths.sum())


@dataclass(frozen=True, slots=True)
class FeatureBatch:
    """Many documents' features, CSR-style: document i owns ``ids[indptr[i]:indptr[i+1]]`` (sorted, unique)."""

    indptr: np.ndarray  # int64, n_documents + 1
    ids: np.ndarray  # int64
    strengths: np.ndarray  # float64
    # The batch's distinct ids and, per entry of ``ids``, its position among them (as np.unique's
    # return_inverse gives, without the sort); None means "compute them when needed".
    distinct: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @staticmethod
    def of_vector(vector: FeatureVector) -> FeatureBatch:
        """A batch of one document (its ids are unique already: they are the batch's distinct ids)."""
        indptr = np.array([0, len(vector)], dtype=np.int64)
        return FeatureBatch(indptr, vector.ids, vector.strengths, (vector.ids, np.arange(len(vector))))

    def distinct_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct ids, inverse): ``distinct_ids()[0][inverse] == ids``."""
        if self.distinct is not None:
            return self.distinct
        unique, inverse = np.unique(self.ids, return_inverse=True)
        return unique, inverse

    def vector(self, i: int) -> FeatureVector:
        start, end = self.indptr[i], self.indptr[i + 1]
        return FeatureVector(self.ids[start:end], self.strengths[start:end])

    def vectors(self) -> list[FeatureVector]:
        return [self.vector(i) for i in range(len(self))]


def gather_rows(parts: Sequence[FeatureBatch], picks: Sequence[tuple[int, int]]) -> FeatureBatch:
    """One batch of the rows ``picks`` = [(part, row in that part), ...] of ``parts``, in that order.

    >>> f = Featurizer(FeatureConfig(strength="count"))
    >>> a, b = f.transform_many([["x"], ["y", "y"]]), f.transform_many([["z"]])
    >>> gather_rows([a, b], [(1, 0), (0, 1)]).strengths.tolist()
    [1.0, 2.0]
    """
    row_base = np.cumsum([0] + [len(p) for p in parts])
    entry_base = np.cumsum([0] + [len(p.ids) for p in parts])
    starts = np.concatenate([p.indptr[:-1] + entry_base[i] for i, p in enumerate(parts)] + [np.zeros(0, np.int64)])
    ends = np.concatenate([p.indptr[1:] + entry_base[i] for i, p in enumerate(parts)] + [np.zeros(0, np.int64)])
    rows = np.array([row_base[part] + row for part, row in picks], dtype=np.int64)
    lengths = (ends[rows] - starts[rows]).astype(np.int64)
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    index = np.repeat(starts[rows] - indptr[:-1], lengths) + np.arange(int(indptr[-1]))
    ids = np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, np.int64)
    strengths = np.concatenate([p.strengths for p in parts]) if parts else np.zeros(0)
    return FeatureBatch(indptr, ids[index], strengths[index])


@njit(cache=True, nogil=True)
def _count_per_document(
    indptr: np.ndarray, local: np.ndarray, slot: np.ndarray, batch_slot: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per document its distinct local token indices and their counts, and the batch's distinct
    indices with each entry's position among them, in one O(tokens) pass.

    ``slot`` and ``batch_slot`` are scratch of at least the memo's size, in any state: an entry
    is trusted only where it points back at its token (a sparse set), so nothing of the size of
    the memo is filled or scanned per batch.
    """
    n = indptr.shape[0] - 1
    m = local.shape[0]
    out_indptr = np.zeros(n + 1, dtype=np.int64)
    out_local = np.empty(m, dtype=np.int64)
    out_counts = np.empty(m, dtype=np.float64)
    used = np.empty(m, dtype=np.int64)  # the batch's distinct local indices, first seen first
    position = np.empty(m, dtype=np.int64)  # per entry: its index into used
    k = 0
    u = 0
    for i in range(n):
        begin = k
        for j in range(indptr[i], indptr[i + 1]):
            t = local[j]
            p = slot[t]
            if begin <= p < k and out_local[p] == t:
                out_counts[p] += 1.0
                continue
            slot[t] = k
            out_local[k] = t
            out_counts[k] = 1.0
            q = batch_slot[t]
            if not (0 <= q < u and used[q] == t):
                q = u
                batch_slot[t] = u
                used[u] = t
                u += 1
            position[k] = q
            k += 1
        out_indptr[i + 1] = k
    return out_indptr, out_local[:k], out_counts[:k], used[:u], position[:k]


class Featurizer:
    """Turns token lists into ``FeatureVector`` s, memoising token ids.

    The memo makes hashing cost one dict lookup per token after a token's first
    sight; past ``max_cached_tokens`` distinct tokens (about 150 bytes each) it
    starts afresh, so a long-running worker's memory stays bounded.
    """

    def __init__(
        self,
        config: FeatureConfig | None = None,
        max_cached_tokens: int = 2_000_000,
        domain: DomainFeatures | None = None,
    ) -> None:
        self.config = config or FeatureConfig()
        self.domain = domain  # when set, each batch also gets (or only gets) its documents' domain features
        self.max_cached_tokens = max_cached_tokens
        self._local: dict[str, int] = {}  # token -> index into _ids
        self._ids: list[int] = []
        self._table = HashTable()  # token hash (fast_documents) -> index into _ids
        # _ids as an array (its first _arrayed entries), and two scratch arrays for
        # _count_per_document, all grown by doubling: a batch copies only the ids new since the
        # last one. Converting the whole list each batch cost 18 ms at 1,000,000 tokens.
        self._arrayed = 0
        self._id_array = np.zeros(0, dtype=np.int64)
        self._slot = np.zeros(0, dtype=np.int64)
        self._batch_slot = np.zeros(0, dtype=np.int64)

    def _forget_if_full(self) -> None:
        if len(self._ids) > self.max_cached_tokens:
            self._local, self._ids = {}, []
            self._arrayed = 0  # the arrays keep their size; their contents are never trusted blindly
            self._table = HashTable()

    def _ids_as_array(self) -> np.ndarray:
        """``_ids`` as an int64 array (a view), copying only the ids added since the last call.

        The scratch of ``_count_per_document`` grows with it, so it always covers every local index.
        """
        n = len(self._ids)
        if n > len(self._id_array):
            size = max(n, 2 * len(self._id_array), 1024)
            grown = np.empty(size, dtype=np.int64)
            grown[: self._arrayed] = self._id_array[: self._arrayed]
            self._id_array = grown
            self._slot, self._batch_slot = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
        if n > self._arrayed:
            self._id_array[self._arrayed : n] = self._ids[self._arrayed : n]
            self._arrayed = n
        return self._id_array[:n]

    def _index(self, token: str) -> int:
        index = self._local.get(token)
        if index is None:
            index = len(self._ids)
            self._local[token] = index
            self._ids.append(feature_id(token))
        return index

    def token_id(self, token: str) -> int:
        return self._ids[self._index(token)]

    def _expand(self, token_lists: Sequence[Sequence[str]]) -> Sequence[Sequence[str]]:
        if not self.config.bigrams:
            return token_lists
        return [
            [*tokens, *(a + _BIGRAM_JOIN + b for a, b in zip(tokens, tokens[1:], strict=False))]
            for tokens in token_lists
        ]

    def transform(self, tokens: Sequence[str]) -> FeatureVector:
        """One document's features (the same as ``transform_many([tokens]).vector(0)``)."""
        if self.domain is not None:
            return self.transform_many([tokens]).vector(0)
        config = self.config
        tokens = self._expand([tokens])[0]
        counts = Counter(tokens)
        index, ids = self._index, self._ids
        feature_ids = np.array([ids[index(t)] for t in counts], dtype=np.int64)
        strengths = strengths_of(np.array(list(counts.values()), dtype=np.float64), config.strength)
        if config.normalize and len(strengths):
            strengths /= strengths.sum()
        return FeatureVector(feature_ids, strengths)

    def transform_many(self, token_lists: Sequence[Sequence[str]]) -> FeatureBatch:
        """The features of many documents: one dict lookup per token, the rest in compiled loops.

        Features appear in order of first occurrence in each document.
        """
        token_lists = self._expand(token_lists)
        n = len(token_lists)
        self._forget_if_full()
        flat = list(chain.from_iterable(token_lists))
        for token in set(flat).difference(self._local):
            self._index(token)
        local = np.array(list(map(self._local.__getitem__, flat)), dtype=np.int64)
        token_indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, token_lists), dtype=np.int64, count=n), out=token_indptr[1:])
        return self._batch(token_indptr, local)

    @property
    def reads_hashes(self) -> bool:
        """Whether ``transform_hashed`` applies (bigrams need the token texts)."""
        return not self.config.bigrams

    def transform_hashed(self, parsed: ParsedDocuments, select: np.ndarray | None = None) -> FeatureBatch:
        """The features of ``parsed``'s messages with tokens (or those of them ``select`` picks), in message
        order; the same as ``transform_many`` of their tokens.

        A token hash seen before costs one probe of a compiled table; the batch's new ones get
        the ids ``transform_many`` would give them from one compiled pass over their bytes
        (``feature_hash``), never decoded to text: the Reuters stream's 31,060 distinct tokens,
        all new to a worker that just started, cost 74-99 ms over its first 10,789 documents
        instead of 204-236 (batches of 2,000; warm, 25-30 ms).
        """
        if not self.reads_hashes:
            raise ConfigError("transform_hashed cannot make bigram features; use transform_many")
        self._forget_if_full()
        chosen = parsed.has_tokens if select is None else select & parsed.has_tokens
        counts = np.diff(parsed.token_indptr)
        # Hash k is token k of the batch unless documents are left out; then token_at says which.
        # (An arange of every token, made for each batch, was 3.5 % of scoring: 2 MB at 2,000 documents.)
        hashes, token_at = parsed.token_hash, None
        if not chosen.all():
            token_at = np.flatnonzero(np.repeat(chosen, counts))
            hashes = hashes[token_at]
        local, missing = self._table.lookup(hashes)
        if missing:
            # New tokens: their ids from one compiled pass over their bytes, no text decoded.
            # Numbered in order of first sight, as one by one: a batch's common tokens then share
            # the memo's first entries (numbered by hash instead, warm batches ran 50 % slower).
            at = np.flatnonzero(local < 0)
            fresh, first, inverse = np.unique(hashes[at], return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            tokens = at[first[order]] if token_at is None else token_at[at[first[order]]]
            ids = feature_ids(parsed.buffer, parsed.token_start[tokens], parsed.token_bytes[tokens], FIRST_TOKEN_ID)
            indices = np.arange(len(self._ids), len(self._ids) + len(fresh), dtype=np.int64)
            self._ids.extend(ids.tolist())
            local[at] = indices[rank[inverse.reshape(-1)]]
            self._table.insert(fresh[order], indices)
        token_indptr = np.zeros(int(chosen.sum()) + 1, dtype=np.int64)
        np.cumsum(counts[chosen], out=token_indptr[1:])
        return self._batch(token_indptr, local)

    def _batch(self, token_indptr: np.ndarray, local: np.ndarray) -> FeatureBatch:
        """Counts, strengths and the batch's distinct ids from each token's index into ``_ids``."""
        config = self.config
        n = len(token_indptr) - 1
        id_array = self._ids_as_array()
        # The distinct ids of each document and of the whole batch: O(entries), no sort, nothing
        # of the memo's size (a zeroed array of it per batch cost 2.5 ms at 1,000,000 tokens).
        indptr, distinct, counts, used, position = _count_per_document(
            token_indptr, local, self._slot, self._batch_slot
        )
        ids = id_array[distinct]
        batch_distinct = (id_array[used], position)
        strengths = strengths_of(counts, config.strength)
        if config.normalize and len(ids):
            documents = np.repeat(np.arange(n), np.diff(indptr))
            totals = np.bincount(documents, weights=strengths, minlength=n)
            strengths = strengths / totals[documents]
        words = FeatureBatch(indptr, ids, strengths, batch_distinct)
        return words if self.domain is None else self.domain.extend(words, counts)
