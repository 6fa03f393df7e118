"""The worker's flags as the CLI parses them: what a bad value says, what a good one becomes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from stream_winnow.errors import ConfigError
from workers.cli_service import DecisionScores, worker
from workers.config import DEFAULT_DECISION_SCORES, MAX_BATCH_LINGER_MS, WorkerConfig
from workers.transport import KafkaSettings


@pytest.mark.parametrize(("given", "expected"), [("all", None), ("ALL", None), ("0", 0), (" 3 ", 3), (7, 7)])
def test_decision_scores_take_all_or_a_count(given: object, expected: int | None) -> None:
    assert DecisionScores().convert(given, None, None) == expected


@pytest.mark.parametrize("bad", ["-1", "ten", "2.5", ""])
def test_a_bad_decision_scores_says_what_is_allowed(bad: str) -> None:
    result = CliRunner().invoke(worker, ["--decision-scores", bad], env={"STREAM_WINNOW_REDIS_URL": "redis://x"})
    assert result.exit_code == 2
    assert "neither 'all' nor a whole number >= 0" in result.output


def test_the_default_is_shown_in_help() -> None:
    result = CliRunner().invoke(worker, ["--help"])
    assert f"default: {DEFAULT_DECISION_SCORES}" in " ".join(result.output.split())


@pytest.mark.parametrize("bad", ["-1", "1001"])
def test_a_batch_linger_out_of_range_says_what_is_allowed(bad: str) -> None:
    result = CliRunner().invoke(worker, ["--batch-linger-ms", bad], env={"STREAM_WINNOW_REDIS_URL": "redis://x"})
    assert result.exit_code == 2
    assert "0<=x<=1000" in result.output


@pytest.mark.parametrize("bad", [-1, MAX_BATCH_LINGER_MS + 1])
def test_a_config_built_in_python_checks_the_batch_linger_too(bad: int) -> None:
    with pytest.raises(ConfigError, match="batch_linger_ms must be 0 to 1000"):
        WorkerConfig(KafkaSettings("127.0.0.1:9092"), redis_url="redis://x", batch_linger_ms=bad)
