"""Where a model sits in Redis: its key names, hash tags and shards.

Keys (several models live side by side in one Redis)::

    sw:{<model>:<shard>}:f:<feature id>   a feature's row (shard = feature id % shards)
    sw:{<model>:<shard>}:n                 rows stored in the shard
    sw:{<model>:<shard>}:w                 writes to the shard's rows (a row cache's validity token)
    sw:{<model>:<shard>}:c                 the last CHANGE_LOG_WRITES writes' feature ids (list of int64)
    sw:{<model>:<shard>}:wm                the shard's watermarks: input partition -> last offset applied
    sw:{<model>}:categories / :columns     category names in column order / name -> column
    sw:{<model>}:layout / :metadata        the tables' layout / the model's settings
    sw:{<model>}:domain                    the domain model the weights were learned with (an .npz), if any
    sw:{<model>}:version / :epoch          learning bumps the version; compact and imports the epoch
    sw:{<model>}:counter:<name>            bookkeeping counters (updates per category, NB's totals)
    sw:{<model>}:wm                        the model part's watermarks, and events seen per partition
    sw:{<model>}:seen:<partition>          the last ``seen_window`` event-id hashes of a partition (a ring)

Every key of a shard shares the hash tag ``{<model>:<shard>}`` (one Cluster slot),
so one Lua script updates a shard atomically; model-level keys share ``{<model>}``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from stream_winnow.errors import ConfigError
from stream_winnow.stores.base import MODEL_PART

__all__ = ["CHANGE_LOG_WRITES", "MODEL_NAME", "ModelKeys", "feature_id_of", "hash_tag_of"]

# Model names become part of keys and hash tags: no braces (hash tags), no colons (key separator), no glob chars.
MODEL_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
# A Cluster has 16,384 hash slots: more shards than that could not each have a slot.
MAX_SHARDS = 16384
# Writes a shard's change log keeps: a cache that fell further behind rereads the shard's rows it needs.
# An entry is 8 bytes a row written (a 1-pod Reuters batch writes about 1,200 rows a shard: 10 KB).
CHANGE_LOG_WRITES = 32
# Row keys remembered per store (about 100 bytes each): far more than a model's features, bounded anyway.
ROW_KEY_CACHE = 2_000_000


class ModelKeys:
    """Every key name of one model split into ``shards`` shards; raises ``ConfigError`` on a bad name or count.

    >>> keys = ModelKeys("news", shards=16)
    >>> keys.row_key(21 % 16, 21), keys.count_keys[5], keys.watermark_key(5)
    (b'sw:{news:5}:f:21', b'sw:{news:5}:n', b'sw:{news:5}:wm')
    >>> keys.version_key, keys.watermark_key(MODEL_PART), keys.seen_key("labels:0")
    ('sw:{news}:version', b'sw:{news}:wm', b'sw:{news}:seen:labels:0')
    """

    def __init__(self, model: str, shards: int) -> None:
        if not MODEL_NAME.fullmatch(model):
            raise ConfigError(f"model name must match {MODEL_NAME.pattern}; got {model!r}")
        if not 1 <= shards <= MAX_SHARDS:
            raise ConfigError(f"shards must be in 1..{MAX_SHARDS}; got {shards}")
        self.model = model
        self.shards = shards
        self.shard_prefix = [f"sw:{{{model}:{s}}}:".encode() for s in range(shards)]
        self.count_keys = [prefix + b"n" for prefix in self.shard_prefix]
        # Per shard, a counter every row write bumps: a row cache knows its rows of the shard exact while it holds.
        self.write_keys = [prefix + b"w" for prefix in self.shard_prefix]
        # Per shard, which rows each of its last writes changed: a cache behind by a few writes rereads only those.
        self.change_keys = [prefix + b"c" for prefix in self.shard_prefix]
        meta = f"sw:{{{model}}}:"
        self.meta_prefix = meta
        self.categories_key = meta + "categories"
        self.columns_key = meta + "columns"
        self.layout_key = meta + "layout"
        self.metadata_key = meta + "metadata"
        self.domain_key = meta + "domain"
        self.version_key = meta + "version"
        self.epoch_key = meta + "epoch"
        self.model_watermark_key = (meta + "wm").encode()
        # Every row key of the model, and every key of it, as SCAN patterns.
        self.rows_pattern = f"sw:{{{model}:*}}:f:*".encode()
        self.model_patterns = (f"sw:{{{model}}}:*".encode(), f"sw:{{{model}:*}}:*".encode())
        self._row_keys_cache: dict[int, bytes] = {}

    def row_key(self, shard: int, feature_id: int) -> bytes:
        """The row key of ``feature_id`` (in ``shard``), remembered: a learning batch asks for the same ones again."""
        key = self._row_keys_cache.get(feature_id)
        if key is None:
            if len(self._row_keys_cache) > ROW_KEY_CACHE:
                self._row_keys_cache.clear()
            key = self._row_keys_cache[feature_id] = self.shard_prefix[shard] + b"f:%d" % feature_id
        return key

    def row_keys(self, feature_ids: Sequence[int], shards: Sequence[int]) -> list[bytes]:
        """The row keys of ``feature_ids``, each in its shard (not remembered: reads ask for many once)."""
        prefix = self.shard_prefix
        return [prefix[s] + b"f:%d" % f for f, s in zip(feature_ids, shards, strict=True)]

    def watermark_key(self, part: int) -> bytes:
        """The watermarks hash of a shard, or of the model part (``MODEL_PART``)."""
        return self.model_watermark_key if part == MODEL_PART else self.shard_prefix[part] + b"wm"

    def seen_key(self, source: str) -> bytes:
        """The ring of the last events seen from ``source`` (an input partition)."""
        return (self.meta_prefix + "seen:" + source).encode()

    def counter_key(self, name: str) -> str:
        """The hash of the bookkeeping counters ``name`` (field -> amount)."""
        return self.meta_prefix + "counter:" + name


def hash_tag_of(key: bytes) -> bytes:
    """The hash tag of a key of a model (the Cluster slot it sits in).

    >>> hash_tag_of(b"sw:{news:5}:f:21"), hash_tag_of(b"sw:{news}:version")
    (b'{news:5}', b'{news}')
    """
    return key[key.index(b"{") : key.index(b"}") + 1]


def feature_id_of(row_key: bytes) -> int:
    """The feature id a row key names.

    >>> feature_id_of(b"sw:{news:5}:f:21")
    21
    """
    return int(row_key.rsplit(b":", 1)[1])
