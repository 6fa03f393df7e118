"""Recently seen documents' tokens, kept in Redis for labelled events that arrive without tokens.

An editor's label may come minutes or hours after the document; the event then
carries only the document's ``id``. Workers store every scored document's
tokens under ``sw:<model>:doc:<id>`` (msgpack, with a TTL, a day by default).
An event whose document has expired (or was never seen) cannot be learned
from: the worker sends it to the dead-letter topic with reason
``document-not-cached``, so it can be replayed with its tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import redis

from stream_winnow.errors import StoreError


class DocumentCache:
    """Tokens by document id, with a time to live; one round trip per batch either way."""

    def __init__(self, client: Any, model: str, ttl_s: int = 86_400) -> None:
        self.client = client
        self.model = model
        self.ttl_s = ttl_s

    def key(self, document_id: str) -> str:
        return f"sw:{self.model}:doc:{document_id}"

    def put_many(self, documents: Mapping[str, Sequence[str]]) -> None:
        if not documents:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for document_id, tokens in documents.items():
                pipe.set(self.key(document_id), msgpack.packb(list(tokens)), ex=self.ttl_s)
            pipe.execute()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            raise StoreError(f"cannot cache documents in Redis: {error}") from error

    def get_many(self, document_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Tokens of the ids still cached; missing ids are absent from the result."""
        if not document_ids:
            return {}
        try:
            pipe = self.client.pipeline(transaction=False)
            for document_id in document_ids:
                pipe.get(self.key(document_id))
            values = pipe.execute()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            raise StoreError(f"cannot read cached documents from Redis: {error}") from error
        return {
            document_id: tuple(msgpack.unpackb(value))
            for document_id, value in zip(document_ids, values, strict=True)
            if value is not None
        }
