"""``benchmarks.tunings``: its labels, its options and its summary (no cluster, no timing)."""

from __future__ import annotations

import pytest

from benchmarks.tunings import _parse_args, summary, tuning_of


def test_labels_name_the_channels_bounds() -> None:
    assert tuning_of("base") == {}
    assert tuning_of("c1.25") == {"sentences>split": {"latency_ms": 1.25}}
    assert tuning_of("s2.5") == {"split>count": {"latency_ms": 2.5}}
    assert tuning_of("c0.5s2.5") == {"sentences>split": {"latency_ms": 0.5}, "split>count": {"latency_ms": 2.5}}


@pytest.mark.parametrize("argv", [["--tunings", "base,x1"], ["--tunings", "c1.25"], ["--tunings", "base,c0"],
                                  ["--cycles", "0"], ["--share", "2"]])
def test_bad_options_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse_args(argv)
    assert exc.value.code == 2


def test_the_summary_compares_each_cycle_with_its_own_base() -> None:
    def run(cycle: int, cpu: float, p99: float) -> dict:
        return {"cycle": cycle, "cpu_us_per_word": cpu, "arrival_ms": {"p50": 1.0, "p99": p99},
                "context_switches_per_sec": 100.0}

    got = {"base": [run(0, 1.0, 6.0), run(1, 2.0, 6.0)], "c1.25": [run(0, 1.1, 4.0), run(1, 2.1, 5.0)]}
    med = summary(got)
    assert med["c1.25"]["cpu_ratios"] == pytest.approx([1.1, 1.05])
    assert med["c1.25"]["p99_ms"] == [4.0, 5.0] and med["base"]["cpu_ratio"] == pytest.approx(1.0)


def test_a_window_without_words_is_left_out_not_a_crash() -> None:
    got = {"base": [{"cycle": 0, "cpu_us_per_word": None, "arrival_ms": {"p50": None, "p99": None},
                     "context_switches_per_sec": 10.0}]}
    med = summary(got)
    assert med["base"]["cpu_us_per_word"] is None and med["base"]["cpu_ratio"] is None
    assert med["base"]["p50_ms"] is None and med["base"]["p99_ms"] == [None]
