"""Latency constraints (issue 17): how well the controller holds a p99 bound, and at what cost.

``python -m benchmarks.latency [--only half,bytewax,bursty,chaining,buffers,load,pinning,compare] [--rounds R]
[--peak-rate S] [--compare key=value] ...``

Word count (``topologies/wordcount.py``, the two seeded sentence streams of ``benchmarks.peers``,
acking on) on a fresh local cluster of real processes per run (ZooKeeper, Nimbus, 2 supervisors,
2 worker processes), with a latency constraint on ``sentences > split > count``. Parts:

1. **half**: nstorm's peak sentences/s (as fast as it goes, as ``benchmarks.peers``; or
   ``--peak-rate``; ``--shape pipeline``: deployed one stage a worker,
   ``benchmarks._peers_nstorm.PIPELINE``, chained from the start), then at half of it ``--rounds`` interleaved rounds of (a) with a constraint
   ``p99_ms=5, window_secs=5`` and (b) without one. After ``--warmup`` s (time for the controller
   to act), over ``--duration`` s: the share of the constraint's windows that met the bound
   (differences of ``status()["constraints"]``' cumulative ``windows`` / ``windows_met``), the p99
   of each window (polled), the count bolts' arrival histogram (spout emit -> count, stamped
   sentences, as ``benchmarks._peers_nstorm``), and worker CPU per word: the worker processes'
   CPU seconds (psutil on the pids of ``status()["workers"]``) over the words the count bolts
   executed ((b) waits only ``--baseline-warmup`` s; the order alternates per round). Goal:
   windows met >= 95%, CPU per word (a) / (b) < 1.05. In the same rounds, (c) the hand-made
   pipeline of ``../shared/reference`` (``benchmarks._peers_handmade``: three single-threaded
   processes, batches of 100, no engine) at the same rate: its p50 / p99 (per message, its
   spout's stamp of a batch's oldest sentence -> its count stage), what the machine gives a
   pipeline with nothing in it but the work (``--no-handmade`` leaves it out).
2. **bytewax**: bytewax's peak with 1 process (``benchmarks._peers_bytewax``), then, in the
   same run, bytewax and nstorm (constraint ``p99_ms=--bytewax-bound-ms``, default 2, about
   bytewax's own p99 there, over windows of 2 s) at that rate: nstorm's p99 (the constraint's
   windows and the arrival histogram) against bytewax's (source emit -> count; bytewax waits
   only ``--peak-warmup`` s), as a ratio, and nstorm's p99 parts (mean buffer wait and queue
   wait per channel, processing per component) of the last window: what bounds it. For
   reference, in each round: nstorm without a constraint at that rate, and nstorm sized like
   bytewax's one process (one worker, one spout, split and count executor) and deployed one
   stage a worker (``--shape pipeline``'s deployment), both with the same constraint. Goal: ratio <= 1, for
   the default deployment and for the one sized like bytewax's process. For A/B runs of the controller, ``--bytewax-rate`` gives the rate
   (bytewax's peak is then not measured) and ``--bytewax-shapes`` leaves out a deployment.
3. **bursty**: the spouts' rate steps 10% -> 70% of nstorm's peak every ``--bursty-step`` s
   (``wordcount.rate.schedule``, cycled from the spouts' open), a constraint ``p99_ms=10,
   window_secs=1``; the static configuration (``topology.latency.control=false``: measured, never
   acted on) against the controller, ``--bursty-rounds`` interleaved rounds: windows (about a
   second each) violating the bound over ``--bursty-duration`` s (a whole number of cycles), in
   the ``--shape`` deployment.
4. **chaining**: word count with the split on ``local_or_shuffle`` (``wordcount.local``: a spout
   and a split per worker, so each split's only input is its worker's spout), at half of the
   peak, ``--chain-rounds`` interleaved rounds of the channel ``sentences > split`` chained
   (``ClusterClient.chain``, each split in its spout's thread) and not: worker CPU per word and
   the arrival p99 (no constraint: the chains are set by hand, so that only chaining differs).
5. **buffers** (no constraint): why the controller shrinks buffers only where they dominate. At
   ``--buffers-share`` of the peak (default 0.35, about bytewax's 1-process peak), ``--buffers-rounds``
   interleaved rounds of fixed output-buffer bounds: the default ``topology.batch.max.latency.ms``
   (5 ms), 1 ms (what a controller that shrank on every violation reaches in a few windows), and
   1 ms with ``topology.max.spout.pending`` unbounded (the spouts' cap of tuples in flight, which a
   slower tree fills): arrival p50 / p99 and worker cores.
6. **load** (no constraint): what the workers pay whatever the load. At 10%, 25% and 50% of the
   peak and as fast as it goes, ``--load-rounds`` rounds (the order reversed every other round):
   worker cores, CPU per word, context switches per second (every thread of the workers, from
   ``/proc``: each wake-up of an executor's thread and each hand-off of the GIL is one), the time
   the workers' threads were ready and waited for a core (the scheduler's run delay, per second
   and per switch) and arrival p99; every other part reports the switches and waits too.
7. **pinning** (no constraint): each worker on a core of its own (``worker.cpu.pin=true``,
   ``worker/cpupin.py``) against workers whose threads float over every core (the default),
   ``--pinning-rounds`` interleaved rounds, as fast as it goes and at half of the peak: words/s,
   worker CPU per word, arrival p50 / p99 and context switches.
8. **compare** (no constraint): the same as **pinning** for any settings: runs "with" every
   ``--compare key=value`` against runs "without" (the defaults and ``-c``), ``--compare-rounds``
   interleaved rounds (how ``worker.sched.batch`` was measured, with ``--compare
   worker.sched.batch=false`` now that it is on by default), in the ``--shape`` deployment (so is
   **pinning**).

nstorm's percentiles come from log-bucket histograms (:mod:`nstorm.latency`): each is a bucket's
upper bound, 4.7% apart (10% before session 27), so two runs often show the very same value. Every run notes the
machine's 1-min load average before and after (the machine is shared).
Prints a table and writes ``benchmarks/results/<--name>.json`` (default ``latency``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, write_json
from benchmarks._peers_nstorm import PIPELINE
from benchmarks._window import CountWindow
from benchmarks._workload import STREAMS, WORDS_PER_SENTENCE

__all__ = ["main"]

PARTS = ("half", "bytewax", "bursty", "chaining", "buffers", "load", "pinning", "compare")
LOAD_SHARES = (0.1, 0.25, 0.5, 0.0)  # load: shares of the peak (0: as fast as it goes)
PATH = ["sentences", "split", "count"]
NAME = "wordcount"
HALF_BOUND_MS, HALF_WINDOW = 5.0, 5
BYTEWAX_BOUND_MS, BYTEWAX_WINDOW = 2.0, 2
# bytewax's shape: one process, one executor a component (the rate is then one spout's)
ONE_WORKER = {"topology.workers": 1, "wordcount.workers": 1, "wordcount.spouts": 1, "wordcount.splits": 1,
              "wordcount.counts": 1}
# --shape and --bytewax-shapes; pipeline: one stage a worker (the spout and the split chained in one, the count
# in the other)
DEPLOYMENTS: dict[str, dict[str, Any]] = {"two": {}, "one": ONE_WORKER, "pipeline": PIPELINE}
SHAPES = tuple(DEPLOYMENTS)  # bytewax: two (with and without a constraint), one and pipeline, each a row
BURSTY_BOUND_MS, BURSTY_WINDOW = 10.0, 1
BURSTY_LOW, BURSTY_HIGH = 0.1, 0.7
GOAL_WINDOWS_MET, GOAL_CPU_RATIO = 0.95, 1.05


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"parts to run, comma-separated: {','.join(PARTS)}")
    parser.add_argument("--peak-rate", type=float, default=0.0,
                        help="nstorm's peak sentences/s (default: measured first, acking on)")
    parser.add_argument("--peak-warmup", type=float, default=10.0, help="time before each peak window, s")
    parser.add_argument("--peak-duration", type=float, default=20.0, help="each peak window (nstorm, bytewax), s")
    parser.add_argument("--rounds", type=int, default=5, help="half: interleaved rounds of (a) and (b)")
    parser.add_argument("--shape", choices=sorted(DEPLOYMENTS), default="two",
                        help="peak, half, bursty, pinning and compare: word count's deployment (two: two of each executor, one per worker; "
                             "one: one of each in one worker; pipeline: one of each, the spout and the split in one "
                             "worker, the count in the other)")
    parser.add_argument("--warmup", type=float, default=30.0,
                        help="half and bytewax: time before the window, for the controller to act, s")
    parser.add_argument("--duration", type=float, default=30.0, help="half and bytewax: measurement window, s")
    parser.add_argument("--baseline-warmup", type=float, default=10.0,
                        help="half: time before the window of (b), with no controller to wait for, s")
    parser.add_argument("--no-handmade", dest="handmade", action="store_false",
                        help="half: leave out (c), the hand-made pipeline of ../shared/reference at the same rate")
    parser.add_argument("--bytewax-rounds", type=int, default=1, help="bytewax: rounds of bytewax then nstorm")
    parser.add_argument("--bytewax-bound-ms", type=float, default=BYTEWAX_BOUND_MS,
                        help="bytewax: nstorm's constraint p99_ms at bytewax's peak rate")
    parser.add_argument("--bytewax-rate", type=float, default=0.0,
                        help="bytewax: run at this many sentences/s instead of bytewax's measured peak (A/B runs)")
    parser.add_argument("--bytewax-shapes", default=",".join(SHAPES),
                        help=f"bytewax: nstorm's deployments to run, comma-separated: {','.join(SHAPES)}")
    parser.add_argument("--bursty-rounds", type=int, default=2, help="bursty: interleaved rounds of static, controller")
    parser.add_argument("--bursty-step", type=float, default=20.0, help="bursty: seconds at each rate")
    parser.add_argument("--bursty-warmup", type=float, default=40.0, help="bursty: time before the window, s")
    parser.add_argument("--bursty-duration", type=float, default=80.0,
                        help="bursty: measurement window, s (best a multiple of 2 x --bursty-step)")
    parser.add_argument("--chain-rounds", type=int, default=3, help="chaining: interleaved rounds of chained, not")
    parser.add_argument("--buffers-rounds", type=int, default=3, help="buffers: interleaved rounds of the bounds")
    parser.add_argument("--buffers-share", type=float, default=0.35, help="buffers: the rate, a share of the peak")
    parser.add_argument("--load-rounds", type=int, default=1, help="load: rounds over the shares of the peak")
    parser.add_argument("--pinning-rounds", type=int, default=3, help="pinning: interleaved rounds of pinned, floating")
    parser.add_argument("--compare", action="append", default=[],
                        help="compare: a key=value setting of the runs 'with' (repeatable), against runs without")
    parser.add_argument("--compare-rounds", type=int, default=3, help="compare: interleaved rounds of with, without")
    parser.add_argument("--name", default="latency", help="results/<name>.json")
    parser.add_argument("-c", "--conf", action="append", default=[], help="extra key=value for every nstorm run")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if not only or set(only) - set(PARTS):
        parser.error(f"--only takes some of {','.join(PARTS)}, got {args.only!r}")
    if min(args.rounds, args.bytewax_rounds, args.bursty_rounds, args.chain_rounds, args.buffers_rounds,
           args.load_rounds, args.pinning_rounds, args.compare_rounds) < 1:
        parser.error("--rounds and every --*-rounds must be at least 1")
    if not 0 < args.buffers_share <= 1:
        parser.error("--buffers-share must be in (0, 1]")
    if min(args.duration, args.peak_duration, args.bursty_duration, args.bursty_step) <= 0:
        parser.error("durations and --bursty-step must be > 0")
    if min(args.warmup, args.baseline_warmup, args.peak_warmup, args.bursty_warmup, args.peak_rate,
           args.bytewax_rate) < 0:
        parser.error("warm-ups, --peak-rate and --bytewax-rate must be >= 0")
    shapes = [s.strip() for s in args.bytewax_shapes.split(",") if s.strip()]
    if not shapes or set(shapes) - set(SHAPES):
        parser.error(f"--bytewax-shapes takes some of {','.join(SHAPES)}, got {args.bytewax_shapes!r}")
    args.bytewax_shapes = shapes
    from nstorm.config import parse_conf_options
    from nstorm.errors import ConfigError

    try:
        args.conf = parse_conf_options(args.conf)
        args.compare = parse_conf_options(args.compare)
    except ConfigError as exc:
        parser.error(str(exc))
    if "compare" in only and not args.compare:
        parser.error("--only compare needs at least one --compare key=value (the runs 'with' it)")
    args.only = [p for p in PARTS if p in only]
    return args


def constraint_conf(p99_ms: float, window_secs: int, control: bool = True) -> dict[str, Any]:
    """The conf of one constraint on word count's path (``-c topology.latency.constraints=...``)."""
    conf: dict[str, Any] = {"topology.latency.constraints": json.dumps(
        [{"path": PATH, "p99_ms": p99_ms, "window_secs": window_secs}])}
    if not control:
        conf["topology.latency.control"] = False
    return conf


# ---- one run on a fresh cluster -------------------------------------------------------------

def _chain_splits(client: Any) -> dict[str, str]:
    """Chain each split to the spout of its worker (``wordcount.local``) and wait until it runs so."""
    from nstorm.chaining import pointwise_pairs

    plan = client.plan(NAME)
    pairs = pointwise_pairs(client.cluster.topology(NAME)["definition"], plan, "sentences", "split")
    if not pairs:
        msg = f"sentences > split is not pointwise in this placement: {dict(plan.executors)}"
        raise RuntimeError(msg)
    client.chain(NAME, pairs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        running = {e: c.get("chained_to") for b in client.heartbeats(NAME).values() for e, c in b.executors.items()}
        if all(running.get(d) == u for d, u in pairs.items()):
            return pairs
        time.sleep(0.2)
    msg = "the chains did not start within 30 s"
    raise RuntimeError(msg)


def run_nstorm(extra: dict[str, Any], warmup: float, duration: float, poll: float = 1.0,
               chain: bool = False) -> dict[str, Any]:
    """Word count with ``extra`` conf on a fresh local cluster: the window ``duration`` s after
    ``warmup`` s; its words/s, worker CPU, arrival-histogram latency and, if it has a constraint,
    the constraint's windows in the window (polled every ``poll`` s) and its last record. With
    ``chain``, each split runs in its spout's thread from before the warm-up."""
    from benchmarks import _peers_nstorm as ns

    conf = {**ns.base_conf(2), **extra}
    load = [os.getloadavg()[0]]
    with ns._client(2) as client:
        client.submit(ns.WORDCOUNT, conf=conf)
        client.wait_running(NAME, 90)
        chains = _chain_splits(client) if chain else {}
        time.sleep(warmup)
        window = CountWindow(client, NAME)
        first, t0 = window.first, window.t0
        timeline: list[dict[str, Any]] = []
        seen = (first["constraints"][0]["windows"] if first["constraints"] else 0)
        while (left := duration - (time.monotonic() - t0)) > 0:
            time.sleep(min(poll, left))
            cs = client.constraints(NAME) if first["constraints"] else []
            if cs and cs[0]["windows"] != seen:
                seen = cs[0]["windows"]
                timeline.append({"t": round(time.monotonic() - t0, 2), "windows": seen,
                                 "windows_met": cs[0]["windows_met"], "p99_ms": cs[0]["measured_p99_ms"],
                                 "samples": cs[0].get("samples")})
        measured, last = window.close(client)
    load.append(os.getloadavg()[0])
    out: dict[str, Any] = {"conf": conf, "window_at": window.at, "load_1min": load, **measured,
                           "chains": chains, "cores": {w["id"]: w.get("core") for w in last["workers"]}}
    if first["constraints"]:
        c0, c1 = first["constraints"][0], last["constraints"][0]
        windows, met = c1["windows"] - c0["windows"], c1["windows_met"] - c0["windows_met"]
        p99s = [w["p99_ms"] for w in timeline if w["p99_ms"] is not None]
        out["constraint"] = {
            "p99_ms": c1["p99_ms"], "window_secs": c1["window_secs"], "windows": windows, "windows_met": met,
            "windows_violated": windows - met, "share_met": met / windows if windows else None,
            "window_p99_ms": {"median": statistics.median(p99s) if p99s else None, "max": max(p99s, default=None),
                              "polled": len(p99s)},
            "last": {k: c1.get(k) for k in ("measured_p99_ms", "met", "samples", "parts_ms", "warning")},
            "actions": c1["actions"], "actions_before_window": len(c0["actions"]),
            "timeline": timeline,
        }
    return out


def _guarded(label: str, fn: Callable[[], dict[str, Any]], log: Console) -> dict[str, Any]:
    """One run; a failure becomes ``{"error"}`` (the other runs still go)."""
    log.print(f"[bold]{label}[/] ...")
    started = time.time()
    try:
        result = fn()
    except Exception as exc:
        log.print(traceback.format_exc(), style="dim")
        result = {"error": f"{type(exc).__name__}: {exc}", "load_1min": [os.getloadavg()[0]]}
    result["label"], result["started"] = label, started
    log.print(f"  {_summary(result)}")
    return result


def _summary(r: dict[str, Any]) -> str:
    if r.get("error"):
        return f"not measured: {r['error']}"
    parts = [f"{_num(r.get('sentences_per_sec'))} sentences/s"]
    if "arrival_ms" in r:
        parts.append(f"arrival p99 {_ms(r['arrival_ms']['p99'])} ms")
    if "latency_p99_ms" in r:
        parts.append(f"p99 {_ms(r['latency_p99_ms'])} ms")
    if r.get("cpu_us_per_word") is not None:
        parts.append(f"{r['cpu_us_per_word']:.2f} CPU µs/word")
    if c := r.get("constraint"):
        parts.append(f"windows met {c['windows_met']}/{c['windows']}, window p99 median "
                     f"{_ms(c['window_p99_ms']['median'])} max {_ms(c['window_p99_ms']['max'])} ms, "
                     f"{len(c['actions'])} actions")
    return ", ".join(parts)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else (f"{x:,.2f}" if x < 100 else f"{x:,.0f}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _med(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None]
    return statistics.median(good) if good else None


def _dig(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, None where a level is missing or not a mapping (a run that failed)."""
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# ---- the parts ------------------------------------------------------------------------------

def at_rate(shape: str, rate: float) -> dict[str, Any]:
    """Word count's conf for deployment ``shape`` offering ``rate`` sentences/s in all (0: as fast as
    it goes), shared among its spouts."""
    conf = dict(DEPLOYMENTS[shape])
    conf["wordcount.rate"] = rate / int(conf.get("wordcount.spouts", STREAMS))
    return conf


def peak(args: argparse.Namespace, log: Console, out: dict[str, Any]) -> float:
    """nstorm's peak sentences/s (acking on): ``--peak-rate`` or measured once."""
    if args.peak_rate:
        out["peak"] = {"sentences_per_sec": args.peak_rate, "given": True}
        return args.peak_rate
    r = _guarded(f"nstorm peak ({args.shape})",
                 lambda: run_nstorm({**at_rate(args.shape, 0), **args.conf}, args.peak_warmup, args.peak_duration), log)
    out["peak"] = r
    return r.get("sentences_per_sec") or 0.0


def run_handmade(handmade: Any, rate: float, duration: float) -> dict[str, Any]:
    """The hand-made pipeline at ``rate`` sentences/s for about ``duration`` s: its latency (per
    message, its spout's stamp of a batch's oldest sentence to the count stage) and the cores its
    processes used (their CPU over the run's wall time, start-up included)."""
    import resource

    load = [os.getloadavg()[0]]
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    r = handmade.run("half", rate, duration)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - t0
    load.append(os.getloadavg()[0])
    if r.error:
        raise RuntimeError(r.error)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"sentences_per_sec": r.sentences_per_sec, "latency_p50_ms": r.latency_p50_ms,
            "latency_p99_ms": r.latency_p99_ms, "latency_kind": r.latency_kind, "cores": cpu / wall,
            "wall_secs": wall, "load_1min": load}


def half(args: argparse.Namespace, rate: float, log: Console) -> dict[str, Any]:
    """(a) with a 5 ms constraint, (b) without, and (c) the hand-made pipeline, interleaved, at
    ``rate`` sentences/s."""
    base = {**at_rate(args.shape, rate), **args.conf}
    handmade = None
    if args.handmade:
        from benchmarks import _peers_handmade

        handmade = _peers_handmade.Handmade(_peers_handmade.locate(Path(__file__).parents[1]))
        if why := handmade.prepare():
            log.print(f"the hand-made pipeline does not run here ({why}): half without it", style="red")
            handmade.close()
            handmade = None
    rounds = []
    try:
        for r in range(args.rounds):
            runs = {
                "a": (f"half, round {r + 1}: (a) constraint p99 {HALF_BOUND_MS:g} ms",
                      lambda: run_nstorm({**base, **constraint_conf(HALF_BOUND_MS, HALF_WINDOW)}, args.warmup, args.duration)),
                "b": (f"half, round {r + 1}: (b) no constraint",
                      lambda: run_nstorm(base, args.baseline_warmup, args.duration)),
                "c": (f"half, round {r + 1}: (c) the hand-made pipeline",
                      lambda: run_handmade(handmade, rate, args.duration)),
            }
            order = ("abc" if r % 2 == 0 else "cba") if handmade is not None else ("ab" if r % 2 == 0 else "ba")
            got = {key: _guarded(*runs[key], log) for key in order}  # drift hits every run alike
            a, b, c = got["a"], got["b"], got.get("c")
            ca = a.get("constraint") or {}
            ratio = (a["cpu_us_per_word"] / b["cpu_us_per_word"]
                     if a.get("cpu_us_per_word") and b.get("cpu_us_per_word") else None)
            rounds.append({"a": a, "b": b, "c": c, "order": order, "share_met": ca.get("share_met"), "cpu_ratio": ratio})
            log.print(f"  round {r + 1}: windows met {_pct(ca.get('share_met'))}, CPU/word (a)/(b) "
                      f"{'-' if ratio is None else f'{ratio:.3f}'}")
    finally:  # its temporary folder goes whatever happens
        if handmade is not None:
            handmade.close()
    share, ratio = _med([x["share_met"] for x in rounds]), _med([x["cpu_ratio"] for x in rounds])
    met, windows, total = every_window(rounds)
    return {"rate_sentences_per_sec": rate, "shape": args.shape, "bound_ms": HALF_BOUND_MS, "window_secs": HALF_WINDOW,
            "rounds": rounds, "windows": windows, "windows_met": met, "share_met": total,
            "median": {"share_met": share, "cpu_ratio": ratio,
                       "a_window_p99_ms": _med([(x["a"].get("constraint") or {}).get("window_p99_ms", {}).get("median")
                                                for x in rounds]),
                       "a_arrival_p99_ms": _med([(x["a"].get("arrival_ms") or {}).get("p99") for x in rounds]),
                       "b_arrival_p99_ms": _med([(x["b"].get("arrival_ms") or {}).get("p99") for x in rounds]),
                       "c_p99_ms": _med([(x["c"] or {}).get("latency_p99_ms") for x in rounds])},
            "goals": {f"windows met >= {GOAL_WINDOWS_MET:.0%}": None if total is None else total >= GOAL_WINDOWS_MET,
                      f"CPU per word (a)/(b) < {GOAL_CPU_RATIO}": None if ratio is None else ratio < GOAL_CPU_RATIO}}


def every_window(rounds: Sequence[Mapping[str, Any]]) -> tuple[int, int, float | None]:
    """Windows met, windows and their share over every round's (a) run: the half goal is on every
    window (a median of rounds would hide one round's misses)."""
    constraints = [x["a"].get("constraint") or {} for x in rounds]
    met = sum(int(c.get("windows_met") or 0) for c in constraints)
    windows = sum(int(c.get("windows") or 0) for c in constraints)
    return met, windows, (met / windows if windows else None)


def chaining(args: argparse.Namespace, rate: float, log: Console) -> dict[str, Any]:
    """Chained against not, interleaved, at ``rate`` sentences/s on a chainable word count."""
    base = {"wordcount.rate": rate / STREAMS, "wordcount.local": True, **args.conf}
    rounds = []
    for r in range(args.chain_rounds):
        runs = {"chained": (f"chaining, round {r + 1}: sentences > split chained",
                            lambda: run_nstorm(base, args.baseline_warmup, args.duration, chain=True)),
                "unchained": (f"chaining, round {r + 1}: not chained",
                              lambda: run_nstorm(base, args.baseline_warmup, args.duration))}
        order = ("chained", "unchained") if r % 2 == 0 else ("unchained", "chained")
        got = {key: _guarded(*runs[key], log) for key in order}
        c, u = got["chained"], got["unchained"]
        ratio = (c["cpu_us_per_word"] / u["cpu_us_per_word"]
                 if c.get("cpu_us_per_word") and u.get("cpu_us_per_word") else None)
        rounds.append({"chained": c, "unchained": u, "cpu_ratio": ratio})
        log.print(f"  round {r + 1}: CPU/word chained/not {'-' if ratio is None else f'{ratio:.3f}'}")
    return {"rate_sentences_per_sec": rate, "rounds": rounds,
            "median": {"cpu_ratio": _med([x["cpu_ratio"] for x in rounds]),
                       "chained_p99_ms": _med([(x["chained"].get("arrival_ms") or {}).get("p99") for x in rounds]),
                       "unchained_p99_ms": _med([(x["unchained"].get("arrival_ms") or {}).get("p99") for x in rounds])}}


BUFFER_CONFIGS: dict[str, dict[str, Any]] = {  # buffers: label -> conf
    "5 ms (default)": {},
    "1 ms": {"topology.batch.max.latency.ms": 1},
    "1 ms, pending unbounded": {"topology.batch.max.latency.ms": 1, "topology.max.spout.pending": 0},
}


def buffers(args: argparse.Namespace, rate: float, log: Console) -> dict[str, Any]:
    """Fixed output-buffer bounds, interleaved, at ``rate`` sentences/s, no constraint."""
    base = {"wordcount.rate": rate / STREAMS, **args.conf}
    rounds = []
    for r in range(args.buffers_rounds):
        labels = list(BUFFER_CONFIGS) if r % 2 == 0 else list(reversed(BUFFER_CONFIGS))
        got = {label: _guarded(f"buffers, round {r + 1}: {label}",
                               lambda label=label: run_nstorm({**base, **BUFFER_CONFIGS[label]},
                                                              args.baseline_warmup, args.duration), log)
               for label in labels}
        rounds.append(got)
    median = {label: {"p50_ms": _med([(x[label].get("arrival_ms") or {}).get("p50") for x in rounds]),
                      "p99_ms": _med([(x[label].get("arrival_ms") or {}).get("p99") for x in rounds]),
                      "cores": _med([x[label].get("worker_cores") for x in rounds]),
                      "cpu_us_per_word": _med([x[label].get("cpu_us_per_word") for x in rounds])}
              for label in BUFFER_CONFIGS}
    return {"rate_sentences_per_sec": rate, "rounds": rounds, "median": median}


def load(args: argparse.Namespace, rate: float, log: Console) -> dict[str, Any]:
    """Worker CPU and context switches at shares of the peak ``rate``, no constraint."""
    rounds = []
    for r in range(args.load_rounds):
        shares = LOAD_SHARES if r % 2 == 0 else tuple(reversed(LOAD_SHARES))
        got = {}
        for share in shares:
            offered = round(rate * share, -1)
            label = f"{share:.0%} of the peak" if share else "as fast as it goes"
            got[str(share)] = _guarded(f"load, round {r + 1}: {label}",
                                       lambda offered=offered: run_nstorm({"wordcount.rate": offered / STREAMS,
                                                                            **args.conf},
                                                                           args.baseline_warmup, args.duration), log)
        rounds.append(got)
    median = {str(share): {key: _med([x[str(share)].get(key) for x in rounds])
                           for key in ("sentences_per_sec", "cpu_us_per_word", "context_switches_per_sec", "worker_cores",
                                       "core_wait_ms_per_sec", "core_wait_us_per_switch")}
              | {"p99": _med([(x[str(share)].get("arrival_ms") or {}).get("p99") for x in rounds])}
              for share in LOAD_SHARES}
    return {"peak_sentences_per_sec": rate, "rounds": rounds, "median": median}


PIN_CONFIGS: dict[str, dict[str, Any]] = {"pinned": {"worker.cpu.pin": True}, "floating": {}}
COMPARE_KEYS = ("words_per_sec", "cpu_us_per_word", "worker_cores", "context_switches_per_sec", "core_wait_ms_per_sec")


def compare(args: argparse.Namespace, rate: float, log: Console, part: str, configs: dict[str, dict[str, Any]],
            rounds_n: int) -> dict[str, Any]:
    """The first of ``configs`` against the second, interleaved, as fast as it goes and at half of ``rate``."""
    first, second = list(configs)
    loads = {"peak": 0.0, "half": round(rate / 2, -1)}
    rounds = []
    for r in range(rounds_n):
        labels = list(configs) if r % 2 == 0 else list(reversed(configs))
        got: dict[str, dict[str, Any]] = {}
        for load_name, offered in loads.items():
            for label in labels:
                extra = {**at_rate(args.shape, offered), **args.conf, **configs[label]}
                warmup = args.peak_warmup if not offered else args.baseline_warmup
                got[f"{load_name}/{label}"] = _guarded(
                    f"{part}, round {r + 1}: {load_name}, {label}",
                    lambda extra=extra, warmup=warmup: run_nstorm(extra, warmup, args.duration), log)
        rounds.append(got)

    def med(key: str, field: str) -> float | None:
        if field in ("p50", "p99"):
            return _med([(x[key].get("arrival_ms") or {}).get(field) for x in rounds])
        return _med([x[key].get(field) for x in rounds])

    median = {key: {f: med(key, f) for f in (*COMPARE_KEYS, "p50", "p99")}
              for key in (f"{n}/{label}" for n in loads for label in configs)}
    ratios = {n: {f: _med([x[f"{n}/{first}"][f] / x[f"{n}/{second}"][f] for x in rounds
                           if x[f"{n}/{first}"].get(f) and x[f"{n}/{second}"].get(f)]) for f in COMPARE_KEYS}
              for n in loads}
    return {"half_rate_sentences_per_sec": loads["half"], "rounds": rounds, "median": median, "ratios": ratios,
            "labels": [first, second]}


def _bytewax_run(rate: float, warmup: float, duration: float) -> dict[str, Any]:
    from benchmarks import _peers_bytewax as bw

    load = [os.getloadavg()[0]]
    r = bw.run(1, rate, warmup, duration)
    load.append(os.getloadavg()[0])
    d = r.to_dict()
    return {"error": r.error, "sentences_per_sec": r.sentences_per_sec, "words_per_sec": r.words_per_sec,
            "latency_p50_ms": r.latency_p50_ms, "latency_p99_ms": r.latency_p99_ms, "latency_kind": r.latency_kind,
            "load_1min": load, "details": d.get("details")} if not r.error else {"error": r.error, "load_1min": load}


def bytewax(args: argparse.Namespace, log: Console) -> dict[str, Any]:
    """bytewax's 1-process peak, then bytewax and nstorm (5 ms constraint) at that rate."""
    from benchmarks import _peers_bytewax as bw

    if why := bw.available():
        return {"error": why}
    if args.bytewax_rate:
        pk: dict[str, Any] = {"given": args.bytewax_rate}
    else:
        pk = _guarded("bytewax (1 proc) peak", lambda: _bytewax_run(0.0, args.peak_warmup, args.peak_duration), log)
    rate = round(args.bytewax_rate or pk.get("sentences_per_sec") or 0.0, -1)
    if not rate:
        return {"peak": pk, "error": "bytewax's peak was not measured"}
    rounds = []
    bound = constraint_conf(args.bytewax_bound_ms, BYTEWAX_WINDOW)
    for r in range(args.bytewax_rounds):
        b = _guarded(f"bytewax (1 proc) at {rate:,.0f} sentences/s, round {r + 1}",
                     lambda: _bytewax_run(rate, args.peak_warmup, args.duration), log)
        two, one = "two" in args.bytewax_shapes, "one" in args.bytewax_shapes
        n = two and _guarded(f"nstorm at {rate:,.0f} sentences/s, constraint p99 {args.bytewax_bound_ms:g} ms, "
                             f"round {r + 1}", lambda: run_nstorm({**at_rate("two", rate), **args.conf, **bound},
                                                                  args.warmup, args.duration), log) or {}
        plain = two and _guarded(f"nstorm at {rate:,.0f} sentences/s, no constraint (reference), round {r + 1}",
                                 lambda: run_nstorm({**at_rate("two", rate), **args.conf},
                                                    args.baseline_warmup, args.duration), log) or {}
        one = one and _guarded(f"nstorm in one worker, one executor a component, at {rate:,.0f} sentences/s, constraint "
                       f"p99 {args.bytewax_bound_ms:g} ms (reference), round {r + 1}",
                       lambda: run_nstorm({**at_rate("one", rate), **args.conf, **bound},
                                          args.warmup, args.duration), log) or {}
        pipe = "pipeline" in args.bytewax_shapes and _guarded(
            f"nstorm one stage a worker (pipeline) at {rate:,.0f} sentences/s, constraint p99 {args.bytewax_bound_ms:g} "
            f"ms (reference), round {r + 1}",
            lambda: run_nstorm({**at_rate("pipeline", rate), **args.conf, **bound}, args.warmup, args.duration),
            log) or {}
        bp99 = b.get("latency_p99_ms")
        rounds.append({"bytewax": b, "nstorm": n, "nstorm_no_constraint": plain, "nstorm_one_worker": one,
                       "nstorm_pipeline": pipe,
                       "ratio_pipeline_window_p99": _ratio(_dig(pipe, "constraint", "window_p99_ms", "median"), bp99),
                       "ratio_window_p99": _ratio(_dig(n, "constraint", "window_p99_ms", "median"), bp99),
                       "ratio_arrival_p99": _ratio(_dig(n, "arrival_ms", "p99"), bp99),
                       "ratio_one_worker_window_p99": _ratio(_dig(one, "constraint", "window_p99_ms", "median"), bp99),
                       "ratio_one_worker_arrival_p99": _ratio(_dig(one, "arrival_ms", "p99"), bp99)})
    last = _dig(rounds[-1], "nstorm", "constraint", "last") or {}

    def med(*keys: str) -> float | None:
        return _med([_dig(x, *keys) for x in rounds])

    ratio, alike = med("ratio_window_p99"), med("ratio_one_worker_window_p99")
    return {"peak": pk, "rate_sentences_per_sec": rate, "bound_ms": args.bytewax_bound_ms, "rounds": rounds,
            "median": {"bytewax_p99_ms": med("bytewax", "latency_p99_ms"),
                       "nstorm_window_p99_ms": med("nstorm", "constraint", "window_p99_ms", "median"),
                       "nstorm_arrival_p99_ms": med("nstorm", "arrival_ms", "p99"),
                       "ratio_window_p99": ratio, "ratio_arrival_p99": med("ratio_arrival_p99"),
                       "nstorm_no_constraint_arrival_p99_ms": med("nstorm_no_constraint", "arrival_ms", "p99"),
                       "nstorm_one_worker_window_p99_ms": med("nstorm_one_worker", "constraint", "window_p99_ms",
                                                              "median"),
                       "nstorm_one_worker_arrival_p99_ms": med("nstorm_one_worker", "arrival_ms", "p99"),
                       "ratio_one_worker_window_p99": alike,
                       "ratio_one_worker_arrival_p99": med("ratio_one_worker_arrival_p99"),
                       "nstorm_pipeline_window_p99_ms": med("nstorm_pipeline", "constraint", "window_p99_ms", "median"),
                       "nstorm_pipeline_arrival_p99_ms": med("nstorm_pipeline", "arrival_ms", "p99"),
                       "ratio_pipeline_window_p99": med("ratio_pipeline_window_p99"),
                       "cpu_us_per_word": {k: med(k, "cpu_us_per_word") for k in
                                           ("nstorm", "nstorm_no_constraint", "nstorm_one_worker",
                                            "nstorm_pipeline")}},
            "bounded_by": _dominant(last.get("parts_ms")), "parts_ms": last.get("parts_ms"),
            "gil_switch_interval_ms": _gil_interval(args.conf),
            "goals": {"nstorm p99 <= bytewax p99 (window p99s)": None if ratio is None else ratio <= 1,
                      "sized like bytewax (one worker): nstorm p99 <= bytewax p99 (window p99s)":
                          None if alike is None else alike <= 1}}


def _gil_interval(conf: dict[str, Any]) -> Any:
    from nstorm.config import merge_conf

    return merge_conf(conf).get("worker.gil.switch.interval.ms")


def _dominant(parts: dict[str, dict[str, float]] | None) -> str | None:
    """The largest mean part of a window, and the sum of all means (which a p99 exceeds)."""
    if not parts:
        return None
    flat = [(f"{kind} {where}", ms) for kind, d in parts.items() for where, ms in (d or {}).items()]
    if not flat:
        return None
    name, ms = max(flat, key=lambda p: p[1])
    return f"{name} ({ms:g} ms mean of {sum(v for _, v in flat):.2f} ms of means)"


def bursty(args: argparse.Namespace, rate: float, log: Console) -> dict[str, Any]:
    """Static configuration against the controller under a 10% -> 70% -> 10% step load, deployed as
    ``--shape`` says (``rate`` is that deployment's peak)."""
    deployment = DEPLOYMENTS[args.shape]
    spouts = int(deployment.get("wordcount.spouts", STREAMS))
    schedule = [[args.bursty_step, round(BURSTY_LOW * rate / spouts, 1)],
                [args.bursty_step, round(BURSTY_HIGH * rate / spouts, 1)]]
    base = {**deployment, "wordcount.rate.schedule": json.dumps(schedule), **args.conf}
    rounds = []
    for r in range(args.bursty_rounds):
        row = {}
        for label, control in (("static", False), ("controller", True)):
            row[label] = _guarded(
                f"bursty, round {r + 1}: {label}",
                lambda control=control: run_nstorm({**base, **constraint_conf(BURSTY_BOUND_MS, BURSTY_WINDOW, control)},
                                                   args.bursty_warmup, args.bursty_duration, poll=0.5), log)
        rounds.append(row)

    def total(label: str, key: str) -> int | None:
        values = [(x[label].get("constraint") or {}).get(key) for x in rounds]
        return None if any(v is None for v in values) else sum(values)

    static, ctl = total("static", "windows_violated"), total("controller", "windows_violated")
    return {"peak_sentences_per_sec": rate, "shape": args.shape, "schedule_per_spout": schedule, "bound_ms": BURSTY_BOUND_MS,
            "window_secs": BURSTY_WINDOW, "rounds": rounds,
            "total": {label: {"windows_violated": total(label, "windows_violated"), "windows": total(label, "windows"),
                              "seconds": sum(x[label].get("elapsed_secs", 0) for x in rounds)}
                      for label in ("static", "controller")},
            "goals": {"controller violates fewer windows than static":
                      None if static is None or ctl is None else ctl < static or ctl == static == 0}}


# ---- output ---------------------------------------------------------------------------------

def render(results: dict[str, Any], args: argparse.Namespace) -> list[Table]:
    tables = []
    if h := results.get("half"):
        t = Table(title=f"half of peak ({_num(h['rate_sentences_per_sec'])} sentences/s): (a) constraint p99 "
                        f"{HALF_BOUND_MS:g} ms / {HALF_WINDOW} s windows vs (b) none; {args.duration:g} s windows "
                        f"after {args.warmup:g} s")
        for col in ("round", "(a) windows met", "(a) window p99 ms median / max", "(a) arrival p99 ms",
                    "(b) arrival p99 ms", "(c) hand-made p50 / p99 ms", "(a) CPU µs/word", "(b) CPU µs/word",
                    "(a)/(b) CPU", "(a) actions", "load 1 min"):
            t.add_column(col, justify="right")
        for i, x in enumerate(h["rounds"], 1):
            a, b, hm = x["a"], x["b"], x.get("c") or {}
            c = a.get("constraint") or {}
            w = c.get("window_p99_ms") or {}
            t.add_row(str(i), f"{c.get('windows_met', '-')}/{c.get('windows', '-')} ({_pct(c.get('share_met'))})",
                      f"{_ms(w.get('median'))} / {_ms(w.get('max'))}", _ms((a.get("arrival_ms") or {}).get("p99")),
                      _ms((b.get("arrival_ms") or {}).get("p99")),
                      f"{_ms(hm.get('latency_p50_ms'))} / {_ms(hm.get('latency_p99_ms'))}" if x.get("c") else "-",
                      _f2(a.get("cpu_us_per_word")), _f2(b.get("cpu_us_per_word")), _f3(x["cpu_ratio"]),
                      str(len(c.get("actions") or [])), _load(a, b, *([hm] if x.get("c") else [])))
        m = h["median"]
        t.add_row("median", _pct(m["share_met"]), _ms(m["a_window_p99_ms"]), _ms(m["a_arrival_p99_ms"]),
                  _ms(m["b_arrival_p99_ms"]), _ms(m.get("c_p99_ms")), "", "", _f3(m["cpu_ratio"]), "", "",
                  style="bold")
        tables.append(t)
    if bw := results.get("bursty"):
        t = Table(title=f"bursty: {BURSTY_LOW:.0%} -> {BURSTY_HIGH:.0%} -> {BURSTY_LOW:.0%} of "
                        f"{_num(bw['peak_sentences_per_sec'])} sentences/s every {args.bursty_step:g} s, "
                        f"p99 {BURSTY_BOUND_MS:g} ms over {BURSTY_WINDOW} s windows, {args.bursty_duration:g} s each")
        for col in ("round", "configuration", "windows violating", "windows judged", "seconds", "window p99 ms median / max",
                    "arrival p99 ms", "actions", "load 1 min"):
            t.add_column(col, justify="right")
        for i, x in enumerate(bw["rounds"], 1):
            for label in ("static", "controller"):
                r = x[label]
                c = r.get("constraint") or {}
                w = c.get("window_p99_ms") or {}
                t.add_row(str(i), label, str(c.get("windows_violated", "-")), str(c.get("windows", "-")),
                          f"{r.get('elapsed_secs', 0):.0f}", f"{_ms(w.get('median'))} / {_ms(w.get('max'))}",
                          _ms((r.get("arrival_ms") or {}).get("p99")), str(len(c.get("actions") or [])), _load(r),
                          style="red" if r.get("error") else None)
        tables.append(t)
    if bf := results.get("buffers"):
        t = Table(title=f"fixed output-buffer bounds at {_num(bf['rate_sentences_per_sec'])} sentences/s, no constraint; "
                        f"{args.duration:g} s windows after {args.baseline_warmup:g} s")
        for col in ("round", "bounds", "arrival p50 ms", "arrival p99 ms", "worker cores", "CPU µs/word",
                    "context switches/s", "load 1 min"):
            t.add_column(col, justify="right")
        for i, x in enumerate(bf["rounds"], 1):
            for label, r in x.items():
                a = r.get("arrival_ms") or {}
                t.add_row(str(i), label, _ms(a.get("p50")), _ms(a.get("p99")), _f2(r.get("worker_cores")),
                          _f2(r.get("cpu_us_per_word")),
                          _num(r.get("context_switches_per_sec")), _load(r), style="red" if r.get("error") else None)
        for label, m in bf["median"].items():
            t.add_row("median", label, _ms(m["p50_ms"]), _ms(m["p99_ms"]), _f2(m["cores"]), _f2(m["cpu_us_per_word"]),
                      "", "", style="bold")
        tables.append(t)
    if ld := results.get("load"):
        t = Table(title=f"worker cost by load (peak {_num(ld['peak_sentences_per_sec'])} sentences/s), no constraint; "
                        f"{args.duration:g} s windows after {args.baseline_warmup:g} s; medians of {len(ld['rounds'])}")
        for col in ("offered", "sentences/s", "worker cores", "CPU µs/word", "context switches/s",
                    "switches per 1,000 words", "waits for a core ms/s", "µs a switch", "arrival p99 ms"):
            t.add_column(col, justify="right")
        for share in LOAD_SHARES:
            m = ld["median"][str(share)]
            sw, sps = m["context_switches_per_sec"], m["sentences_per_sec"]
            t.add_row(f"{share:.0%}" if share else "peak", _num(sps), _f2(m["worker_cores"]), _f2(m["cpu_us_per_word"]),
                      _num(sw), _f2(1000 * sw / (sps * WORDS_PER_SENTENCE)) if sw is not None and sps else "-",
                      _num(m.get("core_wait_ms_per_sec")), _num(m.get("core_wait_us_per_switch")), _ms(m.get("p99")))
        tables.append(t)
    titles = {"pinning": "each worker on a core of its own (worker.cpu.pin) against floating threads",
              "compare": "with --compare settings against without"}
    for part, title in titles.items():
        if not (pn := results.get(part)):
            continue
        first, second = pn["labels"]
        t = Table(title=f"{title}, no constraint; "
                        f"as fast as it goes and at {_num(pn['half_rate_sentences_per_sec'])} sentences/s; medians "
                        f"of {len(pn['rounds'])} interleaved rounds")
        for col in ("load", "workers", "words/s", "worker cores", "CPU µs/word", "arrival p50 ms", "arrival p99 ms",
                    "context switches/s", "waits for a core ms/s"):
            t.add_column(col, justify="right")
        for key, m in pn["median"].items():
            load_name, label = key.split("/")
            t.add_row(load_name, label, _num(m["words_per_sec"]), _f2(m["worker_cores"]), _f2(m["cpu_us_per_word"]),
                      _ms(m["p50"]), _ms(m["p99"]), _num(m["context_switches_per_sec"]),
                      _num(m.get("core_wait_ms_per_sec")))
        for load_name, ratio in pn["ratios"].items():
            t.add_row(load_name, f"{first} / {second}", _f3(ratio["words_per_sec"]), _f3(ratio["worker_cores"]),
                      _f3(ratio["cpu_us_per_word"]), "", "", _f3(ratio["context_switches_per_sec"]),
                      _f3(ratio.get("core_wait_ms_per_sec")), style="bold")
        tables.append(t)
    t = Table(title="latency constraints (issue 17): goals")
    for col in ("part", "measure", "result", "goal"):
        t.add_column(col, justify="left")
    if h := results.get("half"):
        m = h["median"]
        # results before session 24 have the median of the rounds only
        every = h.get("share_met", m["share_met"])
        over = (f"{h['windows_met']} of {h['windows']} windows" if "windows" in h else "median")
        t.add_row("half", f"windows meeting p99 {HALF_BOUND_MS:g} ms ({over}, {len(h['rounds'])} rounds; "
                          f"{h.get('shape', 'two')}, {_num(h['rate_sentences_per_sec'])} sentences/s)",
                  _pct(every), f">= {GOAL_WINDOWS_MET:.0%}: {_met(h['goals'], 0)}")
        t.add_row("half", "worker CPU per word, constraint / none (median)", _f3(m["cpu_ratio"]),
                  f"< {GOAL_CPU_RATIO}: {_met(h['goals'], 1)}")
        if m.get("c_p99_ms") is not None:
            t.add_row("half", "p99 ms, (b) no constraint / (c) the hand-made pipeline at the same rate (medians)",
                      f"{_ms(m['b_arrival_p99_ms'])} / {_ms(m['c_p99_ms'])}", "reference: no engine, no acking")
    if b := results.get("bytewax"):
        if b.get("error"):
            t.add_row("bytewax", "nstorm p99 / bytewax p99", "not measured", b["error"])
        else:
            m = b["median"]
            t.add_row("bytewax", f"p99 at bytewax's 1-proc peak ({_num(b['rate_sentences_per_sec'])} sentences/s): "
                                 "nstorm window p99 / arrival p99 / bytewax p99, ms",
                      f"{_ms(m['nstorm_window_p99_ms'])} / {_ms(m['nstorm_arrival_p99_ms'])} / {_ms(m['bytewax_p99_ms'])}",
                      "")
            t.add_row("bytewax", "nstorm without a constraint at that rate (reference): arrival p99, ms",
                      _ms(m.get("nstorm_no_constraint_arrival_p99_ms")), "")
            t.add_row("bytewax", "nstorm in one worker, one executor a component, same constraint (reference): "
                                 "window p99 / arrival p99, ms; / bytewax p99 (window)",
                      f"{_ms(m.get('nstorm_one_worker_window_p99_ms'))} / {_ms(m.get('nstorm_one_worker_arrival_p99_ms'))}"
                      f"; {_f2(m.get('ratio_one_worker_window_p99'))}", "")
            t.add_row("bytewax", "nstorm one stage a worker (pipeline), same constraint (reference): "
                                 "window p99 / arrival p99, ms; / bytewax p99 (window)",
                      f"{_ms(m.get('nstorm_pipeline_window_p99_ms'))} / {_ms(m.get('nstorm_pipeline_arrival_p99_ms'))}"
                      f"; {_f2(m.get('ratio_pipeline_window_p99'))}", "")
            cpu = m.get("cpu_us_per_word") or {}
            t.add_row("bytewax", "nstorm CPU µs a word: constraint / none / one worker / pipeline",
                      f"{_f2(cpu.get('nstorm'))} / {_f2(cpu.get('nstorm_no_constraint'))} / "
                      f"{_f2(cpu.get('nstorm_one_worker'))} / {_f2(cpu.get('nstorm_pipeline'))}", "")
            t.add_row("bytewax", "nstorm / bytewax p99 (window; arrival)",
                      f"{_f2(m['ratio_window_p99'])}; {_f2(m['ratio_arrival_p99'])}", f"<= 1: {_met(b['goals'], 0)}")
            if len(b["goals"]) > 1:  # (results of older runs have the first goal only)
                t.add_row("bytewax", "nstorm sized like bytewax (one worker, one executor a component) / bytewax p99 "
                                     "(window; arrival)",
                          f"{_f2(m.get('ratio_one_worker_window_p99'))}; {_f2(m.get('ratio_one_worker_arrival_p99'))}",
                          f"<= 1: {_met(b['goals'], 1)}")
            t.add_row("bytewax", "what bounds nstorm's (largest mean part, last window)", b.get("bounded_by") or "-",
                      f"GIL switch interval {b.get('gil_switch_interval_ms')} ms")
    if bw := results.get("bursty"):
        tot = bw["total"]
        t.add_row("bursty", f"windows violating p99 {BURSTY_BOUND_MS:g} ms, static vs controller "
                            f"({len(bw['rounds'])} rounds)",
                  f"{tot['static']['windows_violated']} of {tot['static']['windows']} vs "
                  f"{tot['controller']['windows_violated']} of {tot['controller']['windows']}",
                  f"controller fewer: {_met(bw['goals'], 0)}")
    if ch := results.get("chaining"):
        m = ch["median"]
        t.add_row("chaining", f"CPU per word, sentences > split chained / not ({len(ch['rounds'])} rounds, "
                              f"{_num(ch['rate_sentences_per_sec'])} sentences/s)", _f3(m["cpu_ratio"]), "")
        t.add_row("chaining", "arrival p99 ms, chained / not", f"{_ms(m['chained_p99_ms'])} / {_ms(m['unchained_p99_ms'])}",
                  "")
    if t.row_count:
        tables.append(t)
    return tables


def _met(goals: dict[str, bool | None], i: int) -> str:
    v = list(goals.values())[i]
    return "-" if v is None else ("met" if v else "NOT met")


def _f2(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _load(*runs: dict[str, Any]) -> str:
    loads = [v for r in runs for v in r.get("load_1min") or ()]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    out, log = Console(width=None if sys.stdout.isatty() else 200), Console(stderr=True)
    info = machine()
    started, load0 = time.time(), os.getloadavg()
    results: dict[str, Any] = {}
    rate = 0.0
    if {"half", "bursty", "chaining", "buffers", "load", "pinning", "compare"} & set(args.only):
        rate = peak(args, log, results)
        if not rate:
            log.print("nstorm's peak was not measured: half and bursty are skipped", style="red")
    if "half" in args.only and rate:
        results["half"] = half(args, round(rate / 2, -1), log)
    if "bytewax" in args.only:
        results["bytewax"] = bytewax(args, log)
    if "bursty" in args.only and rate:
        results["bursty"] = bursty(args, rate, log)
    if "chaining" in args.only and rate:
        results["chaining"] = chaining(args, round(rate / 2, -1), log)
    if "buffers" in args.only and rate:
        results["buffers"] = buffers(args, round(rate * args.buffers_share, -1), log)
    if "load" in args.only and rate:
        results["load"] = load(args, rate, log)
    if "pinning" in args.only and rate:
        results["pinning"] = compare(args, rate, log, "pinning", PIN_CONFIGS, args.pinning_rounds)
    if "compare" in args.only and rate:
        results["compare"] = compare(args, rate, log, "compare", {"with": args.compare, "without": {}},
                                     args.compare_rounds)
    ended, load1 = time.time(), os.getloadavg()
    for table in render(results, args):
        out.print(table)
    out.print(f"run {time.strftime('%H:%M:%S', time.localtime(started))} to "
              f"{time.strftime('%H:%M:%S', time.localtime(ended))}; load average at start "
              f"{' '.join(f'{x:.2f}' for x in load0)}, at end {' '.join(f'{x:.2f}' for x in load1)} "
              f"({info['cpus']} cores, shared)")
    path = write_json(args.name, {
        "machine": info, "command": "python -m benchmarks.latency " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": vars(args), "started": started, "ended": ended, "load_avg": {"start": load0, "end": load1},
        "path": PATH, "results": results})
    out.print(f"wrote {path}")


if __name__ == "__main__":
    main()
