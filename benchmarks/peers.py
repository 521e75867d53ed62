"""Word count side by side: nstorm, bytewax and Spark Structured Streaming, in one run.

``python -m benchmarks.peers [--duration S] [--warmup W] [--sentences N] [--only nstorm,bytewax,spark]``

Every system counts the same words: two sentence streams (seeds 42 and 43, 10 Zipf-weighted
words of ``w0``..``w9999`` a sentence, ``topologies/sentences.py``), as the two spout
executors of ``topologies/wordcount.py`` emit them. Each system runs alone, in turn:

1. peak: as fast as it goes for ``--duration`` s after ``--warmup`` s: sentences/s, words/s,
   latency at saturation;
2. half: at a fixed rate of half of nstorm's peak sentences/s (or ``--half-rate``): latency;
3. fixed: exactly ``--sentences`` sentences, the final counts compared with a Python Counter.

nstorm runs on a local cluster (ZooKeeper, Nimbus, 2 supervisors, 2 worker processes,
acking on); bytewax with 1 worker and with 2 worker processes; Spark in local[2].
The peers are optional (``pip install -e '.[bench]'``): one that cannot run is reported
with the reason, and the others still run. Prints a table, writes
``benchmarks/results/peers.json`` and ``benchmarks/results/peers.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import RESULTS, machine, write_json
from benchmarks._workload import POOL, SAMPLE_EVERY, SEED, STREAMS, RunResult

__all__ = ["main"]

SYSTEMS = ("nstorm", "bytewax", "spark")
TARGET_P99_MS = 20.0
LATENCY_NOTE = ("latency: nstorm = complete latency (spout emit -> sentence fully acked, 1 in 16 sampled); "
                "bytewax = source emit -> count of each word (1 sentence in 16); "
                "Spark = row timestamp -> end of its micro-batch")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="measurement window of each peak and half run, s")
    parser.add_argument("--warmup", type=float, default=10.0, help="time before each window, s")
    parser.add_argument("--sentences", type=int, default=100_000, help="sentences of the fixed (checked) run")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="systems to run, comma-separated: nstorm,bytewax,spark")
    parser.add_argument("--half-rate", type=float, default=0.0,
                        help="sentences/s of the half runs (default: half of nstorm's measured peak)")
    parser.add_argument("--bytewax-procs", default="1,2", help="bytewax worker processes, one configuration each")
    parser.add_argument("--spark-rows-per-batch", type=int, default=100_000, help="sentences per Spark micro-batch at peak")
    parser.add_argument("--runs", default="peak,half,fixed", help="which runs: peak,half,fixed")
    parser.add_argument("--name", default="peers", help="results/<name>.json and .png")
    parser.add_argument("-c", "--conf", action="append", default=[], help="extra key=value for nstorm's runs")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if not only or set(only) - set(SYSTEMS):
        parser.error(f"--only takes some of {','.join(SYSTEMS)}, got {args.only!r}")
    runs = [s.strip() for s in args.runs.split(",") if s.strip()]
    if not runs or set(runs) - {"peak", "half", "fixed"}:
        parser.error(f"--runs takes some of peak,half,fixed, got {args.runs!r}")
    try:
        procs = sorted({int(p) for p in args.bytewax_procs.split(",")})
    except ValueError:
        parser.error(f"--bytewax-procs takes comma-separated integers, got {args.bytewax_procs!r}")
    if not procs or min(procs) < 1:
        parser.error(f"--bytewax-procs must be at least 1, got {args.bytewax_procs!r}")
    if args.duration <= 0 or args.warmup < 0 or args.sentences < STREAMS or args.half_rate < 0:
        parser.error("--duration must be > 0, --warmup >= 0, --half-rate >= 0 and --sentences >= 2")
    if args.spark_rows_per_batch < 1:
        parser.error("--spark-rows-per-batch must be at least 1")
    if "half" in runs and "nstorm" not in only and not args.half_rate:
        parser.error("the half runs need nstorm's peak: add nstorm to --only or give --half-rate")
    if "half" in runs and "peak" not in runs and not args.half_rate:
        parser.error("the half runs need nstorm's peak: add peak to --runs or give --half-rate")
    from nstorm.config import parse_conf_options
    from nstorm.errors import ConfigError

    try:
        args.conf = parse_conf_options(args.conf)
    except ConfigError as exc:
        parser.error(str(exc))
    args.only, args.runs, args.bytewax_procs = only, runs, procs
    return args


def _guarded(system: str, run: str, fn: Callable[[], RunResult], log: Console) -> RunResult:
    """Run one measurement; any failure becomes a result that says why (the others still run)."""
    log.print(f"[bold]{system}[/]: {run} ...")
    before = os.getloadavg()[0]
    try:
        result = fn()
    except Exception as exc:
        log.print(traceback.format_exc(), style="dim")
        result = RunResult(system=system, run=run, error=f"{type(exc).__name__}: {exc}")
    result.details["load_1min"] = [before, os.getloadavg()[0]]  # the machine is shared: how busy it was
    log.print(f"  {_summary(result)}")
    return result


def _summary(r: RunResult) -> str:
    if r.error:
        return f"not measured: {r.error}"
    if r.run == "fixed":
        return f"counts {'equal' if r.correct else 'DIFFER from'} a Counter of {r.details.get('sentences')} sentences"
    return (f"{_num(r.sentences_per_sec)} sentences/s, {_num(r.words_per_sec)} words/s, "
            f"latency p50 {_ms(r.latency_p50_ms)} / p99 {_ms(r.latency_p99_ms)} ms")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def measure(args: argparse.Namespace, log: Console) -> tuple[list[RunResult], float]:
    """All runs, in order (nstorm first: its peak sets the half rate); returns results and the half rate."""
    results: list[RunResult] = []
    half_rate = args.half_rate
    if "nstorm" in args.only:
        from benchmarks import _peers_nstorm as ns

        if "peak" in args.runs:
            peak = _guarded("nstorm", "peak", lambda: ns.run_rate(0, args.warmup, args.duration, extra=args.conf), log)
            results.append(peak)
            if not half_rate and peak.sentences_per_sec:
                half_rate = round(peak.sentences_per_sec / 2, -1)
        if "half" in args.runs and half_rate:
            half = _guarded("nstorm", "half", lambda: ns.run_rate(half_rate, args.warmup, args.duration, extra=args.conf), log)
            results.append(half)
        if "fixed" in args.runs:
            results.append(_guarded("nstorm", "fixed", lambda: ns.run_fixed(args.sentences, extra=args.conf), log))
    if "bytewax" in args.only:
        from benchmarks import _peers_bytewax as bw

        for procs in args.bytewax_procs:
            system = f"bytewax ({procs} proc)"
            for run in args.runs:
                if run == "half" and not half_rate:
                    continue
                rate = half_rate if run == "half" else 0.0
                total = args.sentences if run == "fixed" else 0
                results.append(_guarded(system, run, lambda p=procs, r=rate, t=total: bw.run(
                    p, r, args.warmup, args.duration, total=t), log))
    if "spark" in args.only:
        from benchmarks import _peers_spark as sp

        runs = [r for r in args.runs if r != "half" or half_rate]
        log.print(f"[bold]Spark SS[/]: {','.join(runs)} in one Spark process ...")
        before = os.getloadavg()[0]
        try:
            spark = sp.run(runs, half_rate, args.warmup, args.duration, args.sentences, args.spark_rows_per_batch)
        except Exception as exc:
            spark = [RunResult(system=sp.SYSTEM, run=r, error=f"{type(exc).__name__}: {exc}") for r in runs]
        for r in spark:
            r.details["load_1min"] = [before, os.getloadavg()[0]]
            log.print(f"  {r.run}: {_summary(r)}")
        results += spark
    return results, half_rate


def _by_system(results: list[RunResult]) -> dict[str, dict[str, RunResult]]:
    table: dict[str, dict[str, RunResult]] = {}
    for r in results:
        table.setdefault(r.system, {})[r.run] = r
    return table


def targets(results: list[RunResult]) -> dict[str, Any]:
    """Issue 6's targets as ratios within this run (None where a side was not measured)."""
    systems = _by_system(results)
    ns_peak = systems.get("nstorm", {}).get("peak")
    ns_half = systems.get("nstorm", {}).get("half")
    nstorm = ns_peak.words_per_sec if ns_peak and not ns_peak.error else None

    def best(prefix: str) -> float | None:
        rates = [runs["peak"].words_per_sec for name, runs in systems.items()
                 if name.startswith(prefix) and "peak" in runs and runs["peak"].words_per_sec]
        return max(rates) if rates else None

    bytewax, spark = best("bytewax"), best("Spark")
    p99 = ns_half.latency_p99_ms if ns_half and not ns_half.error else None
    return {
        "nstorm_vs_best_bytewax": nstorm / bytewax if nstorm and bytewax else None,
        "nstorm_vs_spark": nstorm / spark if nstorm and spark else None,
        "nstorm_p99_at_half_peak_ms": p99,
        "met": {"2x bytewax": nstorm / bytewax >= 2 if nstorm and bytewax else None,
                ">= Spark SS": nstorm / spark >= 1 if nstorm and spark else None,
                f"p99 < {TARGET_P99_MS:.0f} ms at half peak": p99 < TARGET_P99_MS if p99 is not None else None},
    }


def render(results: list[RunResult], half_rate: float, args: argparse.Namespace) -> Table:
    """One row per system: peak throughput, latency at peak and at the half rate, correctness."""
    systems = _by_system(results)
    ns = systems.get("nstorm", {}).get("peak")
    base = ns.words_per_sec if ns and ns.words_per_sec else None
    table = Table(title=f"word count, {args.duration:.0f} s windows, {machine()['cpus']} cores "
                        f"(half rate = {_num(half_rate)} sentences/s)")
    for col in ("system", "peak sentences/s", "peak words/s", "nstorm / this", "p50 / p99 ms at peak",
                "sentences/s at half rate", "p50 / p99 ms at half rate", "counts = Counter", "not measured"):
        table.add_column(col, justify="left" if col in ("system", "not measured") else "right")
    for name, runs in systems.items():
        peak, half, fixed = runs.get("peak"), runs.get("half"), runs.get("fixed")
        ratio = f"{base / peak.words_per_sec:.2f}" if base and peak and peak.words_per_sec else "-"
        problems = "; ".join(f"{r.run}: {r.error}" for r in runs.values() if r.error)
        table.add_row(
            name, _num(peak.sentences_per_sec) if peak else "-", _num(peak.words_per_sec) if peak else "-", ratio,
            f"{_ms(peak.latency_p50_ms)} / {_ms(peak.latency_p99_ms)}" if peak else "-",
            _num(half.sentences_per_sec) if half else "-",
            f"{_ms(half.latency_p50_ms)} / {_ms(half.latency_p99_ms)}" if half else "-",
            ("yes" if fixed.correct else "NO") if fixed and fixed.correct is not None else "-", problems)
    return table


def plot(results: list[RunResult], half_rate: float, path: Path, title: str) -> Path:
    """Bar charts: peak words/s, and p50/p99 latency at the half rate (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    systems = _by_system(results)
    names = list(systems)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    peaks = [systems[n].get("peak") for n in names]
    values = [r.words_per_sec if r and r.words_per_sec else 0 for r in peaks]
    bars = ax1.bar(names, values, color=["#d62728" if n == "nstorm" else "#7f7f7f" for n in names])
    for bar, v in zip(bars, values, strict=True):
        ax1.annotate(f"{v / 1e3:,.0f}k" if v else "not run", (bar.get_x() + bar.get_width() / 2, v),
                     ha="center", va="bottom", fontsize=9)
    ax1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e3:,.0f}k"))
    ax1.set_ylabel("words/s at peak")
    ax1.set_title("throughput (higher is better)")
    halves = [systems[n].get("half") for n in names]
    x = range(len(names))
    p50 = [r.latency_p50_ms if r and r.latency_p50_ms else 0 for r in halves]
    p99 = [r.latency_p99_ms if r and r.latency_p99_ms else 0 for r in halves]
    ax2.bar([i - 0.2 for i in x], p50, width=0.4, label="p50", color="#1f77b4")
    ax2.bar([i + 0.2 for i in x], p99, width=0.4, label="p99", color="#ff7f0e")
    for i, (a, b) in enumerate(zip(p50, p99, strict=True)):
        if not a and not b:
            ax2.annotate("not run", (i, 1), ha="center", fontsize=9)
        else:
            ax2.annotate(_ms(b), (i + 0.2, b), ha="center", va="bottom", fontsize=8)
    ax2.axhline(TARGET_P99_MS, color="#2ca02c", linestyle="--", linewidth=1, label=f"target p99 {TARGET_P99_MS:.0f} ms")
    ax2.set_yscale("log")
    ax2.set_xticks(list(x), names)
    ax2.set_ylabel("latency, ms (log scale)")
    ax2.set_title(f"latency at {half_rate:,.0f} sentences/s (lower is better)")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.01, LATENCY_NOTE, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    out, log = Console(width=None if sys.stdout.isatty() else 180), Console(stderr=True)
    info = machine()  # its date is the start of the run
    results, half_rate = measure(args, log)
    table = render(results, half_rate, args)
    out.print(table)
    goals = targets(results)
    for goal, met in goals["met"].items():
        out.print(f"target {goal}: {'-' if met is None else ('met' if met else 'NOT met')}")
    loads = [x for r in results for x in r.details.get("load_1min", [])]
    if loads:
        out.print(f"1-min load average of the machine around the runs: {min(loads):.1f} to {max(loads):.1f} "
                  f"({machine()['cpus']} cores; other work on the machine makes the figures noisy)")
    for r in results:
        if r.latency_kind and not r.error:
            out.print(f"[dim]{r.system} {r.run} latency: {r.latency_kind}[/]")
    path = write_json(args.name, {
        "machine": info, "command": "python -m benchmarks.peers " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": {k: v for k, v in vars(args).items()},
        "workload": {"streams": STREAMS, "seeds": [SEED + i for i in range(STREAMS)], "pool_per_stream": POOL,
                     "latency_sample": f"1 sentence in {SAMPLE_EVERY}"},
        "half_rate_sentences_per_sec": half_rate, "targets": goals, "results": [r.to_dict() for r in results],
    })
    try:
        png = plot(results, half_rate, RESULTS / f"{args.name}.png",
                   f"word count on {info['cpus']} cores, {info['date']}: same seeded sentences on every system")
    except ImportError as exc:
        out.print(f"wrote {path}; no chart: {exc} (pip install -e '.[bench]')")
    else:
        out.print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
