"""Domain models (Gliozzo & Strapparava, *Domain Kernels*, 2005): LSA fitted on unlabelled documents.

A domain model maps a document's words to ``k`` domains (about 400). It is fitted
without labels: the term-by-document matrix of the corpus (each entry the term's
strength in the document times its idf, each document of unit length) is
factorised by a truncated SVD ``T ≈ V S Uᵀ``; the domain matrix is
``D = I^N V sqrt(S)`` (each term's row scaled to unit length), and a document's
domain vector is ``t' = t I^IDF D``, scaled to unit length (the paper's eq. 1
and 2). Similar documents share domains even when they share no word, which is
why a learner needs about a tenth of the labels to match bag of words.

The SVD is scipy's ``svds`` (ARPACK): 400 domains of the 9,603 ModApte training
documents (16,891 words with a document frequency of at least 2) take about 15 s
here. A randomized SVD (numpy, 4 power iterations) took about as long, its smallest
singular values up to 6.7 % low, and ModApte's micro-F1 moved by less than 0.003.

Learners see a domain vector as ordinary features with positive strengths: the
sign of each domain is its own feature (``domain j +`` with strength ``x_j``
when ``x_j > 0``, ``domain j -`` with ``-x_j`` otherwise), Littlestone's split,
so the Winnow rules, whose updates assume active features push a score up, learn
signed inputs unchanged, and the Redis store keeps domain weights in rows like
any word's. The feature ids carry the model's version, so weights learned with
one domain model are never read with another.

>>> docs = [["oil", "crude", "barrel"], ["crude", "opec", "oil"], ["wheat", "grain"], ["grain", "corn", "wheat"]]
>>> model = fit_domain_model(docs * 3, dimensions=2, seed=0)
>>> model.dimensions, len(model.term_ids)
(2, 7)
>>> v = model.vectors_of([[feature_id("barrel")], [feature_id("opec")], [feature_id("corn")]], [[1.0]] * 3)
>>> round(float(v[0] @ v[1]), 3), round(float(abs(v[0] @ v[2])), 3)  # barrel ~ opec (no shared word); ~ corn not
(1.0, 0.0)
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import numpy as np
from numba import njit
from scipy import sparse
from scipy.sparse.linalg import svds

from stream_winnow.errors import ConfigError, DataError
from stream_winnow.text.features import (
    STRENGTHS,
    FeatureBatch,
    FeatureConfig,
    Featurizer,
    Strength,
    feature_id,
    strengths_of,
)

FeatureSet = Literal["words", "domain", "both"]
FEATURE_SETS: tuple[str, ...] = get_args(FeatureSet)

DEFAULT_DIMENSIONS = 400
# Terms seen in one document only carry no co-occurrence for the SVD to use; dropping them
# takes out 42 % of a news corpus's vocabulary (ModApte training: 29,082 → 16,891 words).
DEFAULT_MIN_DOCUMENT_FREQUENCY = 2
# Domain features' names join parts with a character no tokenizer emits.
_JOIN = "\x1e"
_FORMAT = 1


@dataclass(frozen=True, eq=False)
class DomainModel:
    """A fitted domain model: its vocabulary (feature ids), their idf, and the unit-row domain matrix.

    ``version`` is a digest of the contents (16 hex digits): two processes that
    load the same model agree on it, and it names the model's features.
    """

    term_ids: np.ndarray  # int64, sorted, unique
    idf: np.ndarray  # float64, one per term
    matrix: np.ndarray  # float32, terms × dimensions, rows of unit length
    strength: Strength = "sqrt"
    documents: int = 0  # how many documents it was fitted on
    version: str = field(init=False)

    def __post_init__(self) -> None:
        # Rows read whole by the mapping: C order (ARPACK's vectors come in Fortran order, 4-6x slower to map).
        object.__setattr__(self, "matrix", np.ascontiguousarray(self.matrix, dtype=np.float32))
        if self.strength not in STRENGTHS:
            raise ConfigError(f"strength must be one of {', '.join(STRENGTHS)}; got {self.strength!r}")
        if self.matrix.ndim != 2 or self.matrix.shape[0] != len(self.term_ids) or len(self.idf) != len(self.term_ids):
            raise DataError(
                f"a domain model needs one idf and one matrix row per term; got {len(self.term_ids)} terms, "
                f"{len(self.idf)} idf values and a {self.matrix.shape} matrix"
            )
        digest = hashlib.blake2b(digest_size=8)
        for part in (self.term_ids, self.idf, self.matrix):
            digest.update(np.ascontiguousarray(part).tobytes())
        digest.update(self.strength.encode())
        object.__setattr__(self, "version", digest.hexdigest())

    @property
    def dimensions(self) -> int:
        return int(self.matrix.shape[1])

    def feature_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids of each domain's positive and negative feature (two int64 arrays of ``dimensions``)."""
        return tuple(  # type: ignore[return-value]
            np.array([feature_id(_JOIN.join(("domain", self.version, str(j), sign))) for j in range(self.dimensions)],
                     dtype=np.int64)
            for sign in "+-"
        )  # fmt: skip

    def term_weights_of(
        self, ids: np.ndarray, counts: np.ndarray, distinct: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per entry, its term's row in the domain matrix (-1: not in the vocabulary) and weight (strength × idf).

        ``distinct`` (the ids' distinct values and each entry's index among them, as
        ``FeatureBatch.distinct_ids``) lets the vocabulary be searched once per distinct id.
        """
        unique, inverse = distinct if distinct is not None else np.unique(ids, return_inverse=True)
        if len(self.term_ids):
            found = np.minimum(np.searchsorted(self.term_ids, unique), len(self.term_ids) - 1)
            position = np.where(self.term_ids[found] == unique, found, -1)[inverse].astype(np.int64)
        else:
            position = np.full(len(ids), -1, dtype=np.int64)
        weights = strengths_of(counts, self.strength) * np.where(position >= 0, self.idf[np.maximum(position, 0)], 0.0)
        return position, weights.astype(np.float32)

    def vectors(self, indptr: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Domain vectors (documents × dimensions, float64, unit length; zero for a document without a known term)
        of documents given CSR-style as feature ids and token counts."""
        position, weights = self.term_weights_of(ids, counts)
        return _map_documents(np.asarray(indptr, np.int64), position, weights, self.matrix)

    def vectors_of(self, id_lists: Sequence[Sequence[int]], count_lists: Sequence[Sequence[float]]) -> np.ndarray:
        """``vectors`` of documents given as lists (for tests and examples)."""
        indptr = np.zeros(len(id_lists) + 1, dtype=np.int64)
        np.cumsum([len(i) for i in id_lists], out=indptr[1:])
        flat_ids = np.array([i for ids in id_lists for i in ids], dtype=np.int64)
        flat_counts = np.array([c for counts in count_lists for c in counts], dtype=np.float64)
        return self.vectors(indptr, flat_ids, flat_counts)

    def to_bytes(self) -> bytes:
        """The model as an ``.npz`` archive (numpy arrays only; loading never unpickles)."""
        buffer = io.BytesIO()
        np.savez(buffer, format=np.array(_FORMAT), term_ids=self.term_ids, idf=self.idf, matrix=self.matrix,
                 strength=np.array(self.strength), documents=np.array(self.documents))  # fmt: skip
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "domain model") -> DomainModel:
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                if int(archive["format"]) != _FORMAT:
                    raise DataError(f"{where}: format {int(archive['format'])} is not {_FORMAT}")
                return cls(
                    np.asarray(archive["term_ids"], dtype=np.int64),
                    np.asarray(archive["idf"], dtype=np.float64),
                    np.asarray(archive["matrix"], dtype=np.float32),
                    str(archive["strength"]),  # type: ignore[arg-type]
                    int(archive["documents"]),
                )
        except (OSError, KeyError, ValueError) as error:
            if isinstance(error, DataError):
                raise
            raise DataError(f"{where} is not a domain model (.npz from `stream-winnow domain fit`): {error}") from error

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path) -> DomainModel:
        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise ConfigError(f"cannot read the domain model {path}: {error.strerror or error}") from error
        return cls.from_bytes(data, str(path))


def fit_domain_model(
    token_lists: Sequence[Sequence[str]],
    dimensions: int = DEFAULT_DIMENSIONS,
    *,
    min_document_frequency: int = DEFAULT_MIN_DOCUMENT_FREQUENCY,
    strength: Strength = "sqrt",
    seed: int = 0,
) -> DomainModel:
    """Fit a domain model of ``dimensions`` domains on unlabelled documents (lists of tokens).

    ``seed`` fixes ARPACK's random start vector, so the same documents give the same model (and version).
    Raises ``ConfigError`` if ``dimensions`` is not below both the number of
    documents and of terms kept (a domain per document would just be the corpus).
    """
    if dimensions < 1:
        raise ConfigError(f"dimensions must be at least 1; got {dimensions}")
    if min_document_frequency < 1:
        raise ConfigError(f"min_document_frequency must be at least 1; got {min_document_frequency}")
    batch: FeatureBatch = Featurizer(FeatureConfig(strength="count")).transform_many(token_lists)
    n = len(batch)
    vocabulary, column = np.unique(batch.ids, return_inverse=True)
    df = np.bincount(column, minlength=len(vocabulary))
    kept = df >= min_document_frequency
    if dimensions >= min(n, int(kept.sum())):
        raise ConfigError(
            f"{dimensions} dimensions need more than {dimensions} documents and terms; got {n} documents and "
            f"{int(kept.sum())} terms in at least {min_document_frequency} of them"
        )
    renumber = np.cumsum(kept) - 1
    entries = kept[column]
    idf = np.log((1 + n) / (1 + df[kept])) + 1.0  # smoothed, as scikit-learn's TfidfTransformer
    documents = np.repeat(np.arange(n), np.diff(batch.indptr))[entries]
    terms = renumber[column[entries]]
    weights = strengths_of(batch.strengths[entries], strength) * idf[terms]
    matrix = sparse.csr_matrix((weights, (terms, documents)), shape=(int(kept.sum()), n))
    lengths = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=0))).ravel()
    lengths[lengths == 0] = 1.0
    matrix = matrix @ sparse.diags(1.0 / lengths)
    left, singular, _ = svds(matrix.tocsr(), k=dimensions, random_state=seed)
    order = np.argsort(singular)[::-1]  # svds gives them smallest first
    left, singular = left[:, order], singular[order]
    domain = left * np.sqrt(singular)
    norms = np.linalg.norm(domain, axis=1)
    norms[norms == 0] = 1.0
    domain /= norms[:, None]
    return DomainModel(vocabulary[kept], idf, domain.astype(np.float32), strength, n)


class DomainFeatures:
    """A learner's features from a document's words: the words, their domains, or both.

    ``extend`` takes a word batch and its token counts and returns the batch the
    learner sees. Domain strengths are the unit domain vector's entries, as
    they are: scaled by 0.3 or by 2 to 3 against the words, ModApte's micro-F1
    moved by at most 0.002 (Balanced Winnow, wide threshold, all labels).
    """

    def __init__(self, model: DomainModel, feature_set: FeatureSet = "both") -> None:
        if feature_set not in ("domain", "both"):
            raise ConfigError(f"domain features are 'domain' or 'both' (words alone need none); got {feature_set!r}")
        self.model = model
        self.feature_set = feature_set
        self._positive, self._negative = model.feature_ids()

    def names(self) -> dict[int, str]:
        """Each domain feature's id and a readable name, ``domain 17+`` or ``domain 17-`` (for ``explain``)."""
        return {int(fid): f"domain {j}{sign}" for sign, ids in zip("+-", (self._positive, self._negative), strict=True)
                for j, fid in enumerate(ids)}  # fmt: skip

    def extend(self, words: FeatureBatch, counts: np.ndarray) -> DomainBatch:
        """``words`` with the domain features of each document after its words (or instead of them)."""
        keep_words = self.feature_set == "both"
        distinct = words.distinct_ids()
        position, weights = self.model.term_weights_of(words.ids, counts, distinct)
        word_unique, word_position = distinct if keep_words else (_NO_IDS, _NO_IDS)
        domain_ids = np.concatenate([self._positive, self._negative])
        split, indptr, ids, strengths, entry_position, used = _domain_batch(
            words.indptr, words.ids, words.strengths, word_position, len(word_unique), position, weights,
            self.model.matrix, domain_ids, keep_words,
        )  # fmt: skip
        distinct = (np.concatenate([word_unique, domain_ids[used]]), entry_position)
        return DomainBatch(indptr, ids, strengths, distinct, words if keep_words else None, split, domain_ids)


_NO_IDS = np.zeros(0, dtype=np.int64)


@njit(cache=True, nogil=True)
def _map_one(
    i: int, indptr: np.ndarray, position: np.ndarray, weights: np.ndarray, matrix: np.ndarray, row: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Document ``i``'s domain vector into ``row`` (float32, ``dimensions``): the sum of its known terms'
    weights times their rows of ``matrix``, scaled to unit length (left zero without a known term).

    Rows are read whole (a 400-wide float32 row is 50 SIMD steps): about 4.5 µs a Reuters document,
    where scipy's sparse product took 10.
    """
    k = matrix.shape[1]
    row[:] = 0.0
    for e in range(indptr[i], indptr[i + 1]):
        p = position[e]
        if p >= 0:
            w = weights[e]
            for j in range(k):
                row[j] += w * matrix[p, j]
    norm = 0.0
    for j in range(k):
        norm += float(row[j]) * float(row[j])
    if norm > 0.0:
        scale = np.float32(1.0 / np.sqrt(norm))
        for j in range(k):
            row[j] *= scale


@njit(cache=True, nogil=True)
def _map_documents(
    indptr: np.ndarray, position: np.ndarray, weights: np.ndarray, matrix: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """Every document's domain vector (``_map_one``), as float64 (documents × dimensions)."""
    n, k = indptr.shape[0] - 1, matrix.shape[1]
    out = np.zeros((n, k), dtype=np.float64)
    row = np.zeros(k, dtype=np.float32)
    for i in range(n):
        _map_one(i, indptr, position, weights, matrix, row)
        for j in range(k):
            out[i, j] = row[j]
    return out


@dataclass(frozen=True, slots=True)
class DomainBatch(FeatureBatch):
    """A ``FeatureBatch`` with its domain features, and what scores them as one dense product.

    Its entries are every feature (words then domains), as any learner and store reads them;
    ``words`` (None for ``domain`` alone) and ``split`` (float32, documents × 2 dimensions: each
    domain's positive part, then each one's negative part; the strengths of ``domain_ids``) let a
    linear rule score the domains with one BLAS product instead of 400 entries a document
    (``MistakeDriven.margins_many``). ``domain_ids`` are the positive features' ids, then the negative ones'.
    """

    words: FeatureBatch | None = None
    split: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    domain_ids: np.ndarray = field(default_factory=lambda: _NO_IDS)


@njit(cache=True, nogil=True)
def _domain_batch(  # noqa: PLR0913 - a compiled kernel takes flat arrays
    word_indptr: np.ndarray,
    word_ids: np.ndarray,
    word_strengths: np.ndarray,
    word_position: np.ndarray,
    n_word_distinct: int,
    term_position: np.ndarray,
    term_weight: np.ndarray,
    matrix: np.ndarray,
    domain_ids: np.ndarray,
    keep_words: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """One pass per document: its domain vector (``_map_one``) as ``split`` (float32, documents × 2 dimensions:
    ``max(x, 0)`` then ``max(-x, 0)``, what scoring multiplies), and its entries: its words (when
    ``keep_words``), then one feature per non-zero domain, the positive feature's id with strength ``x``
    for ``x > 0``, the negative one's with ``-x`` otherwise; each entry's position among the batch's
    distinct ids (the words', then the domain features used, in domain order)."""
    n, k = word_indptr.shape[0] - 1, matrix.shape[1]
    split = np.zeros((n, 2 * k), dtype=np.float32)
    used = np.zeros(2 * k, dtype=np.bool_)
    capacity = n * k + (word_ids.shape[0] if keep_words else 0)
    indptr = np.zeros(n + 1, dtype=np.int64)
    ids = np.empty(capacity, dtype=np.int64)
    strengths = np.empty(capacity, dtype=np.float64)
    position = np.empty(capacity, dtype=np.int64)  # into the domain features first; renumbered below
    row = np.zeros(k, dtype=np.float32)
    e = 0
    for i in range(n):
        if keep_words:
            for w in range(word_indptr[i], word_indptr[i + 1]):
                ids[e], strengths[e], position[e] = word_ids[w], word_strengths[w], word_position[w]
                e += 1
        _map_one(i, word_indptr, term_position, term_weight, matrix, row)
        for j in range(k):
            v = row[j]
            if v != 0.0:
                d = j if v > 0.0 else k + j
                split[i, d] = abs(v)
                used[d] = True
                ids[e], strengths[e], position[e] = domain_ids[d], abs(v), -1 - d
                e += 1
        indptr[i + 1] = e
    slot = np.cumsum(used) - 1 + n_word_distinct
    for x in range(e):
        if position[x] < 0:
            position[x] = slot[-1 - position[x]]
    return split, indptr, ids[:e], strengths[:e], position[:e], used
