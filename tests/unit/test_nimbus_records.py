"""A request's migration records and its plan write (nimbus/daemon.py): a plan that cannot be
written leaves no open record behind (one would hold OTD and every later request off for good)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from nimbus.daemon import Nimbus
from nstorm.moves import RebalanceError
from nstorm.zkschema import ZkPaths


class _Zk:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, path: str, recursive: bool = False) -> None:
        self.deleted.append(path)


def _nimbus(write: Any) -> tuple[Nimbus, _Zk]:
    nimbus = object.__new__(Nimbus)  # no thread, no real ZooKeeper
    zk = _Zk()
    nimbus.zk, nimbus.paths = zk, ZkPaths("/n")  # type: ignore[assignment]
    nimbus.write_plan = write  # type: ignore[method-assign]
    return nimbus, zk


def test_records_of_a_plan_that_changed_meanwhile_are_deleted() -> None:
    nimbus, zk = _nimbus(lambda name, plan, version: False)
    with pytest.raises(RebalanceError, match="the plan changed"):
        nimbus._write_plan_with_records("t", object(), 3, {"count": "m-0000000007"})  # type: ignore[arg-type]
    assert zk.deleted == [f"{ZkPaths('/n').migrations('t')}/m-0000000007"]


def test_records_of_a_plan_write_whose_outcome_is_unknown_stay_and_the_error_is_passed_on() -> None:
    """A lost connection does not say whether the plan was written: deleting its records could
    drop a move under way from the plan; an orphan is completed later instead (below)."""
    def fails(name: str, plan: Any, version: int) -> bool:
        raise ConnectionLoss

    nimbus, zk = _nimbus(fails)
    with pytest.raises(ConnectionLoss):
        nimbus._write_plan_with_records("t", object(), 3, {"a:0": "m-1", "a:1": "m-2"})  # type: ignore[arg-type]
    assert zk.deleted == []


def test_open_records_no_plan_names_are_completed_a_minute_after_their_request() -> None:
    import time
    import types

    from nstorm.plan import Move
    from nstorm.records import MigrationRecord, MoveMode

    now = time.time()
    records = {
        "m-1": MigrationRecord("a:0", "n1:1", "n2:1", MoveMode.THREAD, "user", now - 300, 2, id="m-1"),  # named
        "m-2": MigrationRecord("a:1", "n1:1", "n2:1", MoveMode.THREAD, "otd", now - 300, 2, id="m-2"),  # orphan
        "m-3": MigrationRecord("a:2", "n1:1", "n2:1", MoveMode.THREAD, "user", now - 5, 3, id="m-3"),  # too new
        "m-4": MigrationRecord("a:3", "n1:1", "n2:1", MoveMode.THREAD, "user", now - 300, 2, now - 299, 0.01,
                               False, "m-4"),  # completed
    }
    written: dict[str, bytes] = {}
    nimbus, _zk = _nimbus(lambda name, plan, version: True)
    nimbus.zk.set = lambda path, data: written.__setitem__(path.rsplit("/", 1)[1], data)  # type: ignore[attr-defined]
    nimbus.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        migrations=lambda name: list(records.values()), migration=lambda name, rid: records.get(rid))
    nimbus._orphans_checked = {}
    plan = types.SimpleNamespace(moved={"a:0": Move("n1:1", "n2:1", MoveMode.THREAD, 2, "m-1")}, rescales={},
                                 rebalance=None)
    nimbus._settle_orphans("t", plan)  # type: ignore[arg-type]
    assert list(written) == ["m-2"]
    done = MigrationRecord.from_json(json.loads(written["m-2"]), "m-2")
    assert done.completed_at and done.state_lost is True
    written.clear()
    nimbus._settle_orphans("t", plan)  # type: ignore[arg-type]
    assert written == {}, "looked at every 30 s at most"


def test_records_of_a_written_plan_stay() -> None:
    nimbus, zk = _nimbus(lambda name, plan, version: True)
    nimbus._write_plan_with_records("t", object(), 3, {"count": "m-1"})  # type: ignore[arg-type]
    assert zk.deleted == []


def test_a_stop_mode_move_whose_slot_went_away_during_the_stop_is_dropped_not_written() -> None:
    """The restart plan named a worker it did not have: every reader refused it, the supervisors
    kept the stopped plan, and the topology stayed stopped (nor could it be killed)."""
    from nimbus.rebalance import stop_mode_restart
    from nstorm.plan import Plan, Slot
    from nstorm.records import TopologyStatus

    places = {"a:0": "n1:1", "a:1": "n1:1", "__acker:0": "n1:1"}
    plan = Plan.first("t", list(places), places, [Slot("n1", "127.0.0.1", 1, 2)])
    stopped = plan.replace(workers={}, rebalance={
        "phase": "stopped", "moves": [["a:1", "n2:1"]], "records": {"a:1": "m-1"},
        "workers": {w: s.to_json() for w, s in plan.workers.items()}, "since": 0})
    supervisors = {"n1": {"host": "127.0.0.1", "slots": [[1, 2]]}}  # n2 is gone
    new = stop_mode_restart(stopped, TopologyStatus.ACTIVE, supervisors)
    assert Plan.from_json("t", new.to_json()).executors["a:1"] == "n1:1" and "a:1" not in new.moved
    supervisors["n2"] = {"host": "127.0.0.2", "slots": [[1, 2]]}
    moved = stop_mode_restart(stopped, TopologyStatus.ACTIVE, supervisors)
    assert Plan.from_json("t", moved.to_json()).executors["a:1"] == "n2:1" and moved.moved["a:1"].record == "m-1"


def test_a_process_mode_moves_record_has_its_stall_from_the_request_and_says_state_was_lost() -> None:
    """A restarted executor's record said stall 0.0 and state_lost false: it was down from the
    request to its restart, and without checkpoints its state died with the old process."""
    import time

    from nstorm.zkschema import encode
    from worker.migration import MigrationDesk

    class Zk:
        def __init__(self, data: dict[str, Any]) -> None:
            self.data, self.written = encode(data), None

        def get(self, path: str) -> tuple[bytes, Any]:
            import types

            return self.data, types.SimpleNamespace(version=0)

        def set(self, path: str, data: bytes, version: int = -1) -> None:
            self.written = json.loads(data)

    zk = Zk({"executor": "a:1", "from": "n1:1", "to": "n2:1", "mode": "process", "by": "user",
             "requested_at": time.time() - 2.5, "version": 3, "completed_at": None})
    desk = MigrationDesk("n2:1", lambda *args: None)
    desk.restarted("m-1", lost=True)
    desk.report(zk, "/n/migrations/t")
    assert zk.written["state_lost"] is True and 2.4 < zk.written["stall_secs"] < 10
    assert "stall_from_request" not in zk.written
