"""The last N labelled events' outcomes per model, for per-category mistake rates (``stream-winnow status``).

Workers push one entry per labelled event (its labels and the categories it
found mistaken) to a capped Redis list ``sw:{<model>}:recent`` (LPUSH + LTRIM,
one round trip per batch). A category's mistake rate is the share of the
window's events that were mistaken on it, over the events that involved it
(labelled with it or mistaken on it): 0.25 means one such event in four
needed an update for that category.

>>> mistake_rates([(("grain",), ("grain",)), (("grain", "wheat"), ()), (("crude",), ("grain",))])
{'crude': (0, 1), 'grain': (2, 3), 'wheat': (0, 1)}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import redis

from stream_winnow.errors import StoreError

# Events kept per model: enough for a rate per category of a newsroom's day, small in memory (~100 kB).
DEFAULT_WINDOW = 1000

Outcome = tuple[tuple[str, ...], tuple[str, ...]]  # (labels, mistaken categories)


def outcomes_key(model: str) -> str:
    return f"sw:{{{model}}}:recent"


def push_outcomes(client: Any, model: str, outcomes: Sequence[Outcome], window: int = DEFAULT_WINDOW) -> None:
    """Record outcomes (oldest first) and keep only the newest ``window``."""
    if not outcomes:
        return
    key = outcomes_key(model)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.lpush(key, *[msgpack.packb([list(labels), list(mistaken)]) for labels, mistaken in outcomes])
        pipe.ltrim(key, 0, window - 1)
        pipe.execute()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        raise StoreError(f"cannot record outcomes in Redis: {error}") from error


def recent_outcomes(client: Any, model: str) -> list[Outcome]:
    """The window's outcomes, newest first."""
    raw = client.lrange(outcomes_key(model), 0, -1)
    return [(tuple(labels), tuple(mistaken)) for labels, mistaken in (msgpack.unpackb(r) for r in raw)]


def mistake_rates(outcomes: Sequence[Outcome]) -> dict[str, tuple[int, int]]:
    """Per category: (events mistaken on it, events that involved it), sorted by name."""
    mistaken: dict[str, int] = {}
    involved: dict[str, int] = {}
    for labels, wrong in outcomes:
        for category in set(labels) | set(wrong):
            involved[category] = involved.get(category, 0) + 1
        for category in set(wrong):
            mistaken[category] = mistaken.get(category, 0) + 1
    return {c: (mistaken.get(c, 0), involved[c]) for c in sorted(involved)}
