"""Recently seen documents, kept in Redis for labelled events that arrive without tokens.

An editor's label may come minutes or hours after the document; the event then
carries only the document's ``id``. Workers store every scored document's raw
message (the msgpack map exactly as it came from the ``documents`` topic, not
re-encoded) and read its tokens back with :func:`~stream_winnow.wire.codec.decode_document`
when such an event comes. An event whose document has expired (or was never
seen) cannot be learned from: the worker sends it to the dead-letter topic with
reason ``document-not-cached``, so it can be replayed with its tokens.

Layout: time windows of ``window_s = max(ttl_s // 24, 1)`` seconds (an hour for
the default day), each split into ``parts`` (16) Redis hashes::

    sw:<model>:docs:<w>:<p>    hash  document id -> raw message
        w = floor(now_s / window_s)             the window the document was put in
        p = zlib.crc32(id as UTF-8) % parts     its part

A batch is written in one round trip (on a single node one request packed by
:mod:`stream_winnow.wire.resp`, on a Cluster redis-py's pipeline): one ``HSET`` with all its
documents of a part and one ``EXPIREAT key (w + 1) * window_s + ttl_s`` per
touched key. A document therefore stays readable for at least ``ttl_s`` and at
most ``ttl_s + window_s`` seconds (a day to a day and an hour by default): a
window's hash expires as a whole, an hour after its last possible write plus
the TTL. The bound is by the writer's clock (``EXPIREAT`` is absolute), so a
worker clock that is ``s`` seconds ahead of Redis's keeps documents ``s``
seconds longer, one behind keeps them shorter. Reads look a part's ids up with
one ``HMGET`` in every window whose ``EXPIREAT`` is still in the future (at most
``ceil(ttl_s / window_s) + 1``, 25 by default), again in one pipeline; the
newest window wins, and within a window the last write wins, so the newest put
of an id wins (as long as the writers' clocks agree to within a window).

Why: the previous layout, one ``SET sw:<model>:doc:<id> ... EX ttl`` per
document, cost about 19 % of the worker's scoring time: redis-py builds one
command and parses one reply per document, and Redis keeps one key with its
own TTL each. Now it is two commands per part and batch (at most ``2 * parts``, 32,
whatever the batch size), and Redis keeps ``parts * (ceil(ttl_s / window_s) + 1)`` keys
per model (400 by default), whatever the traffic. ``python -m benchmarks.stages``
(batches of 1,000 Reuters documents, redis-server 6.2 on the same 2-core machine,
redis-py with hiredis): one ``SET`` per document took 7.1 us a document, ``put_many``
1.3 us. A one-off measurement on a 3-master Cluster gave 17.6 against 3.0 us.

The keys carry no hash tag, so on a Redis Cluster the ``parts`` hashes of a
window spread over the slots (and nodes); every command names one key, so the
same code works with a ``redis.Redis`` and a ``redis.cluster.RedisCluster``
(whose pipeline sends each node its commands). Memory is the documents of the
last ``ttl_s`` to ``ttl_s + window_s`` seconds: at most 1/24 more than exact
per-document TTLs would hold (1/48 on average).
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from stream_winnow.errors import CodecError, ConfigError, StoreError
from stream_winnow.wire import resp
from stream_winnow.wire.codec import CodecLimits, decode_document

__all__ = ["DocumentCache"]

log = logging.getLogger(__name__)

# Windows per TTL: a document outlives its TTL by at most one window (1/24 of it).
_WINDOWS_PER_TTL = 24
# Stored messages were validated by the worker (with its own, possibly raised, limits) before
# they were put, so reads check only their structure, not the configurable bounds.
_STORED_LIMITS = CodecLimits(
    max_tokens_per_document=2**62, max_labels=2**62, max_message_bytes=2**62, max_token_chars=2**62
)
# Errors that retrying later can fix: Redis unreachable or slow (BusyLoadingError, "LOADING", is a
# ConnectionError; ClusterDownError and MasterDownError are ClusterErrors) ...
_UNANSWERED = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
)
# ... or refusing for now (out of memory, failing over); redis-py has classes for some replies,
# the others are recognised by their first word. Any other reply is a bug and is raised as it is.
_REFUSED = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError, redis.exceptions.TryAgainError)
_RETRIABLE_REPLIES = ("OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")
# How redis-py prefixes the reply of a pipeline's failed command.
_PIPELINE_PREFIX = " of pipeline caused error: "


class DocumentCache:
    """Raw document messages by id for ``ttl_s`` to ``ttl_s + window_s`` seconds; one round trip per batch.

    ``client`` is a ``redis.Redis`` or ``redis.cluster.RedisCluster`` (``decode_responses=False``).
    ``parts`` hashes per window spread a batch over the slots of a Cluster; ``clock`` gives the time
    in seconds since the epoch (tests pass a fake one). ``limits`` bound the messages read back; by
    default none, since every message put was already validated.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        ttl_s: int = 86_400,
        *,
        parts: int = 16,
        limits: CodecLimits = _STORED_LIMITS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        for name, value in (("ttl_s", ttl_s), ("parts", parts)):
            if type(value) is not int or value < 1:
                raise ConfigError(f"DocumentCache {name} must be a positive integer, got {value!r}")
        self.client = client
        self.model = model
        self.ttl_s = ttl_s
        self.parts = parts
        self.window_s = max(ttl_s // _WINDOWS_PER_TTL, 1)
        self.limits = limits
        self.clock = clock
        self._prefix = f"sw:{model}:docs:"

    def __repr__(self) -> str:
        return f"DocumentCache(model={self.model!r}, ttl_s={self.ttl_s}, window_s={self.window_s}, parts={self.parts})"

    # -- layout -------------------------------------------------------------------------------------
    def key(self, window: int, part: int) -> str:
        """The hash of window ``window`` and part ``part``: ``sw:<model>:docs:<window>:<part>``."""
        return f"{self._prefix}{window}:{part}"

    def part(self, document_id: str) -> int:
        """The part an id is stored in."""
        return zlib.crc32(document_id.encode()) % self.parts

    def window(self, now_s: float) -> int:
        """The window a document put at ``now_s`` goes to."""
        return math.floor(now_s / self.window_s)

    def expire_at(self, window: int) -> int:
        """When window ``window``'s hashes expire (seconds since the epoch, for ``EXPIREAT``)."""
        return (window + 1) * self.window_s + self.ttl_s

    def live_windows(self, now_s: float) -> range:
        """The windows whose hashes have not expired at ``now_s``, newest first."""
        # expire_at(w) > now_s  <=>  w >= floor((now_s - ttl_s) / window_s)
        oldest = math.floor((now_s - self.ttl_s) / self.window_s)
        return range(self.window(now_s), oldest - 1, -1)

    # -- writes and reads ---------------------------------------------------------------------------
    def put_many(self, documents: Mapping[str, bytes]) -> None:
        """Cache raw, already validated document messages by id, as they are (one round trip)."""
        if not documents:
            return
        window = self.window(self.clock())
        parts = self.parts
        by_part: dict[int, list[bytes]] = {}
        for document_id, raw in documents.items():
            field = document_id.encode()
            part = zlib.crc32(field) % parts
            fields = by_part.get(part)
            if fields is None:
                by_part[part] = [field, raw]
            else:
                fields.append(field)
                fields.append(raw)
        expire_at = str(self.expire_at(window)).encode()
        commands: list[list[bytes]] = []
        for part, fields in by_part.items():
            key = self.key(window, part).encode()
            commands.append([b"HSET", key, *fields])
            commands.append([b"EXPIREAT", key, expire_at])
        with _store_errors("caching documents"):
            resp.execute(self.client, commands)  # packed in one pass: half redis-py's client CPU

    def get_many(self, document_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Tokens of the ids still cached (the newest put of each); missing ids are absent from the result."""
        if not document_ids:
            return {}
        windows = self.live_windows(self.clock())
        by_part: dict[int, list[str]] = {}
        for document_id in dict.fromkeys(document_ids):
            by_part.setdefault(self.part(document_id), []).append(document_id)
        with _store_errors("reading cached documents"):
            pipe = self.client.pipeline(transaction=False)
            for part, ids in by_part.items():
                for window in windows:  # newest first
                    pipe.execute_command("HMGET", self.key(window, part), *ids)
            replies = iter(pipe.execute())
        found: dict[str, bytes] = {}
        for ids in by_part.values():
            for _ in windows:
                for document_id, raw in zip(ids, next(replies), strict=True):
                    if raw is not None and document_id not in found:
                        found[document_id] = raw
        tokens: dict[str, tuple[str, ...]] = {}
        for document_id in dict.fromkeys(document_ids):
            raw = found.get(document_id)
            if raw is None:
                continue
            try:
                tokens[document_id] = decode_document(raw, self.limits).tokens
            except CodecError as error:  # not written by put_many (or by another version): as if absent
                log.warning("cached document %r cannot be decoded (%s); treating it as not cached", document_id, error)
        return tokens

    def sample(self, max_documents: int) -> Iterator[tuple[str, tuple[str, ...]]]:
        """(id, tokens) of up to ``max_documents`` cached documents, newest window first: the unlabelled
        sample a domain model is fitted on (``stream-winnow domain fit --from-cache``).

        Reads with ``HSCAN`` (1,000 fields a call), so Redis is never blocked by a large window.
        """
        seen: set[str] = set()
        for window in self.live_windows(self.clock()):
            for part in range(self.parts):
                with _store_errors("sampling cached documents"):
                    fields = self.client.hscan_iter(self.key(window, part), count=1_000)
                    for field, raw in fields:
                        document_id = field.decode(errors="replace")
                        if document_id in seen:
                            continue
                        try:
                            tokens = decode_document(raw, self.limits).tokens
                        except CodecError:
                            continue
                        seen.add(document_id)
                        yield document_id, tokens
                        if len(seen) >= max_documents:
                            return


@contextmanager
def _store_errors(doing: str) -> Iterator[None]:
    """Turn "Redis is unreachable or unwell" into a retriable ``StoreError``."""
    try:
        yield
    except _UNANSWERED as error:
        raise StoreError(f"Redis did not answer while {doing}: {error}") from error
    except redis.exceptions.ResponseError as error:
        message = str(error)
        reply = message.partition(_PIPELINE_PREFIX)[2] or message
        if isinstance(error, _REFUSED) or reply.startswith(_RETRIABLE_REPLIES):
            raise StoreError(f"Redis refused while {doing} ({type(error).__name__}): {message}") from error
        raise
