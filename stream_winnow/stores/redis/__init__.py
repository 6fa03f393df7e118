"""The weight store in Redis (single node or Cluster): ``RedisStore``.

One concept a module:

- ``store``: ``RedisStore``, the ``WeightStore`` that puts the parts below together;
- ``keys``: where a model sits in Redis (key names, hash tags, shards);
- ``rows``: what a feature's row holds (float32 values of every table) and how it is decoded;
- ``scripts`` and ``lua/``: the Lua scripts, loaded by name, registered and run;
- ``reads`` / ``writes``: rows and bookkeeping read, deltas applied and rows deleted, each in one round trip;
- ``cluster``: single node or Cluster, commands routed to a node or spread over every primary;
- ``errors``: Redis failures as ``StoreError`` (retriable) or ``ConfigError``.
"""

from stream_winnow.stores.redis.store import RedisStore

__all__ = ["RedisStore"]
