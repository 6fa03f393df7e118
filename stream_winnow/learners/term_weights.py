"""Term weighting learned from the stream: document frequencies that add, and idf-weighted strengths.

With ``FeatureConfig(idf=True)`` a model counts, for every labelled document it learns, each
of its features once (table ``df``, one value per feature, stored beside the weights) and
the documents themselves (counter ``documents``). Both are sums, so workers add them in any
order with the rest of a batch's delta. A document is then weighed with the counts as they
are when it is scored or learned: each feature's strength (binary, count or sqrt, §4.3 of
Dagan, Karov & Roth) is multiplied by its smoothed idf,

    idf = ln((1 + N) / (1 + df)) + 1        (N documents counted, df of them with the feature)

and the document's strengths are scaled back to their total before weighting. The total is
what Winnow's threshold unit θ/d and length normalisation are about, so idf moves strength
from a document's common words to its rare ones without changing its length: d, θ and
``normalize`` mean what they meant without idf.

How a term's weight changes as its frequency grows: the idf depends on the *fraction*
df/N, so a term as common at document 100,000 as at document 1,000 keeps its weight
(df/N = 0.01: idf 5.51 at N = 1,000 and 5.60 at N = 100,000). A term that spreads, from 1 in
1,000 documents to 1 in 10 (N = 100,000), falls from 7.9 to 3.3, so it carries less than half
the share of each document's strength it had; a weight already learned for it still counts,
with that share behind it. Weights are never rescaled: only the strengths that multiply them.
Early in a stream idf is coarse: at N = 0 every term weighs 1 (plain strengths); at N = 10
a term seen once weighs 2.7 against 1.0 for one in every document.

A worker weighs a batch's documents with the counts read when the batch begins, and adds
the batch's counts with its delta; a learner in one process counts each document as it
learns it. Unlabelled documents are scored, not counted: scoring stays a read.

>>> idf(np.array([0.0, 10.0, 1000.0]), 1000.0).round(2).tolist()
[7.91, 5.51, 1.0]
"""

from __future__ import annotations

import numpy as np

from stream_winnow.stores.base import Bounds, CounterUpdate, RowUpdate, TableSpec, Update
from stream_winnow.text.features import FeatureBatch

__all__ = ["DF_TABLE", "DOCUMENTS_COUNTER", "df_spec", "frequency_updates", "idf", "weigh"]

#: The table of document frequencies: per feature, how many counted documents hold it.
DF_TABLE = "df"
#: The counter of documents counted (key ``"*"``).
DOCUMENTS_COUNTER = "documents"


def df_spec() -> TableSpec:
    """The document-frequency table: one count per feature, added to."""
    return TableSpec(DF_TABLE, 0.0, per_category=False, bounds=Bounds(0.0, 1e30), combine="add")


def idf(df: np.ndarray, documents: float) -> np.ndarray:
    """Smoothed inverse document frequency, ``ln((1 + N) / (1 + df)) + 1`` (1 for a term in every document).

    >>> idf(np.array([0.0, 5.0]), 0.0).tolist()  # nothing counted yet: plain strengths
    [1.0, 1.0]
    """
    df = np.minimum(np.asarray(df, dtype=np.float64), documents)
    return np.log((1.0 + documents) / (1.0 + df)) + 1.0


def weigh(batch: FeatureBatch, df: np.ndarray, documents: float) -> FeatureBatch:
    """``batch`` with each strength times its feature's idf, each document scaled back to its total strength.

    ``df`` holds one count per distinct id of the batch (``batch.distinct_ids()[0]``).

    >>> from stream_winnow.text.features import Featurizer, FeatureConfig
    >>> batch = Featurizer(FeatureConfig(strength="count")).transform_many([["rare", "said", "said"]])
    >>> unique, _ = batch.distinct_ids()
    >>> counts = np.array([1.0 if i == batch.ids[0] else 99.0 for i in unique.tolist()])
    >>> weighed = weigh(batch, counts, 100.0)
    >>> weighed.strengths.round(3).tolist(), float(weighed.strengths.sum())
    ([2.127, 0.873], 3.0)
    """
    if not len(batch.ids):
        return batch
    _, inverse = batch.distinct_ids()
    weighted = batch.strengths * idf(df, documents)[inverse]
    lengths = np.diff(batch.indptr)
    documents_of = np.repeat(np.arange(len(batch)), lengths)
    before = np.bincount(documents_of, weights=batch.strengths, minlength=len(batch))
    after = np.bincount(documents_of, weights=weighted, minlength=len(batch))
    scale = np.divide(before, after, out=np.ones_like(before), where=after > 0)
    return FeatureBatch(batch.indptr, batch.ids, weighted * scale[documents_of], batch.distinct)


def frequency_updates(feature_ids: np.ndarray, counts: np.ndarray, documents: int) -> list[Update]:
    """The updates counting ``documents`` documents whose features ``feature_ids`` (unique) each appear in
    ``counts`` of them. They change the model, so they move its version like any update."""
    add = np.asarray(counts, dtype=np.float64)[:, None]
    return [RowUpdate(DF_TABLE, np.asarray(feature_ids, dtype=np.int64), np.zeros(1, dtype=np.int64), add=add),
            CounterUpdate(DOCUMENTS_COUNTER, {"*": float(documents)})]  # fmt: skip
