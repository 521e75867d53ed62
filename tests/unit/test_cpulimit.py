"""Worker CPU caps (``supervisor.worker.cpu.limit``): cgroup files in a fake tree, OTD's view of capacity.

The real cap on a cluster is ``tests/test_cpulimit_cluster.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nstorm.records import Heartbeat, RecordError
from scheduler_otd.otd import HIGH, LOW, WorkerLoad, classify
from scheduler_otd.runner import _capacity
from supervisor.cpulimit import CpuLimiter


def test_v1_slot_gets_quota_and_pid(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    limiter = CpuLimiter(0.25, "n1", "/home/a", root=tmp_path)
    assert limiter.enabled and limiter.version == 1
    assert limiter.apply(4242, 6701)
    slot = limiter.slot_path(6701)
    assert slot is not None and slot.parent.parent == tmp_path / "cpu"
    assert (slot / "cpu.cfs_quota_us").read_text() == "25000"
    assert (slot / "cpu.cfs_period_us").read_text() == "100000"
    assert (slot / "cgroup.procs").read_text() == "4242"


def test_v2_slot_gets_cpu_max(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory")
    limiter = CpuLimiter(1.5, "n2", "/home/a", root=tmp_path)
    assert limiter.enabled and limiter.version == 2
    assert (limiter.base / "cgroup.subtree_control").read_text() == "+cpu"  # type: ignore[operator]
    assert limiter.apply(7, 6702)
    assert (limiter.slot_path(6702) / "cpu.max").read_text() == "150000 100000"  # type: ignore[operator]


def test_no_controller_or_no_limit_means_uncapped(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("io memory")
    limiter = CpuLimiter(0.5, "n1", "/home/a", root=tmp_path)
    assert not limiter.enabled and "no cgroup CPU controller" in limiter.reason
    assert not limiter.apply(1, 6701)
    assert not CpuLimiter(None, "n1", "/home/a", root=tmp_path).enabled
    assert not CpuLimiter(0, "n1", "/home/a", root=tmp_path).enabled


def test_two_homes_never_share_a_cgroup(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    a = CpuLimiter(0.5, "n1", "/home/a", root=tmp_path)
    b = CpuLimiter(0.5, "n1", "/home/b", root=tmp_path)
    assert a.slot_path(6701) != b.slot_path(6701)


def test_otd_measures_cpu_against_the_cap() -> None:
    def beat(limit: Any) -> Heartbeat:
        return Heartbeat.from_json({"worker_id": "n1:1", "cpu_limit": limit})

    assert _capacity(beat(0.25)) == 0.25
    assert _capacity(beat(None)) == 1.0
    assert _capacity(beat(4)) == 1.0  # one Python process never uses more than a core
    with pytest.raises(RecordError):  # a heartbeat with a malformed cap is not read at all
        beat("bad")
    conf = {"otd.cpu.high": 0.8, "otd.cpu.low": 0.5}
    # 0.22 cores is a saturated worker capped at 0.25, and an idle-ish one on a whole core.
    capped = WorkerLoad(cpu=0.22 / 0.25, queue=0.0, capacity=0.25)
    whole = WorkerLoad(cpu=0.22, queue=0.0)
    assert classify({"a": capped, "b": whole}, conf) == {"a": HIGH, "b": LOW}
