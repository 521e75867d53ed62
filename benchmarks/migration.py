"""The paper's migration experiment (section 5.2) on a local 2-supervisor cluster running word count.

``python -m benchmarks.migration [--duration S] [--period S] [--random M] [--ts MS] [--tw MS] [--dk MS] [--state lmdb]``

Word count runs at a steady offered load (``--rate`` sentences/s per spout executor) for
``--duration`` seconds; every ``--period`` seconds M random executors are re-deployed. Modes,
each on a fresh cluster, same seed:

- ``baseline``: no migrations;
- ``storm``: Storm's rebalance (stop mode: deactivate, wait ``--timeout``, restart all workers);
- ``storm*``: T-Storm/TS-Storm (process mode: restart the workers whose executors changed);
- ``nstorm``: thread mode, no lazy kill (DK=0), no ZooKeeper watch, Storm's cycles (TS 10 s, TW 1 s);
- ``nstorm+``: thread mode with lazy kill (DK), the watch, and short cycles (TS, TW).

``--state lmdb`` runs every mode with durable state (checkpoints in LMDB), where a moved
executor's old copy seals its output before its state leaves (worker.migration).

Throughput is the rate of fully acked sentences x 10 words, sampled every second. Prints a
table in the shape of the paper's Fig. 9/10, writes ``benchmarks/results/migration.json``
and a PNG of throughput over time (Fig. 8). ``--sweep`` adds N-Storm+ runs for M = 1, 2, 4, 8, 16.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import RESULTS, machine, temporary_home, write_json

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"
LEVELS = (0.2, 0.4, 0.6, 0.8, 1.0)


def _mode_settings(mode: str, args: argparse.Namespace) -> tuple[str | None, dict[str, Any]]:
    """(rebalance mode or None, daemon conf) for a benchmark mode."""
    fast = {"supervisor.sync.interval.ms": args.ts, "worker.sync.interval.ms": args.tw,
            "worker.lazy.kill.ms": args.dk, "supervisor.sync.watch": True}
    storm_cycles = {"supervisor.sync.interval.ms": 10_000, "worker.sync.interval.ms": 1_000}
    return {
        "baseline": (None, fast),
        "storm": ("stop", {**fast, **storm_cycles}),
        "storm*": ("process", {**fast, **storm_cycles}),
        "nstorm": ("thread", {**storm_cycles, "worker.lazy.kill.ms": 0, "supervisor.sync.watch": False}),
        "nstorm+": ("thread", fast),
    }[mode]


def run_mode(mode: str, args: argparse.Namespace, m: int, console: Console) -> dict[str, Any]:
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    rebalance_mode, daemon_conf = _mode_settings(mode, args)
    topo_conf = {
        "wordcount.spouts": 2, "wordcount.splits": args.splits, "wordcount.counts": args.counts, "topology.workers": 4,
        "wordcount.rate": args.rate, "topology.message.timeout.secs": args.timeout,
        "worker.heartbeat.interval.secs": 0.5, "topology.state.provider": args.state, **daemon_conf,
    }
    samples: list[dict[str, Any]] = []
    moves: list[dict[str, Any]] = []
    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=2, conf=daemon_conf).start()
        try:
            with ClusterClient(cluster.address) as client:
                client.submit(WORDCOUNT, conf=topo_conf)
                client.wait_running("wordcount", 60)
                time.sleep(args.warmup)
                stop = threading.Event()

                def migrate() -> None:
                    with ClusterClient(cluster.address) as mover:
                        while not stop.wait(args.period):
                            try:
                                result = mover.rebalance("wordcount", mode=rebalance_mode, random_count=m,
                                                         wait_secs=args.timeout, by="random")
                                moves.append({"at": time.monotonic() - t0, "moves": result["moves"]})
                            except Exception as exc:  # noqa: BLE001 - a busy topology skips a period
                                moves.append({"at": time.monotonic() - t0, "skipped": str(exc)})

                t0 = time.monotonic()
                mover = threading.Thread(target=migrate, daemon=True) if rebalance_mode else None
                if mover:
                    mover.start()
                next_at = t0
                first_sec = int(time.time()) + 1
                per_sec: dict[int, dict[str, int]] = {}
                while True:
                    next_at += 1.0
                    time.sleep(max(0.0, next_at - time.monotonic()))
                    status = client.status("wordcount")
                    samples.append({"t": time.monotonic() - t0, "acked": status["spouts"]["acked"],
                                    "failed": status["spouts"]["failed"], "replayed": status["spouts"]["replayed"],
                                    "pids": {w["id"]: w["pid"] for w in status["workers"]}})
                    for sec, by_executor in client.acked_per_second("wordcount").items():
                        slot = per_sec.setdefault(sec, {})
                        for eid, n in by_executor.items():
                            slot[eid] = max(slot.get(eid, 0), n)
                    if time.monotonic() - t0 >= args.duration:
                        break
                stop.set()
                last_sec = int(time.time()) - 2
                time.sleep(2.0)  # let the last complete seconds reach a heartbeat
                for sec, by_executor in client.acked_per_second("wordcount").items():
                    slot = per_sec.setdefault(sec, {})
                    for eid, n in by_executor.items():
                        slot[eid] = max(slot.get(eid, 0), n)
                migrations = client.status("wordcount")["migrations"]
        finally:
            cluster.stop()
    per_second = [10 * sum(per_sec.get(sec, {}).values()) for sec in range(first_sec, last_sec + 1)]
    restarts = 0
    known: dict[str, int] = {}
    for sample in samples:
        for w, pid in sample["pids"].items():
            if pid and known.get(w) and known[w] != pid:
                restarts += 1
            if pid:
                known[w] = pid
    stalls = []
    for record in migrations:
        if record.get("completed_at"):
            if record["mode"] == "thread":
                stalls.append(float(record.get("stall_secs") or 0))
            else:
                stalls.append(float(record["completed_at"]) - float(record["requested_at"]))
    console.print(f"{mode} (M={m}): median {statistics.median(per_second):,.0f} words/s, "
                  f"{len(migrations)} moves, {restarts} worker restarts")
    return {
        "mode": mode, "m": m, "per_second": per_second,
        "total_words": sum(per_second),
        "failed": samples[-1]["failed"] - samples[0]["failed"],
        "replayed": samples[-1]["replayed"] - samples[0]["replayed"],
        "moves": len(migrations), "longest_stall_secs": max(stalls, default=0.0), "stalls_secs": stalls,
        "state": args.state, "restarts": restarts,
        "requests": moves, "conf": {**topo_conf},
    }


def summarize(run: dict[str, Any], baseline: float) -> dict[str, Any]:
    degradation = [1.0 - min(1.0, x / baseline) if baseline else 0.0 for x in run["per_second"]]
    run["seconds_at_degradation"] = {f"{int(level * 100)}%": sum(1 for d in degradation if d >= level - 1e-9)
                                     for level in LEVELS}
    return run


def plot(runs: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for run in runs:
        ax.plot(range(1, len(run["per_second"]) + 1), [x / 1000 for x in run["per_second"]],
                label=f"{run['mode']} (M={run['m']})", linewidth=1.2)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (k words/s)")
    ax.set_title("Word count throughput while executors are re-deployed (cf. N-Storm Fig. 8)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.migration", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="measured seconds per mode")
    parser.add_argument("--period", type=float, default=30.0, help="seconds between re-deployments")
    parser.add_argument("--random", type=int, default=1, help="M: executors moved per re-deployment")
    parser.add_argument("--rate", type=float, default=1500.0, help="sentences/s per spout executor (2 spouts)")
    parser.add_argument("--timeout", type=float, default=30.0, help="topology.message.timeout.secs (Storm's wait)")
    parser.add_argument("--ts", type=int, default=1000, help="TS for nstorm+ (ms)")
    parser.add_argument("--tw", type=int, default=100, help="TW for nstorm+ (ms)")
    parser.add_argument("--dk", type=int, default=2000, help="DK for nstorm+ (ms)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--splits", type=int, default=4, help="split executors (M may not exceed the movable ones)")
    parser.add_argument("--counts", type=int, default=4, help="count executors")
    parser.add_argument("--modes", default="baseline,storm,storm*,nstorm,nstorm+")
    parser.add_argument("--state", choices=("memory", "lmdb"), default="memory",
                        help="topology.state.provider: lmdb takes checkpoints, and a moved copy seals its output first")
    parser.add_argument("--sweep", action="store_true", help="also N-Storm+ with M = 1, 2, 4, 8, 16")
    args = parser.parse_args()
    console = Console(width=200)
    runs = [run_mode(mode, args, args.random, console) for mode in args.modes.split(",")]
    if args.sweep:
        runs += [run_mode("nstorm+", args, m, console) for m in (1, 2, 4, 8, 16) if m != args.random]
    base_run = next((r for r in runs if r["mode"] == "baseline"), None)
    baseline = statistics.median(base_run["per_second"]) if base_run else max(
        statistics.median(r["per_second"]) for r in runs)
    for run in runs:
        summarize(run, baseline)
    table = Table(title=f"re-deployment every {args.period:.0f}s over {args.duration:.0f}s "
                        f"(baseline {baseline:,.0f} words/s; {machine()['cpus']} cores)")
    for col in ("mode", "M", *(f"s >={int(level * 100)}%" for level in LEVELS), "total vs baseline",
                "failed", "replayed", "longest stall (s)", "worker restarts"):
        table.add_column(col, justify="right")
    base_total = base_run["total_words"] if base_run else None
    for run in runs:
        table.add_row(run["mode"], str(run["m"]), *(str(run["seconds_at_degradation"][f"{int(level * 100)}%"])
                                                     for level in LEVELS),
                      f"{run['total_words'] / base_total:.3f}" if base_total else "-",
                      str(run["failed"]), str(run["replayed"]), f"{run['longest_stall_secs']:.3f}",
                      str(run["restarts"]))
    console.print(table)
    RESULTS.mkdir(exist_ok=True)
    png = plot(runs, RESULTS / "migration.png")
    path = write_json("migration", {"machine": machine(), "args": vars(args), "baseline_words_per_sec": baseline,
                                    "runs": runs})
    console.print(f"wrote {path}" + (f" and {png}" if png else " (no PNG: pip install matplotlib)"))


if __name__ == "__main__":
    main()
