"""The built-in tokenizer: lowercase runs of Unicode letters and digits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_winnow.text.tokenize import ENGLISH_STOPWORDS, tokenize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("BAHIA COCOA REVIEW", ["bahia", "cocoa", "review"]),
        ("Showers continued throughout the week", ["showers", "continued", "throughout", "the", "week"]),
        ("1,750 to 1,780 dlrs per tonne", ["1", "750", "to", "1", "780", "dlrs", "per", "tonne"]),
        ("M-1 rose 2.1 pct", ["m", "1", "rose", "2", "1", "pct"]),
        ("The U.S. said...", ["the", "u", "s", "said"]),
        ("<Bahia Superior> +certificates+", ["bahia", "superior", "certificates"]),
        ("snake_case and tabs\tand\nnewlines", ["snake", "case", "and", "tabs", "and", "newlines"]),
        ("Zürich, São Paulo, ΑΘΗΝΑ, Москва", ["zürich", "são", "paulo", "αθηνα", "москва"]),
        ("東京 2024年", ["東京", "2024年"]),
        ("--- !!! ... ???", []),
        ("", []),
    ],
)
def test_examples(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_control_characters_from_sgml_entities_separate_tokens() -> None:
    # Reuters bodies end with "Reuter\n&#3;", which unescapes to U+0003.
    assert tokenize("Comissaria Smith said.\n Reuter\n\x03") == ["comissaria", "smith", "said", "reuter"]


def test_duplicates_and_order_are_kept() -> None:
    assert tokenize("cocoa bean cocoa") == ["cocoa", "bean", "cocoa"]


def test_stopwords_are_off_by_default_and_removed_on_request() -> None:
    text = "The dry period means the temporao will be late this year"
    assert tokenize(text)[:2] == ["the", "dry"]
    assert tokenize(text, stopwords=True) == ["dry", "period", "means", "temporao", "late", "year"]


def test_stopwords_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        tokenize("the cocoa", True)  # type: ignore[call-arg]


def test_stopword_list_is_small_lowercase_and_tokenizable() -> None:
    assert 20 <= len(ENGLISH_STOPWORDS) <= 50
    for word in ENGLISH_STOPWORDS:
        assert tokenize(word) == [word]


@given(st.text())
def test_tokens_are_nonempty_lowercase_letters_and_digits(text: str) -> None:
    for token in tokenize(text):
        assert token
        assert token.isalnum()
        assert token == token.lower()


@given(st.text())
def test_tokenizing_the_joined_tokens_changes_nothing(text: str) -> None:
    tokens = tokenize(text)
    assert tokenize(" ".join(tokens)) == tokens


@given(st.text())
def test_stopword_removal_only_removes_stopwords(text: str) -> None:
    everything = tokenize(text)
    kept = tokenize(text, stopwords=True)
    assert kept == [token for token in everything if token not in ENGLISH_STOPWORDS]
