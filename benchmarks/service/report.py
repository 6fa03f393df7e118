"""The report: a run's results as a markdown table (``--json`` prints the results themselves)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.service.peers import VW_PEER


def _f(value: float, digits: int = 0) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"  # NaN check


def _markers(learning: dict[str, Any]) -> str:
    """MiB of the markers, and bytes an event learned.

    >>> _markers({"events": 100_000, "markers": {"keys": 200_016, "bytes": 125_829_120}})
    '120.0 / 1,258'
    """
    markers = learning.get("markers")
    if not markers or not learning["events"]:
        return "–"
    return f"{markers['bytes'] / 2**20:.1f} / {_f(markers['bytes'] / learning['events'])}"


def _cpu(runs: Sequence[dict[str, Any]], key: str = "cpu_us_per_document") -> str:
    """Each run's CPU µs a document (``key``: the runner's, the broker's, Redis's or the harness's), in run order ("–" where /proc could not tell)."""
    return ", ".join("–" if r.get(key) is None else f"{r[key]:.1f}" for r in runs)


def _machine(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's "busy / steal" % of the machine's CPUs ("–" where /proc/stat could not tell)."""
    return ", ".join(
        "–" if r.get("machine_busy_percent") is None else f"{r['machine_busy_percent']:.0f} / {r['machine_steal_percent']:.1f}"
        for r in runs
    )


def _saturation(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's "longest stretch ms / share %" of saturated machine ("–" where /proc/stat could not tell).

    >>> _saturation([{"saturated_longest_ms": 1600.0, "saturated_percent": 21.5}, {}])
    '1,600 / 21.5, –'
    """
    return ", ".join(
        "–" if r.get("saturated_longest_ms") is None else f"{r['saturated_longest_ms']:,.0f} / {r['saturated_percent']:.1f}"
        for r in runs
    )


def _tasks(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's tasks started on the machine, "over the run / in its longest saturated stretch".

    >>> _tasks([{"tasks_started": 38, "saturated_tasks_started": 31}, {"tasks_started": 3,
    ...          "saturated_tasks_started": None}, {}])
    '38 / 31, 3 / –, –'
    """
    def cell(n: int | None) -> str:
        return "–" if n is None else f"{n:,}"

    return ", ".join(
        "–" if r.get("tasks_started") is None else f"{cell(r['tasks_started'])} / {cell(r.get('saturated_tasks_started'))}"
        for r in runs
    )


def _stretch_cpu(runs: Sequence[dict[str, Any]]) -> str:
    """Each run's CPU in its longest saturated stretch, % of a core: "runner / broker / Redis / harness / rest"
    ("–" where the run had no such stretch or ``/proc`` could not tell).

    >>> _stretch_cpu([{"saturated_cpu_percent": {"runner": 96.2, "broker": 61.0, "redis": 3.1, "harness": 24.4,
    ...                                          "rest": 12.0}}, {"saturated_cpu_percent": None}])
    '96 / 61 / 3 / 24 / 12, –'
    """
    return ", ".join(
        "–" if not r.get("saturated_cpu_percent") else " / ".join(f"{v:.0f}" for v in r["saturated_cpu_percent"].values())
        for r in runs
    )


def _partitions(n: int) -> str:
    """How many partitions each topic has, in words.

    >>> _partitions(1), _partitions(4)
    ('1 partition', '4 partitions')
    """
    return f"{n} partition" + ("" if n == 1 else "s")


def _latency_broker(kind: str) -> str:
    """How the header names where the latency runs were.

    >>> _latency_broker("fresh")
    'each latency run on a fresh embedded broker'
    """
    return "each latency run on a fresh embedded broker" if kind == "fresh" else "the latency runs on the shared broker"


def _thirds(runs: Sequence[dict[str, Any]], key: str, digits: int = 1) -> str:
    """Each run's three figures, first → last third, runs apart by commas ("–" where one is unknown)."""
    return ", ".join(" → ".join("–" if x is None else _f(x, digits) for x in r.get(key) or [None]) for r in runs)


def _split(run: dict[str, Any]) -> str:
    before, after = run.get("to_decided_p50_p99_ms"), run.get("after_decided_p50_p99_ms")
    if before is None or after is None:
        return "–"
    return f"{_f(before[0], 1)} / {_f(before[1], 1)} + {_f(after[0], 1)} / {_f(after[1], 1)}"


def _spread(figures: dict[str, Any], digits: int = 0) -> str:
    """" (runs: a, b, c)" after a median of several runs; nothing for a single run."""
    runs = figures.get("of_runs", [])
    return f" (runs: {', '.join(_f(v, digits) for v in runs)})" if len(runs) > 1 else ""


def _cell(cell: Callable[[dict[str, Any]], str], figures: dict[str, Any]) -> str:
    """A table cell, or a dash for a phase this run left out (``--phases``)."""
    try:
        return cell(figures)
    except KeyError:
        return "–"


def against_vw(results: dict[str, Any]) -> str:
    """Each client's scoring and learning rates over Vowpal Wabbit's in-process docs/s in the same run.

    The machines a run lands on differ by a factor of about 1.6 in speed (VW 8,800-14,600 docs/s),
    and the service's rates move with them; these ratios do not, much. The targets in these units
    (VW doing about 10,000 docs/s where they were set): scoring 2.0 (20,000 docs/s), learning 0.5
    (5,000 mistaken events/s). Empty when the run has no VW figure.

    >>> against_vw({"peers": {VW_PEER: {"per_s": 10_000.0}},
    ...             "clients": {"confluent": {"scoring": {"per_s": 45_000.0}, "learning": {"per_s": 5_500.0}}}})
    'confluent: scoring 4.50, learning 0.55'
    >>> against_vw({"peers": {VW_PEER: {"per_s": float("nan")}}, "clients": {}})  # VW not installed
    ''
    """
    vw = results.get("peers", {}).get(VW_PEER, {}).get("per_s", float("nan"))
    if vw != vw or vw <= 0:  # NaN (VW not installed) or nothing
        return ""
    parts = []
    for client, figures in results["clients"].items():
        ratios = [f"{phase} {figures[phase]['per_s'] / vw:.2f}" for phase in ("scoring", "learning") if phase in figures]
        if ratios:
            parts.append(f"{client}: " + ", ".join(ratios))
    return "; ".join(parts)


def markdown(results: dict[str, Any]) -> str:
    clients = list(results["clients"])
    lines = [
        f"`{results['command']}`",
        "",
        f"{results['corpus']}; batch_max_docs {results['batch_max_docs']} (labels only: "
        f"{results.get('batch_max_labels', '-')}); worker args: "
        f"{' '.join(results['worker_args']) or '(none)'}; median of {results['repeats']} run(s) of pipe, scoring "
        # Results saved without a partitions field had four.
        f"and latency; {_partitions(results.get('partitions', 4))} a topic; the latency load's producer lingers "
        # Results saved without a latency_broker field ran every latency run on the shared broker.
        f"{results['load_linger_ms']} ms; {_latency_broker(results.get('latency_broker', 'shared'))}; batches compressed: documents and labels "
        f"{results.get('load_compression', 'none')}, decisions {results.get('compression', 'none')}; "
        f"{results['cpus']} CPUs, "
        "load average "
        f"{results['load_average_start']:.2f} at start, {results['load_average_end']:.2f} at end",
        "",
        "| measure | " + " | ".join(clients) + " |",
        "|---|" + "---|" * len(clients),
    ]
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("documents per phase", lambda c: f"{c['documents']:,}"),
        ("bare pipe msg/s (consume→decode→encode→produce)", lambda c: _f(c["pipe"]["per_s"]) + _spread(c["pipe"])),
        ("bare pipe msg/s, self-timed (first consume → last ack)", lambda c: _f(c["pipe"]["self_timed_per_s"])),
        ("scoring docs/s (first → last decision)", lambda c: _f(c["scoring"]["per_s"]) + _spread(c["scoring"])),
        ("**scoring / bare pipe**", lambda c: _f(c["scoring_over_pipe"], 2)),
        (f"scoring with domain features (words + {results.get('domain_dimensions', 400)} domains) docs/s",
         lambda c: _f(c["domain_scoring"]["per_s"]) + _spread(c["domain_scoring"])),
        ("**domain / words scoring**", lambda c: _f(c["domain_over_words"], 2)),
        ("group join before first decision, s (excluded)", lambda c: _f(c["scoring"]["join_s"], 1)),
        ("learning events/s (every event a mistake)", lambda c: _f(c["learning"]["per_s"])),
        ("learning: events that were mistakes, share (metric)",
         lambda c: _f(c["learning"]["updates_metric_fraction"], 3)),
        ("learning: mistaken categories per event (metric)",
         lambda c: _f(c["learning"]["mistaken_categories_per_event"], 2)),
        ("learning: model version delta / events",
         lambda c: f"{c['learning']['model_version_delta']:,} / {c['learning']['events']:,}"),
        ("learning: the worker's batches / its mean ms in a batch (metrics)",
         lambda c: f"{c['learning']['batches']:,} / {_f(c['learning']['batch_ms'])}"),
        ("learning: Redis memory of the watermarks and seen events, MiB / bytes an event",
         lambda c: _markers(c["learning"])),
        ("mixed docs/s (10 % labelled later, from cache)", lambda c: _f(c["mixed"]["per_s"])),
        ("mixed: labelled events learned / dead letters",
         lambda c: f"{c['mixed']['learned']:,} / {c['mixed']['dead_letters']:,}"),
        ("latency: offered docs/s (½ scoring); seconds counted, each run",
         lambda c: f"{_f(c['latency']['offered_per_s'])}; "
                   + ", ".join(_f(run["counted_s"], 1) for run in c["latency_runs"])),
        ("latency p50 / p95 / p99 ms",
         lambda c: f"{_f(c['latency']['p50_ms'], 1)} / {_f(c['latency']['p95_ms'], 1)} / "
                   f"{_f(c['latency']['p99_ms'], 1)}" + _spread(c["latency"], 1)),
        ("bare pipe at the same load: p50 / p95 / p99 ms",
         lambda c: f"{_f(c['pipe_latency']['p50_ms'], 1)} / {_f(c['pipe_latency']['p95_ms'], 1)} / "
                   f"{_f(c['pipe_latency']['p99_ms'], 1)}" + _spread(c["pipe_latency"], 1)),
        ("latency: ts → decided_ts / decided_ts → arrival, p50 / p99 ms (each run)",
         lambda c: "; ".join(_split(run) for run in c["latency_runs"])),
        ("latency: p99 ms in each third of the counted time, the worker's runs; the bare pipe's",
         lambda c: f"{_thirds(c['latency_runs'], 'p99_ms_by_third')}; {_thirds(c['pipe_latency_runs'], 'p99_ms_by_third')}"),
        ("latency: the worker's batches over 100 ms, each run (its metrics, warm-up included)",
         lambda c: ", ".join("–" if r.get("worker_batches_over_100ms") is None else f"{r['worker_batches_over_100ms']:,}"
                             for r in c["latency_runs"])),
        ("latency: the worker's offset commits a second of load, each run (its metrics)",
         lambda c: ", ".join("–" if r.get("worker_commits_per_s") is None else _f(r["worker_commits_per_s"], 1)
                             for r in c["latency_runs"])),
        ("latency: the broker's CPU, % of a core, in each third, the worker's runs; the bare pipe's",
         lambda c: f"{_thirds(c['latency_runs'], 'broker_cpu_percent_by_third', 0)}; "
                   f"{_thirds(c['pipe_latency_runs'], 'broker_cpu_percent_by_third', 0)}"),
        ("latency: the worker's / the bare pipe's CPU, µs a document",
         lambda c: f"{_cpu(c['latency_runs'])} / {_cpu(c['pipe_latency_runs'])}"),
        ("latency: the broker's CPU, µs a document, in the worker's / the bare pipe's runs",
         lambda c: f"{_cpu(c['latency_runs'], 'broker_cpu_us_per_document')} / "
                   f"{_cpu(c['pipe_latency_runs'], 'broker_cpu_us_per_document')}"),
        ("latency: Redis's / the load generator and collector's CPU, µs a document, in the worker's runs; "
         "the bare pipe's",
         lambda c: f"{_cpu(c['latency_runs'], 'redis_cpu_us_per_document')} / "
                   f"{_cpu(c['latency_runs'], 'harness_cpu_us_per_document')}; "
                   f"{_cpu(c['pipe_latency_runs'], 'redis_cpu_us_per_document')} / "
                   f"{_cpu(c['pipe_latency_runs'], 'harness_cpu_us_per_document')}"),
        ("latency: the machine's CPUs busy / stolen by the host, %, in the worker's runs; the bare pipe's",
         lambda c: f"{_machine(c['latency_runs'])}; {_machine(c['pipe_latency_runs'])}"),
        ("latency: the machine's CPUs ≥ 95 % busy (100 ms windows): longest stretch ms / share of the run %, "
         "the worker's runs; the bare pipe's",
         lambda c: f"{_saturation(c['latency_runs'])}; {_saturation(c['pipe_latency_runs'])}"),
        ("latency: in that longest stretch, % of a core: the worker or pipe / the broker / Redis / the load generator "
         "and collector / the rest of the machine, the worker's runs; the bare pipe's",
         lambda c: f"{_stretch_cpu(c['latency_runs'])}; {_stretch_cpu(c['pipe_latency_runs'])}"),
        ("latency: processes and threads the machine started, over the run / in that longest stretch, the worker's "
         "runs; the bare pipe's",
         lambda c: f"{_tasks(c['latency_runs'])}; {_tasks(c['pipe_latency_runs'])}"),
        ("latency runs: this process's longest gc pause, ms",
         lambda c: _f(max(r["harness_gc_max_ms"] for r in c["latency_runs"] + c["pipe_latency_runs"]), 1)),
    ]  # fmt: skip
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(cell, results["clients"][c]) for c in clients) + " |")
    memory = results["memory"]
    lines += [
        "",
        f"Model in Redis: {memory['bytes']:,} bytes ({memory['bytes'] / 2**20:.1f} MiB) in {memory['keys']:,} keys; "
        f"{memory['features']:,} features × {memory['categories']} categories × {memory['per_category_tables']} "
        f"tables → **{memory['bytes_per_weight']:.2f} bytes per weight**.",
    ]
    if "peers" in results:
        lines += ["", "| in-process prequential (stream not repeated) | docs/s | micro-F1 |", "|---|---|---|"]
        for system, peer in results["peers"].items():
            lines.append(f"| {system} | {_f(peer['per_s'])} | {_f(peer['micro_f1'], 3)} |")
        yardstick = against_vw(results)
        if yardstick:
            lines += ["", "Against Vowpal Wabbit in process, this run (the machine's yardstick): " + yardstick + "."]
    if "profile" in results:
        profile = results["profile"]
        lines += [
            "",
            f"Worker profile ({profile['client']}, scoring {profile['documents']:,} docs under cProfile from the first "
            f"batch, "
            f"{_f(profile['per_s_under_cprofile'])} docs/s with the profiler on), top by own time:",
            "",
            "| function | calls | own s | share | cumulative s |",
            "|---|---|---|---|---|",
        ]
        for row in profile["top"]:
            lines.append(f"| `{row['function']}` | {row['calls']:,} | {row['own_s']:.2f} | "
                         f"{row['own_share']:.1%} | {row['cumulative_s']:.2f} |")  # fmt: skip
    return "\n".join(lines)
