"""The paper's OTD experiments (section 5.3) on a cluster of network namespaces.

``python -m benchmarks.otd [--duration S] [--link-rate RATE] [--experiments comm,comp]``

Two nodes (network namespaces, each with its own address on a bridge; needs root) with 4
workers each. For each experiment, static placement then OTD (``topology.scheduler=otd``),
same topology, same seed, each on a fresh cluster:

- ``comm`` (communication-intensive): word count on links limited to ``--link-rate``;
- ``comp`` (computation-intensive): ``topologies/compute.py`` (harmonic numbers, with a hot
  key range that shifts every 30 s).

Every second it records throughput (acked spout tuples), the inter-node ratio measured by the
engine (load-collection records) and the bytes the kernel counted on the nodes' veths,
the complete latency (spout emit -> fully acked, p50/p99 of a 1-in-16 sample) and the average
worker CPU. Prints a table, writes ``benchmarks/results/otd.json`` and PNG plots (cf. Fig. 12, 13).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import RESULTS, machine, temporary_home, write_json

ROOT = Path(__file__).parents[1]
EXPERIMENTS = {
    "comm": (ROOT / "topologies" / "wordcount.py", "wordcount", 10, {
        "wordcount.spouts": 2, "wordcount.splits": 8, "wordcount.counts": 8, "wordcount.workers": 8,
        "wordcount.rate": 4000, "topology.max.spout.pending": 2000}),
    "comp": (ROOT / "topologies" / "compute.py", "compute", 1, {
        "compute.rate": 400, "compute.cost": 4000, "compute.shift.secs": 30, "compute.workers": 8}),
}


class _Tail:
    """Reads new load-collection records as they are appended."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.offsets: dict[Path, int] = {}

    def read(self) -> list[dict[str, Any]]:
        records = []
        for path in self.root.rglob("*.jsonl") if self.root.exists() else []:
            offset = self.offsets.get(path, 0)
            with path.open() as f:
                f.seek(offset)
                data = f.read()
            complete = data.rfind("\n") + 1
            self.offsets[path] = offset + complete
            records.extend(json.loads(line) for line in data[:complete].splitlines() if line.strip())
        return records


def run(experiment: str, placement: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from nstorm import netns
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster
    from worker.metrics import metrics_root

    path, name, words_per_tuple, conf = EXPERIMENTS[experiment]
    conf = {**conf, "topology.scheduler": placement, "otd.period.secs": args.period, "otd.window.secs": args.window,
            "worker.heartbeat.interval.secs": 0.5}
    series: list[dict[str, Any]] = []
    with temporary_home():
        nodes = netns.create(2, args.link_rate if experiment == "comm" else None) if netns.available() else []
        hosts = None if nodes else ["127.0.0.11", "127.0.0.12"]
        cluster = LocalCluster(supervisors=2, slots=4, netns=nodes, hosts=hosts)
        try:
            cluster.start()
            with ClusterClient(cluster.address) as client:
                client.submit(path, conf=conf)
                client.wait_running(name, 90)
                warm = time.monotonic()
                if placement == "otd":
                    # The first round starts Nimbus's SparkSession, which takes a minute or more on
                    # a loaded 2-core machine: measure from the first completed round on.
                    while client.status(name).get("otd") is None and time.monotonic() - warm < 300:
                        time.sleep(1.0)
                else:
                    time.sleep(10)
                warmup = time.monotonic() - warm
                tail = _Tail(metrics_root() / name)
                tail.read()  # skip what was recorded during the warm-up
                veth_before = {n.veth: netns.link_bytes(n.veth) for n in nodes}
                t0 = time.monotonic()
                acked_before = client.status(name)["spouts"]["acked"]
                while time.monotonic() - t0 < args.duration:
                    time.sleep(1.0)
                    status = client.status(name)
                    records = tail.read()
                    edges = [r for r in records if r["kind"] == "edge"]
                    loads = [r for r in records if r["kind"] == "load"]
                    total = sum(r["tuples"] for r in edges)
                    inter = sum(r["tuples"] for r in edges if r["inter_node"])
                    inter_bytes = sum(r["bytes"] for r in edges if r["inter_node"])
                    veth_now = {n.veth: netns.link_bytes(n.veth) for n in nodes}
                    kernel = sum(veth_now[v][0] - veth_before[v][0] for v in veth_now)  # bytes nodes sent
                    veth_before = veth_now
                    spout_lat = list(client.latencies(name).values())
                    acked = status["spouts"]["acked"]
                    series.append({
                        "t": round(time.monotonic() - t0, 1),
                        "throughput": (acked - acked_before) * words_per_tuple,
                        "inter_node_ratio": inter / total if total else None,
                        "engine_inter_node_bytes": inter_bytes, "kernel_bytes": kernel,
                        "cpu": statistics.mean(r["cpu"] for r in loads) if loads else None,
                        "latency_p50_ms": statistics.median(x["p50"] for x in spout_lat) if spout_lat else None,
                        "latency_p99_ms": max(x["p99"] for x in spout_lat) if spout_lat else None,
                    })
                    acked_before = acked
                migrations = client.status(name)["migrations"]
        finally:
            cluster.stop()
            if nodes:
                netns.destroy()
    steady = series[len(series) // 3:]

    def avg(key: str) -> float:
        values = [s[key] for s in steady if s[key] is not None]
        return statistics.mean(values) if values else float("nan")

    result = {"experiment": experiment, "placement": placement, "series": series, "migrations": len(migrations),
              "warmup_secs": round(warmup, 1),
              "throughput": avg("throughput"), "inter_node_ratio": avg("inter_node_ratio"), "cpu": avg("cpu"),
              "latency_p50_ms": avg("latency_p50_ms"), "latency_p99_ms": avg("latency_p99_ms"),
              "engine_inter_node_bytes": sum(s["engine_inter_node_bytes"] for s in series),
              "kernel_bytes": sum(s["kernel_bytes"] for s in series), "netns": bool(nodes)}
    console.print(f"{experiment}/{placement} (after {warmup:.0f}s warm-up): {result['throughput']:,.0f}/s, inter-node "
                  f"{result['inter_node_ratio']:.1%}, cpu {result['cpu']:.2f}, {len(migrations)} moves")
    return result


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    experiments = sorted({r["experiment"] for r in results})
    fig, axes = plt.subplots(len(experiments), 3, figsize=(15, 3.8 * len(experiments)), squeeze=False)
    for row, exp in enumerate(experiments):
        for r in (x for x in results if x["experiment"] == exp):
            t = [s["t"] for s in r["series"]]
            axes[row][0].plot(t, [s["throughput"] / 1000 for s in r["series"]], label=r["placement"])
            axes[row][1].plot(t, [s["inter_node_ratio"] for s in r["series"]], label=r["placement"])
            axes[row][2].plot(t, [s["cpu"] for s in r["series"]], label=r["placement"])
        for col, ylabel in enumerate(("throughput (k/s)", "inter-node ratio", "avg worker CPU (cores)")):
            axes[row][col].set_title(f"{exp}: {ylabel}")
            axes[row][col].set_xlabel("time (s)")
            axes[row][col].legend(fontsize=8)
            axes[row][col].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.otd", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--link-rate", default="10mbit")
    parser.add_argument("--period", type=float, default=5.0, help="otd.period.secs")
    parser.add_argument("--window", type=float, default=10.0, help="otd.window.secs")
    parser.add_argument("--experiments", default="comm,comp")
    args = parser.parse_args()
    console = Console(width=180)
    results = [run(exp, placement, args, console) for exp in args.experiments.split(",")
               for placement in ("static", "otd")]
    table = Table(title=f"OTD vs static placement, 2 nodes x 4 workers ({machine()['cpus']} cores, "
                        f"links {args.link_rate} in comm)")
    for col in ("experiment", "placement", "throughput/s", "inter-node ratio", "avg worker CPU",
                "latency p50/p99 (ms)", "moves", "engine vs kernel inter-node bytes"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(r["experiment"], r["placement"], f"{r['throughput']:,.0f}", f"{r['inter_node_ratio']:.1%}",
                      f"{r['cpu']:.3f}", f"{r['latency_p50_ms']:.1f} / {r['latency_p99_ms']:.1f}",
                      str(r["migrations"]),
                      f"{r['engine_inter_node_bytes']:,} / {r['kernel_bytes']:,}" if r["netns"] else "no netns")
    console.print(table)
    RESULTS.mkdir(exist_ok=True)
    png = plot(results, RESULTS / "otd.png")
    out = write_json("otd", {"machine": machine(), "args": vars(args), "results": results})
    console.print(f"wrote {out}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()
