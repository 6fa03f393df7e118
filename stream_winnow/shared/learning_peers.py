"""How many workers learn one model now, from a heartbeat each keeps in Redis, and how they share what they learn.

A worker learns a batch on a local copy of its rows and writes the change as a commutative delta.
Alone, the copy holds every earlier update and the worker learns exactly as one process would.
With peers, each learns on a copy that lacks the others' updates still in flight; they make the
same mistakes on similar documents and promote the same features, and summed deltas add up to
several times the update one learner would make. Two ways bound that (``PeerMixing``):

- ``"sum"`` (the default): each worker writes its whole change, and learns in rounds of
  ``60 / (peers - 1)`` events, reading its rows again before each, so that a round misses at most
  60 of the others' events; the rounds shrink, and the rows written an event grow, with the peers;
- ``"average"``: each worker writes its change at ``1 / peers`` of its strength (Winnow's factors
  to the power 1/peers, Perceptron's addends times it), as iterative parameter mixing averages the
  peers' models, in rounds of ``300 / (peers - 1)`` events: fewer, larger rounds, so fewer rows
  written and read an event, and a final model at least as good; but each change counts less, so
  with more peers the stream's decisions learn more slowly.

``python -m benchmarks.scale`` measures both with real workers (the README's scale table);
``python -m benchmarks.peer_mixing`` models them in process, for any rule, on accuracy alone.

Each learning worker keeps ``sw:{<model>}:learners``, a sorted set of worker ids scored by their last
heartbeat (Unix seconds, the worker's clock): one ZADD, ZREMRANGEBYSCORE and ZCARD a batch, one
round trip. A worker that stops cleanly leaves; one that dies drops out after ``ttl_s``.

>>> round_events(4000, peers=1, staleness_events=60)
4000
>>> round_events(4000, peers=4, staleness_events=60)
20
>>> round_events(4000, peers=400, staleness_events=60)
1
"""

from __future__ import annotations

import time
from typing import Any, Literal

import redis

from stream_winnow.errors import StoreError

# A peer silent this long is gone: far longer than a batch (well under a second), short enough
# that a pod scaled down stops slowing the others within half a minute.
DEFAULT_TTL_S = 30.0


#: How workers learning one model write their changes: whole, or at 1/peers of their strength.
PeerMixing = Literal["sum", "average"]
#: Per mixing, the others' events a round may miss by default (``round_events``).
STALENESS_EVENTS: dict[PeerMixing, int] = {"sum": 60, "average": 300}


def learners_key(model: str) -> str:
    return f"sw:{{{model}}}:learners"


def round_events(batch_events: int, peers: int, staleness_events: int) -> int:
    """Events to learn on one read: the whole batch alone; with peers, so that the others' events a
    round can miss, ``(peers - 1) * round``, stay within ``staleness_events``."""
    if peers <= 1:
        return batch_events
    return max(1, min(batch_events, staleness_events // (peers - 1)))


class LearningPeers:
    """The heartbeat of one worker among those learning ``model``; ``count`` says how many there are."""

    def __init__(self, client: Any, model: str, worker_id: str, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.client, self.key, self.worker_id, self.ttl_s = client, learners_key(model), worker_id, ttl_s

    def count(self, now_s: float | None = None) -> int:
        """Beat, forget the peers silent for ``ttl_s``, and return how many learn the model (this one included)."""
        now_s = time.time() if now_s is None else now_s
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.zadd(self.key, {self.worker_id: now_s})
            pipe.zremrangebyscore(self.key, "-inf", now_s - self.ttl_s)
            pipe.zcard(self.key)
            return max(1, int(pipe.execute()[-1]))
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            raise StoreError(f"cannot count the model's learning workers in Redis: {error}") from error

    def leave(self) -> None:
        """Stop counting as a peer (a clean stop); a Redis failure here is not worth an error."""
        try:
            self.client.zrem(self.key, self.worker_id)
        except redis.exceptions.RedisError:
            pass
