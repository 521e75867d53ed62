"""How long one OTD round takes at scale: 10,000 executors on 1,000 workers.

``python -m benchmarks.otd_scale [--executors N] [--workers W] [--nodes K] [--edges E] [--repeat R]``

Random placement and a random sparse traffic matrix; times Case 3 (Algorithm 2 over every
executor and every low-load worker) and Case 1 (Algorithm 1) with the vectorised
implementation in ``scheduler_otd/otd.py``. Prints a table and writes
``benchmarks/results/otd_scale.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, write_json
from scheduler_otd.otd import WorkerLoad, otd_round


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.otd_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--executors", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=1_000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    executors = [f"c{i // 100}:{i % 100}" for i in range(args.executors)]
    workers = [f"n{i % args.nodes}:{6700 + i // args.nodes}" for i in range(args.workers)]
    worker_node = {w: w.split(":")[0] for w in workers}
    placement = {e: workers[int(rng.integers(args.workers))] for e in executors}
    pairs = rng.integers(0, args.executors, size=(args.edges, 2))
    weights = rng.integers(1, 1000, size=args.edges)
    edges = [(executors[a], executors[b], float(w)) for (a, b), w in zip(pairs, weights, strict=True) if a != b]
    conf = {"otd.threshold.asc": 0}
    cases = {
        "case 3 (Algorithm 2, all low)": {w: WorkerLoad(0.1, 0) for w in workers},
        "case 1 (Algorithm 1, 10% high)": {w: WorkerLoad(0.95 if i % 10 == 0 else 0.1, 0)
                                           for i, w in enumerate(workers)},
    }
    console = Console(width=160)
    table = Table(title=f"one OTD round: {args.executors:,} executors, {args.workers:,} workers, "
                        f"{args.nodes} nodes, {len(edges):,} edges ({machine()['cpus']} cores)")
    for col in ("round", "median (s)", "min (s)", "decision"):
        table.add_column(col, justify="right")
    results = {}
    for label, loads in cases.items():
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            decision = otd_round(executors, placement, worker_node, loads, edges, conf)
            times.append(time.perf_counter() - t0)
        results[label] = {"median_secs": statistics.median(times), "min_secs": min(times),
                          "decision": decision.as_json() | {"classes": None}}
        table.add_row(label, f"{statistics.median(times):.3f}", f"{min(times):.3f}",
                      f"{decision.executor} -> {decision.target} (ASC {decision.asc:.0f})")
    console.print(table)
    path = write_json("otd_scale", {"machine": machine(), "args": vars(args), "results": results})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
