"""stream_winnow.wire.resp against a real redis-server and a real 3-master Redis Cluster (fixtures in tests/conftest.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from stream_winnow.wire import resp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class CountingConnection(redis.Connection):
    """A real connection that counts the requests it writes."""

    writes = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).writes += 1
        super().send_packed_command(command, check_health)


def test_pack_writes_each_command_as_a_resp_array_of_bulk_strings() -> None:
    assert resp.pack([[b"SET", b"k", b"v"]]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
    binary = b"\r\n\x00\xff"  # lengths, not delimiters, frame a value
    assert resp.pack([[b"PING"], [b"ECHO", binary]]) == b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$4\r\n" + binary + b"\r\n"
    assert resp.pack([]) == b""


def test_commands_go_in_one_write_and_replies_come_back_in_order(redis_url: str) -> None:
    client = redis.Redis(connection_pool=redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection))
    key = f"test-resp-{uuid.uuid4().hex}"
    try:
        client.ping()  # connected (its handshake is written too), and back in the pool
        CountingConnection.writes = 0
        replies = resp.execute(client, [
            [b"HSET", key.encode(), b"a", b"1", b"b", b"\r\n"], [b"HSET", key.encode(), b"a", b"2"],
            [b"EXPIREAT", key.encode(), b"4102444800"], [b"HGET", key.encode(), b"b"],
        ])  # fmt: skip
        assert replies == [2, 0, 1, b"\r\n"]
        assert CountingConnection.writes == 1
        assert client.hgetall(key) == {b"a": b"2", b"b": b"\r\n"}
        assert resp.execute(client, []) == [] and CountingConnection.writes == 2  # hgetall's; nothing sent for []
    finally:
        client.delete(key)
        client.close()


def test_an_error_reply_is_raised_once_every_reply_is_read(redis_db: Any) -> None:
    redis_db.set("a-string", b"x")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        resp.execute(redis_db, [[b"SET", b"before", b"1"], [b"HSET", b"a-string", b"f", b"v"], [b"SET", b"after", b"2"]])
    # Redis ran the commands around the error, and the pooled connection holds no unread reply.
    assert resp.execute(redis_db, [[b"GET", b"before"], [b"GET", b"after"]]) == [b"1", b"2"]


def test_a_connection_killed_between_calls_is_reconnected_and_the_commands_sent_again(redis_db: Any) -> None:
    assert resp.execute(redis_db, [[b"CLIENT", b"SETNAME", b"victim"]]) == [b"OK"]
    killer = redis.Redis(connection_pool=redis.ConnectionPool(**redis_db.connection_pool.connection_kwargs))
    try:
        victims = [c for c in killer.client_list() if c.get("name") == "victim"]
        assert len(victims) == 1
        killer.client_kill_filter(_id=victims[0]["id"])
    finally:
        killer.close()
    assert resp.execute(redis_db, [[b"HSET", b"h", b"f", b"v"], [b"HGET", b"h", b"f"]]) == [1, b"v"]
    assert redis_db.hgetall("h") == {b"f": b"v"}


def test_a_cluster_client_runs_the_commands_in_its_own_pipeline(redis_cluster_url: str) -> None:
    client = RedisCluster.from_url(redis_cluster_url)
    keys = [f"test-resp-{uuid.uuid4().hex}-{i}".encode() for i in range(12)]  # spread over the nodes' slots
    try:
        assert len({client.keyslot(key) for key in keys}) > 1
        replies = resp.execute(client, [[b"SET", key, b"%d" % i] for i, key in enumerate(keys)] + [[b"GET", keys[5]]])
        assert replies == [True] * len(keys) + [b"5"]
        assert [client.get(key) for key in keys] == [b"%d" % i for i in range(len(keys))]
    finally:
        client.delete(*keys)
        client.close()


def test_a_pending_request_is_sent_at_once_and_its_replies_read_later(redis_db: Any) -> None:
    """Pending writes the request before it returns: Redis runs it while the caller works on."""
    pending = resp.Pending(redis_db, [[b"SET", b"early", b"1"], [b"INCR", b"n"], [b"GET", b"early"]])
    observer = redis.Redis(connection_pool=redis.ConnectionPool(**redis_db.connection_pool.connection_kwargs))
    try:
        deadline = 50
        while observer.get("early") is None and deadline:  # executed though no reply was read yet
            deadline -= 1
            observer.ping()
        assert observer.get("early") == b"1"
    finally:
        observer.close()
    assert pending.replies() == [b"OK", 1, b"1"]
    assert pending.replies() == [b"OK", 1, b"1"]  # read once, kept
    assert resp.execute(redis_db, [[b"GET", b"n"]]) == [b"1"]  # the connection went back clean


def test_a_pending_error_reply_is_raised_and_an_unread_one_is_closed_clean(redis_db: Any) -> None:
    redis_db.set("a-string", b"x")
    pending = resp.Pending(redis_db, [[b"HSET", b"a-string", b"f", b"v"], [b"SET", b"after", b"2"]])
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        pending.replies()
    dropped = resp.Pending(redis_db, [[b"SET", b"dropped", b"3"], [b"HSET", b"a-string", b"f", b"v"]])
    dropped.close()  # replies read and dropped, the error too
    assert resp.execute(redis_db, [[b"GET", b"after"], [b"GET", b"dropped"]]) == [b"2", b"3"]


def test_a_pending_request_whose_connection_dies_runs_again(redis_db: Any) -> None:
    assert resp.execute(redis_db, [[b"CLIENT", b"SETNAME", b"victim"]]) == [b"OK"]
    pending = resp.Pending(redis_db, [[b"CLIENT", b"GETNAME"], [b"BLPOP", b"never-pushed", b"2"]])
    killer = redis.Redis(connection_pool=redis.ConnectionPool(**redis_db.connection_pool.connection_kwargs))
    try:
        victims = [c for c in killer.client_list() if c.get("name") == "victim"]
        assert len(victims) == 1
        killer.client_kill_filter(_id=victims[0]["id"])  # while it waits on BLPOP, before any reply is read
    finally:
        killer.close()
    assert pending.replies() == [None, None]  # sent again on a new connection (no name), BLPOP timed out
