"""Redis commands written as one packed request, for what a worker sends every batch.

redis-py 8's pipeline runs every argument through its encoder, folds in bookkeeping of its own and
parses each reply through its callbacks. Caching a batch of 170 Reuters documents (the batch a
worker sees at 15,000 documents/s: 16 ``HSET`` of 20 fields, 16 ``EXPIREAT``) cost 1.2 ms of client
CPU that way, on a helper thread that shares the interpreter lock with scoring; written here in one
pass and read back off the same connection, 0.6 ms.
``python -m benchmarks.stages --batch 170``
times the whole write: 7.6 / 6.6 µs a document before, 4.8 / 4.0 after. The weight store's
per-batch read of its write counters goes this way too.

Only a plain ``redis.Redis`` client goes this way; any other client (a ``RedisCluster``, whose
commands go to several nodes) runs the same commands in its own pipeline. Either way the replies
come back in order, an error reply as the ``redis.exceptions.ResponseError`` it is, and only after
every reply has been read (the connection is never left with replies unread). A connection error is
retried by the client's own retry policy, as its pipeline would: only use this for commands that
can be repeated safely (``HSET`` of the same values, ``EXPIREAT`` of the same time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

__all__ = ["Pending", "encode", "execute", "pack", "replies", "transaction"]

Command = Sequence[bytes]


def pack(commands: Sequence[Command]) -> bytes:
    """The RESP request for ``commands`` (each a command name and its arguments, all bytes)."""
    out: list[bytes] = []
    add = out.append
    for command in commands:
        add(b"*%d\r\n" % len(command))
        for argument in command:
            add(b"$%d\r\n" % len(argument))
            add(argument)
            add(b"\r\n")
    return b"".join(out)


def encode(argument: bytes | str | int | float) -> bytes:
    """One argument as redis-py's encoder writes it: bytes as they are, str in UTF-8, numbers by ``repr``.

    >>> [encode(x) for x in (b"k", "é", 7, 0.5)]
    [b'k', b'\\xc3\\xa9', b'7', b'0.5']
    """
    if isinstance(argument, bytes):
        return argument
    if isinstance(argument, str):
        return argument.encode()
    if isinstance(argument, bool) or not isinstance(argument, int | float):
        raise TypeError(f"a Redis argument is bytes, str, int or float; got {type(argument).__name__}")
    return repr(argument).encode()


def execute(client: Any, commands: Sequence[Command]) -> list[Any]:
    """Run ``commands`` in one round trip; their replies in order. Raises the first error reply.

    A plain client's replies are as Redis sent them (``b"OK"``, integers, bulk strings); another
    client's, as its pipeline parses them (``True`` for ``OK``).
    """
    return _raise_first_error(replies(client, commands))


def replies(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``execute``, with each error reply in its place as the ``ResponseError`` it is, not raised.

    For callers that act on particular errors (a ``NoScriptError`` from ``EVALSHA``: load the script,
    send those commands again).
    """
    if not commands:
        return []
    if type(client) is not redis.Redis:
        pipe = client.pipeline(transaction=False)
        for name, *arguments in commands:
            pipe.execute_command(name.decode(), *arguments)  # a cluster routes by the name as str
        return list(pipe.execute(raise_on_error=False))
    request = pack(commands)
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        return list(connection.retry.call_with_retry(
            lambda: _round_trip(connection, request, len(commands)), lambda _error: connection.disconnect()
        ))  # fmt: skip
    finally:
        pool.release(connection)


class Pending:
    """``commands`` sent now, their replies read when asked for (``replies``): the round trip overlaps other work.

    A worker sends its weights' counter read before parsing a batch and reads the reply after, instead
    of waiting for it. The connection is the pool's, held until the replies are read; ``replies`` must
    be called (``close`` is the same, for when they are not wanted). If sending or reading fails on the
    connection, ``replies`` runs the commands again through :func:`execute` and its retries. Another
    client than a plain ``redis.Redis`` runs them in ``replies``, as ``execute`` would.
    """

    __slots__ = ("_client", "_commands", "_connection", "_replies")

    def __init__(self, client: Any, commands: Sequence[Command]) -> None:
        self._client, self._commands = client, commands
        self._connection: Any = None
        self._replies: list[Any] | None = None
        if type(client) is not redis.Redis or not commands:
            return
        pool = client.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_packed_command([pack(commands)])
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            connection.disconnect()  # nothing sent for sure: replies() runs it again
            pool.release(connection)
            return
        self._connection = connection

    def replies(self) -> list[Any]:
        """The replies in order; raises the first error reply (as ``execute``)."""
        if self._replies is not None:
            return self._replies
        connection, self._connection = self._connection, None
        replies: list[Any] | None = None
        if connection is not None:
            try:
                replies = _read(connection, len(self._commands))
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                connection.disconnect()  # replies possibly left unread: never reuse the connection as it is
            except BaseException:
                connection.disconnect()  # likewise, and the caller hears why
                raise
            finally:
                self._client.connection_pool.release(connection)
        if replies is None:
            replies = execute(self._client, self._commands)
        self._replies = replies
        return _raise_first_error(replies)

    def close(self) -> None:
        """Read (and drop) the replies if nobody did, so the connection goes back to the pool clean."""
        if self._connection is not None:
            try:
                self.replies()
            except redis.exceptions.RedisError:
                pass  # not wanted anyway


def transaction(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``MULTI``, ``commands``, ``EXEC`` in one round trip on one connection of a plain ``redis.Redis``:
    all of them run, or none. Returns EXEC's replies, each error reply in its place (not raised).

    A connection error is raised, not retried (the connection is dropped): EXEC may or may not have
    run, and only the caller knows how to tell (the weight store: by its watermarks).
    """
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        request = pack([[b"MULTI"], *commands, [b"EXEC"]])
        *queued, replies = _round_trip(connection, request, len(commands) + 2)
        _raise_first_error(queued)
    except BaseException:
        connection.disconnect()  # possibly in a transaction or with replies unread: never reused as it is
        raise
    finally:
        pool.release(connection)
    return list(replies)


def _raise_first_error(replies: list[Any]) -> list[Any]:
    """``replies``, unless one is an error (a reply, or what a pipeline returned in its place): then the first is raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _read(connection: Any, n_replies: int) -> list[Any]:
    replies: list[Any] = []
    for _ in range(n_replies):
        try:
            replies.append(connection.read_response())
        except ResponseError as error:  # read, and the rest still to read
            replies.append(error)
    return replies


def _round_trip(connection: Any, request: bytes, n_replies: int) -> list[Any]:
    connection.send_packed_command([request])
    return _read(connection, n_replies)
