"""Reuters-21578 and the ModApte split: parsing rules on small SGML, exact counts on the real archive."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from stream_winnow.datasets.labelled_jsonl import read_labelled_jsonl
from stream_winnow.datasets.reuters21578 import ModApteSplit, read_modapte, write_modapte
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import ConfigError
from stream_winnow.text.tokenize import tokenize


def _reuters(
    newid: int,
    topics: list[str],
    *,
    lewis: str = "TRAIN",
    has_topics: str = "YES",
    title: str | None = "TITLE",
    body: str | None = "body",
    unproc: str | None = None,
) -> str:
    """One <REUTERS> element laid out like the real files."""
    d_entries = "".join(f"<D>{topic}</D>" for topic in topics)
    if unproc is not None:
        text = f'<TEXT TYPE="UNPROC">&#2;\n{unproc}</TEXT>'
    else:
        parts = ["<TEXT>&#2;\n"]
        if title is not None:
            parts.append(f"<TITLE>{title}</TITLE>\n")
        parts.append("<DATELINE>    SALVADOR, Feb 26 - </DATELINE>")
        if body is not None:
            parts.append(f"<BODY>{body}</BODY>")
        text = "".join(parts) + "</TEXT>"
    return (
        f'<REUTERS TOPICS="{has_topics}" LEWISSPLIT="{lewis}" CGISPLIT="TRAINING-SET" '
        f'OLDID="{5000 + newid}" NEWID="{newid}">\n'
        "<DATE>26-FEB-1987 15:01:01.79</DATE>\n"
        f"<TOPICS>{d_entries}</TOPICS>\n"
        "<PLACES><D>usa</D></PLACES>\n<PEOPLE></PEOPLE>\n<ORGS></ORGS>\n<EXCHANGES></EXCHANGES>\n"
        "<COMPANIES></COMPANIES>\n<UNKNOWN> \n&#5;&#5;&#5;C T\n&#22;&#22;&#1;f0704&#31;reute</UNKNOWN>\n"
        f"{text}\n</REUTERS>\n"
    )


def _sgm(*elements: str) -> bytes:
    return ('<!DOCTYPE lewis SYSTEM "lewis.dtd">\n' + "".join(elements)).encode("latin-1")


def _write_collection(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def _raw_text(text: str) -> list[str]:
    """A tokenizer that returns the extracted text untouched, to check what the reader extracts."""
    return [text]


# A small collection that exercises every ModApte rule.
RULES = {
    "reut2-000.sgm": _sgm(
        _reuters(1, ["cocoa", "grain"], title="BAHIA &amp; COCOA", body="Prices &lt;rose&gt; 5%\n Reuter\n&#3;"),
        _reuters(2, ["cocoa"], lewis="TEST"),
        _reuters(3, ["cocoa"], has_topics="NO"),
        _reuters(4, ["cocoa"], has_topics="BYPASS"),
        _reuters(5, ["cocoa"], lewis="NOT-USED"),
        _reuters(6, []),
        _reuters(7, ["grain"]),  # grain has no test document: not in use
        _reuters(8, ["ship"], lewis="TEST"),  # ship has no training document: not in use
    ),
    "reut2-001.sgm": _sgm(
        _reuters(9, ["cocoa"], unproc="FED WEEKLY REPORT\n Net free reserves....644 vs 1,337"),
        _reuters(10, ["cocoa", "cocoa"], title=None, body="Body only, no title."),
        _reuters(11, ["cocoa"], lewis="TEST", title="Title only", body=None),
    ),
}


@pytest.fixture
def rules_folder(tmp_path: Path) -> Path:
    return _write_collection(tmp_path / "collection", RULES)


def test_modapte_rules(rules_folder: Path) -> None:
    split = read_modapte(rules_folder)
    assert split.categories == ("cocoa",)
    assert [doc.id for doc in split.train] == ["1", "9", "10"]
    assert [doc.id for doc in split.test] == ["2", "11"]
    # Labels are cut to the categories in use, and a repeated <D> counts once.
    assert all(doc.labels == ("cocoa",) for doc in split.train + split.test)


def test_text_is_title_and_body_with_entities_unescaped(rules_folder: Path) -> None:
    texts = {doc.id: doc.tokens[0] for doc in read_modapte(rules_folder, tokenizer=_raw_text).train}
    assert texts["1"] == "BAHIA & COCOA\nPrices <rose> 5%\n Reuter\n"  # &#3; is a control character: dropped
    assert texts["10"] == "Body only, no title."


def test_unprocessed_documents_use_their_whole_text(rules_folder: Path) -> None:
    split = read_modapte(rules_folder, tokenizer=_raw_text)
    assert split.train[1].tokens == ("\nFED WEEKLY REPORT\n Net free reserves....644 vs 1,337",)


def test_default_tokenizer_is_tokenize(rules_folder: Path) -> None:
    doc = read_modapte(rules_folder).train[0]
    assert doc == LabelledDocument("1", ("bahia", "cocoa", "prices", "rose", "5", "reuter"), ("cocoa",))
    assert doc.tokens == tuple(tokenize("BAHIA & COCOA\nPrices <rose> 5%\n Reuter\n"))


def test_odd_bytes_are_decoded_as_latin1(tmp_path: Path) -> None:
    data = _sgm(_reuters(1, ["cocoa"], body="Z\xfcrich"), _reuters(2, ["cocoa"], lewis="TEST"))
    data = data.replace(b"Z\xfcrich", b"Z\xfcrich \x1b\x7f\xff")
    split = read_modapte(_write_collection(tmp_path, {"reut2-000.sgm": data}))
    assert split.train[0].tokens == ("title", "zürich", "ÿ")


def test_documents_stay_in_file_order_across_files(tmp_path: Path) -> None:
    files = {
        "reut2-001.sgm": _sgm(_reuters(3, ["acq"]), _reuters(4, ["acq"], lewis="TEST")),
        "reut2-000.sgm": _sgm(_reuters(1, ["acq"]), _reuters(2, ["acq"], lewis="TEST")),
        "reut2-002.sgm": _sgm(_reuters(5, ["acq"])),
        "reut2-xyz.sgm": _sgm(_reuters(99, ["acq"])),  # not a distribution file name: ignored
    }
    split = read_modapte(_write_collection(tmp_path, files))
    assert [doc.id for doc in split.train] == ["1", "3", "5"]
    assert [doc.id for doc in split.test] == ["2", "4"]


# earn: 3 training docs, acq: 2, crude: 2, ship: 1; each also has a test doc; corn has none.
TOP = {
    "reut2-000.sgm": _sgm(
        _reuters(1, ["earn"]),
        _reuters(2, ["earn", "ship"]),
        _reuters(3, ["earn", "crude"]),
        _reuters(4, ["crude", "acq"]),
        _reuters(5, ["acq"]),
        _reuters(6, ["corn", "ship"]),
        _reuters(7, ["corn"]),
        _reuters(8, ["earn"], lewis="TEST"),
        _reuters(9, ["acq", "crude", "ship"], lewis="TEST"),
        _reuters(10, ["ship"], lewis="TEST"),
    )
}


def test_categories_are_ordered_by_training_count_then_name(tmp_path: Path) -> None:
    split = read_modapte(_write_collection(tmp_path, TOP))
    assert split.categories == ("earn", "acq", "crude", "ship")  # acq before crude: a tie, by name
    assert [doc.id for doc in split.train] == ["1", "2", "3", "4", "5", "6"]
    assert split.train[5].labels == ("ship",)  # corn is not in use


@pytest.mark.parametrize(
    ("top", "categories", "train_ids", "test_ids"),
    [
        (1, ("earn",), ["1", "2", "3"], ["8"]),
        (2, ("earn", "acq"), ["1", "2", "3", "4", "5"], ["8", "9"]),
        (4, ("earn", "acq", "crude", "ship"), ["1", "2", "3", "4", "5", "6"], ["8", "9", "10"]),
    ],
)
def test_top_keeps_the_most_frequent_categories_and_their_documents(
    tmp_path: Path, top: int, categories: tuple[str, ...], train_ids: list[str], test_ids: list[str]
) -> None:
    folder = _write_collection(tmp_path, TOP)
    split = read_modapte(folder, top=top)
    assert split.categories == categories
    assert [doc.id for doc in split.train] == train_ids
    assert [doc.id for doc in split.test] == test_ids
    assert all(doc.labels and set(doc.labels) <= set(categories) for doc in split.train + split.test)
    assert read_modapte(folder).most_frequent(top) == split


def test_top_two_cuts_labels(tmp_path: Path) -> None:
    split = read_modapte(_write_collection(tmp_path, TOP), top=2)
    labels = {doc.id: doc.labels for doc in split.train + split.test}
    assert labels["3"] == ("earn",)
    assert labels["4"] == ("acq",)
    assert labels["9"] == ("acq",)


@pytest.mark.parametrize("top", [0, -1, True, 2.5, "10"])
def test_bad_top_is_a_config_error(rules_folder: Path, top: object) -> None:
    with pytest.raises(ConfigError, match="top must be"):
        read_modapte(rules_folder, top=top)  # type: ignore[arg-type]


def test_top_beyond_the_categories_in_use_is_a_config_error(tmp_path: Path) -> None:
    folder = _write_collection(tmp_path, TOP)
    with pytest.raises(ConfigError, match="between 1 and 4, got 5"):
        read_modapte(folder, top=5)
    with pytest.raises(ConfigError, match="between 1 and 4"):
        read_modapte(folder).most_frequent(0)


def test_subfolder_and_archive_give_the_same_split(tmp_path: Path) -> None:
    direct = read_modapte(_write_collection(tmp_path / "direct", RULES))
    parent = tmp_path / "parent"
    _write_collection(parent / "reuters21578", RULES)
    archive = tmp_path / "reuters21578.tar.gz"
    members = {"reuters21578/README.txt": b"readme", **{f"reuters21578/{n}": d for n, d in RULES.items()}}
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert read_modapte(parent) == direct
    assert read_modapte(archive) == direct
    assert read_modapte(str(archive)) == direct


def test_missing_source_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_modapte(tmp_path / "nowhere")


def test_folder_without_sgml_files_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("not the data")
    with pytest.raises(ConfigError, match=r"no reut2-\*\.sgm files"):
        read_modapte(tmp_path)


def test_plain_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "reut2-000.sgm.txt"
    path.write_text("hello")
    with pytest.raises(ConfigError, match="neither a folder nor a tar archive"):
        read_modapte(path)


def test_archive_without_sgml_files_is_a_config_error(tmp_path: Path) -> None:
    archive = tmp_path / "other.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("README.txt")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ConfigError, match=r"no reut2-\*\.sgm files in the archive"):
        read_modapte(archive)


def test_write_modapte_writes_both_files_that_read_back(rules_folder: Path, tmp_path: Path) -> None:
    split = read_modapte(rules_folder)
    train_path, test_path = write_modapte(split, tmp_path / "out" / "modapte")
    assert (train_path.name, test_path.name) == ("train.jsonl", "test.jsonl")
    assert list(read_labelled_jsonl(train_path)) == split.train
    assert list(read_labelled_jsonl(test_path)) == split.test


# --- the real archive -------------------------------------------------------------------------------------


def _archive_path() -> Path:
    configured = os.environ.get("STREAM_WINNOW_REUTERS")
    if configured:
        return Path(configured)
    return (Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "reuters21578.tar.gz").resolve()


@pytest.fixture(scope="module")
def archive() -> Path:
    path = _archive_path()
    if not path.exists():
        pytest.skip(f"Reuters-21578 not found at {path}; set STREAM_WINNOW_REUTERS to the .tar.gz or folder")
    return path


@pytest.fixture(scope="module")
def modapte90(archive: Path) -> ModApteSplit:
    started = time.perf_counter()
    split = read_modapte(archive)
    print(f"read {archive} in {time.perf_counter() - started:.2f} s")
    return split


@pytest.mark.slow
def test_real_archive_all_90_categories(modapte90: ModApteSplit) -> None:
    assert (len(modapte90.train), len(modapte90.test), len(modapte90.categories)) == (7770, 3019, 90)
    assert modapte90.train[0] == LabelledDocument("1", modapte90.train[0].tokens, ("cocoa",))
    assert modapte90.train[0].tokens[:3] == ("bahia", "cocoa", "review")
    train_ids = [int(doc.id) for doc in modapte90.train]
    assert train_ids == sorted(train_ids) and len(set(train_ids)) == len(train_ids)
    assert all(doc.tokens for doc in modapte90.train + modapte90.test)


TOP10 = ("earn", "acq", "money-fx", "grain", "crude", "trade", "interest", "wheat", "ship", "corn")


@pytest.mark.slow
def test_real_archive_top_10(modapte90: ModApteSplit) -> None:
    top10 = modapte90.most_frequent(10)
    assert (len(top10.train), len(top10.test), len(top10.categories)) == (6490, 2545, 10)
    assert top10.categories == TOP10
    assert modapte90.categories[:10] == TOP10


@pytest.mark.slow
def test_real_archive_read_with_top_10_matches(archive: Path, modapte90: ModApteSplit) -> None:
    assert read_modapte(archive, top=10) == modapte90.most_frequent(10)
