"""bytewax's side of ``benchmarks.windows``: the same per-key sliding sums with bytewax's windowing.

``input`` (one partition per reading stream, the pools of ``topologies/sensor_windows.py``,
``ts`` the wall clock less the pool's offset) -> ``key_on`` the key -> ``fold_window`` with an
``EventClock`` (``wait_for_system_duration`` = the lag) and a ``SlidingWindower`` of the same
length and slide, aligned to the epoch as nstorm's windows are -> ``output``, where each
result's latency is taken as in nstorm's sink: arrival less (window end + lag). Throughput is
the readings the clock saw per second (its timestamp getter runs once per reading).

Run by :func:`run` as ``python -m benchmarks._windows_bytewax`` processes, one per worker.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["available", "run"]

BATCH = 256  # readings a source partition returns per call at full speed
STREAMS = 2


def available() -> str | None:
    if importlib.util.find_spec("bytewax") is None:
        return "bytewax is not installed (pip install -e '.[bench]')"
    return None


class _Stats:
    start = 0.0
    window = (0.0, 0.0)  # wall clock
    seen = 0
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    latencies: list[float] = []
    results = 0


def _build_flow(proc: int, procs: int, rate: float, warmup: float, duration: float, keys: int) -> Any:
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    from topologies.sensor_windows import LAG, LENGTH, SLIDE, pool

    part_rate = rate / STREAMS
    epoch = datetime(1970, 1, 1, tzinfo=UTC)

    class Partition(StatefulSourcePartition):
        def __init__(self, index: int) -> None:
            self.pool = pool(42 + index, keys)
            self.sent = 0
            self.started = time.monotonic()
            if not _Stats.start:
                _Stats.start = time.time()
                _Stats.window = (_Stats.start + warmup, _Stats.start + warmup + duration)

        def next_batch(self) -> list[tuple[str, int, float]]:
            now = time.time()
            if now >= _Stats.window[1]:
                raise StopIteration
            n = BATCH
            if part_rate:
                n = min(n, int(part_rate * (time.monotonic() - self.started)) - self.sent)
                if n <= 0:
                    return []
            pool_, size, sent = self.pool, len(self.pool), self.sent
            batch = []
            for j in range(sent, sent + n):
                key, value, offset = pool_[j % size]
                batch.append((key, value, now - offset))
            self.sent = sent + n
            return batch

        def snapshot(self) -> int:
            return self.sent

    class Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [str(i) for i in range(STREAMS) if i % procs == proc]

        def build_part(self, step_id: str, for_part: str, resume_state: Any) -> Partition:
            return Partition(int(for_part))

    def timestamp(reading: tuple[str, int, float]) -> datetime:
        _Stats.seen += 1
        if not _Stats.seen % 1024:
            now = time.time()
            if _Stats.window[0] <= now <= _Stats.window[1]:
                point = (now, _Stats.seen)
                _Stats.first = _Stats.first or point
                _Stats.last = point
        return datetime.fromtimestamp(reading[2], UTC)

    class ResultsPartition(StatelessSinkPartition):
        def write_batch(self, items: list[tuple[str, tuple[int, int]]]) -> None:
            now = time.time()
            for _key, (window_id, _total) in items:
                end = window_id * SLIDE + LENGTH
                if _Stats.window[0] <= now <= _Stats.window[1]:
                    _Stats.latencies.append(now - (end + LAG))
                _Stats.results += 1

    class Results(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> ResultsPartition:
            return ResultsPartition()

    flow = Dataflow("windows")
    readings = op.input("readings", flow, Source())
    keyed = op.key_on("key", readings, lambda r: r[0])
    clock = win.EventClock(timestamp, wait_for_system_duration=timedelta(seconds=LAG))
    windower = win.SlidingWindower(length=timedelta(seconds=LENGTH), offset=timedelta(seconds=SLIDE), align_to=epoch)
    sums = win.fold_window("sums", keyed, clock, windower, lambda: 0, lambda acc, r: acc + r[1], lambda a, b: a + b)
    op.output("results", sums.down, Results())
    return flow


def _worker_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._windows_bytewax")
    parser.add_argument("--proc", type=int, required=True)
    parser.add_argument("--addresses", required=True)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from bytewax.testing import cluster_main

    addresses = args.addresses.split(";")
    flow = _build_flow(args.proc, len(addresses), args.rate, args.warmup, args.duration, args.keys)
    cluster_main(flow, addresses if len(addresses) > 1 else [], args.proc if len(addresses) > 1 else 0)
    rate = None
    if _Stats.first and _Stats.last and _Stats.last[0] > _Stats.first[0]:
        rate = (_Stats.last[1] - _Stats.first[1]) / (_Stats.last[0] - _Stats.first[0])
    Path(args.out).write_text(json.dumps({"proc": args.proc, "readings_per_sec": rate, "results": _Stats.results,
                                          "latencies": _Stats.latencies[-50_000:]}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(processes: int, rate: float, warmup: float, duration: float, keys: int) -> dict[str, Any]:
    """One run: ``{"readings_per_sec", "latencies", "results"}`` or ``{"error"}``."""
    if why := available():
        return {"error": why}
    tmp = Path(tempfile.mkdtemp(prefix="bytewax-windows-"))
    addresses = ";".join(f"127.0.0.1:{_free_port()}" for _ in range(processes))
    procs = []
    for i in range(processes):
        argv = [sys.executable, "-m", "benchmarks._windows_bytewax", "--proc", str(i), "--addresses", addresses,
                "--rate", str(rate), "--warmup", str(warmup), "--duration", str(duration), "--keys", str(keys),
                "--out", str(tmp / f"proc-{i}.json")]
        with open(tmp / f"proc-{i}.log", "wb") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=Path(__file__).parents[1], env={**os.environ, "PYTHONHASHSEED": "0"}))
    deadline = time.monotonic() + 120 + warmup + duration
    try:
        for p in procs:
            p.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in time (logs in {tmp})"}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        lines = (tmp / f"proc-{failed[0]}.log").read_text(errors="replace").strip().splitlines()
        return {"error": f"worker {failed[0]} exited with {procs[failed[0]].returncode}: {lines[-1] if lines else ''}"}
    outs = [json.loads((tmp / f"proc-{i}.json").read_text()) for i in range(processes)]
    rates = [o["readings_per_sec"] for o in outs]
    return {"readings_per_sec": sum(rates) if all(r is not None for r in rates) else None,
            "latencies": [x for o in outs for x in o["latencies"]], "results": sum(o["results"] for o in outs)}


if __name__ == "__main__":
    _worker_main()
