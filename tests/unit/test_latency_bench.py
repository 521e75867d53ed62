"""``benchmarks.latency``'s options and the word count rate schedule (no cluster, no timing)."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest

from benchmarks._window import thread_waits
from benchmarks._workload import RunResult
from benchmarks.latency import (
    _parse_args,
    constraint_conf,
    every_window,
    render,
    run_handmade,
)
from topologies.wordcount import rate_schedule, scheduled_sends


def test_only_selects_parts_in_their_order() -> None:
    args = _parse_args(["--only", "buffers,bursty,half", "--rounds", "5", "-c", "a=1"])
    assert args.only == ["half", "bursty", "buffers"]
    assert args.conf == {"a": 1}


@pytest.mark.parametrize("argv", [["--only", "nope"], ["--rounds", "0"], ["--duration", "0"], ["--warmup", "-1"],
                                  ["--buffers-rounds", "0"], ["--buffers-share", "0"], ["--buffers-share", "1.5"],
                                  ["--only", "compare"], ["--only", "compare", "--compare", "novalue"],
                                  ["--only", "compare", "--compare", "a=1", "--compare-rounds", "0"],
                                  ["--bytewax-rate", "-1"], ["--shape", "three"], ["--bytewax-shapes", "three"], ["--bytewax-shapes", ","]])
def test_bad_options_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse_args(argv)
    assert exc.value.code == 2


def test_bytewax_shapes_and_a_given_rate() -> None:
    args = _parse_args(["--only", "bytewax", "--bytewax-shapes", "one", "--bytewax-rate", "90000"])
    assert (args.bytewax_shapes, args.bytewax_rate) == (["one"], 90000.0)
    assert _parse_args(["--only", "bytewax"]).bytewax_shapes == ["two", "one", "pipeline"]


def test_the_pipeline_shape_has_one_spout_at_the_whole_rate() -> None:
    from benchmarks.latency import at_rate

    assert at_rate("pipeline", 90000)["wordcount.rate"] == 90000
    assert at_rate("pipeline", 90000)["wordcount.local"] is True
    assert at_rate("two", 90000) == {"wordcount.rate": 45000}
    assert _parse_args(["--only", "half", "--shape", "pipeline"]).shape == "pipeline"


def test_compare_reads_its_settings_as_submit_does() -> None:
    args = _parse_args(["--only", "compare", "--compare", "worker.sched.batch=false", "--compare", "x.ms=2.5"])
    assert args.only == ["compare"]
    assert args.compare == {"worker.sched.batch": False, "x.ms": 2.5}


def test_constraint_conf_is_one_constraint_on_the_path() -> None:
    conf = constraint_conf(10, 1, control=False)
    assert json.loads(conf["topology.latency.constraints"]) == [
        {"path": ["sentences", "split", "count"], "p99_ms": 10, "window_secs": 1}]
    assert conf["topology.latency.control"] is False


def test_rate_schedule_integrates_and_cycles() -> None:
    steps = rate_schedule("[[20, 100], [20, 700]]")
    assert [scheduled_sends(steps, t) for t in (0, 10, 20, 30, 40, 60)] == [0, 1000, 2000, 9000, 16000, 18000]
    assert rate_schedule(None) == []
    with pytest.raises(ValueError):
        rate_schedule([[0, 5]])



def test_thread_waits_count_switches_and_the_time_ready_threads_waited_for_a_core() -> None:
    pid = os.getpid()
    stop = threading.Event()
    napping = threading.Thread(target=lambda: [stop.wait(0.001) for _ in range(10_000) if not stop.is_set()])
    napping.start()
    try:
        before = thread_waits([pid])[pid]
        stop.wait(0.1)  # the napping thread wakes about every millisecond meanwhile
        after = thread_waits([pid])[pid]
    finally:
        stop.set()
        napping.join()
    assert after[0] - before[0] >= 20 and after[1] >= before[1] >= 0
    assert thread_waits([2**22 + 1]) == {2**22 + 1: (0, 0)}  # no such process: nothing waited, no error


class _FakeHandmade:
    """The hand-made pipeline's runner, answering at once (the real one is a subprocess)."""

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.calls: list[tuple[str, float, float]] = []

    def run(self, kind: str, rate: float, duration: float) -> RunResult:
        self.calls.append((kind, rate, duration))
        return RunResult(system="hand-made", run=kind, sentences_per_sec=rate, latency_p50_ms=1.5,
                         latency_p99_ms=9.0, latency_kind="per message", error=self.error)


def test_the_hand_made_run_of_half_is_at_the_same_rate_and_reported_beside_nstorm() -> None:
    fake = _FakeHandmade()
    c = run_handmade(fake, 120_000.0, 15.0)
    assert fake.calls == [("half", 120_000.0, 15.0)]
    assert (c["latency_p50_ms"], c["latency_p99_ms"], c["sentences_per_sec"]) == (1.5, 9.0, 120_000.0)
    assert c["cores"] >= 0 and len(c["load_1min"]) == 2
    with pytest.raises(RuntimeError, match="not found"):
        run_handmade(_FakeHandmade(error="script not found"), 1.0, 1.0)
    nstorm = {"arrival_ms": {"p99": 11.4}, "cpu_us_per_word": 1.3, "load_1min": [1.0, 2.0]}
    result = {"rate_sentences_per_sec": 120_000.0, "rounds": [{"a": nstorm, "b": nstorm, "c": c, "cpu_ratio": 1.0,
                                                             "share_met": 0.0}, {"a": nstorm, "b": nstorm, "c": None,
                                                                                 "cpu_ratio": 1.0, "share_met": 0.0}],
              "median": {"share_met": 0.0, "cpu_ratio": 1.0, "a_window_p99_ms": None, "a_arrival_p99_ms": 11.4,
                         "b_arrival_p99_ms": 11.4, "c_p99_ms": 9.0}, "goals": {"windows": False, "cpu": True}}
    table, goals = render({"half": result}, _parse_args(["--only", "half"]))
    assert "11.40 / 9.00" in list(goals.columns[2].cells)
    assert "(c) hand-made p50 / p99 ms" in [col.header for col in table.columns]
    cells = [list(col.cells) for col in table.columns if col.header == "(c) hand-made p50 / p99 ms"][0]
    assert cells == ["1.50 / 9.00", "-", "9.00"]


def test_the_bytewax_part_judges_the_deployment_sized_like_bytewax_too() -> None:
    """bytewax runs one process: nstorm in one worker with one executor a component is the like
    deployment, judged beside the default one; results written before that goal render as ever."""
    median = {"bytewax_p99_ms": 1.5, "nstorm_window_p99_ms": 4.0, "nstorm_arrival_p99_ms": 4.4,
              "ratio_window_p99": 2.67, "ratio_arrival_p99": 2.93, "ratio_one_worker_window_p99": 0.62,
              "ratio_one_worker_arrival_p99": 0.55, "cpu_us_per_word": {}}
    goals = {"nstorm p99 <= bytewax p99 (window p99s)": False,
             "sized like bytewax (one worker): nstorm p99 <= bytewax p99 (window p99s)": True}
    result = {"rate_sentences_per_sec": 94_290.0, "median": median, "goals": goals, "rounds": []}
    args = _parse_args(["--only", "bytewax"])
    rows = dict(zip(*[list(c.cells) for c in render({"bytewax": result}, args)[-1].columns[1:4:2]], strict=True))
    alike = [k for k in rows if k.startswith("nstorm sized like bytewax")]
    assert len(alike) == 1 and rows[alike[0]] == "<= 1: met"
    assert rows["nstorm / bytewax p99 (window; arrival)"] == "<= 1: NOT met"
    old = {**result, "goals": dict(list(goals.items())[:1])}
    cells = list(render({"bytewax": old}, args)[-1].columns[1].cells)
    assert not any(c.startswith("nstorm sized like bytewax") for c in cells)


def test_the_half_goal_counts_every_window_of_every_round() -> None:
    """Three rounds of 4/4, 4/4 and 2/4 windows: the median round met all of them, the goal's
    share is 10 of 12 (under 95%: not met), and the goals table says so."""
    def round_(met: int) -> dict[str, Any]:
        run = {"constraint": {"windows": 4, "windows_met": met}, "arrival_ms": {"p99": 4.4},
               "cpu_us_per_word": 0.5, "load_1min": [1.0, 1.0]}
        return {"a": run, "b": run, "c": None, "cpu_ratio": 1.0, "share_met": met / 4}

    rounds = [round_(4), round_(4), round_(2)]
    assert every_window(rounds) == (10, 12, 10 / 12)
    assert every_window([{"a": {}}]) == (0, 0, None)
    result = {"rate_sentences_per_sec": 200_000.0, "rounds": rounds, "windows": 12, "windows_met": 10,
              "share_met": 10 / 12, "median": {"share_met": 1.0, "cpu_ratio": 1.0, "a_window_p99_ms": None,
                                                "a_arrival_p99_ms": 4.4, "b_arrival_p99_ms": 4.4, "c_p99_ms": None},
              "goals": {"windows met >= 95%": False, "CPU per word (a)/(b) < 1.05": True}}
    goals = render({"half": result}, _parse_args(["--only", "half"]))[-1]
    measure, got = list(goals.columns[1].cells)[0], list(goals.columns[2].cells)[0]
    assert "10 of 12 windows" in measure and got == "83%"


def test_compare_runs_in_the_shape_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--shape pipeline`` deploys compare's runs one stage a worker, the rate all on its one spout."""
    from rich.console import Console

    from benchmarks import latency

    confs: list[dict[str, Any]] = []
    monkeypatch.setattr(latency, "run_nstorm", lambda extra, *a, **k: confs.append(extra) or {})
    args = _parse_args(["--only", "compare", "--compare", "x.y=1", "--shape", "pipeline"])
    latency.compare(args, 400_000.0, Console(quiet=True), "compare", {"with": args.compare, "without": {}}, 1)
    half = [c for c in confs if c["wordcount.rate"]]
    assert len(confs) == 4 and len(half) == 2
    assert all(c["wordcount.spouts"] == 1 and c["topology.chaining"] for c in confs)
    assert {c["wordcount.rate"] for c in half} == {200_000.0} and [c.get("x.y") for c in half] == [1, None]
