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


def _flags(**overrides: object) -> dict[str, object]:
    context = worker.make_context("worker", [], default_map={"redis_url": "redis://127.0.0.1:6379/0"})
    return {**context.params, **overrides}


def test_secrets_are_read_from_files_first_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from workers.cli_service import worker_config

    (tmp_path / "url").write_text("redis://:p4ss@redis:6379/0\nignored\n")
    (tmp_path / "sasl").write_text("s3cret\r\n")
    config = worker_config(_flags(redis_url_file=str(tmp_path / "url"), sasl_password_file=str(tmp_path / "sasl")))
    assert config.redis_url == "redis://:p4ss@redis:6379/0"
    assert config.kafka.sasl_password == "s3cret"


@pytest.mark.parametrize(("setup", "message"), [
    ({"sasl_password": "x", "sasl_password_file": "sasl"}, "give --sasl-password or --sasl-password-file, not both"),
    ({"redis_url_file": "missing"}, "cannot read --redis-url-file"),
    ({"redis_url_file": "empty"}, "--redis-url-file .*empty is empty"),
])  # fmt: skip
def test_a_bad_secret_file_says_which_flag(tmp_path, setup: dict[str, str], message: str) -> None:  # type: ignore[no-untyped-def]
    from workers.cli_service import worker_config

    (tmp_path / "sasl").write_text("s3cret\n")
    (tmp_path / "empty").write_text("")
    overrides = {k: (str(tmp_path / v) if k.endswith("_file") else v) for k, v in setup.items()}
    with pytest.raises(ConfigError, match=message):
        worker_config(_flags(**overrides))


def test_kafka_security_flags_reach_both_clients() -> None:
    from workers.cli_service import worker_config
    from workers.transport import confluent, kafka_python

    flags = _flags(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="sw",
                   sasl_password="pw", ssl_cafile="/etc/ca.pem")  # fmt: skip
    settings = worker_config(flags).kafka
    python_side = kafka_python.client_configs(settings)
    assert {k: python_side[k] for k in ("security_protocol", "sasl_mechanism", "sasl_plain_username",
                                        "sasl_plain_password", "ssl_cafile")} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "sw",
        "sasl_plain_password": "pw", "ssl_cafile": "/etc/ca.pem"}  # fmt: skip
    librdkafka = confluent.client_configs(settings)
    assert {k: librdkafka[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                                       "ssl.ca.location")} == {
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "sw",
        "sasl.password": "pw", "ssl.ca.location": "/etc/ca.pem"}  # fmt: skip
    assert "pw" not in repr(settings)


def test_peer_mixing_sums_by_default_and_takes_its_staleness_from_the_mixing() -> None:
    from stream_winnow.shared.learning_peers import STALENESS_EVENTS
    from workers.cli_service import worker_config

    summed = worker_config(_flags())
    assert (summed.peer_mixing, summed.learn_staleness_events) == ("sum", None)
    averaged = worker_config(_flags(peer_mixing="average", learn_staleness_events=120))
    assert (averaged.peer_mixing, averaged.learn_staleness_events) == ("average", 120)
    assert STALENESS_EVENTS == {"sum": 60, "average": 300}


def test_a_bad_peer_mixing_says_what_is_allowed() -> None:
    result = CliRunner().invoke(worker, ["--peer-mixing", "mean"], env={"STREAM_WINNOW_REDIS_URL": "redis://x"})
    assert result.exit_code == 2
    assert "'sum', 'average'" in result.output or "sum, average" in result.output
    with pytest.raises(ConfigError, match="peer_mixing must be sum or average"):
        WorkerConfig(KafkaSettings("127.0.0.1:9092"), redis_url="redis://x", peer_mixing="mean")  # type: ignore[arg-type]
