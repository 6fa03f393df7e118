"""The built-in tokenizer: lowercase runs of letters and digits.

Simple, fast and deterministic, so a document gives the same features in
training, in the service and in a benchmark years later. It lowercases the
text and keeps every maximal run of Unicode letters and digits; everything
else (spaces, punctuation, symbols, the underscore) separates tokens and is
dropped. Numbers are tokens too: in Reuters news "dlrs", "mln" and the figures
around them carry the category.

>>> tokenize("Bahia cocoa: 1,750 dlrs per tonne (Zürich, U.S.)")
['bahia', 'cocoa', '1', '750', 'dlrs', 'per', 'tonne', 'zürich', 'u', 's']
>>> tokenize("The dry period means the temporao will be late", stopwords=True)
['dry', 'period', 'means', 'temporao', 'late']
"""

from __future__ import annotations

import re

__all__ = ["ENGLISH_STOPWORDS", "tokenize"]

# A token is a run of characters that are word characters but not "_":
# Unicode letters and digits (str.isalnum), nothing else.
_TOKEN_RE = re.compile(r"[^\W_]+")

# Lucene's classic English stop set (StopAnalyzer.ENGLISH_STOP_WORDS_SET), 33 words:
# small on purpose, so it removes function words and no topical ones.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """
    a an and are as at be but by for if in into is it no not of on or such
    that the their then there these they this to was will with
    """.split()
)


def tokenize(text: str, *, stopwords: bool = False) -> list[str]:
    """Split ``text`` into lowercase letter/digit tokens, in order, duplicates kept.

    With ``stopwords=True`` the 33 words of ``ENGLISH_STOPWORDS`` are removed.

    >>> tokenize("Net free reserves: 644 vs. 1,337")
    ['net', 'free', 'reserves', '644', 'vs', '1', '337']
    >>> tokenize("--- +3.5% ... ---")
    ['3', '5']
    >>> tokenize("")
    []
    """
    tokens = _TOKEN_RE.findall(text.lower())
    if stopwords:
        return [token for token in tokens if token not in ENGLISH_STOPWORDS]
    return tokens
