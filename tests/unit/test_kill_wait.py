"""A kill's wait is timed by Nimbus's own clock from when it sees the kill: ``kill_at`` was the
killer's clock, and a client on a machine whose clock is minutes off removed the topology minutes
early (or late)."""

from __future__ import annotations

import time
import types
from typing import Any

from nimbus.daemon import Nimbus
from nstorm.clusterstate import ClusterState


def _status(data: Any) -> ClusterState:
    state = object.__new__(ClusterState)
    state.read = lambda path, watch=False: (data, None)  # type: ignore[method-assign]
    state.paths = types.SimpleNamespace(status=lambda name: f"/status/{name}")  # type: ignore[assignment]
    return state


def test_the_wait_is_the_killers_difference_not_its_clock() -> None:
    skewed = time.time() - 3600  # the killer's clock is an hour behind
    assert _status({"status": "KILLED", "kill_at": skewed + 30, "updated_at": skewed}).kill_wait("t") == 30
    assert _status({"status": "KILLED", "kill_at": 5}).kill_wait("t") == 0.0, "no updated_at: at once"
    assert _status({"status": "KILLED", "kill_at": 1.0, "updated_at": 2.0}).kill_wait("t") == 0.0
    assert _status(None).kill_wait("t") == 0.0


def test_nimbus_removes_a_killed_topology_after_the_wait_on_its_own_clock(monkeypatch: Any) -> None:
    skewed = time.time() - 3600
    nimbus = object.__new__(Nimbus)
    nimbus._kills = {}
    nimbus.cluster = _status({"status": "KILLED", "kill_at": skewed + 30, "updated_at": skewed})
    clock = [1000.0]
    monkeypatch.setattr("nimbus.daemon.time.monotonic", lambda: clock[0])
    assert not nimbus._kill_due("t", skewed + 30), "its kill_at is an hour ago on this clock: not due yet"
    clock[0] += 29.0
    assert not nimbus._kill_due("t", skewed + 30)
    clock[0] += 1.0
    assert nimbus._kill_due("t", skewed + 30)
    # A second kill (another kill_at) starts its own wait.
    nimbus.cluster = _status({"status": "KILLED", "kill_at": skewed + 100, "updated_at": skewed + 90})
    assert not nimbus._kill_due("t", skewed + 100)
    clock[0] += 10.0
    assert nimbus._kill_due("t", skewed + 100)
