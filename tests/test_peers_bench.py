"""Smoke test of ``benchmarks.peers``' correctness path: each system counts a tiny fixed input exactly.

Not timed: the benchmark measures; these tests only check that each system's word count
equals a Python Counter of the same sentences, that the hand-made pipeline runs and its
output is read, how options select the systems, how the table and targets state the ratios,
and that bad options exit with 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._workload import check_counts, expected_counts

ROOT = Path(__file__).parents[1]
SENTENCES = 400


def test_expected_counts_are_the_two_seeded_streams() -> None:
    counts = expected_counts(SENTENCES)
    assert sum(counts.values()) == SENTENCES * 10
    assert check_counts(dict(counts), SENTENCES)["correct"]
    off = dict(counts)
    off["w0"] += 1
    assert check_counts(off, SENTENCES)["words_differing"] == 1


def test_nstorm_counts_a_fixed_input_exactly(client) -> None:
    from benchmarks._peers_nstorm import fixed_on

    result = fixed_on(client, SENTENCES, name="peerswc", timeout=90)
    assert result.error is None
    assert result.correct is True
    assert result.details["words_counted"] == SENTENCES * 10
    assert result.details["failed"] == 0


@pytest.mark.parametrize("processes", [1, 2])
def test_bytewax_counts_a_fixed_input_exactly(processes: int) -> None:
    pytest.importorskip("bytewax")
    from benchmarks._peers_bytewax import run

    result = run(processes, 0, 0, 0, total=SENTENCES, timeout=60)
    assert result.error is None
    assert result.correct is True
    assert len(result.details["parts"]) == processes


def test_a_peer_that_is_not_installed_is_reported_not_run(monkeypatch) -> None:
    import importlib.util

    from benchmarks import _peers_bytewax

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bytewax" else real(name, *a))
    result = _peers_bytewax.run(1, 0, 0, 0, total=SENTENCES)
    assert result.correct is None
    assert result.error == "bytewax is not installed (pip install -e '.[bench]')"


@pytest.mark.skipif(not os.environ.get("NSTORM_BENCH_TESTS"),
                    reason="a Spark streaming JVM takes minutes on a loaded 2-core machine; NSTORM_BENCH_TESTS=1 runs it")
def test_spark_counts_a_fixed_input_exactly() -> None:
    pytest.importorskip("pyspark")
    from benchmarks._peers_spark import available, run

    if why := available():
        pytest.skip(why)
    [result] = run(["fixed"], 0, 0, 0, SENTENCES, rows_per_batch=SENTENCES, timeout=200)
    if result.error and "did not finish" in result.error:
        pytest.skip(f"Spark too slow on this machine right now: {result.error}")  # load, not a wrong count
    assert result.error is None
    assert result.correct is True


@pytest.mark.parametrize("option", [["--only", "flink"], ["--runs", "half", "--only", "bytewax"], ["--duration", "0"],
                                    ["--only", "handmade", "--no-handmade"]])
def test_bad_options_exit_2_with_one_line(option: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.peers", *option], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "error: " in proc.stderr.strip().splitlines()[-1]


def test_only_and_skips_select_the_configurations() -> None:
    from benchmarks import peers

    args = peers._parse_args([])
    assert args.only == ["nstorm", "handmade", "bytewax", "spark"] and args.nstorm_plain
    names = [(name, sorted(kinds)) for name, _, kinds in peers._runners(peers._parse_args(["--only", "nstorm,handmade"]))]
    assert names == [(peers.NSTORM, ["fixed", "half", "peak"]), (peers.NSTORM_NO_ACKS, ["fixed", "half", "peak"]),
                     (peers.NSTORM_PLAIN, ["fixed", "half", "peak"]), (peers.NSTORM_PIPELINE, ["half", "peak"]),
                     (peers.NSTORM_PIPELINE_NO_ACKS, ["half", "peak"]), (peers.NSTORM_PIPELINE_PLAIN, ["half", "peak"]),
                     (peers.HANDMADE, ["half", "peak"])]
    args = peers._parse_args(["--only", "nstorm,handmade", "--no-plain", "--no-acking-off", "--no-pipeline",
                              "--no-handmade"])
    assert [name for name, _, _ in peers._runners(args)] == [peers.NSTORM]


def test_targets_and_table_say_where_nstorm_stands_against_the_hand_made_pipeline() -> None:
    from rich.console import Console

    from benchmarks import peers
    from benchmarks._workload import RunResult

    def peak(system: str, words: list[float]) -> list[RunResult]:
        return [RunResult(system=system, run="peak", words_per_sec=w, sentences_per_sec=w / 10) for w in words]

    every = (peak(peers.NSTORM, [800, 700]) + peak(peers.NSTORM_NO_ACKS, [900, 1000])
             + peak(peers.NSTORM_PLAIN, [500, 500]) + peak(peers.HANDMADE, [1000, 1000]))
    results = peers.summarize(every)
    goals = peers.targets(results)
    assert goals["met"][">= 0.75x hand-made pyzmq (acking on)"] is True  # median 750 / 1000
    assert goals["met"][">= 1.00x hand-made pyzmq (acking off)"] is False  # 950 / 1000
    assert goals["met"][">= 0.60x hand-made pyzmq (plain, acking on)"] is False
    assert goals["vs_handmade"][peers.NSTORM]["rounds"] == [0.8, 0.7]
    assert goals["vs_handmade"][peers.NSTORM_PLAIN]["ratio"] == 0.5
    console = Console(width=300, record=True)
    console.print(peers.render(results, 0.0, peers._parse_args(["--only", "nstorm,handmade"])))
    text = console.export_text()
    assert "0.75x (met: >= 0.75x)" in text and "0.95x (NOT met: >= 1.00x)" in text and "1.00x" in text


def test_a_missing_hand_made_pipeline_is_reported_not_run(tmp_path: Path) -> None:
    from benchmarks._peers_handmade import Handmade, locate

    assert locate(ROOT) == (ROOT.parent / "shared" / "reference" / "handmade_pipeline.py").resolve()
    pipeline = Handmade(tmp_path / "handmade_pipeline.py")
    try:
        result = pipeline.run("peak", 0.0, 1.0)
    finally:
        pipeline.close()
    assert result.words_per_sec is None
    assert result.error == f"{tmp_path / 'handmade_pipeline.py'} not found"


def test_the_hand_made_pipeline_runs_and_its_words_per_second_are_read() -> None:
    from benchmarks import _peers_handmade as hm

    pipeline = hm.Handmade(hm.locate(ROOT))
    if why := pipeline.available():
        pytest.skip(why)
    try:  # generates the data and calibrates (untimed), then about half a second of counting
        result = pipeline.run("peak", 0.0, 0.5)
    finally:
        pipeline.close()
    assert result.error is None, result.error
    assert result.words_per_sec and result.words_per_sec > 0
    assert result.details["output"]["n"] == result.details["sentences"]


def test_plain_word_count_emits_per_word_and_counts_per_tuple() -> None:
    from nstorm import Bolt
    from topologies import wordcount, wordcount_checked

    def classes(module, conf):
        t = module.make_topology({**conf, "wordcount.output.dir": "/tmp"})
        return t.classes["split"], t.classes["count"]

    assert classes(wordcount, {}) == (wordcount.Split, wordcount.Count)
    assert classes(wordcount, {"wordcount.batched": False}) == (wordcount.Split, wordcount.TupleCount)
    assert classes(wordcount, {"wordcount.plain": "true"}) == (wordcount.PlainSplit, wordcount.TupleCount)
    split, count = classes(wordcount_checked, {"wordcount.plain": True})
    assert split is wordcount.PlainSplit and count.process_batch is Bolt.process_batch
