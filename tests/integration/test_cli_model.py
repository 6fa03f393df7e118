"""The model commands (train, export, import, explain, categories, status, compact) against real Redis.

Every test uses its own model names, so tests share the servers without flushing them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from stream_winnow.datasets import read_labelled_jsonl, write_labelled_jsonl
from stream_winnow.documents import LabelledDocument
from stream_winnow.learners.base import UPDATES_COUNTER
from stream_winnow.models.named import RedisClient, connect, open_learner
from stream_winnow.models.snapshot import Snapshot, take_snapshot
from stream_winnow.models.training import fit
from workers.cli import main
from workers.cli_learning import make_learner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# Few passes keep the tests fast; the model still learns the synthetic categories.
PASSES = "4"
# float32 storage in Redis against float64 in memory.
RTOL, ATOL = 1e-5, 1e-5


CATEGORIES = ("grain", "oil", "earn", "acq")


def synthetic_docs(n: int = 120, seed: int = 0) -> list[LabelledDocument]:
    """Documents of shared words, one word of their own and words typical of their (1-2) categories.

    (As in tests/test_snapshot.py; an integration module cannot import a top-level test module.)
    """
    rng = np.random.default_rng(seed)
    common = [f"w{i}" for i in range(80)]
    typical = {c: [f"{c}{i}" for i in range(12)] for c in CATEGORIES}
    docs = []
    for i in range(n):
        labels = list(rng.choice(CATEGORIES, size=int(rng.integers(1, 3)), replace=False))
        tokens = [*rng.choice(common, size=15), f"rare{seed}-{i}"]  # rare words: what compact discards
        for label in labels:
            tokens += list(rng.choice(typical[label], size=5))
        docs.append(LabelledDocument(str(i), tuple(str(t) for t in tokens), tuple(str(c) for c in labels)))
    return docs


def assert_same_model(a: Snapshot, b: Snapshot) -> None:
    assert (a.metadata, a.categories, a.tables, a.counters, a.version) == (
        b.metadata, b.categories, b.tables, b.counters, b.version
    )  # fmt: skip
    np.testing.assert_array_equal(a.feature_ids, b.feature_ids)
    assert list(a.values) == list(b.values)
    for name in a.values:
        np.testing.assert_array_equal(a.values[name], b.values[name], err_msg=name)


def unique_model() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def ok(*args: str) -> Result:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    write_labelled_jsonl(path, synthetic_docs(150))
    return path


@pytest.fixture(params=["single", "cluster"])
def backend_url(request: pytest.FixtureRequest) -> str:
    fixture = "redis_url" if request.param == "single" else "redis_cluster_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def client(redis_url: str) -> Iterator[RedisClient]:
    made = connect(redis_url)
    yield made
    made.close()


@pytest.fixture(scope="module")
def trained_model(redis_url: str, train_file: Path) -> str:
    """One model trained once for the read-only commands (explain, categories, status)."""
    model = unique_model()
    ok("train", "--redis-url", redis_url, "--model", model, "--input", str(train_file), "--passes", PASSES,
       "--shards", "4")  # fmt: skip
    return model


def test_train_writes_the_model_that_memory_training_makes(redis_url: str, train_file: Path,
                                                           client: RedisClient) -> None:  # fmt: skip
    model = unique_model()
    result = ok("train", "--redis-url", redis_url, "--model", model, "--input", str(train_file),
                "--passes", PASSES, "--alpha", "1.4", "--shards", "8")  # fmt: skip
    for field in ("passes: ", "mistakes per pass: ", "features stored: ", "seconds: "):
        assert field in result.output

    served = open_learner(client, model, create=False)
    metadata = served.store.metadata()
    assert metadata["learner"] == "balanced-winnow"
    assert metadata["shards"] == "8"
    assert json.loads(metadata["settings"])["alpha"] == 1.4
    assert "updated_at" in metadata and "mean_active_features" in metadata

    options: dict[str, Any] = {
        "learner": "balanced-winnow", "mode": "any-of", "strength": None, "normalize": None, "bigrams": False, "idf": None,
        "alpha": 1.4, "beta": None, "theta": None, "theta_minus": None, "theta_plus": None, "smoothing": None,
        "passes": int(PASSES), "average": True, "discard_below": None, "shuffle_seed": None,
    }  # fmt: skip
    local, training = make_learner(options)
    docs = list(read_labelled_jsonl(train_file))
    fit(local, docs, training)
    assert served.store.categories() == local.store.categories()
    assert served.store.n_features() == local.store.n_features()
    for doc in synthetic_docs(30, seed=7):
        got, expected = served.predict_one(doc.tokens), local.predict_one(doc.tokens)
        np.testing.assert_allclose(got.margins, expected.margins, rtol=RTOL, atol=ATOL)
        assert got.categories == expected.categories


def test_train_refuses_an_existing_model_without_replace(redis_url: str, train_file: Path,
                                                         client: RedisClient) -> None:  # fmt: skip
    model = unique_model()
    args = ["train", "--redis-url", redis_url, "--model", model, "--input", str(train_file), "--passes", "1"]
    ok(*args)
    refused = invoke(*args)
    assert refused.exit_code == 2 and "--replace" in refused.output
    ok(*args, "--learner", "perceptron", "--replace")  # another learner's tables: dropped first
    assert open_learner(client, model, create=False).name == "perceptron"


@pytest.mark.parametrize("suffix", [".msgpack", ".npz"])
def test_export_import_round_trip(backend_url: str, train_file: Path, tmp_path: Path, suffix: str) -> None:
    source, copy = unique_model(), unique_model()
    ok("train", "--redis-url", backend_url, "--model", source, "--input", str(train_file), "--passes", "2",
       "--shards", "4")  # fmt: skip
    path = tmp_path / f"snapshot{suffix}"
    assert "features" in ok("export", "--redis-url", backend_url, "--model", source, "--out", str(path)).output
    env = {"STREAM_WINNOW_REDIS_URL": backend_url, "STREAM_WINNOW_MODEL": copy}  # the environment works too
    result = invoke("import", "--input", str(path), env=env)
    assert result.exit_code == 0, result.output

    client = connect(backend_url)
    try:
        a, b = open_learner(client, source, create=False), open_learner(client, copy, create=False)
        assert_same_model(take_snapshot(a.store), take_snapshot(b.store))
        assert b.store.n_features() == a.store.n_features() > 0
        for doc in synthetic_docs(10, seed=3):
            np.testing.assert_array_equal(a.predict_one(doc.tokens).margins, b.predict_one(doc.tokens).margins)
        status = json.loads(ok("status", "--redis-url", backend_url, "--json").output)
        listed = {m["model"]: m for m in status["models"]}
        assert listed[source]["features"] == listed[copy]["features"] > 0
        assert listed[copy]["memory_bytes"] > 0
        # The imported model keeps learning like any other.
        assert b.learn_one(["brand", "new", "words"], ["grain", "fresh"]).applied
        assert "fresh" in b.store.categories()
    finally:
        client.close()


def test_import_refuses_a_non_empty_model(redis_url: str, trained_model: str, train_file: Path,
                                          tmp_path: Path) -> None:  # fmt: skip
    path = tmp_path / "m.msgpack"
    ok("export", "--redis-url", redis_url, "--model", trained_model, "--out", str(path))
    other = unique_model()
    ok("train", "--redis-url", redis_url, "--model", other, "--input", str(train_file), "--passes", "1",
       "--learner", "perceptron")  # fmt: skip
    refused = invoke("import", "--redis-url", redis_url, "--model", other, "--input", str(path))
    assert refused.exit_code == 2 and "already exists" in refused.output and "--replace" in refused.output
    ok("import", "--redis-url", redis_url, "--model", other, "--input", str(path), "--replace", "--shards", "2")
    client = connect(redis_url)
    try:
        learner = open_learner(client, other, create=False)
        assert learner.name == "balanced-winnow" and learner.store.metadata()["shards"] == "2"
        reference = open_learner(client, trained_model, create=False)
        assert learner.store.n_features() == reference.store.n_features()
    finally:
        client.close()


def test_explain_a_category(redis_url: str, trained_model: str, train_file: Path) -> None:
    base = ["explain", "--redis-url", redis_url, "--model", trained_model, "--category", "grain", "--top", "5"]
    text = ok(*base, "--vocabulary", str(train_file)).output
    assert "top 5 (for)" in text and "bottom 5 (against)" in text
    out = json.loads(ok(*base, "--vocabulary", str(train_file), "--json").output)
    assert len(out["top"]) == 5
    weights = [entry["weight"] for entry in out["top"]]
    assert weights == sorted(weights, reverse=True)
    # Words typical of the category carry its largest weights.
    assert sum(entry["token"].startswith("grain") for entry in out["top"]) >= 4
    without = json.loads(ok(*base, "--json").output)
    assert all(entry["token"] is None for entry in without["top"])
    assert [e["feature_id"] for e in without["top"]] == [e["feature_id"] for e in out["top"]]


def test_explain_a_document(redis_url: str, trained_model: str, client: RedisClient) -> None:
    tokens = ["oil1", "oil2", "oil3", "oil4", "w1", "w2"]
    base = ["explain", "--redis-url", redis_url, "--model", trained_model, "--top", "3"]
    out = json.loads(ok(*base, "--json", "--tokens", *tokens).output)
    learner = open_learner(client, trained_model, create=False)
    prediction = learner.predict_one(tokens)
    assert out["decision"] == list(prediction.categories) and "oil" in out["decision"]
    shown = {part["category"]: part for part in out["categories"]}
    assert shown["oil"]["predicted"] and len(shown["oil"]["features"]) == 3
    assert sum(not part["predicted"] for part in out["categories"]) == 1  # the best category not chosen
    # Contributions add up to the margin (linear rule): score - theta.
    everything = json.loads(ok(*base[:-2], "--top", "100", "--json", "--tokens", *tokens).output)
    oil = next(part for part in everything["categories"] if part["category"] == "oil")
    assert sum(f["weight"] for f in oil["features"]) - 1.0 == pytest.approx(oil["margin"], abs=1e-9)
    assert {f["token"] for f in oil["features"]} == set(tokens)
    text = ok(*base, "--text", "Oil1 oil2 and oil3").output
    assert "decision: " in text and "margin" in text and "oil1" in text


def test_explain_says_what_it_needs(redis_url: str, trained_model: str) -> None:
    base = ["explain", "--redis-url", redis_url, "--model", trained_model]
    assert "--category C, --text" in invoke(*base).output
    assert "put --tokens before" in invoke(*base, "oil1").output
    unknown = invoke(*base, "--category", "nope")
    assert unknown.exit_code == 2 and "no category 'nope'" in unknown.output and "grain" in unknown.output
    missing = invoke("explain", "--redis-url", redis_url, "--model", unique_model(), "--category", "grain")
    assert missing.exit_code == 2 and "no model" in missing.output and trained_model in missing.output


def test_categories(redis_url: str, trained_model: str, client: RedisClient) -> None:
    learner = open_learner(client, trained_model, create=False)
    out = json.loads(ok("categories", "--redis-url", redis_url, "--model", trained_model, "--json").output)
    assert [c["name"] for c in out["categories"]] == list(learner.store.categories())
    assert [c["column"] for c in out["categories"]] == list(range(4))
    updates = learner.store.counters(UPDATES_COUNTER)
    assert {c["name"]: c["updates"] for c in out["categories"]} == {k: int(v) for k, v in updates.items() if k != "*"}
    text = ok("categories", "--redis-url", redis_url, "--model", trained_model).output
    assert "column" in text and "updates" in text and "grain" in text


def test_categories_of_naive_bayes_count_documents(redis_url: str, train_file: Path) -> None:
    model = unique_model()
    ok("train", "--redis-url", redis_url, "--model", model, "--input", str(train_file), "--learner", "multinomial-nb")
    out = json.loads(ok("categories", "--redis-url", redis_url, "--model", model, "--json").output)
    expected: dict[str, int] = {}
    for doc in read_labelled_jsonl(train_file):
        for label in doc.labels:
            expected[label] = expected.get(label, 0) + 1
    assert {c["name"]: c["documents"] for c in out["categories"]} == expected
    assert "documents" in ok("categories", "--redis-url", redis_url, "--model", model).output


def test_status(redis_url: str, trained_model: str) -> None:
    out = json.loads(ok("status", "--redis-url", redis_url, "--json").output)
    model = next(m for m in out["models"] if m["model"] == trained_model)
    assert model["learner"] == "balanced-winnow" and model["shards"] == 4
    assert model["categories"] == 4 and model["features"] > 100 and model["version"] > 0
    assert model["memory_bytes"] > 0 and model["memory_sampled"] is False and model["keys"] > model["features"]
    assert model["updated_at"] and set(model["updates_per_category"]) == {"grain", "oil", "earn", "acq"}
    text = ok("status", "--redis-url", redis_url).output
    for field in (f"model {trained_model!r}", "learner", "features", "memory", "version", "trained at", "updates"):
        assert field in text


def test_status_samples_memory_of_many_keys(redis_url: str, trained_model: str, client: RedisClient) -> None:
    from workers.cli_model import memory_usage

    keys = open_learner(client, trained_model, create=False).store.model_keys()  # type: ignore[attr-defined]
    exact, sampled = memory_usage(client, keys)
    estimate, was_sampled = memory_usage(client, keys, sample=len(keys) // 2)
    assert not sampled and was_sampled
    assert estimate == pytest.approx(exact, rel=0.3)


def test_compact(backend_url: str, train_file: Path) -> None:
    model = unique_model()
    ok("train", "--redis-url", backend_url, "--model", model, "--input", str(train_file), "--passes", "2")
    base = ["compact", "--redis-url", backend_url, "--model", model, "--json"]
    skipped = json.loads(ok(*base, "--min-mistakes", "1000000").output)
    assert skipped["skipped"] and skipped["discarded"] == 0
    dry = json.loads(ok(*base, "--dry-run").output)
    assert 0 < dry["fraction"] < 1 and dry["examined"] > 0
    done = json.loads(ok(*base).output)
    assert (done["examined"], done["discarded"]) == (dry["examined"], dry["discarded"])
    again = json.loads(ok(*base).output)
    assert again["discarded"] == 0 and again["examined"] == done["examined"] - done["discarded"]
    assert "fraction" in ok(*base[:-1]).output


def test_compact_refuses_naive_bayes(redis_url: str, train_file: Path) -> None:
    model = unique_model()
    ok("train", "--redis-url", redis_url, "--model", model, "--input", str(train_file), "--learner", "multinomial-nb")
    refused = invoke("compact", "--redis-url", redis_url, "--model", model)
    assert refused.exit_code == 2 and "mistake-driven" in refused.output


def test_bad_flags_say_what_is_allowed(redis_url: str, train_file: Path, tmp_path: Path, trained_model: str) -> None:
    learner = invoke("train", "--redis-url", redis_url, "--input", str(train_file), "--learner", "svm")
    assert learner.exit_code == 2 and "balanced-winnow" in learner.output and "perceptron" in learner.output
    shards = invoke("train", "--redis-url", redis_url, "--input", str(train_file), "--shards", "0")
    assert shards.exit_code == 2 and "1<=x<=16384" in shards.output
    suffix = invoke("export", "--redis-url", redis_url, "--model", trained_model, "--out", str(tmp_path / "m.txt"))
    assert suffix.exit_code == 2 and "*.msgpack or *.npz" in suffix.output
    fmt = invoke("export", "--redis-url", redis_url, "--model", trained_model, "--out", "m", "--format", "pickle")
    assert fmt.exit_code == 2 and "'msgpack', 'npz'" in fmt.output
    (tmp_path / "junk.npz").write_bytes(b"PK not a zip")
    junk = invoke("import", "--redis-url", redis_url, "--model", unique_model(), "--input", str(tmp_path / "junk.npz"))
    assert junk.exit_code == 1 and "not a readable stream-winnow snapshot" in junk.output
