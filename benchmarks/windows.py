"""Per-key sliding sums: nstorm's WindowedBolt, the same by hand in a plain bolt, and bytewax's windowing.

``python -m benchmarks.windows [--duration S] [--warmup W] [--rounds R] [--keys K] [--only ...]``

The workload is ``topologies/sensor_windows.py``'s: two reading streams (seeded pools, ``K``
keys, timestamps the wall clock less up to 0.5 s), each key's values summed over 4 s event-time
windows sliding every 2 s with a 1 s lag. The systems, each alone, in turn, every round:

- ``windowed``: nstorm, ``WindowSums`` (a WindowedBolt with an accumulator per window);
- ``hand``: nstorm, ``HandSums`` (a plain bolt with ``process_batch``, its own sums, watermark
  and heap of window ends: what a user writes without windows);
- ``windowed+lmdb``: ``windowed`` with acking on and ``lmdb`` checkpoints every second (tuples
  acked on arrival, the open windows in each checkpoint): the reliable configuration;
- ``bytewax``: ``fold_window`` with an ``EventClock`` and a ``SlidingWindower`` (1 process).

nstorm runs on a local cluster (ZooKeeper, Nimbus, 2 supervisors, 2 worker processes: 2 spout,
2 ``sums`` and 1 sink executor), with acking off except ``windowed+lmdb``; bytewax without a
recovery store. Peak: as fast as it goes, readings/s taken in by the window step over
``--duration`` s after ``--warmup`` s, and result latency; half: every system at half of
``windowed``'s median peak, result latency. Result latency = when a window's sum reaches the
sink, less the earliest moment it could (its end plus the lag). Prints a table, writes
``benchmarks/results/windows.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks import _windows_bytewax
from benchmarks._common import machine, temporary_home, write_json
from benchmarks._workload import percentile

__all__ = ["main"]

ROOT = Path(__file__).parents[1]
TOPOLOGY = ROOT / "topologies" / "sensor_windows.py"
SYSTEMS = ("windowed", "hand", "windowed+lmdb", "bytewax")


@contextmanager
def _client() -> Iterator[Any]:
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=1).start()
        try:
            with ClusterClient(cluster.address) as client:
                yield client
        finally:
            cluster.stop()


def _nstorm(system: str, rate: float, warmup: float, duration: float, keys: int) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="nstorm-windows-"))
    conf: dict[str, Any] = {"windows.variant": "hand" if system == "hand" else "windowed", "windows.keys": keys,
                            "windows.output.dir": str(out), "windows.rate": rate / 2}
    if system == "windowed+lmdb":
        conf.update({"topology.state.provider": "lmdb", "windows.reliable": True,
                     "topology.state.checkpoint.interval.ms": 1000})
    else:
        conf["topology.acker.executors"] = 0
    with _client() as client:
        name = client.submit(TOPOLOGY, conf=conf)["name"]
        client.wait_running(name, 60)
        time.sleep(warmup)
        first = client.status(name)
        t0 = time.time()
        time.sleep(duration)
        last = client.status(name)
        t1 = time.time()
        executed = last["components"]["sums"]["executed"] - first["components"]["sums"]["executed"]
        window = last["components"]["sums"].get("window") or {}
        samples = []
        for path in out.glob("sink-*.json"):
            data = json.loads(path.read_text())
            samples.extend(lat for at, lat in data["samples"] if t0 <= at <= t1)
        client.kill(name)
        client.wait_removed(name, 30)
    return {"readings_per_sec": executed / (t1 - t0), "latencies": samples,
            "errors": last["components"]["sums"]["errors"], "last_error": last["components"]["sums"]["last_error"],
            "window": window, "checkpoints": last.get("checkpoints", {}).get("last_committed")}


def _run(system: str, rate: float, warmup: float, duration: float, keys: int) -> dict[str, Any]:
    try:
        if system == "bytewax":
            result = _windows_bytewax.run(1, rate, warmup, duration, keys)
        else:
            result = _nstorm(system, rate, warmup, duration, keys)
    except Exception as exc:  # noqa: BLE001 - one system failing leaves the others
        result = {"error": f"{type(exc).__name__}: {exc}"}
    lat = result.pop("latencies", None) or []
    result["results_in_window"] = len(lat)
    for q in (0.5, 0.99):
        v = percentile(lat, q)
        result[f"latency_p{int(q * 100)}_ms"] = 1000 * v if v is not None else None
    return result


def _median(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.windows", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="measurement window of each run, s")
    parser.add_argument("--warmup", type=float, default=10.0, help="time before each window, s")
    parser.add_argument("--rounds", type=int, default=2, help="peak runs of every system (medians are shown)")
    parser.add_argument("--keys", type=int, default=1000, help="distinct keys")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated: " + ",".join(SYSTEMS))
    parser.add_argument("--no-half", action="store_true", help="skip the half-rate latency runs")
    args = parser.parse_args(argv)
    systems = [s for s in args.only.split(",") if s]
    console = Console(stderr=True)
    peaks: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(args.rounds):
        for system in systems:
            console.print(f"round {r + 1}/{args.rounds}: {system} at peak...")
            res = _run(system, 0.0, args.warmup, args.duration, args.keys)
            console.print(f"  {res}")
            peaks[system].append(res)
    base = _median([p.get("readings_per_sec") for p in peaks.get("windowed", [])])
    half: dict[str, dict[str, Any]] = {}
    if base and not args.no_half:
        for system in systems:
            console.print(f"{system} at half of windowed's peak ({base / 2:,.0f} readings/s)...")
            half[system] = _run(system, base / 2, args.warmup, args.duration, args.keys)
            console.print(f"  {half[system]}")
    table = Table(title=f"per-key sliding sums (4 s / 2 s, lag 1 s, {args.keys} keys), medians of {args.rounds} rounds")
    for col in ("system", "readings/s", "vs windowed", "p50 / p99 ms at peak", "p50 / p99 ms at half", "note"):
        table.add_column(col, justify="left" if col in ("system", "note") else "right")
    rows = []
    for system in systems:
        runs = peaks[system]
        rate = _median([p.get("readings_per_sec") for p in runs])
        p50, p99 = _median([p.get("latency_p50_ms") for p in runs]), _median([p.get("latency_p99_ms") for p in runs])
        h = half.get(system, {})
        errors = sorted({p["error"] for p in [*runs, h] if p.get("error")})
        row = {"system": system, "readings_per_sec": rate, "ratio": rate / base if rate and base else None,
               "peak_p50_ms": p50, "peak_p99_ms": p99, "half_p50_ms": h.get("latency_p50_ms"),
               "half_p99_ms": h.get("latency_p99_ms"), "errors": errors, "runs": runs, "half": h}
        rows.append(row)

        def ms(a: float | None, b: float | None) -> str:
            return f"{a:.0f} / {b:.0f}" if a is not None and b is not None else "-"

        table.add_row(system, f"{rate:,.0f}" if rate else "-", f"{row['ratio']:.2f}x" if row["ratio"] else "-",
                      ms(p50, p99), ms(h.get("latency_p50_ms"), h.get("latency_p99_ms")), "; ".join(errors)[:60])
    Console().print(table)
    path = write_json("windows", {"machine": machine(), "args": vars(args), "rows": rows,
                                  "latency": "sink arrival - (window end + lag), wall clock"})
    console.print(f"results: {path}")


if __name__ == "__main__":
    main()
