"""Readers and writers for document collections.

- ``labelled_jsonl``: the project's own file format, one JSON document per line.
- ``reuters21578``: the Reuters-21578 SGML distribution and its ModApte split.
- ``synthetic``: a small seeded synthetic news stream, for demos and tests.
"""

from stream_winnow.datasets.labelled_jsonl import (
    FileDocument,
    read_jsonl_documents,
    read_labelled_jsonl,
    write_labelled_jsonl,
)
from stream_winnow.datasets.reuters21578 import ModApteSplit, read_modapte, read_single_label, write_modapte
from stream_winnow.datasets.synthetic import iter_synthetic, synthetic_stream

__all__ = [
    "FileDocument",
    "ModApteSplit",
    "iter_synthetic",
    "read_jsonl_documents",
    "read_labelled_jsonl",
    "read_modapte",
    "read_single_label",
    "synthetic_stream",
    "write_labelled_jsonl",
    "write_modapte",
]
