"""Word count side by side: nstorm, a hand-made pyzmq pipeline, bytewax and Spark Structured Streaming, in one run.

``python -m benchmarks.peers [--duration S] [--warmup W] [--rounds R] [--sentences N]
[--only nstorm,handmade,bytewax,spark] [--no-acking-off] [--no-plain] [--no-pipeline] [--no-handmade]
[--handmade PATH]``

Every system counts the same words: two sentence streams (seeds 42 and 43, 10 Zipf-weighted
words of ``w0``..``w9999`` a sentence, ``topologies/sentences.py``), as the two spout
executors of ``topologies/wordcount.py`` emit them. Each system runs alone, in turn:

1. peak: as fast as it goes for ``--duration`` s after ``--warmup`` s: sentences/s, words/s,
   latency at saturation;
2. half: at a fixed rate of half of nstorm's peak sentences/s (or ``--half-rate``): latency;
3. fixed: exactly ``--sentences`` sentences, the final counts compared with a Python Counter.

Peak and half runs are repeated ``--rounds`` times, every system once per round, so that
the machine's own noise hits all of them alike; the table shows medians.

nstorm runs on a local cluster (ZooKeeper, Nimbus, 2 supervisors, 2 worker processes) with
acking on (at-least-once: every sentence tracked and replayed if lost) and, as a second
configuration, with acking off (nothing replayed after a failure, which is what bytewax gives
here: it runs without its recovery store); bytewax with 1 worker and with 2 worker
processes; Spark in local[2] with a checkpoint location (offsets and state recovered after a
failure). A third nstorm configuration, ``nstorm (plain)`` (``--no-plain`` skips it), is word
count written the plain way most users write it (``wordcount.plain``): per-tuple ``process``,
one ``emit`` per word, no ``process_batch`` and no ``emit_many``, acking on. Two more,
``nstorm (pipeline)``, ``nstorm (pipeline, acking off)`` and ``nstorm (pipeline, plain)``
(``--no-pipeline`` skips them), are
the same word count deployed one stage a worker (:data:`benchmarks._peers_nstorm.PIPELINE`: one
executor a component, the split chained to the spout in one worker, the count in the other);
they have no fixed run (their one spout reads one of the two streams).

``handmade`` is the hand-made pyzmq pipeline of ``../shared/reference/`` (next to the
repository, or ``--handmade PATH``; :mod:`benchmarks._peers_handmade`): word count hand-rolled
on pyzmq and msgpack, one process per stage (3 stages: spout -> split -> count), batches of
100, nothing tracked or replayed: the floor nstorm is measured against. It runs as a
subprocess with a temporary ``PEERS_DIR``; its data file is generated once per run (untimed)
and a peak run counts enough sentences to last about ``--duration`` s; its ``words_per_s`` is
words counted per second at the count stage, as nstorm's. It has no fixed (checked) run. The
targets: nstorm's peak words/s at least 0.75x the pipeline's with acking on, 1.0x with acking
off, and 0.6x for ``nstorm (plain)`` (the pipeline rows alike); the table's ``this / hand-made`` column and the ``met``
lines say where each stands (the medians of the rounds; the per-round ratios are in the JSON).
The peers are optional (``pip install -e '.[bench]'``): one that cannot run is reported
with the reason, and the others still run. Prints a table, writes
``benchmarks/results/peers.json`` and ``benchmarks/results/peers.png``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import RESULTS, machine, write_json
from benchmarks._peers_handmade import SYSTEM as HANDMADE
from benchmarks._workload import POOL, SAMPLE_EVERY, SEED, STREAMS, RunResult

__all__ = ["main"]

SYSTEMS = ("nstorm", "handmade", "bytewax", "spark")
TARGET_P99_MS = 20.0
LATENCY_NOTE = ("latency: nstorm = spout emit -> count processes the words (stamped sentences, about one a ms); "
                "hand-made = oldest sentence of a message -> count stage (1 message in 10); "
                "bytewax = source emit -> count of each word (1 sentence in 16); "
                "Spark = row timestamp -> end of its micro-batch")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="measurement window of each peak and half run, s")
    parser.add_argument("--warmup", type=float, default=10.0, help="time before each window, s")
    parser.add_argument("--sentences", type=int, default=100_000, help="sentences of the fixed (checked) run")
    parser.add_argument("--only", default=",".join(SYSTEMS),
                        help=f"systems to run, comma-separated: {','.join(SYSTEMS)}")
    parser.add_argument("--half-rate", type=float, default=0.0,
                        help="sentences/s of the half runs (default: half of nstorm's measured peak)")
    parser.add_argument("--bytewax-procs", default="1,2", help="bytewax worker processes, one configuration each")
    parser.add_argument("--spark-rows-per-batch", type=int, default=100_000, help="sentences per Spark micro-batch at peak")
    parser.add_argument("--runs", default="peak,half,fixed", help="which runs: peak,half,fixed")
    parser.add_argument("--rounds", type=int, default=1,
                        help="peak and half runs of every system, interleaved; the table shows medians")
    parser.add_argument("--no-acking-off", dest="nstorm_no_acks", action="store_false",
                        help="skip nstorm with acking off (run only the at-least-once configuration)")
    parser.add_argument("--no-plain", dest="nstorm_plain", action="store_false",
                        help="skip nstorm (plain): word count with per-tuple process and one emit per word")
    parser.add_argument("--no-pipeline", dest="nstorm_pipeline", action="store_false",
                        help="skip nstorm (pipeline): one executor a component, the spout and the split chained in "
                             "one worker, the count in the other (with and without acking, and plain)")
    parser.add_argument("--no-handmade", dest="handmade_on", action="store_false",
                        help="skip the hand-made pyzmq pipeline (as leaving handmade out of --only does)")
    parser.add_argument("--handmade", metavar="PATH", default=None,
                        help="handmade_pipeline.py (default: ../shared/reference/ next to the repository)")
    parser.add_argument("--name", default="peers", help="results/<name>.json and .png")
    parser.add_argument("-c", "--conf", action="append", default=[], help="extra key=value for nstorm's runs")
    parser.add_argument("--plot", metavar="JSON", help="only draw the PNG of an earlier run's results file")
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
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
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
    if not args.handmade_on:
        only = [s for s in only if s != "handmade"]
        if not only:
            parser.error("--no-handmade leaves no system to run")
    args.only, args.runs, args.bytewax_procs = only, runs, procs
    return args


def _guarded(system: str, label: str, fn: Callable[[], RunResult], log: Console) -> RunResult:
    """Run one measurement; any failure becomes a result that says why (the others still run)."""
    log.print(f"[bold]{system}[/]: {label} ...")
    before = os.getloadavg()[0]
    try:
        result = fn()
    except Exception as exc:
        log.print(traceback.format_exc(), style="dim")
        result = RunResult(system=system, run=label.split()[0], error=f"{type(exc).__name__}: {exc}")
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


NSTORM = "nstorm"
NSTORM_NO_ACKS = "nstorm (acking off)"
NO_ACKS = {"topology.acker.executors": 0, "wordcount.reliable": False}
NSTORM_PLAIN = "nstorm (plain)"
PLAIN = {"wordcount.plain": True}
# The same word count deployed one stage a worker (benchmarks._peers_nstorm.PIPELINE)
NSTORM_PIPELINE = "nstorm (pipeline)"
NSTORM_PIPELINE_NO_ACKS = "nstorm (pipeline, acking off)"
NSTORM_PIPELINE_PLAIN = "nstorm (pipeline, plain)"
NO_STAMPS = (NSTORM_NO_ACKS, NSTORM_PIPELINE_NO_ACKS)
# nstorm's peak words/s as a ratio to the hand-made pipeline's: the goal of each configuration
HANDMADE_GOALS = ((NSTORM, "acking on", 0.75), (NSTORM_NO_ACKS, "acking off", 1.0),
                  (NSTORM_PLAIN, "plain, acking on", 0.6), (NSTORM_PIPELINE, "pipeline, acking on", 0.75),
                  (NSTORM_PIPELINE_NO_ACKS, "pipeline, acking off", 1.0),
                  (NSTORM_PIPELINE_PLAIN, "pipeline, plain, acking on", 0.6))

Runner = Callable[[str, float], RunResult]
ALL_RUNS = frozenset({"peak", "half", "fixed"})


def _runners(args: argparse.Namespace,
             cleanup: list[Callable[[], None]] | None = None) -> list[tuple[str, Runner, frozenset[str]]]:
    """One ``(system, run(kind, rate), kinds it has)`` per configuration to measure, in the order
    they run; what must be cleaned up after the last run is appended to ``cleanup``."""
    out: list[tuple[str, Runner, frozenset[str]]] = []
    if "nstorm" in args.only:
        from benchmarks import _peers_nstorm as ns

        configs = [(NSTORM, {})]
        if args.nstorm_no_acks:
            configs.append((NSTORM_NO_ACKS, NO_ACKS))
        if args.nstorm_plain:
            configs.append((NSTORM_PLAIN, PLAIN))
        if args.nstorm_pipeline:
            configs.append((NSTORM_PIPELINE, ns.PIPELINE))
            if args.nstorm_no_acks:
                configs.append((NSTORM_PIPELINE_NO_ACKS, {**ns.PIPELINE, **NO_ACKS}))
            if args.nstorm_plain:
                configs.append((NSTORM_PIPELINE_PLAIN, {**ns.PIPELINE, **PLAIN}))
        for system, extra in configs:
            conf = {**extra, **args.conf}

            def nstorm_run(kind: str, rate: float, system: str = system, conf: dict[str, Any] = conf) -> RunResult:
                if kind == "fixed":
                    return ns.run_fixed(args.sentences, extra=conf, system=system)
                return ns.run_rate(rate, args.warmup, args.duration, extra=conf, system=system)

            # one spout reads one of the two streams: the fixed run's Counter is of both
            kinds = ALL_RUNS - {"fixed"} if extra.get("wordcount.spouts") == 1 else ALL_RUNS
            out.append((system, nstorm_run, kinds))
    if "handmade" in args.only:
        from benchmarks import _peers_handmade as hm

        pipeline = hm.Handmade(Path(args.handmade).resolve() if args.handmade else hm.locate(Path(__file__).parents[1]))
        if cleanup is not None:
            cleanup.append(pipeline.close)

        def handmade_run(kind: str, rate: float) -> RunResult:
            return pipeline.run(kind, rate, args.duration)

        # no fixed run: it prints the total of words and w0's count, not the counts
        out.append((hm.SYSTEM, handmade_run, frozenset({"peak", "half"})))
    if "bytewax" in args.only:
        from benchmarks import _peers_bytewax as bw

        for procs in args.bytewax_procs:
            def bytewax_run(kind: str, rate: float, procs: int = procs) -> RunResult:
                total = args.sentences if kind == "fixed" else 0
                return bw.run(procs, rate if kind == "half" else 0.0, args.warmup, args.duration, total=total)

            out.append((f"bytewax ({procs} proc)", bytewax_run, ALL_RUNS))
    if "spark" in args.only:
        from benchmarks import _peers_spark as sp

        def spark_run(kind: str, rate: float) -> RunResult:
            results = sp.run([kind], rate, args.warmup, args.duration, args.sentences, args.spark_rows_per_batch)
            return results[0] if results else RunResult(system=sp.SYSTEM, run=kind, error="no result")

        out.append((sp.SYSTEM, spark_run, ALL_RUNS))
    return out


def measure(args: argparse.Namespace, log: Console) -> tuple[list[RunResult], float]:
    """Every run: peaks round by round (the systems interleaved, so a burst of other load on the
    machine hits them alike), then the half-rate runs the same way, then one fixed run each.
    Returns every result and the half rate (half of nstorm's median peak, acking on)."""
    results: list[RunResult] = []
    cleanup: list[Callable[[], None]] = []
    runners = _runners(args, cleanup)
    try:
        return _measure_all(args, runners, results, log)
    finally:
        for close in cleanup:
            close()


def _measure_all(args: argparse.Namespace, runners: list[tuple[str, Runner, frozenset[str]]],
                 results: list[RunResult], log: Console) -> tuple[list[RunResult], float]:
    half_rate = args.half_rate

    def each(kind: str, label: str, rate: float) -> None:
        for system, fn, kinds in runners:
            if kind in kinds:
                results.append(_guarded(system, label, lambda fn=fn: fn(kind, rate), log))

    if "peak" in args.runs:
        for r in range(args.rounds):
            each("peak", f"peak (round {r + 1})", 0.0)
        peaks = [x.sentences_per_sec for x in results if x.system == NSTORM and x.run == "peak" and x.sentences_per_sec]
        if not half_rate and peaks:
            half_rate = round(statistics.median(peaks) / 2, -1)
    if "half" in args.runs and half_rate:
        for r in range(args.rounds):
            each("half", f"half (round {r + 1})", half_rate)
    if "fixed" in args.runs:
        each("fixed", "fixed", 0.0)
    return results, half_rate


def summarize(results: list[RunResult]) -> list[RunResult]:
    """One result per (system, run): medians over the rounds, every round kept in ``details``."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.system, r.run), []).append(r)
    out = []
    for (system, run), rs in groups.items():
        good = [r for r in rs if not r.error]
        if len(rs) == 1 or not good:
            out.append(rs[0])
            continue

        def med(key: str, good: list[RunResult] = good) -> float | None:
            values = [getattr(r, key) for r in good if getattr(r, key) is not None]
            return statistics.median(values) if values else None

        out.append(RunResult(
            system=system, run=run, sentences_per_sec=med("sentences_per_sec"), words_per_sec=med("words_per_sec"),
            latency_p50_ms=med("latency_p50_ms"), latency_p99_ms=med("latency_p99_ms"),
            latency_kind=good[0].latency_kind + f" (median of {len(good)} rounds)" if good[0].latency_kind else "",
            offered_sentences_per_sec=good[0].offered_sentences_per_sec,
            error="; ".join(r.error for r in rs if r.error) or None,
            details={"rounds": [r.to_dict() for r in rs]}))
    return out


def _by_system(results: list[RunResult]) -> dict[str, dict[str, RunResult]]:
    table: dict[str, dict[str, RunResult]] = {}
    for r in results:
        table.setdefault(r.system, {})[r.run] = r
    return table


def targets(results: list[RunResult]) -> dict[str, Any]:
    """Issue 6's targets as ratios within this run, for nstorm with acking on (at-least-once) and
    off (no replay, like the peers as configured here); None where a side was not measured."""
    systems = _by_system(results)

    def peak(system: str) -> float | None:
        r = systems.get(system, {}).get("peak")
        return r.words_per_sec if r and not r.error and r.words_per_sec else None

    def best(prefix: str) -> float | None:
        rates = [peak(name) for name in systems if name.startswith(prefix)]
        return max((r for r in rates if r), default=None)

    bytewax, spark = best("bytewax"), best("Spark")
    ns_half = systems.get(NSTORM, {}).get("half")
    p99 = ns_half.latency_p99_ms if ns_half and not ns_half.error else None
    out: dict[str, Any] = {"nstorm_p99_at_half_peak_ms": p99, "met": {}}
    for system, label in ((NSTORM, "acking on"), (NSTORM_NO_ACKS, "acking off")):
        nstorm = peak(system)
        if nstorm is None:
            continue
        key = "nstorm" if system == NSTORM else "nstorm_no_acks"
        out[f"{key}_vs_best_bytewax"] = nstorm / bytewax if bytewax else None
        out[f"{key}_vs_spark"] = nstorm / spark if spark else None
        out["met"][f"2x bytewax ({label})"] = nstorm / bytewax >= 2 if bytewax else None
        out["met"][f">= Spark SS ({label})"] = nstorm / spark >= 1 if spark else None
    out["met"][f"p99 < {TARGET_P99_MS:.0f} ms at half peak (acking on)"] = p99 < TARGET_P99_MS if p99 is not None else None
    handmade = peak(HANDMADE)
    out["vs_handmade"] = {}
    for system, label, goal in HANDMADE_GOALS:
        nstorm = peak(system)
        if nstorm is None:
            continue
        ratio = nstorm / handmade if handmade else None
        out["vs_handmade"][system] = {"goal": goal, "ratio": ratio, "rounds": _round_ratios(systems, system)}
        out["met"][f">= {goal:.2f}x hand-made pyzmq ({label})"] = ratio >= goal if ratio is not None else None
    return out


def _round_ratios(systems: dict[str, dict[str, RunResult]], system: str) -> list[float | None]:
    """``system``'s peak words/s over the hand-made pipeline's, round by round (they ran side by side)."""

    def rounds(name: str) -> list[float | None]:
        r = systems.get(name, {}).get("peak")
        if r is None:
            return []
        each = [RunResult.from_dict(d) for d in r.details["rounds"]] if "rounds" in r.details else [r]
        return [x.words_per_sec if not x.error else None for x in each]

    return [a / b if a and b else None for a, b in zip(rounds(system), rounds(HANDMADE), strict=False)]


def render(results: list[RunResult], half_rate: float, args: argparse.Namespace) -> Table:
    """One row per system: peak throughput (also as a ratio to the hand-made pipeline's), latency
    at peak and at the half rate, correctness."""
    systems = _by_system(results)
    ns = systems.get(NSTORM, {}).get("peak")
    base = ns.words_per_sec if ns and ns.words_per_sec else None
    hm = systems.get(HANDMADE, {}).get("peak")
    floor = hm.words_per_sec if hm and not hm.error and hm.words_per_sec else None
    goals = {system: goal for system, _, goal in HANDMADE_GOALS}
    table = Table(title=f"word count, {args.duration:.0f} s windows, {machine()['cpus']} cores "
                        f"(half rate = {_num(half_rate)} sentences/s)")
    for col in ("system", "peak sentences/s", "peak words/s", "nstorm / this", "this / hand-made", "p50 / p99 ms at peak",
                "sentences/s at half rate", "p50 / p99 ms at half rate", "counts = Counter", "not measured"):
        table.add_column(col, justify="left" if col in ("system", "not measured") else "right")
    for name, runs in systems.items():
        peak, half, fixed = runs.get("peak"), runs.get("half"), runs.get("fixed")
        ratio = f"{base / peak.words_per_sec:.2f}" if base and peak and peak.words_per_sec else "-"
        vs = "-"
        if floor and peak and peak.words_per_sec:
            vs = f"{peak.words_per_sec / floor:.2f}x"
            if name in goals:
                vs += f" ({'met' if peak.words_per_sec / floor >= goals[name] else 'NOT met'}: >= {goals[name]:.2f}x)"
        problems = "; ".join(f"{r.run}: {r.error}" for r in runs.values() if r.error)
        table.add_row(
            name, _num(peak.sentences_per_sec) if peak else "-", _num(peak.words_per_sec) if peak else "-", ratio, vs,
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
    labels = [n.replace(" (", "\n(") for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    peaks = [systems[n].get("peak") for n in names]
    values = [r.words_per_sec if r and r.words_per_sec else 0 for r in peaks]
    colors = ["#d62728" if n.startswith("nstorm") else "#2ca02c" if n == HANDMADE else "#7f7f7f" for n in names]
    bars = ax1.bar(labels, values, color=colors)
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
            why = "no stamps\n(acking off)" if names[i] in NO_STAMPS else "not run"
            ax2.annotate(why, (i, 1), ha="center", fontsize=8)
        else:
            ax2.annotate(_ms(b), (i + 0.2, b), ha="center", va="bottom", fontsize=8)
    ax2.axhline(TARGET_P99_MS, color="#2ca02c", linestyle="--", linewidth=1, label=f"target p99 {TARGET_P99_MS:.0f} ms")
    ax2.set_yscale("log")
    ax2.set_xticks(list(x), labels)
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
    if args.plot:
        import json

        data = json.loads(Path(args.plot).read_text())
        results = [RunResult.from_dict(d) for d in data["results"]]
        png = plot(results, data["half_rate_sentences_per_sec"], Path(args.plot).with_suffix(".png"),
                   f"word count on {data['machine']['cpus']} cores, {data['machine']['date']}: "
                   "same seeded sentences on every system")
        print(f"wrote {png}")
        return
    out, log = Console(width=None if sys.stdout.isatty() else 180), Console(stderr=True)
    info = machine()  # its date is the start of the run
    every, half_rate = measure(args, log)
    results = summarize(every)
    table = render(results, half_rate, args)
    out.print(table)
    goals = targets(results)
    ratios = {f">= {v['goal']:.2f}x hand-made pyzmq ({label})": v["ratio"]
              for system, label, _ in HANDMADE_GOALS if (v := goals["vs_handmade"].get(system))}
    for goal, met in goals["met"].items():
        where = f" ({ratios[goal]:.2f}x)" if ratios.get(goal) is not None else ""
        out.print(f"target {goal}: {'-' if met is None else ('met' if met else 'NOT met')}{where}")
    loads = [x for r in every for x in r.details.get("load_1min", [])]  # every round (medians keep none)
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
        "rounds": args.rounds,
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
