"""Adaptive batching against per-tuple sending, on the same word count, in one run.

``python -m benchmarks.batching [--seconds S] [--warmup W] [--workers N] [--repeat R] [--low-rate R]``

On one local cluster of real processes (2 supervisors, ``--workers`` worker processes),
runs ``topologies/wordcount.py`` one configuration after the other:

- peak throughput with adaptive batching and with per-tuple sending
  (``topology.batch.size=1``), each with acking on and off;
- adaptive batching, and fixed-size batches under the same deadlines
  (``topology.batch.adaptive=false``: every batch limit at the cap), at half of the adaptive acking-on peak (the
  median of the peak runs so far) and at ``--low-rate`` sentences/s; per-tuple sending
  at ``--low-rate`` as well.

Words/s are the count bolts' executed counters over the window; sentences/s the spouts'
acks. Latencies come from histograms the executors keep of the sentences the spouts stamp
(about one a millisecond, :mod:`nstorm.latency`), subtracted across the window, so p50/p99
cover exactly the window (resolution one bucket, about 4.7%): end to end (spout emit -> a
count bolt processes the words) and complete (spout emit -> tree fully acked). Prints a
table and writes ``benchmarks/results/batching.json``.

The machine is shared: every configuration runs once per round (``--repeat`` rounds,
interleaved, so that a burst of other load hits all of them alike), the table shows
medians, and each run records the 1-minute load average before and after it and the
words per CPU-second of the worker processes (less sensitive to other load than words/s).
The throughput ratios are taken per round, between runs minutes apart at most.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, temporary_home, write_json
from nstorm import latency

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"
PER_TUPLE = {"topology.batch.size": 1}
FIXED = {"topology.batch.adaptive": False}
ACKING_OFF = {"topology.acker.executors": 0, "wordcount.reliable": False}


def _cpu_secs(pids: list[int]) -> float:
    """User + system CPU seconds of the worker processes so far."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.Error, ValueError):
            continue
        total += times.user + times.system
    return total


def _snapshot(client: Any, name: str, pids: list[int] | None = None) -> dict[str, Any]:
    status = client.status(name)
    pids = pids or [w["pid"] for w in status["workers"] if w.get("pid")]
    return {"t": time.monotonic(), "status": status, "hist": client.latency_histogram(name),
            "e2e": client.arrival_histogram(name, "count"), "pids": pids, "cpu": _cpu_secs(pids)}


def measure(client: Any, name: str, conf: dict[str, Any], warmup: float, seconds: float) -> dict[str, Any]:
    """Submit word count as ``name`` with ``conf``, measure one window, kill it."""
    client.submit(WORDCOUNT, name=name, conf=conf)
    load_before = os.getloadavg()[0]
    try:
        client.wait_running(name, 60)
        time.sleep(warmup)
        first = _snapshot(client, name)
        cpu = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            cpu.append(sum(float(w.get("cpu") or 0) for w in client.status(name)["workers"]))
        last = _snapshot(client, name, first["pids"])
    finally:
        client.kill(name)
        client.wait_removed(name, 60)
    elapsed = last["t"] - first["t"]
    cpu_secs = last["cpu"] - first["cpu"]

    def delta(component: str, key: str) -> int:
        return int(last["status"]["components"][component][key]) - int(first["status"]["components"][component][key])

    window = latency.subtract(last["hist"], first["hist"])
    p50, p99 = latency.percentile(window, 0.5), latency.percentile(window, 0.99)
    e2e = latency.subtract(last["e2e"], first["e2e"])
    e50, e99 = latency.percentile(e2e, 0.5), latency.percentile(e2e, 0.99)
    acked = last["status"]["spouts"]["acked"] - first["status"]["spouts"]["acked"]
    split_batches = delta("split", "batches")
    spout_batches = delta("sentences", "batches")
    return {
        "conf": conf,
        "seconds": elapsed,
        "words_per_sec": delta("count", "executed") / elapsed,
        "words_per_cpu_sec": delta("count", "executed") / cpu_secs if cpu_secs > 0 else None,
        "sentences_acked_per_sec": acked / elapsed,
        "latency_p50_ms": None if p50 is None else 1000 * p50,
        "latency_p99_ms": None if p99 is None else 1000 * p99,
        "latency_samples": sum(window.values()),
        "e2e_p50_ms": None if e50 is None else 1000 * e50,
        "e2e_p99_ms": None if e99 is None else 1000 * e99,
        "split_tuples_per_batch": delta("split", "emitted") / split_batches if split_batches else None,
        "spout_tuples_per_batch": delta("sentences", "emitted") / spout_batches if spout_batches else None,
        "workers_cpu": statistics.median(cpu) if cpu else None,
        "failed": last["status"]["spouts"]["failed"],
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def _fmt(x: float | None, pattern: str = "{:,.0f}") -> str:
    return "-" if x is None else pattern.format(x)


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batching", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measurement window per configuration")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="rounds; every configuration runs once per round")
    parser.add_argument("--low-rate", type=float, default=1000.0, help="sentences/s of the low-rate runs")
    parser.add_argument("--only", action="append", default=[], help="run only this label (repeatable; default: all)")
    parser.add_argument("-c", "--conf", action="append", default=[], help="extra key=value for every run")
    args = parser.parse_args()
    from nstorm.client import ClusterClient
    from nstorm.config import parse_conf_options
    from nstorm.localcluster import LocalCluster

    extra = parse_conf_options(args.conf)
    spouts = args.workers
    base = {"wordcount.spouts": spouts, "wordcount.splits": args.workers, "wordcount.counts": args.workers,
            "topology.workers": args.workers, **extra}
    console = Console(width=max(120, Console().width))
    results: dict[str, list[dict[str, Any]]] = {}
    only = set(args.only)
    counter = iter(range(1_000_000))

    def run(label: str, conf: dict[str, Any]) -> dict[str, Any] | None:
        if only and label not in only:
            return None
        r = measure(client, f"bench{next(counter)}", {**base, **conf}, args.warmup, args.seconds)
        results.setdefault(label, []).append(r)
        console.print(f"{label}: {r['words_per_sec']:,.0f} words/s, {r['sentences_acked_per_sec']:,.0f} acked/s, "
                      f"end to end p50 {_fmt(r['e2e_p50_ms'], '{:.1f}')} / p99 {_fmt(r['e2e_p99_ms'], '{:.1f}')} ms, "
                      f"complete p50 {_fmt(r['latency_p50_ms'], '{:.1f}')} / p99 {_fmt(r['latency_p99_ms'], '{:.1f}')} ms, "
                      f"load {r['load_avg_1min']}")
        return r

    round_ratios: dict[str, list[float]] = {}
    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=max(1, args.workers // 2 + args.workers % 2)).start()
        try:
            with ClusterClient(cluster.address) as client:
                for _ in range(max(1, args.repeat)):
                    for acking, off in (("on", {}), ("off", ACKING_OFF)):
                        a = run(f"adaptive, peak, acking {acking}", off)
                        p = run(f"per-tuple, peak, acking {acking}", {**PER_TUPLE, **off})
                        if a and p and p["words_per_sec"]:
                            round_ratios.setdefault(f"acking {acking}", []).append(
                                a["words_per_sec"] / p["words_per_sec"])
                    peak = _median(results.get("adaptive, peak, acking on", []), "sentences_acked_per_sec")
                    if peak:
                        rate = {"wordcount.rate": peak / 2 / spouts}
                        run("adaptive, half peak", rate)
                        run("fixed cap, half peak", {**FIXED, **rate})
                    low = {"wordcount.rate": args.low_rate / spouts}
                    run("adaptive, low rate", low)
                    run("fixed cap, low rate", {**FIXED, **low})
                    run("per-tuple, low rate", {**PER_TUPLE, **low})
        finally:
            cluster.stop()

    table = Table(title=f"word count: adaptive batching vs per-tuple sending ({args.workers} workers, "
                        f"{machine()['cpus']} cores; medians of {args.repeat} rounds)")
    for col in ("run", "sent./s", "words/s", "words/cpu-s", "e2e p50 / p99 ms", "complete p50 / p99 ms",
                "split batch", "load"):
        table.add_column(col, justify="right")
    summary = {}
    for label, runs in results.items():
        summary[label] = row = {key: _median(runs, key) for key in (
            "sentences_acked_per_sec", "words_per_sec", "words_per_cpu_sec", "latency_p50_ms", "latency_p99_ms",
            "e2e_p50_ms", "e2e_p99_ms", "split_tuples_per_batch", "spout_tuples_per_batch")}
        row["load_avg_1min"] = statistics.median(x for r in runs for x in r["load_avg_1min"])
        table.add_row(label, _fmt(row["sentences_acked_per_sec"]), _fmt(row["words_per_sec"]),
                      _fmt(row["words_per_cpu_sec"]),
                      f'{_fmt(row["e2e_p50_ms"], "{:.1f}")} / {_fmt(row["e2e_p99_ms"], "{:.1f}")}',
                      f'{_fmt(row["latency_p50_ms"], "{:.1f}")} / {_fmt(row["latency_p99_ms"], "{:.1f}")}',
                      _fmt(row["split_tuples_per_batch"], "{:.1f}"),
                      _fmt(row["load_avg_1min"], "{:.1f}"))
    console.print(table)
    ratios = {f"adaptive / per-tuple words/s, {k}": {"median": statistics.median(v), "rounds": v}
              for k, v in round_ratios.items()}
    for label, ratio in ratios.items():
        console.print(f"{label}: {ratio['median']:.1f}x (rounds: {', '.join(f'{x:.1f}' for x in ratio['rounds'])})")
    path = write_json("batching", {"machine": machine(), "args": vars(args), "summary": summary, "runs": results,
                                   "ratios": ratios})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
