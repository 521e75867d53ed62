"""What security costs: word count throughput with ZooKeeper ACLs and CurveZMQ off and on.

``python -m benchmarks.security [--seconds S] [--warmup W] [--workers N] [--rounds R]``

Runs the word count (acking on) on a fresh local cluster of real processes (2 supervisors)
per configuration: plain, ZooKeeper ACLs, CurveZMQ, both; ``--rounds`` repeats the set in
turn so that a noisy machine hits every configuration alike. Reports the median words/s of
each and its ratio to plain, as a table and ``benchmarks/results/security.json``.
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, sample_rate, temporary_home, write_json

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def run_once(cluster_conf: dict[str, Any], workers: int, warmup: float, seconds: float) -> float:
    """Words/s counted in a steady-state window, on a cluster started with ``cluster_conf``."""
    from nstorm.client import ClusterClient
    from nstorm.curvekeys import generate_keys
    from nstorm.localcluster import LocalCluster

    with temporary_home() as home:
        conf = dict(cluster_conf)
        if conf.get("nstorm.transport.curve"):
            generate_keys(home / "keys")
            conf["nstorm.transport.curve.keys.dir"] = str(home / "keys")
        cluster = LocalCluster(supervisors=2, slots=max(1, workers // 2 + workers % 2), conf=conf).start()
        try:
            with ClusterClient(cluster.address, auth=conf.get("nstorm.zookeeper.auth")) as client:
                client.submit(WORDCOUNT, conf={"topology.workers": workers, "wordcount.spouts": workers,
                                               "wordcount.splits": workers, "wordcount.counts": workers})
                client.wait_running("wordcount", 60)
                return sample_rate(client, "wordcount", "count", "executed", warmup, seconds)
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.security", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measurement window per run")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration, interleaved")
    args = parser.parse_args()
    auth = f"bench:{uuid.uuid4().hex}"
    configs: dict[str, dict[str, Any]] = {
        "plain": {},
        "ZooKeeper ACLs": {"nstorm.zookeeper.auth": auth},
        "CurveZMQ": {"nstorm.transport.curve": True},
        "ACLs + CurveZMQ": {"nstorm.zookeeper.auth": auth, "nstorm.transport.curve": True},
    }
    console = Console()
    rates: dict[str, list[float]] = {label: [] for label in configs}
    for r in range(args.rounds):
        for label, conf in configs.items():
            rate = run_once(conf, args.workers, args.warmup, args.seconds)
            rates[label].append(rate)
            console.print(f"round {r + 1} {label}: {rate:,.0f} words/s")
    medians = {label: statistics.median(v) for label, v in rates.items()}
    table = Table(title=f"word count with security ({args.workers} workers, 2 nodes, {machine()['cpus']} cores, "
                        f"median of {args.rounds})")
    for col in ("configuration", "words/s", "runs", "vs plain"):
        table.add_column(col, justify="right")
    for label, median in medians.items():
        table.add_row(label, f"{median:,.0f}", ", ".join(f"{v:,.0f}" for v in rates[label]),
                      f"{median / medians['plain']:.2f}")
    console.print(table)
    path = write_json("security", {"machine": machine(), "args": vars(args), "words_per_sec": rates,
                                   "median_words_per_sec": medians})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
