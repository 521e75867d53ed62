"""What each output-buffer size a latency constraint's controller can set costs, in one deployment.

``python -m benchmarks.tunings [--rate S | --share F] [--tunings base,c1.25,c0.5,s2.5,c0.5s2.5]
[--cycles K] [--warmup S] [--settle S] [--duration S] [--name N]``

Word count deployed one stage a worker (``benchmarks._peers_nstorm.PIPELINE``: the spout and the
split chained in one worker, the count in the other; acking on, no constraint) at a fixed rate
(``--rate`` sentences/s, or ``--share`` of a peak measured first), on one fresh local cluster. The
output buffers are then sized in turn as the controller would size them (``ClusterClient.tune``: a
channel's latency bound in the plan's ``tuning``, live), ``--cycles`` times over the list (its order
reversed every other cycle), and each size is measured for ``--duration`` s after ``--settle`` s:
worker CPU a word, the count's arrival p50 / p99 (spout emit -> count, stamped sentences) and the
workers' context switches a second. Labels: ``base`` (the configured 5 ms everywhere), ``c<ms>``
(the chained ``sentences>split`` channel's bound), ``s<ms>`` (``split>count``'s), and both
(``c0.5s2.5``). One deployment for all of them, so that the machine's drift from one cluster to
the next (30% and more here) stays out of the ratios; ``benchmarks.latency --only buffers`` sizes
every channel at once, each in a fresh cluster.

Prints a table (medians over the cycles, and each size's CPU a word over ``base``'s) and writes
``benchmarks/results/<--name>.json`` (default ``tunings``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, write_json

NAME = "wordcount"
CHAINED, REMOTE = "sentences>split", "split>count"
_LABEL = re.compile(r"^(?:c(?P<c>\d+(?:\.\d+)?))?(?:s(?P<s>\d+(?:\.\d+)?))?$")


def tuning_of(label: str) -> dict[str, dict[str, float]]:
    """The plan's ``tuning`` a label names: ``base`` none, ``c1.25`` the chained channel's bound,
    ``s2.5`` split>count's, ``c0.5s2.5`` both (ValueError otherwise)."""
    if label == "base":
        return {}
    m = _LABEL.match(label)
    if not m or not (m["c"] or m["s"]):
        msg = f"unknown tuning {label!r}: base, c<ms>, s<ms> or c<ms>s<ms> (c1.25, s2.5, c0.5s2.5)"
        raise ValueError(msg)
    out: dict[str, dict[str, float]] = {}
    for key, channel in (("c", CHAINED), ("s", REMOTE)):
        if m[key]:
            ms = float(m[key])
            if ms <= 0:
                msg = f"tuning {label!r}: a bound must be > 0 ms"
                raise ValueError(msg)
            out[channel] = {"latency_ms": ms}
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tunings", description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.0, help="sentences/s offered (default: --share of the peak)")
    parser.add_argument("--share", type=float, default=0.5, help="the rate as a share of a peak measured first")
    parser.add_argument("--tunings", default="base,c1.25,c0.5,s2.5,c0.5s2.5", help="labels, comma-separated")
    parser.add_argument("--cycles", type=int, default=3, help="passes over the tunings (order reversed every other)")
    parser.add_argument("--warmup", type=float, default=20.0, help="time after the deployment runs, s")
    parser.add_argument("--settle", type=float, default=5.0, help="time after each tuning is in the plan, s")
    parser.add_argument("--duration", type=float, default=20.0, help="each measurement window, s")
    parser.add_argument("--name", default="tunings", help="results/<name>.json")
    args = parser.parse_args(argv)
    labels = [x.strip() for x in args.tunings.split(",") if x.strip()]
    try:
        args.tunings = {label: tuning_of(label) for label in labels}
    except ValueError as exc:
        parser.error(str(exc))
    if "base" not in args.tunings:
        parser.error("--tunings must include base (the ratios are over it)")
    if args.cycles < 1 or args.duration <= 0 or min(args.rate, args.warmup, args.settle) < 0:
        parser.error("--cycles must be at least 1, --duration > 0, --rate and the waits >= 0")
    if not 0 < args.share <= 1:
        parser.error("--share must be in (0, 1]")
    return args


def _measure(client: Any, duration: float) -> dict[str, Any]:
    """One window at the current tuning: CPU a word, arrival p50/p99, context switches a second."""
    from benchmarks._window import CountWindow

    window = CountWindow(client, NAME)
    time.sleep(duration)
    return window.close(client)[0]


def run(rate: float, tunings: dict[str, dict[str, dict[str, float]]], cycles: int, warmup: float, settle: float,
        duration: float, log: Console) -> dict[str, list[dict[str, Any]]]:
    """Every tuning measured ``cycles`` times in one deployment at ``rate`` sentences/s."""
    from benchmarks import _peers_nstorm as ns
    from benchmarks.latency import at_rate

    got: dict[str, list[dict[str, Any]]] = {label: [] for label in tunings}
    with ns._client(2) as client:
        client.submit(ns.WORDCOUNT, conf={**ns.base_conf(2), **at_rate("pipeline", rate)})
        client.wait_running(NAME, 90)
        time.sleep(warmup)
        labels = list(tunings)
        for cycle in range(cycles):
            for label in labels if cycle % 2 == 0 else labels[::-1]:
                client.tune(NAME, tunings[label], by="benchmark")
                time.sleep(settle)
                r = {"cycle": cycle, "at": time.time(), **_measure(client, duration)}
                got[label].append(r)
                cpu = r["cpu_us_per_word"]
                log.print(f"{time.strftime('%H:%M:%S')} cycle {cycle + 1} {label}: "
                          f"{'-' if cpu is None else f'{cpu:.3f}'} µs a word, p99 {r['arrival_ms']['p99']} ms, "
                          f"{r['context_switches_per_sec']:,.0f} switches/s")
    return got


def summary(got: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Medians over the cycles per tuning, and CPU a word over ``base``'s in the same cycle."""
    base = {r["cycle"]: r for r in got["base"]}
    out = {}
    for label, runs in got.items():
        ratios = [r["cpu_us_per_word"] / base[r["cycle"]]["cpu_us_per_word"] for r in runs
                  if r["cpu_us_per_word"] and base.get(r["cycle"], {}).get("cpu_us_per_word")]
        out[label] = {
            "cpu_us_per_word": _median(r["cpu_us_per_word"] for r in runs),
            "cpu_ratio": _median(ratios), "cpu_ratios": ratios,
            "p99_ms": [r["arrival_ms"]["p99"] for r in runs],
            "p50_ms": _median(r["arrival_ms"]["p50"] for r in runs),
            "switches_per_sec": _median(r["context_switches_per_sec"] for r in runs),
        }
    return out


def _median(values: Any) -> float | None:
    """The median of the values that were measured (a window with no words counted has none)."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> None:
    """Run, print the table, write the results file."""
    args = _parse_args(argv)
    out, log = Console(width=None if sys.stdout.isatty() else 200), Console(stderr=True)
    info, started, load0 = machine(), time.time(), os.getloadavg()
    peak = None
    rate = args.rate
    if not rate:
        from benchmarks.latency import at_rate, run_nstorm
        peak = run_nstorm(at_rate("pipeline", 0), 8.0, 15.0)
        rate = round((peak.get("sentences_per_sec") or 0.0) * args.share, -1)
        if not rate:
            log.print("the peak was not measured: nothing to run", style="red")
            raise SystemExit(1)
    got = run(rate, args.tunings, args.cycles, args.warmup, args.settle, args.duration, log)
    med = summary(got)
    t = Table(title=f"word count one stage a worker at {rate:,.0f} sentences/s: output-buffer sizes, "
                    f"{args.cycles} cycles of {args.duration:g} s")
    for col in ("tuning", "CPU µs a word", "/ base (per cycle, median)", "arrival p99 ms, each cycle", "p50 ms",
                "switches/s"):
        t.add_column(col)
    for label, m in med.items():
        t.add_row(label, _f(m["cpu_us_per_word"], ".3f"),
                  f"{m['cpu_ratio']:.3f} ({', '.join(f'{x:.3f}' for x in m['cpu_ratios'])})" if m["cpu_ratio"] else "-",
                  ", ".join(_f(x, "g") for x in m["p99_ms"]), _f(m["p50_ms"], "g"), _f(m["switches_per_sec"], ",.0f"))
    out.print(t)
    ended, load1 = time.time(), os.getloadavg()
    path = write_json(args.name, {
        "machine": info, "command": "python -m benchmarks.tunings " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": {**vars(args)}, "started": started, "ended": ended, "load_avg": {"start": load0, "end": load1},
        "results": {"rate_sentences_per_sec": rate, "peak": peak, "runs": got, "median": med}})
    out.print(f"wrote {path}")


if __name__ == "__main__":
    main()
