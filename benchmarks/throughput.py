"""Word count throughput end to end on a local cluster, against a plain Python loop.

``python -m benchmarks.throughput [--seconds S] [--warmup W] [--workers N] [--rounds R]``

Measures, in one run: the single-process Python loop that splits and counts the same
sentences, then nstorm's word count with acking off and on, each with the count bolt
taking whole batches (``process_batch``, the default) and a tuple at a time (``process``),
each on a fresh local cluster of real processes. Rates are the count bolts' executed
counters over a steady-state window; with ``--rounds`` every configuration runs once per
round (interleaved, so the machine's noise hits them alike) and the table shows medians.
Prints a table and writes ``benchmarks/results/throughput.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, sample_rate, temporary_home, write_json
from topologies.sentences import sentences

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def plain_loop(count: int = 200_000) -> float:
    """Words/s of split + dict update in one Python loop (the ceiling for one core)."""
    data = sentences(count)
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for s in data:
        for w in s.split():
            counts[w] = counts.get(w, 0) + 1
    elapsed = time.perf_counter() - t0
    return sum(counts.values()) / elapsed


def run_nstorm(conf: dict, workers: int, warmup: float, seconds: float) -> dict:
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=max(1, workers // 2 + workers % 2)).start()
        try:
            with ClusterClient(cluster.address) as client:
                client.submit(WORDCOUNT, conf={**conf, "topology.workers": workers})
                client.wait_running("wordcount", 60)
                words = sample_rate(client, "wordcount", "count", "executed", warmup, seconds)
                status = client.status("wordcount")
                sentences_rate = words / 10
                return {"words_per_sec": words, "sentences_per_sec": sentences_rate,
                        "failed": status["spouts"]["failed"], "conf": conf}
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measurement window per configuration")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="runs of every configuration, interleaved")
    parser.add_argument("-c", "--conf", action="append", default=[], help="extra key=value for both runs")
    args = parser.parse_args()
    from nstorm.config import parse_conf_options

    extra = parse_conf_options(args.conf)
    console = Console()
    loop = plain_loop()
    console.print(f"plain Python loop: {loop:,.0f} words/s")
    base = {"wordcount.spouts": args.workers, "wordcount.splits": args.workers, "wordcount.counts": args.workers}
    no_acks = {"topology.acker.executors": 0, "wordcount.reliable": False}
    runs = {
        "acking off": {**base, **no_acks, **extra},
        "acking off, process per tuple": {**base, **no_acks, "wordcount.batched": False, **extra},
        "acking on": {**base, **extra},
        "acking on, process per tuple": {**base, "wordcount.batched": False, **extra},
    }
    rounds: dict[str, list[dict]] = {label: [] for label in runs}
    for r in range(max(1, args.rounds)):
        for label, conf in runs.items():
            rounds[label].append(run_nstorm(conf, args.workers, args.warmup, args.seconds))
            console.print(f"round {r + 1}, {label}: {rounds[label][-1]['words_per_sec']:,.0f} words/s")
    results = {label: {"words_per_sec": statistics.median(x["words_per_sec"] for x in rs),
                       "sentences_per_sec": statistics.median(x["sentences_per_sec"] for x in rs),
                       "rounds": rs, "conf": runs[label]} for label, rs in rounds.items()}
    table = Table(title=f"word count throughput ({args.workers} workers, {machine()['cpus']} cores"
                        f"{f', medians of {args.rounds} rounds' if args.rounds > 1 else ''})")
    for col in ("run", "sentences/s", "words/s", "vs plain loop"):
        table.add_column(col, justify="right")
    table.add_row("plain Python loop (1 process)", f"{loop / 10:,.0f}", f"{loop:,.0f}", "1.00")
    for label, r in results.items():
        table.add_row(f"nstorm, {label}", f"{r['sentences_per_sec']:,.0f}", f"{r['words_per_sec']:,.0f}",
                      f"{r['words_per_sec'] / loop:.3f}")
    console.print(table)
    path = write_json("throughput", {"machine": machine(), "args": vars(args), "plain_loop_words_per_sec": loop,
                                     "runs": results})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
