"""Clocks, rates and CPU: what the phases count with, and what the latency runs report besides the latency (from
``/proc``: each process's CPU, the machine's ticks and its saturated stretches; this process's gc pauses)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

# A latency run's machine counts as saturated in a window of SATURATION_WINDOW_S whose CPU ticks
# (20 on 2 CPUs at 100 Hz) are at least SATURATED_PERCENT busy: 19 of 20.
SATURATION_WINDOW_S = 0.1
SATURATED_PERCENT = 95.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat's counts


def _now_ms() -> int:
    return int(time.time() * 1000)


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def _cpu_s(pid: int | None) -> float | None:
    """CPU seconds so far of process ``pid`` (the broker's, Redis's); None where it is unknown or /proc cannot tell."""
    return None if pid is None else cpu_seconds(pid)


def cpu_seconds(pid: int) -> float | None:
    """``broker_cost.cpu_seconds`` (Linux ``/proc``), or None where it cannot tell."""
    from benchmarks.broker_cost import cpu_seconds as read

    try:
        return read(pid)
    except OSError:
        return None


class _Usage(NamedTuple):
    """CPU used so far (seconds): by the runner, the broker, Redis and this process (the load generator and
    the collector); and the machine's ticks (``broker_cost.machine_ticks``). None where ``/proc`` cannot tell."""

    runner_s: float | None
    broker_s: float | None
    machine: tuple[int, int, int] | None
    redis_s: float | None
    harness_s: float | None
    tasks: int | None = None  # processes and threads the machine has started (broker_cost.tasks_started)


def _usage(runner_pid: int, broker_pid: int | None, redis_pid: int | None) -> _Usage:
    from benchmarks.broker_cost import machine_ticks, tasks_started

    try:
        machine: tuple[int, int, int] | None = machine_ticks()
        tasks: int | None = tasks_started()
    except (OSError, ValueError):
        machine = tasks = None
    return _Usage(
        cpu_seconds(runner_pid), _cpu_s(broker_pid), machine, _cpu_s(redis_pid), cpu_seconds(os.getpid()), tasks,
    )  # fmt: skip


def _tasks_between(start: _Usage, end: _Usage) -> int | None:
    """Tasks the machine started between two readings (None where ``/proc`` could not tell)."""
    return None if start.tasks is None or end.tasks is None else end.tasks - start.tasks


def _per_document_us(start_s: float | None, end_s: float | None, documents: int) -> float | None:
    """CPU µs a document between two readings of seconds used (None where either is unknown)."""
    return None if start_s is None or end_s is None else (end_s - start_s) / documents * 1e6


def _share(start: tuple[int, int, int] | None, end: tuple[int, int, int] | None, part: int) -> float | None:
    """Percent of the ticks between ``start`` and ``end`` that went to ``part`` (1 busy, 2 steal)."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    return 100.0 * (end[part] - start[part]) / (end[0] - start[0])


class _Pauses:
    """The longest garbage collection of this process while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.longest_s = max(self.longest_s, time.perf_counter() - self._started)


class Saturation(NamedTuple):
    """How long a run's machine was saturated, and where its longest stretch lies among the samples."""

    longest_ms: float
    percent: float
    # Indices of the samples that open and close the longest stretch (equal where there was none).
    first: int
    last: int


def saturated(
    samples: Sequence[tuple[float, tuple[int, int, int] | None]], threshold_percent: float = SATURATED_PERCENT,
) -> Saturation:
    """The longest stretch (ms) and the share (%) of time that the machine's CPUs were at least
    ``threshold_percent`` busy, from ``(perf_counter s, broker_cost.machine_ticks())`` samples.

    Each window between two samples counts whole or not at all; a stretch is consecutive such
    windows. Three windows of 100 ms on 2 CPUs (20 ticks each), busy 20, 19 and 5 ticks:

    >>> s = [(0.0, (0, 0, 0)), (0.1, (20, 20, 0)), (0.2, (40, 39, 0)), (0.3, (60, 44, 0))]
    >>> saturated(s)
    Saturation(longest_ms=200.0, percent=66.7, first=0, last=2)
    """
    longest = stretch = total = spanned = 0.0
    first = last = opened = 0
    for i, ((t0, ticks0), (t1, ticks1)) in enumerate(itertools.pairwise(samples)):
        spanned += t1 - t0
        busy = _share(ticks0, ticks1, 1)
        if busy is not None and busy >= threshold_percent:
            if stretch == 0.0:
                opened = i
            stretch += t1 - t0
            total += t1 - t0
            if stretch > longest:
                longest, first, last = stretch, opened, i + 1
        else:
            stretch = 0.0
    return Saturation(round(longest * 1000, 1), round(100.0 * total / spanned, 1) if spanned else 0.0, first, last)


def stretch_cpu(start: tuple[float, _Usage], end: tuple[float, _Usage]) -> dict[str, float] | None:
    """Who used the CPUs between two samples: % of one core for the runner, the broker, Redis, this
    process (the load generator and the collector) and the rest of the machine (what is busy beyond
    those four: the kernel's own threads, other services). None where ``/proc`` could not tell.

    Over 300 ms on 2 CPUs at 100 ticks a second (60 ticks, 57 busy), the runner 0.24 s, the broker 0.15:

    >>> a = _Usage(1.0, 2.0, (0, 0, 0), 0.5, 3.0)
    >>> b = _Usage(1.24, 2.15, (60, 57, 0), 0.51, 3.06)
    >>> {k: round(v) for k, v in stretch_cpu((0.0, a), (0.3, b)).items()}
    {'runner': 80, 'broker': 50, 'redis': 3, 'harness': 20, 'rest': 37}
    """
    (t0, a), (t1, b) = start, end
    if t1 <= t0 or a.machine is None or b.machine is None:
        return None
    shares: dict[str, float] = {}
    for name, before, after in (("runner", a.runner_s, b.runner_s), ("broker", a.broker_s, b.broker_s),
                                ("redis", a.redis_s, b.redis_s), ("harness", a.harness_s, b.harness_s)):  # fmt: skip
        if before is None or after is None:
            return None
        shares[name] = 100.0 * (after - before) / (t1 - t0)
    busy_s = (b.machine[1] - a.machine[1]) / _CLOCK_TICKS
    shares["rest"] = max(0.0, 100.0 * busy_s / (t1 - t0) - sum(shares.values()))
    return shares


class _MachineSampler:
    """The machine's CPU ticks and each process's CPU every ``window_s`` (``/proc``) on a thread of its own, while a latency run lasts.

    The longest p99s have come with the machine saturated: in nine latency runs of the worker and
    nine of its bare pipe at 34,000 documents/s (``--client confluent --phases latency
    --latency-rate 34000 --repeats 3 --no-peers``, three invocations), the worker's 441.5 ms run had
    the machine at least 95 % busy for 2,517 ms at a stretch and the bare pipe's 343.8 ms run for
    707 ms, while the runs under 100 ms had at most 200 ms. Not every miss had one: the worker's
    103.6 and 121.9 ms runs had 103 and 108 ms. In such a stretch the broker, which lists every
    stored batch of a partition on each fetch, gets less CPU while the clients behind it fetch
    more. :func:`saturated` reads the ticks this keeps, and :func:`stretch_cpu` who used them in the
    longest stretch; nothing is kept where ``/proc`` cannot tell.
    """

    def __init__(self, pids: tuple[int, int | None, int | None], window_s: float = SATURATION_WINDOW_S) -> None:
        self.samples: list[tuple[float, _Usage]] = []
        self._pids = pids
        self._window_s = window_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-machine-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            usage = _usage(*self._pids)
            if usage.machine is None:
                return
            self.samples.append((time.perf_counter(), usage))
            if self._stop.wait(self._window_s):
                return

    def start(self) -> _MachineSampler:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, _Usage]]:
        """Stop sampling and return the samples."""
        self._stop.set()
        self._thread.join()
        return self.samples
