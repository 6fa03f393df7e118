"""The learning subcommands end to end: ``stream-winnow dataset reuters21578`` and ``stream-winnow evaluate``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stream_winnow.datasets import read_labelled_jsonl
from workers.cli import main

REQUIRED_KEYS = {
    "micro_f1", "macro_f1", "micro_bep", "accuracy", "n_train", "n_test", "n_categories", "seconds", "docs_per_second",
}  # fmt: skip

WORDS = {
    "grain": ["wheat", "corn", "harvest", "tonnes", "crop"],
    "crude": ["oil", "barrel", "opec", "refinery", "crude"],
    "money": ["dollar", "yen", "currency", "rate", "bank"],
}


def reuters_element(newid: int, topics: list[str], lewis: str, body: str) -> str:
    """One <REUTERS> element laid out like the real distribution files."""
    d_entries = "".join(f"<D>{t}</D>" for t in topics)
    return (
        f'<REUTERS TOPICS="YES" LEWISSPLIT="{lewis}" CGISPLIT="TRAINING-SET" OLDID="{5000 + newid}" NEWID="{newid}">\n'
        "<DATE>26-FEB-1987 15:01:01.79</DATE>\n"
        f"<TOPICS>{d_entries}</TOPICS>\n"
        "<PLACES><D>usa</D></PLACES>\n<PEOPLE></PEOPLE>\n<ORGS></ORGS>\n<EXCHANGES></EXCHANGES>\n<COMPANIES></COMPANIES>\n"
        "<UNKNOWN> \n&#5;&#5;&#5;C T\n&#22;&#22;&#1;f0704&#31;reute</UNKNOWN>\n"
        f"<TEXT>&#2;\n<TITLE>{topics[0].upper()} NEWS</TITLE>\n<DATELINE>    CHICAGO, Feb 26 - </DATELINE>"
        f"<BODY>{body}\n Reuter\n&#3;</BODY></TEXT>\n</REUTERS>\n"
    )


@pytest.fixture
def sgml_folder(tmp_path: Path) -> Path:
    """A tiny SGML collection: 3 categories, 36 training and 12 test documents over two files."""
    elements: list[str] = []
    names = list(WORDS)
    for i in range(48):
        topic = names[i % 3]
        words = WORDS[topic]
        body = " ".join(words[(i + k) % 5] for k in range(4)) + f" report number {i}"
        elements.append(reuters_element(i + 1, [topic], "TRAIN" if i < 36 else "TEST", body))
    folder = tmp_path / "reuters"
    folder.mkdir()
    header = '<!DOCTYPE lewis SYSTEM "lewis.dtd">\n'
    (folder / "reut2-000.sgm").write_bytes((header + "".join(elements[:30])).encode("latin-1"))
    (folder / "reut2-001.sgm").write_bytes((header + "".join(elements[30:])).encode("latin-1"))
    return folder


@pytest.fixture
def run() -> Callable[..., Result]:
    """``run(*args) -> Result``: invoke the ``stream-winnow`` command in process."""
    runner = CliRunner()

    def invoke(*args: str | Path) -> Result:
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return invoke


@pytest.fixture
def dataset(sgml_folder: Path, tmp_path: Path, run: Callable[..., Result]) -> tuple[Path, Path]:
    out = tmp_path / "jsonl"
    result = run("dataset", "reuters21578", "--source", sgml_folder, "--out", out)
    assert result.exit_code == 0, result.output
    return out / "train.jsonl", out / "test.jsonl"


def test_dataset_writes_train_and_test_jsonl(dataset: tuple[Path, Path], sgml_folder: Path, run: Callable[..., Result],
                                             tmp_path: Path) -> None:  # fmt: skip
    train_path, test_path = dataset
    train, test = list(read_labelled_jsonl(train_path)), list(read_labelled_jsonl(test_path))
    assert (len(train), len(test)) == (36, 12)
    assert [d.id for d in train[:3]] == ["1", "2", "3"]
    assert train[0].labels == ("grain",)
    assert train[0].tokens[:2] == ("grain", "news")
    result = run("dataset", "reuters21578", "--source", sgml_folder, "--out", tmp_path / "top1", "--top", "1")
    assert result.exit_code == 0
    assert "categories: 1" in result.output
    assert "36 documents" in run("dataset", "reuters21578", "--source", sgml_folder, "--out", tmp_path / "again").output


def json_output(result: Result) -> dict[str, object]:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "learner", ["balanced-winnow", "positive-winnow", "perceptron", "multinomial-nb", "bernoulli-nb"]
)
def test_evaluate_holdout_json(dataset: tuple[Path, Path], run: Callable[..., Result], learner: str) -> None:
    train, test = dataset
    out = json_output(run("evaluate", "--train", train, "--test", test, "--learner", learner, "--json", "--quiet"))
    assert REQUIRED_KEYS <= set(out)
    assert out["learner"] == learner
    assert (out["n_train"], out["n_test"], out["n_categories"]) == (36, 12, 3)
    assert out["micro_f1"] > 0.8  # the categories are easy to tell apart
    assert isinstance(out["seconds"], float) and out["docs_per_second"] > 0


def test_evaluate_prequential_json(dataset: tuple[Path, Path], run: Callable[..., Result]) -> None:
    train, test = dataset
    out = json_output(run("evaluate", "--prequential", "--stream", train, "--stream", test, "--json", "--quiet"))
    assert REQUIRED_KEYS <= set(out)
    assert (out["n_train"], out["n_test"]) == (0, 48)


def test_evaluate_settings_reach_the_learner(dataset: tuple[Path, Path], run: Callable[..., Result]) -> None:
    train, test = dataset
    args = ["evaluate", "--train", train, "--test", test, "--json", "--quiet", "--mode", "one-of", "--passes", "2"]
    out = json_output(run(*args, "--learner", "perceptron", "--alpha", "0.5", "--bigrams"))
    assert out["mode"] == "one-of"
    assert len(out["mistakes_per_pass"]) <= 2  # type: ignore[arg-type]


def test_evaluate_plain_text_output(dataset: tuple[Path, Path], run: Callable[..., Result]) -> None:
    train, test = dataset
    result = run("evaluate", "--train", train, "--test", test, "--quiet")
    assert result.exit_code == 0
    assert "micro_f1" in result.stdout and "n_categories" in result.stdout


def test_plot_writes_a_png(dataset: tuple[Path, Path], run: Callable[..., Result], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    train, _ = dataset
    png = tmp_path / "curve.png"
    result = run("evaluate", "--prequential", "--stream", train, "--plot", png, "--quiet")
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("flag", "value", "allowed"),
    [
        ("--learner", "nope", ["balanced-winnow", "positive-winnow", "perceptron", "multinomial-nb", "bernoulli-nb"]),
        ("--mode", "many", ["any-of", "one-of"]),
        ("--strength", "log", ["binary", "count", "sqrt"]),
    ],
)
def test_bad_choice_fails_listing_the_allowed_values(
    dataset: tuple[Path, Path], run: Callable[..., Result], flag: str, value: str, allowed: list[str]
) -> None:
    train, test = dataset
    result = run("evaluate", "--train", train, "--test", test, flag, value)
    assert result.exit_code == 2
    assert value in result.output
    for name in allowed:
        assert name in result.output


def test_beta_with_perceptron_names_what_perceptron_accepts(
    dataset: tuple[Path, Path], run: Callable[..., Result]
) -> None:
    train, test = dataset
    result = run("evaluate", "--train", train, "--test", test, "--learner", "perceptron", "--beta", "0.5")
    assert result.exit_code == 2
    assert "perceptron does not take 'beta'" in result.output
    assert "alpha, theta, theta_minus, theta_plus, mean_active_features" in result.output


def test_bad_hyperparameter_value_is_a_usage_error(dataset: tuple[Path, Path], run: Callable[..., Result]) -> None:
    train, test = dataset
    result = run("evaluate", "--train", train, "--test", test, "--learner", "perceptron", "--alpha", "-1")
    assert result.exit_code == 2
    assert "alpha > 0" in result.output


def test_bad_jsonl_line_fails_naming_the_line(
    dataset: tuple[Path, Path], run: Callable[..., Result], tmp_path: Path
) -> None:
    train, test = dataset
    lines = train.read_text(encoding="utf-8").splitlines()
    lines.insert(4, '{"id": "broken", "tokens": "not a list"}')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run("evaluate", "--train", bad, "--test", test, "--quiet")
    assert result.exit_code == 1
    assert f"{bad}:5:" in result.output
    assert "'tokens' must be a list of strings" in result.output
    prequential = run("evaluate", "--prequential", "--stream", bad, "--quiet")
    assert prequential.exit_code == 1 and f"{bad}:5:" in prequential.output


def test_bad_json_fails_naming_the_line(run: Callable[..., Result], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "tokens": ["a"], "labels": ["x"]}\n\n{not json\n', encoding="utf-8")
    result = run("evaluate", "--prequential", "--stream", bad, "--quiet")
    assert result.exit_code == 1
    assert f"{bad}:3: not valid JSON" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prequential"], "--prequential takes --stream"),
        (["--train", "{train}"], "hold-out evaluation takes --train FILE and --test FILE"),
        (["--train", "{train}", "--test", "{test}", "--plot", "x.png"], "--plot draws the prequential learning curve"),
    ],
)
def test_evaluate_usage_errors(
    dataset: tuple[Path, Path], run: Callable[..., Result], args: list[str], message: str
) -> None:
    train, test = dataset
    filled = [a.format(train=train, test=test) for a in args]
    result = run("evaluate", *filled, "--quiet")
    assert result.exit_code == 2
    assert message in result.output


def test_dataset_source_must_exist(run: Callable[..., Result], tmp_path: Path) -> None:
    result = run("dataset", "reuters21578", "--source", tmp_path / "missing", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert "does not exist" in result.output
