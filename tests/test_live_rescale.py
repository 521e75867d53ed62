"""Live rescaling on a real cluster: a component's parallelism changed while tuples flow, no worker
restarted, keyed state split and merged by key group, counts and sums exact.

Word count with acking on (``tests/topologies/exact_wordcount.py``, counts in ``keyed_state``)
scaled 4 -> 8 -> 2 -> 5 count executors live; and the keyed sums with LMDB checkpoints
(``tests/topologies/durable_sum.py``) scaled 3 -> 5 and then a worker SIGKILLed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from _exactwc import counts_of, expected_counts, wait_finished
from conftest import TOPOLOGIES, read_outputs, run_cli, wait_until

EXACT = TOPOLOGIES / "exact_wordcount.py"
PARTITIONED = TOPOLOGIES / "partitioned.py"
DURABLE_SUM = TOPOLOGIES / "durable_sum.py"


def _pids(client: Any, name: str) -> dict[str, int]:
    return {w["id"]: w["pid"] for w in client.status(name)["workers"]}


def _acked(out: Path) -> int:
    return sum(len(v.get("acks", {})) for k, v in read_outputs(out).items() if k.startswith("spout-"))


def _counts(client: Any, name: str) -> list[str]:
    return sorted((e for e in client.plan(name).executors if e.startswith("count:")), key=lambda e: int(e[6:]))


def test_count_scaled_live_4_8_2_5_keeps_every_count_exact(client, tmp_path: Path) -> None:
    per_spout = 3000
    # A long message timeout: a tuple failed here must be the rescale's doing, not a loaded machine's.
    client.submit(EXACT, name="rescalewc", conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout,
                                                 "test.rate": 200, "topology.message.timeout.secs": 90})
    try:
        client.wait_running("rescalewc", 60)
        wait_until(lambda: _acked(tmp_path) > 200, 60, what="the first acks")
        pids = _pids(client, "rescalewc")
        for n in (8, 2, 5):
            before = _acked(tmp_path)
            result = client.rebalance("rescalewc", parallelism={"count": n})
            done = client.wait_migrations("rescalewc", result["records"], timeout=60)
            assert [r.mode.value for r in done] == ["rescale"] and done[0].target == str(n)
            assert len(_counts(client, "rescalewc")) == n
            wait_until(lambda: not client.plan("rescalewc").rescales, 30, what="the rescale to leave the plan")
            wait_until(lambda before=before: _acked(tmp_path) > before + 200, 60, what=f"acks after scaling to {n}")
        assert _counts(client, "rescalewc") == ["count:0", "count:1", "count:8", "count:9", "count:10"]
        out = wait_finished(client, tmp_path, "rescalewc", per_spout)  # every sentence acked once, none failed
        assert counts_of(out) == expected_counts(per_spout)
        assert _pids(client, "rescalewc") == pids, "no worker restarted"
        status = client.status("rescalewc")
        assert status["components"]["count"]["parallelism"] == 5
        assert all(f"count:{i}" not in w["executors"] for w in status["workers"] for i in (2, 3, 4, 5, 6, 7))
    finally:
        client.kill("rescalewc")
        client.wait_removed("rescalewc", 30)


def _held(client: Any, name: str) -> dict[str, int]:
    """Worker id -> its user executors (ackers left out)."""
    return {w["id"]: sum(not e.startswith("__acker") for e in w["executors"]) for w in client.status(name)["workers"]}


def test_workers_changed_live_2_3_2_spread_evenly_and_keep_every_count_exact(cluster, client, tmp_path: Path) -> None:
    """``nstorm rebalance NAME -n N`` (Storm's rebalance, which stops the topology): an even
    spread over N workers by live moves; the workers it empties are released; with no option,
    an even placement asks for nothing."""
    per_spout = 6000
    client.submit(EXACT, name="spreadwc", conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout,
                                                "test.rate": 600, "topology.message.timeout.secs": 90,
                                                "test.movable": True})  # (its spouts move too)
    try:
        client.wait_running("spreadwc", 60)
        wait_until(lambda: _acked(tmp_path) > 200, 60, what="the first acks")
        for n, shares in ((3, [3, 3, 3]), (2, [4, 5])):
            wait_until(lambda: None not in _pids(client, "spreadwc").values(), 60, what="every worker's pid")
            pids = _pids(client, "spreadwc")
            result = run_cli("rebalance", "spreadwc", "-n", str(n), cluster=cluster)
            assert result.returncode == 0, result.stderr
            assert "thread mode" in result.stdout and " in " in result.stdout, result.stdout  # the moves, completed
            def settled(n: int = n) -> bool:
                workers = client.status("spreadwc")["workers"]
                # A worker the moves emptied says it is being released (it held nothing, unexplained).
                assert all(w["releasing"] for w in workers if not w["executors"]), workers
                return len(workers) == n

            wait_until(settled, 60, what=f"{n} workers")
            assert sorted(_held(client, "spreadwc").values()) == shares
            kept = _pids(client, "spreadwc")
            assert {w: p for w, p in kept.items() if w in pids} == {w: p for w, p in pids.items() if w in kept}
        again = run_cli("rebalance", "spreadwc", cluster=cluster)
        assert again.returncode == 0 and "already even" in again.stdout, (again.stdout, again.stderr)
        out = wait_finished(client, tmp_path, "spreadwc", per_spout)  # every sentence acked once, none failed
        assert counts_of(out) == expected_counts(per_spout)
        assert {m["by"] for m in client.status("spreadwc")["migrations"]} == {"user"}
    finally:
        client.kill("spreadwc")
        client.wait_removed("spreadwc", 30)


def test_bad_rescales_exit_2_with_one_line(cluster, client, tmp_path: Path) -> None:
    client.submit(EXACT, name="rescalebad", conf={"test.output.dir": str(tmp_path), "test.sentences": 10})
    try:
        client.wait_running("rescalebad", 60)
        for args, words in ((["--parallelism", "nope=2"], "unknown component"),
                            (["-e", "count=0"], ">= 1"),
                            (["-e", "count=500"], "topology.max.parallelism"),
                            (["-e", "count"], "malformed"),
                            (["-e", "count=4"], "already has 4"),
                            (["-e", "count=5", "--workers", "99"], "free slots"),
                            (["-e", "count=5", "--mode", "process"], "not process mode"),
                            (["-n", "0"], "expected an integer >= 1"),
                            (["-n", "20"], "free slots")):
            result = run_cli("rebalance", "rescalebad", *args, cluster=cluster)
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert words in result.stderr and "Traceback" not in result.stderr, result.stderr
            assert len(result.stderr.strip().splitlines()) == 1
    finally:
        client.kill("rescalebad")
        client.wait_removed("rescalebad", 30)


def _sums(out: Path) -> dict[str, int] | None:
    """The sums executors wrote last; None while a key is in two files (one is being rewritten)."""
    totals: dict[str, int] = {}
    for name, data in read_outputs(out).items():
        if name.startswith("sum-"):
            for key, value in data.get("totals", {}).items():
                if key in totals:
                    return None
                totals[key] = value
    return totals


@pytest.mark.parametrize("provider", ["lmdb"])
def test_sums_rescaled_live_with_durable_state_then_a_worker_killed_stay_exact(client, tmp_path: Path,
                                                                               provider: str) -> None:
    numbers = 9000
    client.submit(DURABLE_SUM, name="rescalesum", conf={
        "test.output.dir": str(tmp_path), "test.numbers": numbers, "test.rate": 1000,
        "topology.state.provider": provider, "topology.state.checkpoint.interval.ms": 300})
    try:
        client.wait_running("rescalesum", 60)

        def committed() -> int:
            last = client.status("rescalesum")["checkpoints"]["last_committed"]
            return last["id"] if last else 0

        wait_until(lambda: committed() >= 2, 60, what="checkpoints")
        result = client.rebalance("rescalesum", parallelism={"sum": 5})
        client.wait_migrations("rescalesum", result["records"], timeout=60)
        base = committed()
        wait_until(lambda: committed() > base, 60, what="a checkpoint in the new layout")
        status = client.status("rescalesum")
        restores = status["checkpoints"]["restores"]
        victim = next(w for w in status["workers"] if any(e in w["executors"] for e in ("sum:3", "sum:4")))
        os.kill(victim["pid"], signal.SIGKILL)
        wait_until(lambda: client.status("rescalesum")["checkpoints"]["restores"] > restores, 60,
                   what="a rollback after the kill")
        expected: dict[str, int] = {}
        for i in range(1, numbers + 1):
            expected[str(i % 7)] = expected.get(str(i % 7), 0) + i
        wait_until(lambda: _sums(tmp_path) == expected, 180, interval=0.3, what="the sums to be exact")
    finally:
        client.kill("rescalesum")
        client.wait_removed("rescalesum", 30)


def test_a_partitioned_spout_scaled_live_2_3_1_hands_its_partitions_over(client, tmp_path: Path) -> None:
    """Each partition's position moves with its key group: every record comes out exactly once
    (no failure, so no replay), whichever spout executor read it."""
    partitions, records = 16, 600
    client.submit(PARTITIONED, name="rescalespout", conf={
        "test.output.dir": str(tmp_path), "test.partitions": partitions, "test.records": records, "test.rate": 800,
        "topology.message.timeout.secs": 90})
    try:
        client.wait_running("rescalespout", 60)

        def seen() -> dict[str, int]:
            total: dict[str, int] = {}
            for name, data in read_outputs(tmp_path).items():
                if name.startswith("record-"):
                    for key, n in data.items():
                        total[key] = total.get(key, 0) + n
            return total

        pids = _pids(client, "rescalespout")
        for n in (3, 1):
            before = len(seen())
            wait_until(lambda before=before: len(seen()) > before + 500, 60, what="records before the rescale")
            result = client.rebalance("rescalespout", parallelism={"offsets": n})
            client.wait_migrations("rescalespout", result["records"], timeout=60)
            assert client.status("rescalespout")["components"]["offsets"]["parallelism"] == n
        wanted = {f"{p}:{o}" for p in range(partitions) for o in range(records)}
        wait_until(lambda: wanted <= set(seen()), 120, interval=0.3, what="every record of every partition")
        assert client.status("rescalespout")["spouts"]["failed"] == 0
        assert set(seen().values()) == {1}, "a record read twice"
        assert _pids(client, "rescalespout") == pids, "no worker restarted"
    finally:
        client.kill("rescalespout")
        client.wait_removed("rescalespout", 30)
