"""The unit everything works on: a tokenised document with optional labels."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LabelledDocument:
    """A tokenised document and its true categories (empty when unlabelled).

    ``tokens`` keeps duplicates and order: counts matter for ``count`` and
    ``sqrt`` feature strength, order for bigrams.
    """

    id: str
    tokens: tuple[str, ...]
    labels: tuple[str, ...] = ()
