"""The labelled JSON Lines format: reading good files, naming bad lines, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_winnow.datasets.labelled_jsonl import read_labelled_jsonl, write_labelled_jsonl
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import DataError, DataFormatError, StreamWinnowError


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_reads_tokens_labels_and_text(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "docs.jsonl",
        [
            '{"id": "1", "tokens": ["bahia", "cocoa", "cocoa"], "labels": ["cocoa"]}',
            '{"id": "2", "tokens": [], "labels": ["earn", "acq"]}',
            '{"id": "3", "tokens": ["grain"]}',
            '{"id": "4", "text": "Grain exports: 1,750 tonnes", "labels": ["grain"]}',
            '{"id": "5", "tokens": ["x"], "text": "ignored when tokens are given"}',
            '{"id": "6", "tokens": ["zürich"], "labels": [], "source": "reuters", "date": 1987}',
        ],
    )
    assert list(read_labelled_jsonl(path)) == [
        LabelledDocument("1", ("bahia", "cocoa", "cocoa"), ("cocoa",)),
        LabelledDocument("2", (), ("earn", "acq")),
        LabelledDocument("3", ("grain",), ()),
        LabelledDocument("4", ("grain", "exports", "1", "750", "tonnes"), ("grain",)),
        LabelledDocument("5", ("x",), ()),
        LabelledDocument("6", ("zürich",), ()),
    ]


def test_accepts_str_path_blank_lines_crlf_and_no_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b'\n{"id": "1", "tokens": ["a"]}\r\n   \n\t\n{"id": "2", "tokens": ["b"]}')
    assert [doc.id for doc in read_labelled_jsonl(str(path))] == ["1", "2"]


def test_empty_file_gives_no_documents(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert list(read_labelled_jsonl(path)) == []


def test_reading_streams_documents_before_a_later_bad_line(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "docs.jsonl", ['{"id": "1", "tokens": ["a"]}', "oops"])
    docs = read_labelled_jsonl(path)
    assert next(docs).id == "1"
    with pytest.raises(DataFormatError):
        next(docs)


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(read_labelled_jsonl(tmp_path / "absent.jsonl"))


GOOD = '{"id": "1", "tokens": ["a"], "labels": ["x"]}'


@pytest.mark.parametrize(
    ("bad_line", "fragments"),
    [
        ('{"id": "2", "tokens": ["a"]', ["not valid JSON", "expected one JSON object per line"]),
        ("id=2 tokens=a", ["not valid JSON"]),
        ('["2", ["a"], ["x"]]', ["a JSON array is not a document", "expected one JSON object"]),
        ('"just a string"', ["a JSON string is not a document"]),
        ("null", ["a JSON null is not a document"]),
        ('{"tokens": ["a"], "labels": ["x"]}', ["missing 'id'", "expected a string"]),
        ('{"id": 2, "tokens": ["a"]}', ["'id' must be a string, got number 2"]),
        ('{"id": null, "tokens": ["a"]}', ["'id' must be a string, got null"]),
        ('{"id": "2", "tokens": "a b"}', ["'tokens' must be a list of strings, got string \"a b\""]),
        ('{"id": "2", "tokens": ["a", 7]}', ["'tokens' must be a list of strings, but item 1 is number 7"]),
        ('{"id": "2", "tokens": ["a"], "labels": "x"}', ["'labels' must be a list of strings, got string"]),
        ('{"id": "2", "tokens": ["a"], "labels": [["x"]]}', ["'labels'", "item 0 is array"]),
        ('{"id": "2", "tokens": ["a"], "labels": null}', ["'labels' must be a list of strings, got null"]),
        ('{"id": "2", "labels": ["x"]}', ["missing 'tokens' and 'text'", '"tokens": [list of strings]']),
        ('{"id": "2", "text": ["a"]}', ["'text' must be a string, got array"]),
    ],
)
def test_bad_line_names_path_line_number_problem_and_expectation(
    tmp_path: Path, bad_line: str, fragments: list[str]
) -> None:
    path = _write_lines(tmp_path / "docs.jsonl", [GOOD, "", GOOD, bad_line, GOOD])
    with pytest.raises(DataFormatError) as caught:
        list(read_labelled_jsonl(path))
    error = caught.value
    assert error.path == str(path)
    assert error.line_number == 4  # 1-based, blank line counted
    assert str(error).startswith(f"{path}:4: ")
    for fragment in fragments:
        assert fragment in error.reason


def test_invalid_utf8_is_a_format_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(GOOD.encode() + b'\n{"id": "2", "tokens": ["caf\xe9"]}\n')
    with pytest.raises(DataFormatError, match=r":2: not valid UTF-8"):
        list(read_labelled_jsonl(path))


def test_long_values_are_cut_in_messages(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "docs.jsonl", [json.dumps({"id": "1", "tokens": "x" * 500})])
    with pytest.raises(DataFormatError) as caught:
        list(read_labelled_jsonl(path))
    assert len(caught.value.reason) < 120
    assert caught.value.reason.endswith("...")


def test_format_error_sits_in_the_exception_tree() -> None:
    assert issubclass(DataFormatError, DataError)
    assert issubclass(DataFormatError, StreamWinnowError)
    assert not DataFormatError("f", 1, "r").retriable


def test_write_returns_count_and_writes_compact_utf8(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    docs = [
        LabelledDocument("1", ("zürich", "cocoa"), ("cocoa",)),
        LabelledDocument("2", ("москва",)),
    ]
    assert write_labelled_jsonl(path, iter(docs)) == 2
    assert path.read_bytes().decode("utf-8").splitlines() == [
        '{"id":"1","tokens":["zürich","cocoa"],"labels":["cocoa"]}',
        '{"id":"2","tokens":["москва"],"labels":[]}',
    ]


def test_write_nothing_gives_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    assert write_labelled_jsonl(str(path), []) == 0
    assert path.read_bytes() == b""


def test_round_trip_with_awkward_strings(tmp_path: Path) -> None:
    docs = [
        LabelledDocument("", ("",), ("",)),
        LabelledDocument("line\nbreak", ("a\r\nb", "\u2028", "\u0085", '"quoted"', "back\\slash"), ("\t",)),
        LabelledDocument("emoji", ("😀", "\x00", "{}", "[]"), ("ü",)),
    ]
    path = tmp_path / "docs.jsonl"
    assert write_labelled_jsonl(path, docs) == 3
    assert len(path.read_bytes().split(b"\n")) == 4  # three lines and the final newline
    assert list(read_labelled_jsonl(path)) == docs


# Lone surrogates cannot be encoded as UTF-8, so they are not valid document text.
_strings = st.text(st.characters(codec="utf-8"), max_size=12)
_documents = st.builds(
    LabelledDocument,
    id=_strings,
    tokens=st.lists(_strings, max_size=8).map(tuple),
    labels=st.lists(_strings, max_size=4).map(tuple),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(_documents, max_size=6))
def test_round_trip_property(tmp_path: Path, docs: list[LabelledDocument]) -> None:
    path = tmp_path / "round_trip.jsonl"
    assert write_labelled_jsonl(path, docs) == len(docs)
    assert list(read_labelled_jsonl(path)) == docs
