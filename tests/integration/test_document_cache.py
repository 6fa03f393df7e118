"""DocumentCache against a real redis-server and a real 3-master Redis Cluster (fixtures in tests/conftest.py).

Every test uses its own model name and deletes its keys, so tests share the servers without flushing them.
The clock is faked but starts at the real time: ``EXPIREAT`` is absolute, so keys really live for
``ttl_s`` and the windows a read looks at follow the fake clock.
"""

from __future__ import annotations

import math
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from stream_winnow.errors import ConfigError, StoreError
from stream_winnow.shared.document_cache import DocumentCache
from stream_winnow.wire.codec import DocumentMessage, encode_document
from workers.embedded import free_port, start_redis, start_redis_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CacheFactory = Callable[..., DocumentCache]


class FakeClock:
    """Seconds since the epoch, starting at ``offset_s`` into the current real window of ``window_s``."""

    def __init__(self, window_s: int, offset_s: float = 0.5) -> None:
        self.now = (int(time.time()) // window_s) * window_s + offset_s

    def __call__(self) -> float:
        return self.now


class RecordingClient:
    """A client whose pipelines record the commands they send (name and key) and count executions."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pipelines: list[list[tuple[str, str]]] = []
        self.executions = 0

    def pipeline(self, transaction: bool = False) -> RecordingPipeline:
        commands: list[tuple[str, str]] = []
        self.pipelines.append(commands)
        return RecordingPipeline(self, self.client.pipeline(transaction=transaction), commands)


class RecordingPipeline:
    def __init__(self, owner: RecordingClient, pipe: Any, commands: list[tuple[str, str]]) -> None:
        self.owner, self.pipe, self.commands = owner, pipe, commands

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        self.commands.append((_text(args[0]), _text(args[1])))
        return self.pipe.execute_command(*args, **kwargs)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        self.owner.executions += 1
        return list(self.pipe.execute(raise_on_error=raise_on_error))


def _text(argument: Any) -> str:
    return argument.decode() if isinstance(argument, bytes) else str(argument)


def raw_document(document_id: str, tokens: tuple[str, ...], **kwargs: Any) -> bytes:
    return encode_document(DocumentMessage(document_id, tokens, **kwargs))


def keys_of(client: Any, model: str) -> set[str]:
    return {key.decode() for key in client.scan_iter(match=f"sw:{model}:docs:*", count=1000)}


@pytest.fixture(params=["single", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A ``redis.Redis`` on the single node, then a ``RedisCluster`` on the 3-master cluster."""
    if request.param == "single":
        made: Any = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    else:
        made = RedisCluster.from_url(request.getfixturevalue("redis_cluster_url"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def make_cache(client: Any) -> Iterator[CacheFactory]:
    """``make_cache(ttl_s=240, **options) -> DocumentCache`` with a unique model and a FakeClock; keys deleted after."""
    models: list[str] = []

    def make(ttl_s: int = 240, *, on: Any = None, **options: Any) -> DocumentCache:
        model = f"test-{uuid.uuid4().hex[:12]}"
        models.append(model)
        options.setdefault("clock", FakeClock(max(ttl_s // 24, 1)))
        return DocumentCache(client if on is None else on, model, ttl_s, **options)

    yield make
    for model in models:
        for key in keys_of(client, model):
            client.delete(key)


# -- layout --------------------------------------------------------------------------------------------


def test_windows_are_a_24th_of_the_ttl_and_at_least_a_second() -> None:
    assert DocumentCache(None, "m").window_s == 3600
    assert DocumentCache(None, "m", 240).window_s == 10
    assert DocumentCache(None, "m", 250).window_s == 10
    assert DocumentCache(None, "m", 23).window_s == 1
    assert DocumentCache(None, "m", 1).window_s == 1


@pytest.mark.parametrize("options", [{"ttl_s": 0}, {"ttl_s": -5}, {"ttl_s": 1.5}, {"parts": 0}, {"parts": True}])
def test_bad_settings_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        DocumentCache(None, "m", **options)


def test_documents_are_stored_raw_in_the_hash_of_their_window_and_part(make_cache: CacheFactory, client: Any) -> None:
    cache = make_cache(ttl_s=86_400)
    raw = raw_document("d1", ("oil", "prices"), labels=("crude",), ts_ms=1732875000000)
    cache.put_many({"d1": raw})
    window = math.floor(cache.clock() / 3600)
    key = f"sw:{cache.model}:docs:{window}:{zlib.crc32(b'd1') % 16}"
    assert keys_of(client, cache.model) == {key}
    assert client.hgetall(key) == {b"d1": raw}, "the message is stored byte for byte"
    assert "{" not in key, "no hash tag: the parts spread over a Cluster's slots"


# -- reads ------------------------------------------------------------------------------------------------


def test_tokens_round_trip(make_cache: CacheFactory) -> None:
    cache = make_cache()
    documents = {
        "d1": ("oil", "prices", "rise"),
        "Ünïcode:id {with} braces": ("größe", "日本", "x" * 256),
        "d3": ("only",),
    }
    cache.put_many({i: raw_document(i, tokens, ts_ms=7) for i, tokens in documents.items()})
    assert cache.get_many(list(documents)) == documents
    assert all(type(tokens) is tuple for tokens in cache.get_many(list(documents)).values())


def test_missing_ids_are_absent(make_cache: CacheFactory, client: Any) -> None:
    cache = make_cache()
    assert cache.get_many(["nothing", "here"]) == {}
    cache.put_many({"a": raw_document("a", ("x",)), "b": raw_document("b", ("y",))})
    assert cache.get_many(["missing", "a", "also-missing", "a"]) == {"a": ("x",)}
    assert cache.get_many([]) == {}
    cache.put_many({})
    assert len(keys_of(client, cache.model)) == len({cache.part("a"), cache.part("b")})


def test_newest_put_wins_in_one_window_and_across_windows(make_cache: CacheFactory) -> None:
    cache = make_cache(ttl_s=240)
    clock = cache.clock
    assert isinstance(clock, FakeClock)
    cache.put_many({"d": raw_document("d", ("first",)), "e": raw_document("e", ("e1",))})
    cache.put_many({"d": raw_document("d", ("second",))})
    assert cache.get_many(["d", "e"]) == {"d": ("second",), "e": ("e1",)}
    clock.now += cache.window_s  # the next window: the old one still holds "d" as ("second",)
    cache.put_many({"d": raw_document("d", ("third",))})
    assert cache.get_many(["d", "e"]) == {"d": ("third",), "e": ("e1",)}
    clock.now += 5 * cache.window_s
    cache.put_many({"e": raw_document("e", ("e2",))})
    assert cache.get_many(["e", "d"]) == {"e": ("e2",), "d": ("third",)}


def test_many_ids_spread_over_every_part_and_read_back(make_cache: CacheFactory, client: Any) -> None:
    cache = make_cache(ttl_s=86_400, parts=16)
    documents = {f"doc-{i}": (f"t{i}", "common", f"u{i % 7}") for i in range(2000)}
    ids = list(documents)
    for start in range(0, len(ids), 500):
        cache.put_many({i: raw_document(i, documents[i]) for i in ids[start : start + 500]})
    keys = keys_of(client, cache.model)
    assert {int(key.rsplit(":", 1)[1]) for key in keys} == set(range(16)), "2000 ids touch all 16 parts"
    assert len(keys) == 16, "one hash per part of the one window"
    assert sum(client.hlen(key) for key in keys) == 2000
    unknown = [f"unknown-{i}" for i in range(100)]
    assert cache.get_many(unknown + ids[::-1]) == documents
    if isinstance(client, RedisCluster):
        nodes = {client.get_node_from_key(key).name for key in keys}
        assert len(nodes) >= 2, "the parts spread over the cluster's masters"


def test_a_document_above_the_default_codec_limits_reads_back(make_cache: CacheFactory) -> None:
    """A worker may raise its limits (STREAM_WINNOW_MAX_TOKENS_PER_DOCUMENT): what it cached must read back."""
    cache = make_cache()
    tokens = tuple(f"t{i}" for i in range(15_000))
    raw = msgpack.packb({"id": "big", "tokens": list(tokens)})
    cache.put_many({"big": raw})
    assert cache.get_many(["big"]) == {"big": tokens}


def test_a_value_that_is_not_a_document_reads_as_absent(make_cache: CacheFactory, client: Any) -> None:
    cache = make_cache()
    cache.put_many({"good": raw_document("good", ("a",)), "bad": b"\xc1 not msgpack"})
    assert cache.get_many(["bad", "good"]) == {"good": ("a",)}


# -- round trips --------------------------------------------------------------------------------------


def test_each_call_is_one_pipeline_with_two_commands_per_touched_part(make_cache: CacheFactory, client: Any) -> None:
    recorder = RecordingClient(client)
    cache = make_cache(ttl_s=240, on=recorder, parts=8)
    documents = {f"d{i}": raw_document(f"d{i}", ("x",)) for i in range(50)}
    cache.put_many(documents)
    assert recorder.executions == 1 and len(recorder.pipelines) == 1
    window = cache.window(cache.clock())
    parts = {cache.part(i) for i in documents}
    keys = {cache.key(window, p) for p in parts}
    sent = recorder.pipelines[0]
    assert sorted(name for name, _ in sent) == ["EXPIREAT"] * len(keys) + ["HSET"] * len(keys)
    assert {key for _, key in sent} == keys

    cache.get_many(list(documents))
    assert recorder.executions == 2 and len(recorder.pipelines) == 2
    read = recorder.pipelines[1]
    assert {name for name, _ in read} == {"HMGET"}
    assert len(read) == len(parts) * len(cache.live_windows(cache.clock()))


# -- expiry ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [0.0, 0.5, 9.999])
def test_expireat_keeps_a_document_between_ttl_and_ttl_plus_a_window(
    make_cache: CacheFactory, client: Any, offset: float
) -> None:
    cache = make_cache(ttl_s=240)  # windows of 10 s
    clock = cache.clock
    assert isinstance(clock, FakeClock)
    clock.now = math.floor(clock.now) + offset
    put_at = clock.now
    cache.put_many({"d": raw_document("d", ("x",))})
    (key,) = keys_of(client, cache.model)
    expire_at = cache.expire_at(cache.window(put_at))
    assert 240 < expire_at - put_at <= 250
    assert expire_at == (math.floor(put_at / 10) + 1) * 10 + 240
    # TTL is relative to Redis's clock, the fake one started at the real time: allow a few seconds.
    assert abs(client.ttl(key) - (expire_at - time.time())) <= 3

    clock.now = put_at + 240 - 1
    assert cache.get_many(["d"]) == {"d": ("x",)}, "readable until ttl_s after the put"
    clock.now = expire_at - 0.001
    assert cache.get_many(["d"]) == {"d": ("x",)}
    clock.now = expire_at
    assert cache.get_many(["d"]) == {}, "the window's hash has expired by then: reads skip it"
    clock.now = put_at + 240 + 10 + 1
    assert cache.get_many(["d"]) == {}
    assert client.exists(key) == 1, "Redis still holds it (real time): the read skipped the window"


def test_reads_look_at_exactly_the_windows_that_have_not_expired(make_cache: CacheFactory) -> None:
    for ttl_s in (1, 23, 240, 250, 73, 86_400):
        cache = make_cache(ttl_s=ttl_s)
        window_s = cache.window_s
        for now in (1_000_000_000.0, 1_000_000_000.5, 1_000_000_007.25, 1_000_003_599.999):
            windows = list(cache.live_windows(now))
            assert windows == sorted(windows, reverse=True) and windows[0] == math.floor(now / window_s)
            assert all(cache.expire_at(w) > now for w in windows)
            assert cache.expire_at(windows[-1] - 1) <= now, "the window before the oldest read has expired"
            assert len(windows) <= math.ceil(ttl_s / window_s) + 1


def test_put_at_the_end_of_one_window_and_read_a_ttl_later(make_cache: CacheFactory) -> None:
    cache = make_cache(ttl_s=73)  # windows of 3 s: the TTL is not a whole number of windows
    clock = cache.clock
    assert isinstance(clock, FakeClock)
    for offset in (0.0, 1.0, 2.999):
        clock.now = math.floor(clock.now / 3) * 3 + 3 + offset  # start of a fresh window, plus offset
        put_at = clock.now
        cache.put_many({f"d{offset}": raw_document(f"d{offset}", ("x",))})
        clock.now = put_at + 73 - 0.001
        assert cache.get_many([f"d{offset}"]) == {f"d{offset}": ("x",)}
        clock.now = put_at + 73 + 3 + 0.001
        assert cache.get_many([f"d{offset}"]) == {}


def test_redis_really_expires_the_hashes(make_cache: CacheFactory, client: Any) -> None:
    cache = make_cache(ttl_s=1, clock=time.time)  # windows of 1 s: gone 1 to 2 s after the put
    put_at = time.time()
    cache.put_many({"d": raw_document("d", ("x",))})
    assert cache.get_many(["d"]) == {"d": ("x",)}
    (key,) = keys_of(client, cache.model)
    expire_at = cache.expire_at(cache.window(put_at))
    assert 0 < client.pttl(key) <= 2000
    time.sleep(max(expire_at - time.time(), 0) + 0.2)
    assert client.exists(key) == 0
    assert cache.get_many(["d"]) == {}


# -- failures ---------------------------------------------------------------------------------------------


def test_an_unreachable_redis_raises_a_retriable_store_error() -> None:
    # No retries: redis-py 8 retries a refused connection 10 times with backoff (about 4 s).
    client = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    cache = DocumentCache(client, "m")
    cache.put_many({})  # nothing to send, nothing to fail
    assert cache.get_many([]) == {}
    started = time.monotonic()
    with pytest.raises(StoreError, match="caching documents") as caught:
        cache.put_many({"d": raw_document("d", ("x",))})
    assert caught.value.retriable
    assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)
    with pytest.raises(StoreError, match="reading cached documents"):
        cache.get_many(["d"])
    assert time.monotonic() - started < 2.0


def test_a_stopped_cluster_raises_a_retriable_store_error() -> None:
    with start_redis_cluster(masters=3) as cluster:
        client = RedisCluster.from_url(cluster.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        cache = DocumentCache(client, "m")
        cache.put_many({f"d{i}": raw_document(f"d{i}", ("x",)) for i in range(50)})
        assert len(cache.get_many([f"d{i}" for i in range(50)])) == 50
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="caching documents") as caught:
            cache.put_many({"d": raw_document("d", ("x",))})
        assert caught.value.retriable
        with pytest.raises(StoreError, match="reading cached documents"):
            cache.get_many(["d"])
        assert time.monotonic() - started < 60.0
    finally:
        client.close()


def test_out_of_memory_is_a_retriable_store_error_and_other_replies_are_not() -> None:
    with start_redis() as server:
        client = redis.Redis.from_url(server.url)
        try:
            cache = DocumentCache(client, "m")
            client.config_set("maxmemory", 1)
            client.config_set("maxmemory-policy", "noeviction")
            with pytest.raises(StoreError, match=r"refused while caching documents \(OutOfMemoryError\)") as refused:
                cache.put_many({"d": raw_document("d", ("x",))})
            assert refused.value.retriable
            client.config_set("maxmemory", 0)
            key = cache.key(cache.window(time.time()), cache.part("d"))
            client.set(key, b"a string, not a hash")
            with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
                cache.put_many({"d": raw_document("d", ("x",))})
        finally:
            client.close()
