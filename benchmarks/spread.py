"""Workers changed while word count runs: Storm's ``rebalance -n`` (stop) against nstorm's live spread,
and a worker that moves empty, released.

``python -m benchmarks.spread [--modes windows,empty,live,stop] [--rate R] [--timeout S] [--after S] [--stop-wait S]``

Word count (``topologies/wordcount.py``, acking on, 2 spouts offering ``--rate`` sentences/s each, 4
splits, 4 counts, 2 workers) on a fresh local cluster (2 supervisors with 4 slots each) per mode:

- ``empty``: every executor but the ackers moved off the worker of ``sentences:0`` in one live
  request; the emptied worker is released. (Any commit runs this mode and ``windows``: they need
  no ``-n``, so an A/B against a tree from before the ackers' hand-over can run them.)
- ``windows``: the same with ``topologies/windowed.py`` (2 spouts of 200 readings/s, sums over 10 s
  windows sliding every 5 s, acking on, message timeout 30 s): a window holds its tuples' trees
  open until it fires, so the emptied worker's ackers hold thousands of open trees when it goes.
- ``live``: ``nstorm rebalance NAME -n 3``, then ``-n 2`` (thread mode, nothing stops);
- ``stop``: the same in stop mode (Storm's rebalance: deactivated ``--stop-wait`` s, every worker
  stopped and restarted).

Reported per mode, from the spouts' exact per-second ack counts (heartbeats): tuples acked a
second (median) and in all from the first request, the longest run of seconds below half the
offered load after it (not for ``windows``, whose acks come in bursts as windows fire), the
trees that failed (timed out: replayed by the spout) and how long each request took. Every run
goes on ``--after`` seconds past its last request, more than the message timeout (``--timeout``),
so that a tree lost with a worker shows up as failed.

Prints a table and writes ``benchmarks/results/spread.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, temporary_home, write_json

TOPOLOGIES = Path(__file__).parents[1] / "topologies"
NAME = "spreadwc"
WINDOWS_TIMEOUT = 30.0  # the windowed topology's trees live up to a window and its lag (12 s)


class AckSeconds:
    """Sentences acked per wall-clock second, merged from the spouts' heartbeats (each holds the
    last 15 seconds of its executor: read more often than that)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, int], int] = {}

    def read(self, client: Any) -> None:
        for wid, beat in client.heartbeats(NAME).items():
            for eid, counters in beat.executors.items():
                if eid.startswith(("sentences:", "readings:")):
                    for sec, n in (counters.get("acked_per_sec") or {}).items():
                        self.seen[(wid, eid, int(sec))] = int(n)

    def per_second(self, start: int, end: int) -> list[int]:
        out = [0] * max(0, end - start)
        for (_w, _e, sec), n in self.seen.items():
            if start <= sec < end:
                out[sec - start] += n
        return out


def _longest_dip(seconds: list[int], floor: float) -> int:
    longest = run = 0
    for n in seconds:
        run = run + 1 if n < floor else 0
        longest = max(longest, run)
    return longest


def _wait(client: Any, acks: AckSeconds, seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        acks.read(client)
        time.sleep(min(2.0, max(0.0, end - time.time())))


def run_mode(mode: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    windows = mode == "windows"
    timeout = max(args.timeout, WINDOWS_TIMEOUT) if windows else args.timeout
    conf = {"wordcount.rate": args.rate, "topology.message.timeout.secs": timeout,
            "worker.heartbeat.interval.secs": 0.5}
    spout = "readings:0" if windows else "sentences:0"
    tail_secs = args.after + timeout - args.timeout
    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=4)
        try:
            cluster.start()
            with ClusterClient(cluster.address) as client:
                client.submit(TOPOLOGIES / ("windowed.py" if windows else "wordcount.py"), name=NAME, conf=conf)
                client.wait_running(NAME, 90)
                acks = AckSeconds()
                _wait(client, acks, args.warmup)
                first = int(time.time())
                requests = []
                if mode in ("empty", "windows"):
                    plan = client.plan(NAME)
                    emptied = plan.executors[spout]
                    other = next(w for w in sorted(plan.workers) if w != emptied)
                    steps = [[(e, other) for e, w in sorted(plan.executors.items())
                              if w == emptied and not e.startswith("__acker")]]
                else:
                    steps = [3, 2]
                for step in steps:
                    at = time.time()
                    if mode in ("empty", "windows"):
                        result = client.rebalance(NAME, moves=step, timeout=120)
                    else:
                        result = client.rebalance(NAME, mode="thread" if mode == "live" else "stop", workers=step,
                                                  wait_secs=args.stop_wait if mode == "stop" else None, timeout=120)
                    done = client.wait_migrations(NAME, result["records"], timeout=300)
                    client.wait_running(NAME, 120)
                    took = max((r.completed_at or at) for r in done) - at if done else 0.0
                    requests.append({"request": f"{len(step)} moves" if isinstance(step, list) else f"-n {step}",
                                     "moves": len(result["moves"]), "took": round(took, 3)})
                    console.print(f"{mode}: {requests[-1]['request']} done in {took:.2f}s")
                    _wait(client, acks, args.between if step is not steps[-1] else tail_secs)
                last = int(time.time()) - 2  # (the last second is still being counted)
                status = client.status(NAME)
        finally:
            cluster.stop()
    seconds = acks.per_second(first - 5, last)  # from 5 s before the first request
    after = seconds[5:]
    offered = 400.0 if windows else 2 * args.rate  # (the windowed spouts' own rate, 200/s each)
    return {"mode": mode, "requests": requests, "per_second": seconds, "offered": offered,
            "median_acked": statistics.median(after) if after else 0, "acked_after": sum(after),
            "longest_dip_secs": None if windows else _longest_dip(after, offered / 2),  # (windows ack in bursts)
            "failed": status["spouts"]["failed"], "replayed": status["spouts"]["replayed"],
            "workers": len(status["workers"])}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spread", description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="windows,empty,live,stop")
    parser.add_argument("--rate", type=float, default=2000.0, help="sentences/s per spout executor (2 spouts)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help=f"topology.message.timeout.secs (windows: at least {WINDOWS_TIMEOUT:.0f})")
    parser.add_argument("--warmup", type=float, default=12.0)
    parser.add_argument("--between", type=float, default=10.0, help="seconds between the two requests")
    parser.add_argument("--after", type=float, default=20.0, help="seconds after the last request")
    parser.add_argument("--stop-wait", type=float, default=5.0, help="stop mode: seconds deactivated first")
    args = parser.parse_args()
    if args.after <= args.timeout:
        parser.error("--after must exceed --timeout (a lost tree fails only after the message timeout)")
    console = Console()
    results = [run_mode(mode.strip(), args, console) for mode in args.modes.split(",") if mode.strip()]
    table = Table(title=f"Workers changed while tuples flow (word count: {2 * args.rate:,.0f} sentences/s offered)")
    for column in ("mode", "requests (moves, s to complete)", "acked/s median", "acked from the request",
                   "longest dip (s)", "failed", "replayed", "workers"):
        table.add_column(column)
    for r in results:
        reqs = "; ".join(f"{q['request']}: {q['moves']}, {q['took']:.2f}" for q in r["requests"])
        table.add_row(r["mode"], reqs, f"{r['median_acked']:,.0f}", f"{r['acked_after']:,}", str(r["longest_dip_secs"] if r["longest_dip_secs"] is not None else "-"), str(r["failed"]),
                      str(r["replayed"]), str(r["workers"]))
    console.print(table)
    path = write_json("spread", {"machine": machine(), "args": vars(args), "results": results})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
