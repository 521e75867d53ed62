"""A starting worker's spouts wait for every other worker of the topology to say hello.

Unit tests of :class:`worker.backpressure.BackpressureMonitor` with a fake worker (no
threads, no sockets): the gate, its time limit, and the hello a worker answers to a new
incarnation of a peer (a restarted worker must not wait for the time limit).
"""

from __future__ import annotations

from typing import Any

import pytest

from worker import backpressure
from worker.backpressure import BackpressureMonitor

from fakes import FakeHost, plan_of


def _monitor(peers: list[str]) -> tuple[BackpressureMonitor, list[tuple[str, Any]]]:
    """A monitor for worker "me" in a topology of "me" and ``peers``; what it sends is recorded
    as ``(worker, entries)``."""
    places = {"s:0": "me", **{f"s:{i + 1}": p for i, p in enumerate(peers)}}
    host = FakeHost(plan_of(places), worker_id="me")
    sent = _Sent(host.sockets)
    return BackpressureMonitor(host), sent  # type: ignore[arg-type]


class _Sent(list):
    """The announcements sent so far, read from the fake sockets at every look."""

    def __init__(self, sockets: Any) -> None:
        super().__init__()
        self.sockets = sockets

    def _fill(self) -> None:
        self[:] = [(wid, message[3]) for wid, message in self.sockets.control_messages()]

    def __iter__(self) -> Any:
        self._fill()
        return super().__iter__()

    def __len__(self) -> int:
        self._fill()
        return super().__len__()

    def __bool__(self) -> bool:
        return len(self) > 0


def test_spouts_wait_for_every_peer_then_go() -> None:
    bp, sent = _monitor(["a", "b"])
    assert bp.throttled  # before the first plan is seen
    bp._open_gate()
    bp._update()
    assert bp.throttled
    assert sorted(w for w, _ in sent) == ["a", "b"]  # hello to everyone
    assert all(e[0] == "me" and e[1] is False and e[2] == bp.incarnation for _, e in sent)
    bp.on_announcement("a", False, 11)
    assert bp.throttled
    bp.on_announcement("b", False, 12)
    assert not bp.throttled


def test_a_peer_heard_before_the_first_plan_counts() -> None:
    bp, _ = _monitor(["a"])
    bp.on_announcement("a", False, 11)
    bp._open_gate()
    bp._update()
    assert not bp.throttled


def test_a_single_worker_topology_never_waits() -> None:
    bp, sent = _monitor([])
    bp._open_gate()
    bp._update()
    assert not bp.throttled and not sent


def test_the_wait_has_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    bp, _ = _monitor(["a"])
    bp._open_gate()
    bp._update()
    assert bp.throttled
    now = backpressure.time.monotonic()
    monkeypatch.setattr(backpressure.time, "monotonic", lambda: now + backpressure._GATE_SECS + 1)
    bp._update()
    assert not bp.throttled  # a worker that never starts does not stop the topology


def test_a_new_incarnation_gets_a_hello_back_and_congestion_still_throttles() -> None:
    bp, sent = _monitor(["a"])
    bp._open_gate()
    bp.on_announcement("a", False, 11)
    assert bp.replies == {"a"}  # answered by the monitor thread (it owns the sockets)
    bp.replies.clear()
    bp.on_announcement("a", False, 11)
    assert not bp.replies  # the same incarnation again: no answer
    bp.on_announcement("a", False, 99)  # "a" restarted: it waits for our hello
    assert bp.replies == {"a"}
    bp.on_announcement("a", True, 99)
    assert bp.throttled  # congestion
    bp.on_announcement("a", False, 99)
    assert not bp.throttled
    bp.on_announcement("a", True)  # an announcement without an incarnation still counts
    assert bp.throttled
