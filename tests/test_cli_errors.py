"""What a user can get wrong gets one line saying what and what to do, an exit code, and no traceback."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from workers.cli import main


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


@pytest.fixture
def stream_file(tmp_path: Path) -> Path:
    path = tmp_path / "stream.jsonl"
    lines = [{"id": str(i), "tokens": ["grain", "wheat"] if i % 2 else ["oil"], "labels": ["grain"] if i % 2 else []}
             for i in range(20)]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_learner_setting_out_of_range_names_the_range(stream_file: Path) -> None:
    code, output = _run("evaluate", "--prequential", "--stream", str(stream_file), "--alpha", "-5", "--quiet")
    assert code == 2
    assert _one_line(output) == "error: balanced-winnow needs alpha > 1 and 0 < beta < 1; got -5.0, 0.7"


def test_a_plot_into_a_missing_folder_is_refused_before_the_run(stream_file: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    code, output = _run("evaluate", "--prequential", "--stream", str(stream_file), "--quiet",
                        "--plot", str(tmp_path / "no-such-folder" / "curve.png"))  # fmt: skip
    assert code == 2
    assert "no-such-folder does not exist; create it first" in output and "Traceback" not in output
    assert time.monotonic() - started < 30  # refused up front, not after learning


def test_a_bad_file_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "tokens": ["x"]}\n{"id": "b", "tokens": []}\n', encoding="utf-8")
    code, output = _run("produce", "--input", str(path), "--bootstrap-servers", "127.0.0.1:1", "--quiet")
    assert code == 1
    assert _one_line(output).startswith(f"error: {path}:2: ")


def test_up_on_a_taken_port_says_so_and_starts_nothing(taken_port: int) -> None:
    code, output = _run("up", "--broker-port", str(taken_port))
    assert code == 2
    assert _one_line(output) == (f"error: port {taken_port} (--broker-port) is taken by another process; "
                                 "free it, or give --broker-port 0 for any")  # fmt: skip


@pytest.mark.slow
def test_a_broker_that_is_not_there_is_one_line_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text('{"id": "a", "tokens": ["x"], "labels": ["y"]}\n', encoding="utf-8")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]
    code, output = _run("produce", "--input", str(path), "--bootstrap-servers", f"127.0.0.1:{nobody}", "--quiet")
    assert code == 1
    line = _one_line(output)
    assert line.startswith(f"error: cannot create a producer for 127.0.0.1:{nobody}") and "stream-winnow up" in line
