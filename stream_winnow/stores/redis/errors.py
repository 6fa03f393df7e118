"""Redis failures as the store's errors: ``StoreError`` where retrying later can help, ``ConfigError`` for a clash."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from stream_winnow.errors import ConfigError, StoreError

__all__ = ["LAYOUT_ERROR", "RETRIABLE_REPLIES", "store_errors"]

# A script error that means "this model name holds another model" rather than "Redis is unwell".
LAYOUT_ERROR = "SWLAYOUT"
# Redis errors that retrying later can fix (the rest are bugs and propagate as they are).
RETRIABLE_REPLIES = ("OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")


@contextmanager
def store_errors(doing: str) -> Iterator[None]:
    """Turn "Redis is unreachable or unwell" into ``StoreError`` (retriable); a layout clash into ``ConfigError``."""
    try:
        yield
    except StoreError:
        raise
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.ClusterError,
        redis.exceptions.RedisClusterException,
    ) as exc:
        raise StoreError(f"Redis did not answer while {doing}: {exc}") from exc
    except (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError, redis.exceptions.TryAgainError) as exc:
        # redis-py drops these replies' codes from the message, so they are told apart by class.
        raise StoreError(f"Redis refused while {doing}: {type(exc).__name__}: {exc}") from exc
    except redis.exceptions.ResponseError as exc:
        message = str(exc)
        if message.startswith(LAYOUT_ERROR) or f" {LAYOUT_ERROR} " in message:
            raise ConfigError(f"this model name holds a model with other tables: {message}") from exc
        if message.startswith(RETRIABLE_REPLIES):
            raise StoreError(f"Redis refused while {doing}: {message}") from exc
        raise
