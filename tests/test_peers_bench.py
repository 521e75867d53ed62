"""Smoke test of ``benchmarks.peers``' correctness path: each system counts a tiny fixed input exactly.

Not timed: the benchmark measures; these tests only check that each system's word count
equals a Python Counter of the same sentences, and that bad options exit with 2.
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


@pytest.mark.parametrize("option", [["--only", "flink"], ["--runs", "half", "--only", "bytewax"], ["--duration", "0"]])
def test_bad_options_exit_2_with_one_line(option: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.peers", *option], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "error: " in proc.stderr.strip().splitlines()[-1]
