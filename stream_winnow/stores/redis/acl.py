"""Least privilege in Redis: the ACL rules of a worker's user, limited to one model's keys.

A worker needs about twenty commands (reads and writes of rows, watermarks and
counters, its Lua scripts, the document cache, the peers' heartbeat) on the keys
of its model only. ``worker_acl_rules("news")`` gives them as ``ACL SETUSER``
arguments; an operator adds the password::

    ACL SETUSER sw-news reset on >PASSWORD <rules...>

or puts the same line in an ``aclfile``. Everything else is refused with
``NOPERM``: other models' and other applications' keys, ``FLUSHALL``, ``CONFIG``,
``KEYS``, ``DEBUG``, scripts that name keys outside the model. (``SCAN``, with which a
starting worker fills its cache from the model's rows, can list other keys' names; Redis
ACLs do not filter it, but their values stay out of reach.) The operator's
commands (``train``, ``import``, ``export``, ``compact``, ``status``, ``domain fit
--from-cache``) scan and rewrite whole models and keep the default (or an admin) user.

>>> rules = worker_acl_rules("news")
>>> rules[:5]
['resetkeys', '~sw:{news}:*', '~sw:{news:*}:*', '~sw:news:docs:*', 'resetchannels']
>>> "+evalsha" in rules and "+flushall" not in rules
True
"""

from __future__ import annotations

from stream_winnow.stores.redis.keys import ModelKeys

__all__ = ["CLUSTER_COMMANDS", "WORKER_COMMANDS", "worker_acl_rules"]

# What a worker sends, and what its Lua scripts call (lua/*.lua; a script runs with its caller's
# rights): found by running workers (scoring, learning with peers, the document cache) under a user
# with these alone; the integration test checks that ACL LOG refused none of it.
WORKER_COMMANDS: tuple[str, ...] = (
    "ping", "info", "select",
    "get", "set", "setrange", "mget", "mset", "incr", "incrby", "exists", "scan",
    "hget", "hset", "hmget", "hgetall", "hincrbyfloat",
    "lpush", "rpush", "ltrim", "lrange", "llen",
    "zadd", "zrem", "zcard", "zremrangebyscore",
    "expireat",
    "evalsha", "eval", "script|load", "script|exists",
    "multi", "exec",
)  # fmt: skip
# redis-py names itself on connecting (CLIENT SETINFO, Redis >= 7.2; older servers do not know the command).
SETINFO_SINCE = (7, 2)
# A Cluster client also maps the slots and reads the command table.
CLUSTER_COMMANDS: tuple[str, ...] = ("cluster|slots", "cluster|shards", "cluster|nodes", "command", "readonly")


def worker_acl_rules(model: str, *, cluster: bool = False, server: tuple[int, int] = SETINFO_SINCE) -> list[str]:
    """``ACL SETUSER`` rules (without user name, ``on`` or password) for the workers of ``model`` on a
    Redis of version ``server`` (major, minor)."""
    keys = ModelKeys(model, 1)  # checks the name; the shard count does not change the patterns
    patterns = [f"~{pattern.decode()}" for pattern in keys.model_patterns] + [f"~sw:{model}:docs:*"]
    commands = WORKER_COMMANDS + (CLUSTER_COMMANDS if cluster else ())
    commands += ("client|setinfo",) if server >= SETINFO_SINCE else ()
    return ["resetkeys", *patterns, "resetchannels", "-@all", *(f"+{c}" for c in commands)]
