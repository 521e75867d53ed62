"""The OTD runner's guards around a round's decision (scheduler_otd/runner.py), with fakes: no
move while the window still spans OTD's last one, and no executor OTD moved lately moved again
(a window that straddles a move sent an executor back and forth for good)."""

from __future__ import annotations

import json
import time
import types
from typing import Any

import pytest

import scheduler_otd.runner as runner_module
from nstorm.plan import Plan, Slot
from nstorm.records import MigrationRecord, MoveMode
from nstorm.zkschema import ZkPaths
from scheduler_otd.runner import OtdRunner

PLACES = {"a:0": "n1:1", "a:1": "n1:1", "b:0": "n2:1", "__acker:0": "n1:1"}
CONF = {"otd.window.secs": 10, "otd.move.cooldown.secs": 60}


def _runner(monkeypatch: pytest.MonkeyPatch, migrations: list[MigrationRecord],
            up: tuple[str, ...] = ("n1", "n2")) -> tuple[OtdRunner, list[str], dict[str, Any]]:
    plan = Plan.first("t", list(PLACES), PLACES, [Slot("n1", "127.0.0.1", 1, 2), Slot("n2", "127.0.0.1", 1, 2)])
    runner = object.__new__(OtdRunner)
    requests: list[str] = []
    runner.zk = types.SimpleNamespace(  # type: ignore[assignment]
        create=lambda path, data=b"", sequence=False, makepath=False: requests.append(path) or path,
        exists=lambda path: True, set=lambda path, data: None)
    runner.paths = ZkPaths("/n")
    runner.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        plan=lambda name: (plan, None), busy_executors=lambda name: set(), children=lambda path: [],
        heartbeats=lambda name: {}, migrations=lambda name: migrations, supervisors=lambda: dict.fromkeys(up, {}))
    runner.traffic = lambda name, window, load: (  # type: ignore[method-assign]
        {"workers": [], "edges": [], "inter_node_ratio": 0.0, "total_tuples": 0}, "python")
    seen: dict[str, Any] = {}

    def decide(executors: Any, placement: Any, nodes: Any, loads: Any, edges: Any, conf: Any, movable: Any) -> Any:
        seen["movable"] = list(movable)
        return types.SimpleNamespace(case=3, classes={}, warning=None, executor="a:1", target="n2:1", asc=-10.0,
                                     as_json=lambda: {"case": 3, "executor": "a:1", "target": "n2:1"})

    monkeypatch.setattr(runner_module, "otd_round", decide)
    monkeypatch.setattr(runner_module, "record_round", lambda *args: None)
    return runner, requests, seen


def _moved(executor: str, secs_ago: float) -> MigrationRecord:
    at = time.time() - secs_ago
    return MigrationRecord(executor, "n2:1", "n1:1", MoveMode.THREAD, "otd", at, 2, at + 0.5, 0.01, False, "m-1")


def test_no_move_while_the_window_still_spans_otds_last_one(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, requests, _ = _runner(monkeypatch, [_moved("b:0", 4.0)])
    record = runner.round("t", CONF)
    assert record is not None and "held" in record and requests == []
    runner, requests, _ = _runner(monkeypatch, [_moved("b:0", 30.0)])
    record = runner.round("t", CONF)
    assert record is not None and "held" not in record and len(requests) == 1


def test_an_executor_otd_moved_lately_is_not_movable(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, _, seen = _runner(monkeypatch, [_moved("a:0", 30.0)])
    runner.round("t", CONF)
    assert "a:0" not in seen["movable"] and "a:1" in seen["movable"]
    runner, _, seen = _runner(monkeypatch, [_moved("a:0", 90.0)])
    runner.round("t", CONF)
    assert "a:0" in seen["movable"]


def test_executors_on_a_worker_whose_supervisor_is_down_are_not_movable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Such a worker runs on but reads no new plan: Nimbus refuses a move from or to it, so OTD
    neither moves its executors nor counts it as a target (it has no load, so no class)."""
    runner, _, seen = _runner(monkeypatch, [], up=("n1",))
    runner.round("t", CONF)
    assert "b:0" not in seen["movable"] and {"a:0", "a:1"} <= set(seen["movable"])


def test_a_round_aggregates_in_python_when_the_spark_job_fails(tmp_path: Any) -> None:
    import threading

    runner = object.__new__(OtdRunner)
    runner._stop = threading.Event()
    runner.metrics_dir = tmp_path

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the JVM is gone")

    runner._job = types.SimpleNamespace(ready=types.SimpleNamespace(is_set=lambda: True), run=broken)
    traffic, engine = runner.traffic("t", 10.0, 10.0)
    assert engine == "python" and traffic["total_tuples"] == 0


def test_the_executors_a_latency_move_joined_are_held_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    at = time.time() - 10
    joined = MigrationRecord("b:0", "n2:1", "n1:1", MoveMode.THREAD, "latency", at, 2, at + 0.5, 0.01, False, "m-1")
    runner, _, seen = _runner(monkeypatch, [joined])
    runner.round("t", CONF)
    assert not {"a:0", "a:1", "b:0"} & set(seen["movable"]), "b:0 moved next to a:0 and a:1: neither moves away"


def _saturated_round(monkeypatch: pytest.MonkeyPatch, free_node: str, cap: float = 0.0,
                     other_workers: int = 0, one_machine: bool = False) -> tuple[dict[str, Any], list[Any]]:
    """A Case 2 round with ``otd.autoscale`` whose two workers (both on n1, 127.0.0.1) fall behind
    with their threads waiting for a CPU; the free slots: n1's first (the first in Nimbus's order),
    and one on ``free_node`` if it is not n1 (n2: 127.0.0.2). With ``cap``, the supervisors cap
    workers at that many cores on machines of 2 cores; ``other_workers``: another topology's
    workers on n1; ``one_machine``: n1 and n2 register one machine (network namespaces or
    containers of one machine: an address each). Returns the record and the requests."""
    from nstorm.records import Heartbeat
    from scheduler_otd.otd import Decision

    runner, _, _ = _runner(monkeypatch, [])
    requests: list[Any] = []
    runner.zk = types.SimpleNamespace(  # type: ignore[assignment]
        create=lambda path, data=b"", sequence=False, makepath=False: requests.append(json.loads(data)) or path,
        exists=lambda path: True, set=lambda path, data: None)
    plan, _ = runner.cluster.plan("t")
    plan = plan.replace(workers={"n1:3": Slot("n1", "127.0.0.1", 3, 4), "n1:5": Slot("n1", "127.0.0.1", 5, 6)},
                        executors={"a:0": "n1:3", "a:1": "n1:5", "b:0": "n1:5", "__acker:0": "n1:3"})
    others = {f"n1:{p}": Slot("n1", "127.0.0.1", p, p + 1) for p in range(11, 11 + 2 * other_workers, 2)}
    other = Plan.first("u", [f"c:{i}" for i in range(other_workers)],
                       {f"c:{i}": w for i, w in enumerate(others)}, list(others.values()))
    slots = {"n1": [[1, 2], [3, 4], [5, 6], *([s.port, s.port + 1] for s in others.values())],
             **({free_node: [[7, 8]]} if free_node != "n1" else {})}
    limit = cap if cap > 0 else None
    beats = {w: Heartbeat(w, 1, time.time(), 1, cpu=0.4, cpu_limit=limit,
                          executors={"a:0": {"cpu": 0.6}, "a:1": {"cpu": 0.5}} if w == "n1:3" else {})
             for w in plan.workers}
    registration = {"worker_cpu_limit": cap, "cores": 2} if cap > 0 else {}
    runner.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        plan=lambda name: (plan if name == "t" else other, None), busy_executors=lambda name: set(),
        children=lambda path: [], heartbeats=lambda name: beats, migrations=lambda name: [],
        names=lambda: ["t", "u"] if other_workers else ["t"],
        topology=lambda name: {"definition": {"components": {"a": {"kind": "bolt"}, "b": {"kind": "bolt"}}}},
        supervisors=lambda: {node: {"host": "127.0.0.1" if node == "n1" else "127.0.0.2", "slots": s, **registration,
                                    "machine": "boot-1" if one_machine or node == "n1" else "boot-2"}
                             for node, s in slots.items()})
    runner.traffic = lambda name, window, load: (  # type: ignore[method-assign]
        {"workers": [{"id": w, "cpu": 0.95, "backlog": 40.0, "trend": 3.0, "wait": 0.8} for w in plan.workers],
         "edges": [], "inter_node_ratio": 0.0, "total_tuples": 0}, "python")
    runner._scaled_at, runner._low_since = {}, {}
    monkeypatch.setattr(runner_module, "otd_round", lambda *args: Decision(
        2, warning="resources are short", classes={"n1:3": "high", "n1:5": "high"}))
    record = runner.round("t", {**CONF, "otd.autoscale": True})
    assert record is not None
    return record, requests


def test_autoscale_adds_no_executor_where_the_machine_has_no_cpu_to_give(monkeypatch: pytest.MonkeyPatch) -> None:
    record, requests = _saturated_round(monkeypatch, "n1")
    assert "autoscale" not in record and requests == []
    assert "no CPU to give" in record["warning"] and "127.0.0.1" in record["warning"]
    record, requests = _saturated_round(monkeypatch, "n2")  # a free slot on another machine too
    assert record["autoscale"]["component"] == "a" and record["autoscale"]["workers"] == 3 and len(requests) == 1
    assert record["warning"] is None
    assert requests[0]["hosts"] == ["127.0.0.2"], "the new worker goes to the machine with CPU, not n1's free slot"


def test_a_capped_scale_out_counts_other_topologies_caps_on_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Capped workers (0.4 cores on 2-core machines) fall behind at their caps: a new capped worker
    needs a machine with room for one cap more. Another topology's capped workers take that
    machine's cores as much as this topology's own: before, only its own were counted, and two
    topologies' caps together could exceed a machine's cores."""
    record, requests = _saturated_round(monkeypatch, "n1", cap=0.4)  # 2 x 0.4 of n1's 2 cores
    assert record["autoscale"]["component"] == "a" and requests[0]["hosts"] == ["127.0.0.1"]
    record, requests = _saturated_round(monkeypatch, "n1", cap=0.4, other_workers=2)  # 4 x 0.4 + 0.4 = 2 cores
    assert record["autoscale"]["component"] == "a" and requests[0]["hosts"] == ["127.0.0.1"]
    record, requests = _saturated_round(monkeypatch, "n1", cap=0.4, other_workers=3)  # 5 x 0.4: no room
    assert "autoscale" not in record and requests == []
    assert "caps" in record["warning"] and "127.0.0.1" in record["warning"]
    record, requests = _saturated_round(monkeypatch, "n2", cap=0.4, other_workers=3)  # n2 has room
    assert record["autoscale"]["component"] == "a" and requests[0]["hosts"] == ["127.0.0.2"]


def test_supervisors_of_one_machine_at_other_addresses_are_one_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """n2 at its own address (a network namespace, a container) on n1's machine: its free slot
    has no CPU to give starved n1 workers, nor room for one cap more when n1's caps take the
    cores. Before, a machine was a host address, and the new worker went to n2 to wait there."""
    record, requests = _saturated_round(monkeypatch, "n2", one_machine=True)
    assert "autoscale" not in record and requests == []
    assert "no CPU to give" in record["warning"] and "127.0.0.2" in record["warning"]
    record, requests = _saturated_round(monkeypatch, "n2", cap=0.4, other_workers=3, one_machine=True)
    assert "autoscale" not in record and requests == []
    assert "caps" in record["warning"] and "127.0.0.2" in record["warning"]


def test_a_machine_is_its_supervisors_registered_machine_else_its_host() -> None:
    """Caps are a supervisor's (its host's), cores its machine's: other topologies' workers on any
    host of the machine take their own host's cap off the machine's cores; an uncapped
    supervisor's workers take none, and a new worker there needs no room for a cap."""
    supervisors = {"n1": {"host": "10.77.0.11", "machine": "b1", "cores": 2, "worker_cpu_limit": 0.5},
                   "n2": {"host": "10.77.0.12", "machine": "b1", "cores": 2, "worker_cpu_limit": 0.25},
                   "n4": {"host": "10.77.0.14", "machine": "b1", "cores": 2, "worker_cpu_limit": 0},
                   "n3": {"host": "10.0.0.9"}, "n5": {"host": "10.0.0.9", "machine": "b9"}}
    assert runner_module.machine_of(supervisors) == {"10.77.0.11": "b1", "10.77.0.12": "b1", "10.77.0.14": "b1",
                                                     "10.0.0.9": "b9"}  # a registered machine decides
    assert runner_module.machine_of({"n3": {"host": "10.0.0.9"}}) == {"10.0.0.9": "10.0.0.9"}
    others = [Slot("n1", "10.77.0.11", 1, 2), Slot("n2", "10.77.0.12", 1, 2), Slot("n4", "10.77.0.14", 1, 2)]
    assert runner_module._machines(supervisors, others) == {
        "10.77.0.11": (0.5, 1.25), "10.77.0.12": (0.25, 1.25), "10.77.0.14": (0.0, 1.25)}
