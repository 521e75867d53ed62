"""Supervisors that share a home (a local cluster on one host) get slots with no port in common.

A free port is only probed, not held, until a worker binds it: the kernel may hand the same port
to the next supervisor that asks, and two nodes' workers on one port then send each other's
frames to themselves (a CI run where n1 and n2 both had 38157: rollbacks until deactivated).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import nstorm.net
from supervisor.daemon import _ports, pick_slots


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_port_another_node_of_the_home_has_is_never_picked(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handed = itertools.chain(range(40000, 40008), range(40000, 40016))  # the kernel hands 40000.. out again
    monkeypatch.setattr(nstorm.net, "free_port", lambda host: next(handed))
    n1 = pick_slots(4, 0, "127.0.0.1", "n1")
    n2 = pick_slots(4, 0, "127.0.0.1", "n2")
    assert _ports(n1) == set(range(40000, 40008))
    assert len(_ports(n2)) == 8 and not _ports(n1) & _ports(n2)
    assert pick_slots(4, 0, "127.0.0.1", "n1") == n1  # a restarted supervisor gets its slots back


def test_remembered_slots_that_clash_with_another_node_s_are_picked_again(home: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    handed = itertools.chain(range(40000, 40008), range(40000, 40008), range(41000, 41008))
    monkeypatch.setattr(nstorm.net, "free_port", lambda host: next(handed))
    n1 = pick_slots(4, 0, "127.0.0.1", "n1")
    clash = home / "supervisor" / "n2"
    clash.mkdir(parents=True)
    (clash / "slots.json").write_text('{"host": "127.0.0.1", "slots": [[40000, 40001], [40100, 40101], '
                                      '[40102, 40103], [40104, 40105]]}')
    n2 = pick_slots(4, 0, "127.0.0.1", "n2")
    assert not _ports(n1) & _ports(n2) and _ports(n2) == set(range(41000, 41008))
