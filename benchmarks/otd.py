"""The paper's OTD experiments (section 5.3) on a cluster of network namespaces.

``python -m benchmarks.otd [--duration S] [--link-rate RATE] [--experiments comm,comp] [--placements static,otd]``

Two nodes (network namespaces, each with its own address on a bridge; needs root) with 4
workers each. For each experiment, static placement then OTD (``topology.scheduler=otd``),
same topology, same seed, each on a fresh cluster:

- ``comm`` (communication-intensive): word count on links limited to ``--link-rate``;
- ``comp`` (computation-intensive): ``topologies/compute.py`` (harmonic numbers over 64
  Zipf-skewed keys whose weights are dealt anew every 120 s, 12 executors), each worker capped at ``--worker-cpu`` cores
  by its supervisor (``supervisor.worker.cpu.limit``, a cgroup quota): 8 workers of 0.2 cores
  on this 2-core machine are 8 small nodes' worth of compute, and a worker whose executors get
  the hot keys saturates its cap while the others idle, as on the paper's cluster. Uncapped,
  every placement saturates the machine's two cores and load balancing has nothing to gain.

Both placements measure from 10 s after the topology runs (OTD's first rounds aggregate in
plain Python while Nimbus's SparkSession, started when Nimbus leads, warms up). Every second
it records throughput (acked spout tuples), the inter-node ratio measured by the engine
(load-collection records) and the bytes the kernel counted on the nodes' veths, the complete
latency (spout emit -> fully acked, of the stamped tuples, about one a ms per spout), the average and the highest
worker CPU and run-queue wait, the machine's load average, and each OTD round (case, engine, duration). Prints a
table, writes ``benchmarks/results/otd.json`` and PNG plots (cf. Fig. 12, 13).

Namespaces and the bridge have fixed names (``nstorm-n1``, ``nstorm-br0``) and making them
removes leftovers, so each run first waits until no one else's are there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException
from rich.console import Console
from rich.table import Table

from benchmarks._common import RESULTS, machine, temporary_home, write_json
from nstorm.errors import NStormError

ROOT = Path(__file__).parents[1]
EXPERIMENTS = {
    "comm": (ROOT / "topologies" / "wordcount.py", "wordcount", 10, {
        "wordcount.spouts": 2, "wordcount.splits": 8, "wordcount.counts": 8, "wordcount.workers": 8,
        "wordcount.rate": 4000, "topology.max.spout.pending": 2000}),
    # 300 tuples/s of H(50000) (2.2 ms each): about 0.65 cores of work, which fits the 8 capped
    # workers (1.6 cores, each also spending about 0.05 on its threads' wake-ups) when spread
    # evenly, while the round-robin placement gives one worker about twice its share: in a
    # pilot it sat at its cap, two others below half of theirs, and 24% of the offered tuples
    # were not processed. Every executor fits a worker's cap alone, so moving executors can help.
    "comp": (ROOT / "topologies" / "compute.py", "compute", 1, {
        "compute.rate": 150, "compute.cost": 50000, "compute.shift.secs": 120, "compute.workers": 8,
        "compute.bolts": 12, "compute.keys": 64, "compute.skew": 0.8}),
}
WARMUP_SECS = 10.0


class _NetnsLost(RuntimeError):
    """Our namespaces vanished during a run (someone else's ``netns.create``/``destroy``)."""


def _wait_for_free_netns(console: Console, timeout: float = 1800.0) -> None:
    """Wait until no namespace or bridge of ours exists (another engineer's run may be using them)."""
    deadline = time.monotonic() + timeout
    while True:
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        bridge = subprocess.run(["ip", "link", "show", "nstorm-br0"], capture_output=True).returncode == 0
        busy = [line.split()[0] for line in names.splitlines() if line.startswith("nstorm-")]
        if not busy and not bridge:
            return
        if time.monotonic() > deadline:
            msg = f"network namespaces {busy} (bridge: {bridge}) still in use after {timeout:.0f}s"
            raise SystemExit(msg)
        console.print(f"namespaces {busy} / bridge in use by someone else: waiting")
        time.sleep(30)


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
    from nstorm.home import metrics_dir
    from nstorm.localcluster import LocalCluster

    path, name, words_per_tuple, conf = EXPERIMENTS[experiment]
    conf = {**conf, "topology.scheduler": placement, "otd.period.secs": args.period, "otd.window.secs": args.window,
            "worker.heartbeat.interval.secs": 0.5}
    series: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    with temporary_home():
        if netns.available():
            _wait_for_free_netns(console)
        nodes = netns.create(2, args.link_rate if experiment == "comm" else None) if netns.available() else []
        hosts = None if nodes else ["127.0.0.11", "127.0.0.12"]
        cap = args.worker_cpu if experiment == "comp" and args.worker_cpu > 0 else None
        cluster_conf = {"otd.spark.eager": True, **({"supervisor.worker.cpu.limit": cap} if cap else {})}
        cluster = LocalCluster(supervisors=2, slots=4, netns=nodes, hosts=hosts, conf=cluster_conf)
        try:
            cluster.start()
            with ClusterClient(cluster.address) as client:
                client.submit(path, conf=conf)
                client.wait_running(name, 90)
                warm = time.monotonic()
                time.sleep(WARMUP_SECS)
                warmup = time.monotonic() - warm
                tail = _Tail(metrics_dir() / name)
                tail.read()  # skip what was recorded during the warm-up
                veth_before = {n.veth: netns.link_bytes(n.veth) for n in nodes}
                t0 = time.monotonic()
                acked_before = client.status(name)["spouts"]["acked"]
                sampled_at = time.monotonic()
                while time.monotonic() - t0 < args.duration:
                    time.sleep(1.0)
                    status = client.status(name)
                    now = time.monotonic()  # a sample takes more than a second on a loaded machine
                    records = tail.read()
                    edges = [r for r in records if r["kind"] == "edge"]
                    loads = [r for r in records if r["kind"] == "load"]
                    total = sum(r["tuples"] for r in edges)
                    inter = sum(r["tuples"] for r in edges if r["inter_node"])
                    inter_bytes = sum(r["bytes"] for r in edges if r["inter_node"])
                    if any(not Path(f"/var/run/netns/{n.namespace}").exists() for n in nodes):
                        msg = f"{experiment}/{placement}: the namespaces vanished after {now - t0:.0f}s"
                        raise _NetnsLost(msg)
                    veth_now = {n.veth: netns.link_bytes(n.veth) for n in nodes}
                    kernel = sum(veth_now[v][0] - veth_before[v][0] for v in veth_now)  # bytes nodes sent
                    veth_before = veth_now
                    spout_lat = list(client.latencies(name).values())
                    acked = status["spouts"]["acked"]
                    otd = status.get("otd")
                    if otd and (not rounds or rounds[-1]["at"] != otd["at"]):
                        rounds.append({k: otd.get(k) for k in ("at", "case", "executor", "target", "asc", "engine",
                                                                 "round_secs", "inter_node_ratio", "classes")})
                    series.append({
                        "t": round(now - t0, 1), "acked": acked,
                        "throughput": (acked - acked_before) * words_per_tuple / (now - sampled_at),
                        "inter_node_ratio": inter / total if total else None,
                        "engine_inter_node_bytes": inter_bytes, "kernel_bytes": kernel,
                        "cpu": statistics.mean(r["cpu"] for r in loads) if loads else None,
                        "cpu_max": max(r["cpu"] for r in loads) if loads else None,
                        "wait": statistics.mean(r.get("wait", 0.0) for r in loads) if loads else None,
                        "wait_max": max(r.get("wait", 0.0) for r in loads) if loads else None,
                        "loadavg": os.getloadavg()[0],
                        "latency_p50_ms": statistics.median(x["p50"] for x in spout_lat) if spout_lat else None,
                        "latency_p99_ms": max(x["p99"] for x in spout_lat) if spout_lat else None,
                    })
                    acked_before, sampled_at = acked, now
                migrations = client.status(name)["migrations"]
        finally:
            cluster.stop()
            if nodes:
                netns.destroy()
    end = series[-1]["t"] if series else 0.0
    steady = [s for s in series if s["t"] >= end / 3]  # the last two thirds
    last_minute = [s for s in series if s["t"] >= end - 60]

    def avg(key: str, part: list[dict[str, Any]] = steady) -> float:
        values = [s[key] for s in part if s[key] is not None]
        return statistics.mean(values) if values else float("nan")

    def rate(part: list[dict[str, Any]]) -> float:
        """Throughput over ``part``: acked spout tuples between its first and last sample."""
        if len(part) < 2:
            return float("nan")
        return (part[-1]["acked"] - part[0]["acked"]) * words_per_tuple / (part[-1]["t"] - part[0]["t"])

    by_engine = {e: [r["round_secs"] for r in rounds if r["engine"] == e] for e in ("python", "spark")}
    result = {"experiment": experiment, "placement": placement, "series": series, "migrations": len(migrations),
              "worker_cpu_limit": cap,
              "words_per_tuple": words_per_tuple,
              "warmup_secs": round(warmup, 1), "rounds": rounds,
              "round_cases": {c: sum(1 for r in rounds if r["case"] == c) for c in (1, 2, 3, 4)},
              "round_secs_median": {e: statistics.median(v) for e, v in by_engine.items() if v},
              "throughput": rate(steady), "inter_node_ratio": avg("inter_node_ratio"), "cpu": avg("cpu"),
              "cpu_max": avg("cpu_max"), "wait": avg("wait"), "wait_max": avg("wait_max"), "loadavg": avg("loadavg"),
              "last_minute": {"throughput": rate(last_minute),
                              **{k: avg(k, last_minute) for k in ("inter_node_ratio", "cpu")}},
              "latency_p50_ms": avg("latency_p50_ms"), "latency_p99_ms": avg("latency_p99_ms"),
              "engine_inter_node_bytes": sum(s["engine_inter_node_bytes"] for s in series),
              "kernel_bytes": sum(s["kernel_bytes"] for s in series), "netns": bool(nodes)}
    console.print(f"{experiment}/{placement}: {result['throughput']:,.0f}/s, inter-node {result['inter_node_ratio']:.1%}, "
                  f"cpu {result['cpu']:.3f} (max {result['cpu_max']:.2f}), run-queue wait {result['wait']:.3f} "
                  f"(max {result['wait_max']:.2f}), load avg {result['loadavg']:.1f}, "
                  f"{len(migrations)} moves, rounds by case {result['round_cases']}, "
                  f"median round {result['round_secs_median']}")
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
            series = r["series"]
            t = [s["t"] for s in series]
            # trailing 10 s: a per-sample rate shows heartbeat gaps around a spout's move as spikes
            trailing = [[p for p in series if s["t"] - 10 <= p["t"] <= s["t"]] for s in series]
            per_tuple = r.get("words_per_tuple") or EXPERIMENTS[exp][2]
            rates = [(w[-1]["acked"] - w[0]["acked"]) * per_tuple / (w[-1]["t"] - w[0]["t"]) / 1000
                     if len(w) > 1 else None for w in trailing]
            cpus = [statistics.mean(c) if (c := [p["cpu"] for p in w if p["cpu"] is not None]) else None
                    for w in trailing]
            axes[row][0].plot(t, rates, label=r["placement"])
            axes[row][1].plot(t, [s["inter_node_ratio"] for s in series], label=r["placement"])
            axes[row][2].plot(t, cpus, label=r["placement"])
        for col, ylabel in enumerate(("throughput, trailing 10 s (k/s)", "inter-node ratio",
                                      "avg worker CPU, trailing 10 s (cores)")):
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
    parser.add_argument("--worker-cpu", type=float, default=0.2,
                        help="comp: cores each worker may use (cgroup cap; 0: uncapped)")
    parser.add_argument("--placements", default="static,otd")
    parser.add_argument("--out", default="otd", help="name of the JSON and PNG under benchmarks/results/")
    parser.add_argument("--plot", nargs="+", metavar="JSON", help="only draw the PNG of earlier results")
    args = parser.parse_args()
    console = Console(width=180)
    if args.plot:
        earlier = [r for f in args.plot for r in json.loads(Path(f).read_text())["results"]]
        console.print(f"wrote {plot(earlier, RESULTS / f'{args.out}.png')}")
        return
    results = []
    for exp in args.experiments.split(","):
        for placement in args.placements.split(","):
            for attempt in range(3):
                try:
                    results.append(run(exp, placement, args, console))
                    break
                except (_NetnsLost, NStormError, KazooException, TimeoutError) as exc:  # a shared machine: links vanish, ZK stalls
                    console.print(f"{exp}/{placement} failed ({type(exc).__name__}: {exc}): run again ({attempt + 1}/3)")
            else:
                raise SystemExit(f"{exp}/{placement}: the namespaces kept vanishing")
    table = Table(title=f"OTD vs static placement, 2 nodes x 4 workers ({machine()['cpus']} cores, "
                        f"links {args.link_rate} in comm)")
    for col in ("experiment", "placement", "throughput/s", "inter-node ratio", "last minute", "avg worker CPU",
                "run-queue wait (avg / max)", "latency p50/p99 (ms)", "moves", "rounds by case", "load avg", "engine vs kernel inter-node bytes"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(r["experiment"], r["placement"], f"{r['throughput']:,.0f}", f"{r['inter_node_ratio']:.1%}",
                      f"{r['last_minute']['throughput']:,.0f}/s, {r['last_minute']['inter_node_ratio']:.1%}",
                      f"{r['cpu']:.3f}" + (f" ({r['cpu'] / r['worker_cpu_limit']:.0%} of cap)"
                                           if r.get("worker_cpu_limit") else ""),
                      f"{r['wait']:.3f} / {r['wait_max']:.2f}", f"{r['latency_p50_ms']:.1f} / {r['latency_p99_ms']:.1f}",
                      str(r["migrations"]), str({c: n for c, n in r["round_cases"].items() if n}), f"{r['loadavg']:.1f}",
                      f"{r['engine_inter_node_bytes']:,} / {r['kernel_bytes']:,}" if r["netns"] else "no netns")
    console.print(table)
    RESULTS.mkdir(exist_ok=True)
    png = plot(results, RESULTS / f"{args.out}.png")
    out = write_json(args.out, {"machine": machine(), "args": vars(args), "results": results})
    console.print(f"wrote {out}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()
