"""Changing a bolt's parallelism while it runs: live, Storm's way, and stop-and-restore; and OTD's autoscaling.

``python -m benchmarks.rescale [--modes live,stop,restore,autoscale] [--rate R] [--cost C] [--cap CORES]
[--step-secs S] [--stop-wait S]``

``topologies/keyed_work.py`` (2 spouts offering ``--rate`` keyed tuples/s each over 512 keys,
a ``work`` bolt doing ``--cost`` units of work per tuple) on a fresh local cluster per mode: 2
supervisors with 4 slots each, every worker capped at ``--cap`` cores by its supervisor
(``supervisor.worker.cpu.limit``), so that new workers add capacity on this 2-core machine.
The ``work`` bolt goes 4 -> 8 (on 4 workers, ``--workers``) -> 2 -> 5 executors, one step every
``--step-secs``:

- ``live``: ``nstorm rebalance --parallelism`` (thread mode): key groups handed over, nothing stops;
- ``stop``: Storm's ``rebalance -e``: deactivate, wait ``--stop-wait`` (Storm waits a message
  timeout), stop every worker, restart with the new parallelism (in-memory state is lost);
- ``restore``: Flink's stop-and-restore: checkpoints in LMDB every second, a stop-mode change with
  no wait, the workers restarted from the last checkpoint in the new layout.

Every work executor records, per key group and 0.1 s bucket, the largest delay of its tuples
(processing time - emit time) and how many it processed. Reported per mode: tuples processed per
second over time (and the total against the offered load), and per step the longest *stall* of
a key group, its largest delay in the 10 s after the step less its usual delay (the median of its
bucket maxima in the 10 s before): separately for the groups the step moved to another executor
(affected) and the others (unaffected). In the stop modes every group stops.

``autoscale``: ``topology.scheduler=otd`` with ``otd.autoscale=true``, the work bolt at 2
executors on 2 workers, ``--autoscale-cost`` units a tuple (enough that three times ``--rate``
overloads 2 capped workers), the offered load stepped from ``--rate`` to three times it after
30 s: how far the work bolt is behind the offered load over time (offered less processed), and
OTD's scale-out steps (``by: otd``); the load step is absorbed when that backlog stops growing.

Prints tables and writes ``benchmarks/results/rescale.json``.
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

from benchmarks._common import machine, temporary_home, write_json

TOPOLOGY = Path(__file__).parents[1] / "topologies" / "keyed_work.py"
NAME = "keyedwork"
STEPS = [(8, 4), (2, None), (5, None)]  # (work executors, workers)
GROUPS = 128


def _owners(plan: Any) -> dict[int, str]:
    """Key group -> the work executor that owns it in ``plan``."""
    works = [e for e in plan.tasks if e in plan.executors and e.startswith("work:")]
    return {g: works[g % len(works)] for g in range(GROUPS)}


def _read_buckets(out: Path) -> list[dict[str, Any]]:
    records = []
    for path in out.glob("work-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def _timeline(records: list[dict[str, Any]], t0: float, end: float) -> list[int]:
    """Tuples processed per whole second from ``t0``."""
    seconds = [0] * max(0, int(end - t0) + 1)
    for r in records:
        i = int(r["t"] - t0)
        if 0 <= i < len(seconds):
            seconds[i] += int(r["n"])
    return seconds


def _stalls(records: list[dict[str, Any]], at: float, affected: set[int], window: float = 10.0,
            until: float | None = None) -> dict[str, Any]:
    """The longest stall among the affected and the unaffected key groups of a step at ``at``.

    A group's stall is the larger of two excesses over its usual in the ``window`` before the
    step: of its largest delay (a held tuple is processed late) over its usual delay (the median
    of its bucket maxima), and of its longest time without a tuple processed (a stopped topology
    processes nothing) over its longest such time before (a group gets a tuple every ~60 ms at
    the default rate, so quiet spells of a few buckets happen by chance), in the ``window`` after
    the step (or until ``until``, the step's end, when later)."""
    end = max(at + window, until or 0.0)
    delays_before: dict[int, list[float]] = {}
    seen: dict[int, list[float]] = {}
    after: dict[int, float] = {}
    for r in records:
        t = r["t"]
        if not at - window <= t < end:
            continue
        for g, delay in r["groups"].items():
            g = int(g)
            seen.setdefault(g, []).append(t)
            if t < at:
                delays_before.setdefault(g, []).append(delay)
            else:
                after[g] = max(after.get(g, 0.0), delay)
    stall: dict[int, float] = {}
    for g in set(seen) | affected:
        times = sorted(seen.get(g, []))
        gaps_before = [b - a for a, b in zip(times, times[1:], strict=False) if b < at]
        points = [t for t in times if t < at][-1:] + [t for t in times if t >= at] + [end]
        gap_after = max((b - a for a, b in zip(points, points[1:], strict=False)), default=0.0)
        usual_gap = max(gaps_before, default=0.0)
        usual_delay = statistics.median(delays_before.get(g) or [0.0])
        stall[g] = max(0.0, gap_after - usual_gap, after.get(g, 0.0) - usual_delay)
    hit = [s for g, s in stall.items() if g in affected]
    other = [s for g, s in stall.items() if g not in affected]
    return {"affected": round(max(hit, default=0.0), 4), "unaffected": round(max(other, default=0.0), 4),
            "affected_groups": len(affected), "unaffected_p99": round(_p99(other), 4)}


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * (len(values) - 1) + 0.5))]


def run_mode(mode: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    with temporary_home() as home:
        out = home / "work"
        out.mkdir()
        conf: dict[str, Any] = {"keyed.output.dir": str(out), "keyed.cost": args.cost, "keyed.bolts": 4,
                                "keyed.workers": 2, "keyed.schedule": [[0, args.rate]],
                                "worker.heartbeat.interval.secs": 0.5, "topology.message.timeout.secs": 30}
        if mode == "restore":
            conf.update({"topology.state.provider": "lmdb", "topology.state.checkpoint.interval.ms": 1000})
        if mode == "autoscale":
            # Two work executors, then three times the load at 30 s (the cool-down keeps OTD from
            # scaling the idle start in; scaling out waits only for a window of the new layout).
            conf.update({"keyed.bolts": 2, "keyed.schedule": [[0, args.rate], [30, 3 * args.rate]],
                         "keyed.cost": args.autoscale_cost,
                         "topology.scheduler": "otd", "otd.autoscale": True, "otd.period.secs": 5,
                         "otd.window.secs": 10, "otd.autoscale.cooldown.secs": 600})
        cluster = LocalCluster(supervisors=2, slots=4, conf={"supervisor.worker.cpu.limit": args.cap})
        try:
            cluster.start()
            with ClusterClient(cluster.address) as client:
                client.submit(TOPOLOGY, conf=conf)
                client.wait_running(NAME, 90)
                t0 = time.time()
                steps = []
                if mode == "autoscale":
                    backlog = []
                    while time.time() - t0 < args.autoscale_secs:
                        status = client.status(NAME)
                        backlog.append([round(time.time() - t0, 1), status["components"]["work"]["queue"],
                                        status["components"]["work"]["parallelism"]])
                        time.sleep(1.0)
                    steps = [{"at": round(r.requested_at - t0, 1), "to": r.target, "by": r.by,
                              "done_after": round(r.completed_at - r.requested_at, 3) if r.completed_at else None}
                             for r in client.migrations(NAME) if r.mode.value == "rescale"]
                    end = time.time()
                    records = _read_buckets(out)
                    seconds = _timeline(records, t0, end)
                    behind = _behind(seconds, [(0.0, 2 * args.rate), (30.0, 6 * args.rate)])
                    return {"mode": mode, "queue": backlog, "steps": steps, "per_second": seconds,
                            "behind": behind, "absorbed_after_secs": _absorbed(behind, 30.0),
                            "longest_growth_secs": _longest_growth(behind, 30)}
                time.sleep(args.warmup)
                for n, workers in STEPS:
                    plan = client.plan(NAME)
                    before = _owners(plan)
                    at = time.time()
                    if mode == "live":
                        result = client.rebalance(NAME, parallelism={"work": n}, workers=workers)
                    else:
                        result = client.rebalance(NAME, mode="stop", parallelism={"work": n}, workers=workers,
                                                  wait_secs=args.stop_wait if mode == "stop" else 0.0)
                    done = client.wait_migrations(NAME, result["records"], timeout=300)
                    client.wait_running(NAME, 120)
                    after = _owners(client.plan(NAME))
                    moved = {g for g in range(GROUPS) if before[g] != after[g]} if mode == "live" else set(range(GROUPS))
                    steps.append({"to": n, "at": at, "took": round((done[0].completed_at or at) - at, 3),
                                  "moved_groups": len(moved), "moved": sorted(moved)})
                    console.print(f"{mode}: work -> {n} executors in {steps[-1]['took']:.2f}s "
                                  f"({len(moved)} key groups change owner)")
                    time.sleep(max(0.0, args.step_secs - (time.time() - at)))
                end = time.time()
                time.sleep(1.0)
                status = client.status(NAME)
        finally:
            cluster.stop()
        records = _read_buckets(out)
        for step in steps:
            step["stall"] = _stalls(records, step["at"], set(step.pop("moved")), until=step["at"] + step["took"])
            step["at"] = round(step["at"] - t0, 1)
        seconds = _timeline(records, t0, end)
        offered = 2 * args.rate * (end - t0)
        return {"mode": mode, "steps": steps, "per_second": seconds, "processed": sum(seconds),
                "offered": round(offered), "failed": status["spouts"]["failed"]}


def _behind(seconds: list[int], schedule: list[tuple[float, float]]) -> list[int]:
    """Per second, how many tuples the work bolt is behind the offered load: offered (by the
    spouts' schedule) less processed since ``t0``, less its smallest value before the load step
    (the spouts started before ``t0``). The backlog is at the spouts: ``max.spout.pending``
    keeps the bolt's own queue short, so an overloaded bolt shows as spouts behind schedule."""
    offered = processed = 0.0
    out = []
    for i, n in enumerate(seconds):
        offered += [rate for at, rate in schedule if at <= i][-1]
        processed += n
        out.append(offered - processed)
    step = int(schedule[-1][0])
    base = min(out[:step] or [0.0])
    return [max(0, round(b - base)) for b in out]


def _longest_growth(behind: list[int], step_at: int) -> int:
    """The longest run of seconds, from the load step on, in which the backlog grew every second
    (the goal: no backlog grows for more than 30 s)."""
    best = run = 0
    for i in range(max(step_at, 1), len(behind)):
        run = run + 1 if behind[i] > behind[i - 1] else 0
        best = max(best, run)
    return best


def _absorbed(behind: list[int], step_at: float) -> float | None:
    """Seconds from the load step until the backlog stopped growing (its last new high)."""
    peak, peak_at = -1, None
    for t, b in enumerate(behind):
        if t >= step_at and b > peak:
            peak, peak_at = b, t
    return round(peak_at - step_at, 1) if peak_at is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rescale", description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="live,stop,restore,autoscale")
    parser.add_argument("--rate", type=float, default=1000.0, help="tuples/s per spout (2 spouts)")
    parser.add_argument("--cost", type=int, default=2000, help="work units per tuple")
    parser.add_argument("--cap", type=float, default=0.4, help="cores per worker (supervisor.worker.cpu.limit)")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--step-secs", type=float, default=30.0, help="seconds between steps (at least)")
    parser.add_argument("--stop-wait", type=float, default=30.0, help="stop mode: seconds deactivated first (Storm's)")
    parser.add_argument("--autoscale-secs", type=float, default=150.0)
    parser.add_argument("--autoscale-cost", type=int, default=8000,
                        help="work units per tuple in the autoscale run: three times --rate overloads 2 capped workers")
    args = parser.parse_args()
    console = Console()
    results = []
    for mode in args.modes.split(","):
        results.append(run_mode(mode.strip(), args, console))
    table = Table(title=f"work bolt 4 -> 8 -> 2 -> 5 executors ({machine()['cpus']} cores, workers capped at "
                        f"{args.cap} cores, {2 * args.rate:.0f} tuples/s offered)")
    for col in ("mode", "processed / offered", "step", "took (s)", "groups moved", "longest stall, affected (s)",
                "longest stall, unaffected (s)"):
        table.add_column(col, justify="right")
    for r in results:
        if r["mode"] == "autoscale":
            continue
        for i, step in enumerate(r["steps"]):
            table.add_row(r["mode"] if i == 0 else "", f"{r['processed'] / max(r['offered'], 1):.3f}" if i == 0 else "",
                          f"-> {step['to']}", f"{step['took']:.2f}", str(step["moved_groups"]),
                          f"{step['stall']['affected']:.3f}", f"{step['stall']['unaffected']:.3f}")
    console.print(table)
    for r in results:
        if r["mode"] == "autoscale":
            peak = max(r["behind"], default=0)
            console.print(f"autoscale: {2 * args.rate:.0f} -> {6 * args.rate:.0f} tuples/s at 30 s, cost "
                          f"{args.autoscale_cost}; steps {r['steps']}")
            console.print(f"  behind the offered load, every 10 s: {r['behind'][::10]}")
            console.print(f"  backlog peaked at {peak} tuples, {r['absorbed_after_secs']} s after the load step; "
                          f"it grew for {r['longest_growth_secs']} s in a row at most")
    path = write_json("rescale", {"machine": machine(), "args": vars(args), "results": results})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
