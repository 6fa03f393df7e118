"""Reuters-21578 (Distribution 1.0) and its ModApte split.

Reads the 22 SGML files ``reut2-000.sgm`` ... ``reut2-021.sgm`` straight from
the ``.tar.gz`` archive (no extraction) or from a folder holding them, directly
or in its ``reuters21578/`` subfolder.

The ModApte split, as counted on this distribution:

- a document is in the split when ``TOPICS="YES"``; ``LEWISSPLIT="TRAIN"``
  puts it in training, ``LEWISSPLIT="TEST"`` in test (``NOT-USED`` is dropped);
- the categories in use are those with at least one training and one test
  document (90 of them), or the ``top`` most frequent of those by training
  document count (``top=10``: earn, acq, money-fx, grain, crude, trade,
  interest, wheat, ship, corn);
- a document keeps only its categories in use, and is dropped if none is left.

That gives 7,770 training / 3,019 test documents over 90 categories, and
6,490 / 2,545 over the top 10. Documents stay in file order (NEWID order),
which matters for streaming (prequential) evaluation.

A document's id is its ``NEWID``; its text is its ``<TITLE>`` and ``<BODY>``
with SGML entities unescaped by ``html.unescape`` (``&lt;`` gives "<",
``&amp;`` "&"; control characters such as ``&#3;``, the end-of-story mark,
give nothing). The 61 documents of ``TYPE="UNPROC"`` in the 90-category split
(tables such as the Fed's weekly reserves) have neither, so their whole
``<TEXT>`` is used. Its labels are the ``<D>`` entries of ``<TOPICS>``. The
files are decoded as Latin-1, which never fails on the few stray bytes they
hold.
"""

from __future__ import annotations

import html
import re
import tarfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from stream_winnow.datasets.labelled_jsonl import write_labelled_jsonl
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import ConfigError
from stream_winnow.text.tokenize import tokenize

__all__ = ["ModApteSplit", "read_modapte", "write_modapte"]

Tokenizer = Callable[[str], Iterable[str]]

_SGM_NAME_RE = re.compile(r"(?:^|/)reut2-\d{3}\.sgm$")
_ATTRIBUTE_RE = re.compile(r'([A-Z]+)="([^"]*)"')
_TOPICS_RE = re.compile(r"<TOPICS>(.*?)</TOPICS>", re.DOTALL)
_D_RE = re.compile(r"<D>(.*?)</D>", re.DOTALL)
_TITLE_RE = re.compile(r"<TITLE>(.*?)</TITLE>", re.DOTALL)
_BODY_RE = re.compile(r"<BODY>(.*?)</BODY>", re.DOTALL)
_TEXT_RE = re.compile(r"<TEXT\b[^>]*>(.*?)</TEXT>", re.DOTALL)
_TAG_RE = re.compile(r"<[^>]*>")

_SPLITS = {"TRAIN": "train", "TEST": "test"}


@dataclass(frozen=True)
class ModApteSplit:
    """Training and test documents of the ModApte split, and the categories in use.

    ``categories`` is ordered by training-document count, most frequent first
    (ties by name), so ``categories[:10]`` are the top 10 (earn has 2,877
    training documents, acq 1,650). Every document's labels are a non-empty
    subset of ``categories``.
    """

    train: list[LabelledDocument]
    test: list[LabelledDocument]
    categories: tuple[str, ...]

    def most_frequent(self, top: int) -> ModApteSplit:
        """The split restricted to the ``top`` most frequent categories, without re-reading the files.

        Gives the same result as ``read_modapte(source, top=top)``.
        """
        return _restrict(self.train, self.test, _check_top(top, len(self.categories)))


def read_modapte(source: str | Path, top: int | None = None, tokenizer: Tokenizer = tokenize) -> ModApteSplit:
    """Read the ModApte split from a Reuters-21578 ``.tar.gz`` or folder.

    ``top=None`` keeps all 90 categories with a training and a test document;
    ``top=10`` keeps the 10 most frequent of those. ``tokenizer`` turns a
    document's text into tokens. Reading and tokenising the whole archive takes
    about 1.3 s, mostly tokenising. Raises ``ConfigError`` if ``source`` does
    not exist or holds no ``reut2-*.sgm`` file, or if ``top`` is not between 1
    and the number of categories in use.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ConfigError(f"top must be a positive number of categories or None, got {top!r}")
    train, test = _read_candidates(Path(source), tokenizer)
    split = _restrict(train, test, None)
    return split if top is None else split.most_frequent(top)


def read_single_label(source: str | Path, top: int | None = None, tokenizer: Tokenizer = tokenize) -> ModApteSplit:
    """R52 (``top=None``) or R8 (``top=8``): the ModApte documents with exactly one topic, for one-of work.

    Kept are the categories with at least one such training and one such test document: 52 of them,
    6,532 / 2,569 documents; ``top=8`` keeps the 8 most frequent by training documents (earn, acq,
    crude, trade, money-fx, interest, money-supply, ship: 5,567 / 2,208). Raises as ``read_modapte`` does.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ConfigError(f"top must be a positive number of categories or None, got {top!r}")
    train, test = _read_candidates(Path(source), tokenizer)
    split = _restrict([d for d in train if len(d.labels) == 1], [d for d in test if len(d.labels) == 1], None)
    return split if top is None else split.most_frequent(top)


def read_modapte_unlabelled(source: str | Path, tokenizer: Tokenizer = tokenize) -> list[LabelledDocument]:
    """All 9,603 ModApte training documents with their labels dropped: the unlabelled corpus a domain model is
    fitted on (1,828 of them have no topic at all; a newsroom's archive is the same kind of text)."""
    train, _ = _read_candidates(Path(source), tokenizer)
    return [LabelledDocument(doc.id, doc.tokens, ()) for doc in train]


def write_modapte(split: ModApteSplit, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` into ``out_dir`` (created if missing); return both paths."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    train_path, test_path = directory / "train.jsonl", directory / "test.jsonl"
    write_labelled_jsonl(train_path, split.train)
    write_labelled_jsonl(test_path, split.test)
    return train_path, test_path


def _check_top(top: int, available: int) -> int:
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= available:
        raise ConfigError(f"top must be a number of categories between 1 and {available}, got {top!r}")
    return top


def _restrict(train: list[LabelledDocument], test: list[LabelledDocument], top: int | None) -> ModApteSplit:
    """Keep the categories with a training and a test document (the ``top`` most frequent if given)."""
    train_counts = Counter(label for doc in train for label in doc.labels)
    test_labels = {label for doc in test for label in doc.labels}
    in_use = sorted((c for c in train_counts if c in test_labels), key=lambda c: (-train_counts[c], c))
    if top is not None:
        in_use = in_use[:top]
    keep = frozenset(in_use)
    return ModApteSplit(_keep_labelled(train, keep), _keep_labelled(test, keep), tuple(in_use))


def _keep_labelled(docs: list[LabelledDocument], keep: frozenset[str]) -> list[LabelledDocument]:
    """Documents with their labels cut to ``keep``; those left without a label are dropped."""
    kept = []
    for doc in docs:
        labels = tuple(label for label in doc.labels if label in keep)
        if not labels:
            continue
        kept.append(doc if labels == doc.labels else LabelledDocument(doc.id, doc.tokens, labels))
    return kept


def _read_candidates(source: Path, tokenizer: Tokenizer) -> tuple[list[LabelledDocument], list[LabelledDocument]]:
    """All ``TOPICS="YES"`` training and test documents, in file order, with all their topics."""
    train: list[LabelledDocument] = []
    test: list[LabelledDocument] = []
    for sgml in _sgml_texts(source):
        for header, body in _elements(sgml):
            attributes = dict(_ATTRIBUTE_RE.findall(header))
            split = _SPLITS.get(attributes.get("LEWISSPLIT", ""))
            if attributes.get("TOPICS") != "YES" or split is None:
                continue
            topics = _TOPICS_RE.search(body)
            # dict.fromkeys drops a repeated <D> while keeping the order.
            labels = tuple(dict.fromkeys(d.strip() for d in _D_RE.findall(topics.group(1)))) if topics else ()
            doc = LabelledDocument(attributes.get("NEWID", ""), tuple(tokenizer(_text(body))), labels)
            (train if split == "train" else test).append(doc)
    return train, test


def _elements(sgml: str) -> Iterator[tuple[str, str]]:
    """The attributes text and the content of each ``<REUTERS ...>...</REUTERS>`` element, in order.

    Plain ``str.split``/``str.find``: 0.03 s for the 27 MB, against 0.7 s for a lazy ``.*?`` regex.
    """
    for chunk in sgml.split("</REUTERS>"):
        start = chunk.find("<REUTERS")
        if start < 0:
            continue
        header_end = chunk.find(">", start)
        if header_end < 0:
            continue
        yield chunk[start + len("<REUTERS") : header_end], chunk[header_end + 1 :]


def _text(body: str) -> str:
    """Title and body of one ``<REUTERS>`` element, unescaped; the whole ``<TEXT>`` if it has neither."""
    parts = [m.group(1) for m in (_TITLE_RE.search(body), _BODY_RE.search(body)) if m]
    if not parts:
        text = _TEXT_RE.search(body)
        parts = [_TAG_RE.sub(" ", text.group(1))] if text else []
    return html.unescape("\n".join(parts))


def _sgml_texts(source: Path) -> Iterator[str]:
    """The decoded ``reut2-*.sgm`` files of ``source``, in name order."""
    if not source.exists():
        raise ConfigError(f"Reuters-21578 source {str(source)!r} does not exist")
    if source.is_dir():
        files = sorted(p for p in source.glob("reut2-*.sgm") if _SGM_NAME_RE.search(p.name))
        if not files:
            files = sorted(p for p in (source / "reuters21578").glob("reut2-*.sgm") if _SGM_NAME_RE.search(p.name))
        if not files:
            raise ConfigError(
                f"no reut2-*.sgm files in {str(source)!r} or its reuters21578/ subfolder; "
                "expected the Reuters-21578 distribution (folder or .tar.gz)"
            )
        for path in files:
            yield path.read_bytes().decode("latin-1")
        return
    if not tarfile.is_tarfile(source):
        raise ConfigError(
            f"Reuters-21578 source {str(source)!r} is neither a folder nor a tar archive; "
            "expected reuters21578.tar.gz or a folder holding reut2-*.sgm"
        )
    with tarfile.open(source, "r:*") as archive:
        members = sorted(
            (m for m in archive.getmembers() if m.isfile() and _SGM_NAME_RE.search(m.name)),
            key=lambda m: m.name,
        )
        if not members:
            raise ConfigError(
                f"no reut2-*.sgm files in the archive {str(source)!r}; expected the Reuters-21578 distribution"
            )
        for member in members:
            data = archive.extractfile(member)
            if data is not None:
                yield data.read().decode("latin-1")
