"""The weight store in Redis (single node or Cluster): ``RedisStore``; see ``store`` for the layout."""

from stream_winnow.stores.redis.store import RedisStore

__all__ = ["RedisStore"]
