"""Workers killed around a live move, and a topology resubmitted with new options, on a real cluster.

The keyed sum (``tests/topologies/keyed_sum.py``): one spout offering 2,000 integers a second,
2 ``mod`` bolts, 3 ``sum`` bolts with their totals in ``self.state``, acking on. A worker
killed after a live move, or during its hand-over, must never leave the topology waiting for
a state that cannot come: every tuple is acked in the end and ``status`` reports no stall.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from nstorm.errors import UsageError

from conftest import TOPOLOGIES, read_outputs, wait_until

KEYED_SUM = TOPOLOGIES / "keyed_sum.py"


def _acked(out: Path) -> int:
    return len(read_outputs(out).get("numbers", {}).get("acked", {}))


def _worker(client: Any, name: str, wid: str) -> dict[str, Any]:
    return next(w for w in client.status(name)["workers"] if w["id"] == wid)


def _kill(client: Any, name: str, wid: str) -> None:
    """SIGKILL worker ``wid`` and wait until its supervisor has restarted it."""
    pid = _worker(client, name, wid)["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: (p := _worker(client, name, wid)["pid"]) and p != pid, 60, what=f"{wid} to be restarted")


def _places(client: Any, name: str) -> tuple[str, list[dict[str, Any]]]:
    """The spout's worker, and every worker."""
    workers = [w for w in client.status(name)["workers"] if w["pid"]]
    spout = next(w["id"] for w in workers if any(e.startswith("numbers:") for e in w["executors"]))
    return spout, workers


def _progress(out: Path, more: int, what: str, numbers: int = 20000) -> None:
    """Wait until the spout has ``more`` acks than now (the topology moves), or every one of its
    ``numbers``: a spout held back at the start (its gate waits up to 10 s for a late worker)
    catches up in a burst, and may have emitted nearly all of them before this is called."""
    target = min(_acked(out) + more, numbers)
    wait_until(lambda: _acked(out) >= target, 60, what=what)


def _kill_topology(client: Any, name: str) -> None:
    client.kill(name)
    client.wait_removed(name, 30)


def test_a_completed_move_leaves_the_plan(client, tmp_path: Path) -> None:
    client.submit(KEYED_SUM, name="movedone", conf={"test.output.dir": str(tmp_path), "test.rate": 500})
    try:
        plan = client.wait_running("movedone", 60)
        source = plan.executors["sum:0"]
        target = next(w for w in sorted(plan.workers) if w != source)
        result = client.rebalance("movedone", moves=[("sum:0", target)])
        client.wait_migrations("movedone", result["records"], timeout=30)
        wait_until(lambda: "sum:0" not in (client.plan("movedone").moved), 30,
                   what="the completed move to leave the plan")
        assert client.plan("movedone").executors["sum:0"] == target
    finally:
        _kill_topology(client, "movedone")


def test_a_worker_killed_after_a_live_move_never_stalls_the_topology(client, tmp_path: Path) -> None:
    """The scenario that stalled for good: a sum's worker killed and restarted, the sum moved live
    to the spout's worker, then that worker killed. Twice, each a new submission.

    16,000 numbers at 2,000/s: the first spout still emits when the sum moves (about 12,000 are
    out then), and the restarted one emits them all again through the restarted destination.
    Placement is the same in every run (the even scheduler), and in a timed invocation of the
    three runs the moved sum had left the plan before the kill in each: a third run repeated the
    second."""
    numbers = 16000
    for run in range(2):
        out = tmp_path / f"run{run}"
        out.mkdir()
        name = f"killmove{run}"
        client.submit(KEYED_SUM, name=name, conf={"test.output.dir": str(out), "test.numbers": numbers,
                                                  "test.rate": 2000, "topology.message.timeout.secs": 10})
        try:
            client.wait_running(name, 60)
            _progress(out, 500, "the first acks", numbers)
            spout, workers = _places(client, name)
            victim = next(w for w in workers if w["id"] != spout and any(e.startswith("sum:") for e in w["executors"]))
            moved = next(e for e in victim["executors"] if e.startswith("sum:"))
            _kill(client, name, victim["id"])
            _progress(out, 2000, "acks after the first restart", numbers)
            result = client.rebalance(name, moves=[(moved, spout)])
            done = client.wait_migrations(name, result["records"], timeout=30)
            assert done[0].target == spout and not done[0].state_lost
            _progress(out, 1000, "acks after the move", numbers)
            _kill(client, name, spout)  # the move's destination, and the spout with it
            # The restarted spout starts again from 1: every number must be acked.
            wait_until(lambda out=out: _acked(out) >= numbers, 120, what=f"run {run}: every number acked after the kills")
            status = client.status(name)
            assert status["stalled"] is None, status["stalled"]
            assert moved not in (client.plan(name).moved)
        finally:
            _kill_topology(client, name)


def _held_move(client: Any, name: str, out: Path, executor: str, target: str) -> str:
    """Move ``executor`` to ``target`` with its new copy held in ``prepare`` (before it asks for
    the state); returns the migration record's id."""
    index = executor.rpartition(":")[2]
    (out / f"hold-sum-{index}").touch()
    result = client.rebalance(name, moves=[(executor, target)])
    wait_until(lambda: _worker(client, name, target)["plan_version"] == result["version"], 30,
               what="the target worker to start the new copy")
    return result["records"][executor]


def _record(client: Any, name: str, record: str) -> Any:
    return next(r for r in client.migrations(name) if r.id == record)


def _kill_during_hand_over(client: Any, out: Path, name: str, executor: str, victim: str,
                           state_wait_ms: int) -> tuple[Any, str, int]:
    """Move ``executor`` (a sum) to a worker without the spout, its new copy held before it asks
    for the state; kill the move's ``victim`` ("source" or "target") meanwhile, then let the copy
    go. Returns the completed migration record, the target worker and the sum's total before."""
    index = executor.rpartition(":")[2]
    client.submit(KEYED_SUM, name=name, conf={"test.output.dir": str(out), "test.rate": 1000,
                                              "worker.lazy.kill.ms": 60000, "worker.state.wait.ms": state_wait_ms})
    client.wait_running(name, 60)
    _progress(out, 1000, "the first acks")
    spout, workers = _places(client, name)
    if client.plan(name).executors[executor] == spout:  # keep the spout out of it: its restart hides stalls
        other = next(w["id"] for w in workers if w["id"] != spout)
        client.wait_migrations(name, client.rebalance(name, moves=[(executor, other)])["records"], timeout=30)
        wait_until(lambda: executor not in client.plan(name).moved, 30, what="the first move to complete")
    source = client.plan(name).executors[executor]
    target = next(w["id"] for w in workers if w["id"] not in (spout, source))
    before = sum(read_outputs(out).get(f"sum-{index}", {}).get("state", {}).values())
    record = _held_move(client, name, out, executor, target)
    _kill(client, name, target if victim == "target" else source)
    (out / f"hold-sum-{index}").unlink()
    done = wait_until(lambda: (r := _record(client, name, record)).completed_at and r, 60,
                      what=f"the move to complete after its {victim} was killed")
    return done, target, before


def test_a_destination_killed_during_the_hand_over_still_gets_the_state(client, tmp_path: Path) -> None:
    """The old copy waits for a copy that asks for the state; a restarted destination's copy asks,
    and gets it: nothing of the state is lost."""
    try:
        done, target, before = _kill_during_hand_over(client, tmp_path, "killdst", "sum:1", "target", 60000)
        assert done.state_lost is False
        wait_until(lambda: read_outputs(tmp_path).get("sum-1", {}).get("worker") == target, 30,
                   what="the new copy to write its totals")
        assert sum(read_outputs(tmp_path)["sum-1"]["state"].values()) >= before > 0  # the totals came along
    finally:
        (tmp_path / "hold-sum-1").unlink(missing_ok=True)
        _kill_topology(client, "killdst")


def test_a_source_killed_during_the_hand_over_lets_the_new_copy_start_at_once(client, tmp_path: Path) -> None:
    """The restarted source has no copy: it answers the new copy's READY with GONE, and the copy
    starts empty then, long before its ``worker.state.wait.ms`` of 600 s (the wait above is 60 s)."""
    try:
        done, _target, _before = _kill_during_hand_over(client, tmp_path, "killsrc", "sum:2", "source", 600000)
        assert done.state_lost is True
        _progress(tmp_path, 2000, "acks after the new copy started")
    finally:
        (tmp_path / "hold-sum-2").unlink(missing_ok=True)
        _kill_topology(client, "killsrc")


def test_a_topology_submitted_again_runs_with_its_new_options(client, tmp_path: Path) -> None:
    """Killed and submitted again at once under the same name, the same file with another
    ``-c test.output.dir``: the new workers write to the new directory, and ``status`` counts
    only the new submission."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    client.submit(KEYED_SUM, name="again", conf={"test.output.dir": str(first), "test.rate": 1000})
    client.wait_running("again", 60)
    _progress(first, 3000, "the first submission to run")
    client.kill("again")
    deadline = time.monotonic() + 60
    while True:  # as soon as Nimbus has removed it
        try:
            client.submit(KEYED_SUM, name="again", conf={"test.output.dir": str(second), "test.rate": 1000})
            break
        except UsageError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        client.wait_running("again", 60)
        _progress(second, 500, "the second submission to write to its own directory")
        frozen = read_outputs(first)["numbers"]
        _progress(second, 500, "more acks")
        assert read_outputs(first)["numbers"] == frozen  # nothing of the new one writes there
        status = client.status("again")
        assert status["spouts"]["acked"] <= _acked(second) + 1000  # not the first submission's counters
    finally:
        _kill_topology(client, "again")


def test_a_worker_that_moves_emptied_is_released(client, tmp_path: Path) -> None:
    """Every executor of one worker moved live elsewhere: once the moves are complete the worker
    leaves the plan (its acker moves, keeping its task) and its process ends; nothing is lost."""
    numbers = 8000
    client.submit(KEYED_SUM, name="release", conf={"test.output.dir": str(tmp_path), "test.numbers": numbers,
                                                   "test.rate": 1000})
    try:
        plan = client.wait_running("release", 60)
        _progress(tmp_path, 500, "the first acks", numbers)
        spout, workers = _places(client, "release")
        victim = next(w for w in workers if w["id"] != spout)
        others = [w["id"] for w in workers if w["id"] != victim["id"]]
        moves = [(e, others[i % len(others)]) for i, e in enumerate(sorted(victim["executors"]))
                 if not e.startswith("__acker")]
        result = client.rebalance("release", moves=moves)
        client.wait_migrations("release", result["records"], timeout=30)
        wait_until(lambda: victim["id"] not in client.plan("release").workers, 30, what="the emptied worker's release")
        after = client.plan("release")
        assert after.tasks == plan.tasks and len([e for e in after.executors if e.startswith("__acker")]) == 4
        wait_until(lambda: not psutil.pid_exists(victim["pid"]), 30, what="the released worker to stop")
        wait_until(lambda: _acked(tmp_path) >= numbers, 120, what="every number acked")
    finally:
        _kill_topology(client, "release")
