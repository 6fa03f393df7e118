"""The store's Lua scripts: read from ``lua/<name>.lua`` and registered with a client.

Each file opens with a ``--`` comment header that says what the script takes and returns. Redis gets
the text from the first line after that header on (the blank line below it), so editing a header
leaves a script's SHA1, the name ``EVALSHA`` calls it by, as it was: workers before and after such an
edit share Redis's script cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

__all__ = ["StoreScripts", "register", "source"]


@cache
def source(name: str) -> str:
    """The script ``lua/<name>.lua`` as Redis runs it: the file without its ``--`` header.

    >>> source("delete").splitlines()[1]
    'local n = 0'
    """
    text = resources.files("stream_winnow.stores.redis").joinpath("lua", f"{name}.lua").read_text("utf-8")
    lines = text.splitlines(keepends=True)
    body = next((i for i, line in enumerate(lines) if not line.startswith("--")), len(lines))
    return "".join(lines[body:])


@dataclass(frozen=True)
class StoreScripts:
    """The store's scripts, registered with one client (a script Redis forgot is loaded again by its ``sha``)."""

    apply_delta: Script  # a shard's share of a batch's delta and its watermarks (lua/apply_delta.lua)
    apply_model: Script  # the model part's counters, version, seen events and watermarks (lua/apply_model.lua)
    ensure_categories: Script  # the layout check and a column per category name (lua/ensure_categories.lua)
    delete: Script  # a shard's rows deleted, its count and write counter kept true (lua/delete.lua)


def register(client: redis.Redis | RedisCluster) -> StoreScripts:
    """Every script of the store, registered with ``client`` (no round trip: each SHA1 is computed here)."""
    return StoreScripts(
        apply_delta=client.register_script(source("apply_delta")),
        apply_model=client.register_script(source("apply_model")),
        ensure_categories=client.register_script(source("ensure_categories")),
        delete=client.register_script(source("delete")),
    )
