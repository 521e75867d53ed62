"""The latency controller's bookkeeping (nimbus/latency.py) with a fake ZooKeeper: one step at a
time per topology, Nimbus's refusals, a new leader carrying the counts on, an empty window.

Which step a window asks for is :func:`nstorm.qospolicy.decide`'s (tests/unit/test_qos.py); the
windows here are given as they would be measured, so that only the bookkeeping around them runs.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Any

import pytest

import nimbus.latency as controller_module
from nimbus.latency import LatencyController
from nstorm.qospolicy import BACKOFF_RESET_WINDOWS, ConstraintState, PathWindow, decide
from nstorm.zkschema import ZkPaths

NAME = "t"
AB = {"path": ["a", "b"], "p99_ms": 5, "window_secs": 1}
BC = {"path": ["b", "c"], "p99_ms": 5, "window_secs": 1}


class FakeZk:
    """The few ZooKeeper calls the controller makes, over a dict of JSON nodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.seq = 0

    def create(self, path: str, data: bytes = b"", sequence: bool = False, makepath: bool = False) -> str:
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
        self.nodes[path] = data
        return path

    def exists(self, path: str) -> bool:
        return path in self.nodes

    def set(self, path: str, data: bytes) -> None:
        self.nodes[path] = data

    def delete(self, path: str) -> None:
        del self.nodes[path]

    def json(self, path: str) -> Any:
        return json.loads(self.nodes[path])


class FakeCluster:
    """``ClusterState`` as the controller reads it: one topology, its plan, no heartbeats."""

    def __init__(self, zk: FakeZk, constraints: list[dict[str, Any]], submission: str = "s1") -> None:
        self.zk = zk
        self.definition = {"components": {"a": {"inputs": []}, "b": {"inputs": [{"component": "a"}]},
                                          "c": {"inputs": [{"component": "b"}]}},
                           "latency_constraints": constraints}
        self.submission = submission

    def topology(self, name: str) -> dict[str, Any]:
        return {"definition": self.definition, "conf": {}, "submission": self.submission}

    def heartbeats(self, name: str) -> dict[str, Any]:
        return {}

    def plan(self, name: str) -> tuple[Any, Any]:
        return types.SimpleNamespace(tuning={}, chains={}), None

    def migrations(self, name: str) -> list[Any]:
        return []

    def read(self, path: str) -> tuple[Any, Any]:
        raw = self.zk.nodes.get(path)
        return (None, None) if raw is None else (json.loads(raw), object())


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, PathWindow]]:
    """Constraint name -> the window the controller measures for it next."""
    given: dict[str, PathWindow] = {}
    monkeypatch.setattr(controller_module, "path_window", lambda path, name, window: given[name])
    monkeypatch.setattr(controller_module, "_chain_options", lambda *args: ([], [], []))
    monkeypatch.setattr(controller_module, "_busy", lambda *args: True)
    yield given


def _controller(zk: FakeZk, cluster: FakeCluster) -> LatencyController:
    c = object.__new__(LatencyController)  # no thread, no real ZooKeeper
    c.zk, c.paths, c.cluster, c.conf = zk, ZkPaths("/n"), cluster, {}  # type: ignore[assignment]
    c.tracked, c.submissions, c.stepped_at = {}, {}, {}
    return c


def _broken(channel: str) -> PathWindow:
    """A window over the bound whose buffers dominate: a buffer step is asked for."""
    return PathWindow(20.0, 100, buffer_ms={channel: 3.0}, queue_ms={channel: 0.1}, exec_ms={})


def _record(zk: FakeZk) -> dict[str, dict[str, Any]]:
    return {">".join(e["path"]): e for e in zk.json(f"/n/latency/{NAME}")["constraints"]}


def _requests(zk: FakeZk) -> list[str]:
    return sorted(p for p in zk.nodes if p.startswith(f"/n/requests/{NAME}/"))


def test_a_window_during_which_another_constraint_stepped_is_counted_not_acted_on(windows: Any) -> None:
    zk = FakeZk()
    c = _controller(zk, FakeCluster(zk, [AB, BC]))
    c.tick(NAME, 0.0)  # primes both windows
    windows.update({"a>b": _broken("a>b"), "b>c": _broken("b>c")})
    c.tick(NAME, 1.0)
    record = _record(zk)
    assert [a["kind"] for a in record["a>b"]["actions"]] == ["buffer"]
    assert record["b>c"]["actions"] == [], "one step per topology at a time"
    assert record["b>c"]["windows"] == 1 and record["b>c"]["windows_met"] == 0, "its window still counts"
    assert len(_requests(zk)) == 1
    # b>c's next window began with a>b's step: it may act on it.
    c.tick(NAME, 2.0)
    assert [a["kind"] for a in _record(zk)["b>c"]["actions"]] == ["buffer"]


def _answered_step(windows: Any, result: dict[str, Any]) -> tuple[FakeZk, Any]:
    """A controller that took a buffer step on a>b, and Nimbus's ``result`` written into its request."""
    zk = FakeZk()
    c = _controller(zk, FakeCluster(zk, [AB]))
    c.tick(NAME, 0.0)
    windows["a>b"] = _broken("a>b")
    c.tick(NAME, 1.0)
    (path,) = _requests(zk)
    zk.set(path, json.dumps({**zk.json(path), "result": result}).encode())
    c.tick(NAME, 1.5)  # no window is due: the answer is read all the same
    return zk, c


def test_a_step_nimbus_refuses_is_marked_refused_and_its_answer_collected(windows: Any) -> None:
    zk, c = _answered_step(windows, {"ok": False, "error": "a rescale is under way", "at": 1})
    (action,) = _record(zk)["a>b"]["actions"]
    assert action["refused"] == "a rescale is under way"
    assert _requests(zk) == [], "the answer is collected"
    assert c.tracked[NAME]["a>b"].state.undo is None, "no window judges a step that was not taken"


def test_an_accepted_step_is_not_marked_and_its_answer_is_collected(windows: Any) -> None:
    zk, _c = _answered_step(windows, {"ok": True, "at": 1})
    assert "refused" not in _record(zk)["a>b"]["actions"][0] and _requests(zk) == []


def test_a_new_leader_goes_on_counting_from_the_record(windows: Any) -> None:
    zk = FakeZk()
    cluster = FakeCluster(zk, [AB])
    first = _controller(zk, cluster)
    first.tick(NAME, 0.0)
    windows["a>b"] = _broken("a>b")
    first.tick(NAME, 1.0)
    windows["a>b"] = PathWindow(2.0, 100, buffer_ms={"a>b": 1.0}, queue_ms={"a>b": 0.1}, exec_ms={})
    first.tick(NAME, 2.0)
    before = _record(zk)["a>b"]
    assert before["windows"] == 2 and before["windows_met"] == 1 and len(before["actions"]) == 1

    second = _controller(zk, cluster)  # the standby, leading now
    second.tick(NAME, 100.0)
    second.tick(NAME, 101.0)
    after = _record(zk)["a>b"]
    assert after["windows"] == 3 and after["windows_met"] == 2
    assert after["actions"] == before["actions"]

    other = FakeCluster(zk, [AB], submission="s2")  # submitted again: a fresh start
    third = _controller(zk, other)
    third.tick(NAME, 200.0)
    assert _record(zk)["a>b"]["windows"] == 0 and _record(zk)["a>b"]["actions"] == []


def test_a_window_without_samples_leaves_no_verdict(windows: Any) -> None:
    zk = FakeZk()
    c = _controller(zk, FakeCluster(zk, [AB]))
    c.tick(NAME, 0.0)
    windows["a>b"] = PathWindow(2.0, 100, buffer_ms={"a>b": 1.0}, queue_ms={}, exec_ms={})
    c.tick(NAME, 1.0)
    assert _record(zk)["a>b"]["met"] is True
    windows["a>b"] = PathWindow(None, 0)
    c.tick(NAME, 2.0)  # one empty window: a heartbeat that came just after it, most likely
    assert _record(zk)["a>b"]["met"] is True
    c.tick(NAME, 3.0)
    c.tick(NAME, 4.0)  # silent for 3 s and two windows: the path stalled
    entry = _record(zk)["a>b"]
    assert entry["measured_p99_ms"] is None and entry["met"] is None and entry["samples"] == 0
    assert entry["windows"] == 1 and entry["windows_met"] == 1


def test_a_p99_hovering_at_the_bound_backs_off_further() -> None:
    """Broken, met, broken...: the backoff grows, and starts again only after a run of met windows."""
    state = ConstraintState()
    broken = PathWindow(9.0, 100, buffer_ms={"a>b": 0.1}, queue_ms={"a>b": 5.0}, exec_ms={})
    met = PathWindow(4.0, 100, buffer_ms={"a>b": 0.1}, queue_ms={"a>b": 2.0}, exec_ms={})
    tuning: dict[str, dict[str, float]] = {}  # queues wait longest, buffers as configured: only a warning is left
    warned_at = []
    for i in range(40):
        win = broken if i % 2 == 0 else met
        step = decide(["a", "b"], 5.0, win, state, tuning, 5.0, moves=False)
        if step is not None:
            assert step.kind == "warn"
            warned_at.append(i)
    gaps = [b - a for a, b in zip(warned_at, warned_at[1:], strict=False)]
    # Windows between warnings: 2, 4, 6, then 10 (8 skipped); a single met window used to start the
    # backoff again (2, 4, 2, 4, ...).
    assert gaps[:3] == [2, 4, 6] and set(gaps[3:]) == {10}, gaps
    for _ in range(BACKOFF_RESET_WINDOWS):
        decide(["a", "b"], 5.0, met, state, tuning, 5.0, moves=False)
    assert state.backoff == 1


def test_a_long_window_that_short_steps_keep_count_only_gets_its_clean_window(windows: Any) -> None:
    """A 3-s constraint beside a 1-s one that steps every window: every 3-s window began before
    the other's last step and would be count-only for good; once one of them broke the bound,
    the short one holds its steps until the long one had a clean window."""
    zk = FakeZk()
    long_ab = {**AB, "window_secs": 3}
    c = _controller(zk, FakeCluster(zk, [long_ab, BC]))
    c.tick(NAME, 0.0)
    windows.update({"a>b": _broken("a>b"), "b>c": _broken("b>c")})
    for now in (1.0, 2.0):
        c.tick(NAME, now)
    assert _record(zk)["b>c"]["actions"], "the short constraint stepped"
    c.tick(NAME, 3.0)  # a>b's window began at 0, before those steps: counted only
    assert _record(zk)["a>b"]["actions"] == [] and c.tracked[NAME]["a>b"].starved
    steps = len(_record(zk)["b>c"]["actions"])
    for now in (3.0, 4.0, 5.0):
        c.tick(NAME, now)
    assert len(_record(zk)["b>c"]["actions"]) == steps, "the short one holds while the long one waits"
    c.tick(NAME, 6.0)
    assert [a["kind"] for a in _record(zk)["a>b"]["actions"]] == ["buffer"]
    assert not c.tracked[NAME]["a>b"].starved
    c.tick(NAME, 7.0)
    assert len(_record(zk)["b>c"]["actions"]) > steps, "then the short one goes on"


def test_a_refused_step_does_not_hold_the_other_windows(windows: Any) -> None:
    zk, c = _answered_step(windows, {"ok": False, "error": "a rescale is under way", "at": 1})
    assert c.stepped_at == {}, "no step was taken: no window is count-only for it"
