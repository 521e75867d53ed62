"""Where word count's CPU goes: words/s, worker CPU per word, messages and latency per setting.

``python -m benchmarks.hotpath [--seconds S] [--warmup W] [--rounds R] [--configs NAMES]``

The harness behind the "hot path" sections of ``docs/benchmarks.md``: the word count on a
local cluster of 2 supervisors and 2 worker processes (2 spout, 2 split, 2 count executors),
one fresh cluster per configuration, configurations interleaved over ``--rounds``. Per run
it reads, over the window after the warm-up: the count bolts' executed words per second,
the CPU seconds of both worker processes (psutil) per word, the control messages (acker
entries and answers) and data batches per second from the heartbeats, and the end-to-end
(spout emit -> count) and complete (emit -> tree acked) latency histograms. Prints the
medians and writes ``benchmarks/results/hotpath.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import beat_rate, machine, temporary_home, write_json

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"
BASE = {"wordcount.spouts": 2, "wordcount.splits": 2, "wordcount.counts": 2, "topology.workers": 2}
CONFIGS: dict[str, dict[str, Any]] = {  # name (for --configs) -> the -c options
    "acking": {},
    "tree-per-tuple": {"topology.acking.group.size": 1},
    "defaults-before": {"topology.max.spout.pending": 1000, "topology.batch.size": 1024},  # before 2026-11-23 05:00
    "pending-5000": {"topology.max.spout.pending": 5000},
    "no-acking": {"topology.acker.executors": 0},
}


def _message_counts(client: Any) -> tuple[int, int]:
    """Cumulative (data batches, control messages) sent by every executor of the word count."""
    batches = control = 0
    for beat in client.heartbeats("wordcount").values():
        for counters in beat.executors.values():
            batches += int(counters.get("batches") or 0)
            control += int(counters.get("control_messages") or 0)
    return batches, control


def run(conf: dict[str, Any], warmup: float, seconds: float) -> dict[str, Any]:
    """One configuration on a fresh cluster: rates, CPU per word and latency over the window."""
    import psutil

    from nstorm import latency
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=1).start()
        try:
            with ClusterClient(cluster.address) as client:
                client.submit(WORDCOUNT, conf={**BASE, **conf})
                client.wait_running("wordcount", 60)
                time.sleep(warmup)
                procs = [psutil.Process(w["pid"]) for w in client.status("wordcount")["workers"]]

                def cpu() -> float:
                    return sum(p.cpu_times().user + p.cpu_times().system for p in procs)

                e2e0, done0 = client.arrival_histogram("wordcount", "count"), client.latency_histogram("wordcount")
                msgs0, cpu0 = _message_counts(client), cpu()
                beats0, t0 = client.heartbeats("wordcount"), time.monotonic()
                time.sleep(seconds)
                beats1, elapsed = client.heartbeats("wordcount"), time.monotonic() - t0
                msgs1, cpu1 = _message_counts(client), cpu()
                e2e = latency.subtract(client.arrival_histogram("wordcount", "count"), e2e0)
                done = latency.subtract(client.latency_histogram("wordcount"), done0)
        finally:
            cluster.stop()
    words = beat_rate(beats0, beats1, "count", "executed")  # over the heartbeats' own times

    def ms(hist: dict[int, int], q: float) -> float | None:
        value = latency.percentile(hist, q)
        return None if value is None else 1000 * value

    return {"words_per_sec": words, "worker_cores": (cpu1 - cpu0) / elapsed,
            "cpu_us_per_word": (cpu1 - cpu0) / max(1.0, words * elapsed) * 1e6,
            "batches_per_sec": (msgs1[0] - msgs0[0]) / elapsed, "control_per_sec": (msgs1[1] - msgs0[1]) / elapsed,
            "e2e_ms": {"p50": ms(e2e, 0.5), "p99": ms(e2e, 0.99)},
            "complete_ms": {"p50": ms(done, 0.5), "p99": ms(done, 0.99)}, "conf": conf}


def _median(rounds: list[dict[str, Any]], *keys: str) -> float | None:
    values = []
    for r in rounds:
        value: Any = r
        for key in keys:
            value = value.get(key) if value is not None else None
        if value is not None:
            values.append(value)
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hotpath", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window per run")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2, help="runs of every configuration, interleaved")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of: {', '.join(CONFIGS)}")
    args = parser.parse_args()
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")
    console = Console()
    rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(max(1, args.rounds)):
        for name in names:
            result = run(CONFIGS[name], args.warmup, args.seconds)
            rounds[name].append(result)
            console.print(f"round {r + 1}, {name}: {result['words_per_sec']:,.0f} words/s, "
                          f"{result['cpu_us_per_word']:.2f} µs CPU a word")
    table = Table(title=f"word count hot path (2 workers, {machine()['cpus']} cores, medians of {args.rounds} rounds)")
    for col in ("configuration", "words/s", "worker cores", "µs CPU/word", "batches/s", "control msgs/s",
                "e2e p50 / p99 ms", "complete p50 / p99 ms"):
        table.add_column(col, justify="right")

    def pair(rs: list[dict[str, Any]], key: str) -> str:
        p50, p99 = _median(rs, key, "p50"), _median(rs, key, "p99")
        return "-" if p50 is None or p99 is None else f"{p50:.1f} / {p99:.1f}"

    for name, rs in rounds.items():
        table.add_row(name, f"{_median(rs, 'words_per_sec'):,.0f}", f"{_median(rs, 'worker_cores'):.2f}",
                      f"{_median(rs, 'cpu_us_per_word'):.2f}", f"{_median(rs, 'batches_per_sec'):,.0f}",
                      f"{_median(rs, 'control_per_sec'):,.0f}", pair(rs, "e2e_ms"), pair(rs, "complete_ms"))
    console.print(table)
    path = write_json("hotpath", {"machine": machine(), "args": vars(args), "rounds": rounds})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
