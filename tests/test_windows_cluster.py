"""Windows on a real cluster: seeded event-time readings summed per sensor in sliding windows.

``tests/topologies/windowed_sums.py``: one spout, 2 windowed ``totals`` executors (fields
grouping on the sensor), a ``collect`` sink that keeps every window's total and how often it
came. Each run must end with exactly the windows a brute-force pass over the readings gives,
each fired once, and every straggler on the late stream: through a live migration of a
windowed executor in the middle of its windows (``memory`` state provider: acks held until
the tuples leave their windows, the windows handed over with the state), and through a SIGKILL
of a windowed executor's worker with ``lmdb`` checkpoints (the windows restored from the last
checkpoint; the sink's state is restored too, so no window counts twice in it).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from conftest import TOPOLOGIES, read_outputs, run_cli, wait_until

sys.path.insert(0, str(TOPOLOGIES))
from windowed_sums import SENSORS, expected  # noqa: E402

WINDOWED = TOPOLOGIES / "windowed_sums.py"
READINGS = 9000
STRAGGLE = 500


def _done(out: Path) -> bool:
    spout = read_outputs(out).get("readings", {})
    return spout.get("next", 0) >= READINGS + SENSORS and spout.get("in_flight", 1) == 0


def _worker_of(client: Any, name: str, executor: str) -> dict[str, Any]:
    return next(w for w in client.status(name)["workers"] if executor in w["executors"])


def _check(client: Any, name: str, out: Path, seed: int) -> None:
    want, stragglers = expected(READINGS, seed, STRAGGLE)
    wait_until(lambda: _done(out), 180, interval=0.3, what="every reading emitted and acked")

    def collected() -> dict[str, Any]:
        return read_outputs(out).get("collect", {})

    wait_until(lambda: len(collected().get("windows", {})) >= len(want) and collected().get("late", 0) >= stragglers,
               60, interval=0.3, what=f"{len(want)} windows and {stragglers} late readings at the sink")
    got = collected()
    totals = {k: v[0] for k, v in got["windows"].items()}
    missing = sorted(set(want) - set(totals))[:5]
    extra = sorted(set(totals) - set(want))[:5]
    wrong = sorted(k for k in want if k in totals and totals[k] != want[k])[:5]
    assert not missing and not extra and not wrong, f"missing {missing}, extra {extra}, wrong totals {wrong}"
    twice = sorted(k for k, v in got["windows"].items() if v[1] != 1)[:5]
    assert not twice, f"windows fired more than once: {twice}"
    assert got["late"] == stragglers
    window = wait_until(lambda: (w := client.status(name)["components"]["totals"]["window"])["late_tuples"]
                        >= stragglers and w["fired"] >= len(want) and w, 30, what="the windows' counters in status")
    assert window["watermark"] is not None and window["error"] is None and window["malformed"] == 0


def test_windows_are_exact_through_a_live_migration_in_the_middle_of_a_window(cluster, client, tmp_path: Path) -> None:
    name = "windowsmove"
    client.submit(WINDOWED, name=name, conf={"test.output.dir": str(tmp_path), "test.readings": READINGS,
                                             "test.rate": 900, "test.seed": 3, "test.straggle.every": STRAGGLE})
    try:
        client.wait_running(name, 60)
        for executor, at in (("totals:0", 2000), ("totals:1", 4500), ("totals:0", 6500)):
            wait_until(lambda at=at: read_outputs(tmp_path).get("readings", {}).get("next", 0) >= at, 60,
                       interval=0.2, what=f"{at} readings emitted")
            status = client.status(name)
            assert status["components"]["totals"]["window"]["open_windows"] > 0, "the move is in the middle of windows"
            plan = client.plan(name)
            source = plan.executors[executor]
            target = next(w for w in sorted(plan.workers) if w != source)
            result = client.rebalance(name, moves=[(executor, target)])
            records = client.wait_migrations(name, result["records"], timeout=30)
            assert all(r.stall_secs is not None for r in records)
        # Everything off the spout's worker: its acker holds the trees of the tuples in open
        # windows; it hands them to its new copy, and the emptied worker is released.
        plan = client.plan(name)
        emptied = plan.executors["readings:0"]
        other = next(w for w in sorted(plan.workers) if w != emptied)
        moves = [(e, other) for e, w in sorted(plan.executors.items()) if w == emptied and not e.startswith("__acker")]
        result = client.rebalance(name, moves=moves)
        client.wait_migrations(name, result["records"], timeout=30)
        wait_until(lambda: emptied not in client.plan(name).workers, 30, what=f"{emptied} released")
        _check(client, name, tmp_path, seed=3)
        assert client.status(name)["spouts"]["failed"] == 0, "no tuple failed: nothing was replayed into a window"
        shown = run_cli("status", name, cluster=cluster)
        assert "totals windows: watermark=" in shown.stdout, shown.stdout
    finally:
        client.kill(name)
        client.wait_removed(name, 30)


def test_windows_are_restored_after_a_sigkill_with_lmdb_checkpoints(client, tmp_path: Path) -> None:
    name = "windowskill"
    client.submit(WINDOWED, name=name, conf={
        "test.output.dir": str(tmp_path), "test.readings": READINGS, "test.rate": 900, "test.seed": 5,
        "test.straggle.every": STRAGGLE, "test.incremental": True, "topology.state.provider": "lmdb",
        "topology.state.checkpoint.interval.ms": 300})
    try:
        plan = client.wait_running(name, 60)

        def committed() -> int:
            last = client.status(name)["checkpoints"]["last_committed"]
            return last["id"] if last else 0

        wait_until(lambda: committed() >= 2 and read_outputs(tmp_path).get("readings", {}).get("next", 0) >= 3000,
                   60, what="checkpoints with open windows")
        victim = next(e for e in ("totals:0", "totals:1") if plan.executors[e] != plan.executors["readings:0"])
        before = client.status(name)["checkpoints"]["restores"]
        worker = _worker_of(client, name, victim)
        os.kill(worker["pid"], signal.SIGKILL)
        wait_until(lambda: client.status(name)["checkpoints"]["restores"] > before, 60,
                   what=f"a rollback after {worker['id']} was killed")
        _check(client, name, tmp_path, seed=5)
    finally:
        client.kill(name)
        client.wait_removed(name, 30)


def test_a_message_timeout_shorter_than_the_window_is_refused_at_submit(cluster) -> None:
    result = run_cli("submit", str(WINDOWED), "--name", "shorttimeout", "-c", "test.output.dir=/tmp",
                     "-c", "topology.message.timeout.secs=5", cluster=cluster)
    assert result.returncode == 2, result.stderr
    assert "topology.message.timeout.secs=5 must exceed" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_example_sums_sensor_windows_and_routes_stragglers_to_the_late_stream(client, tmp_path: Path) -> None:
    example = Path(__file__).parents[1] / "topologies" / "windowed.py"
    client.submit(example, name="windowedexample", conf={"windowed.output.dir": str(tmp_path)})
    try:
        client.wait_running("windowedexample", 60)
        # Three slides of 8 sensors: windows go on firing (the example's spouts once stalled at their
        # pending cap after the first, holding the readings the next windows waited for).
        report = wait_until(lambda: (r := read_outputs(tmp_path).get("report")) and r.get("windows", 0) >= 24 and r,
                            90, interval=0.5, what="window totals at the report bolt, slide after slide")
        sensors = {k: v for k, v in report.items() if k.startswith("s")}
        assert sensors and all(v["end"] - v["start"] == 10.0 and v["readings"] > 0 for v in sensors.values())
        window = wait_until(lambda: (w := client.status("windowedexample")["components"]["totals"]["window"])
                            ["late_tuples"] > 0 and w, 60, what="stragglers counted late")
        assert window["watermark"] is not None and window["open_windows"] > 0 and window["fired"] >= 8
    finally:
        client.kill("windowedexample")
        client.wait_removed("windowedexample", 30)


def test_spouts_at_their_pending_cap_behind_open_windows_are_reported_stalled(cluster, client, tmp_path: Path) -> None:
    """With acking and in-memory state a window acks its tuples when it fires, and it fires only
    when newer tuples move the watermark on: a ``topology.max.spout.pending`` smaller than what a
    window holds stops the spouts before any window can fire. Nothing sits in a queue, so the
    stall names the windowed bolts that hold the tuples."""
    name = "windowsstuck"
    client.submit(WINDOWED, name=name, conf={"test.output.dir": str(tmp_path), "test.readings": READINGS,
                                             "test.rate": 900, "test.seed": 5, "test.straggle.every": 0,
                                             "topology.max.spout.pending": 50,  # a 4 s window holds 400
                                             "topology.message.timeout.secs": 8})
    try:
        client.wait_running(name, 60)
        stalled = wait_until(lambda: client.status(name)["stalled"], 90, interval=0.5,
                             what="the topology reported stalled")
        assert stalled["holding_input"] == [] and stalled["pending"] > 0, stalled
        assert stalled["holding_windows"] and all(e.startswith("totals:") for e in stalled["holding_windows"]), stalled
        shown = run_cli("status", name, cluster=cluster)
        assert "STALLED" in shown.stdout and "holding tuples in open windows: totals:" in shown.stdout, shown.stdout
    finally:
        client.kill(name)
        client.wait_removed(name, 30)
