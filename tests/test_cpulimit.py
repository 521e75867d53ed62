"""Worker CPU caps (``supervisor.worker.cpu.limit``): cgroup files, OTD's view of capacity, a real cap.

The unit tests write into a fake cgroup tree; the integration test needs root and a cgroup CPU
controller, starts a real cluster whose supervisors cap their workers, and checks the kernel
holds a word count's worker to its quota.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from scheduler_otd.otd import HIGH, LOW, WorkerLoad, classify
from scheduler_otd.runner import _capacity
from supervisor.cpulimit import CGROUP_ROOT, CpuLimiter

from conftest import wait_until

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


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
    assert _capacity({"cpu_limit": 0.25}) == 0.25
    assert _capacity({"cpu_limit": None}) == 1.0
    assert _capacity({"cpu_limit": 4}) == 1.0  # one Python process never uses more than a core
    assert _capacity({"cpu_limit": "bad"}) == 1.0
    conf = {"otd.cpu.high": 0.8, "otd.cpu.low": 0.5}
    # 0.22 cores is a saturated worker capped at 0.25, and an idle-ish one on a whole core.
    capped = WorkerLoad(cpu=0.22 / 0.25, queue=0.0, capacity=0.25)
    whole = WorkerLoad(cpu=0.22, queue=0.0)
    assert classify({"a": capped, "b": whole}, conf) == {"a": HIGH, "b": LOW}


def _cgroup_cpu_available() -> bool:
    import os

    if os.geteuid() != 0:
        return False
    probe = CpuLimiter(0.5, "probe", f"probe-{uuid.uuid4().hex}")
    ok = probe.enabled
    probe.close()
    return ok


@pytest.fixture(scope="module")
def capped_cluster(zookeeper: str) -> Iterator[Any]:
    from nstorm.localcluster import LocalCluster

    c = LocalCluster(supervisors=1, slots=1, zk_address=zookeeper, root=f"/cpu-{uuid.uuid4().hex[:8]}",
                     conf={"supervisor.worker.cpu.limit": 0.3})
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.skipif(not _cgroup_cpu_available(), reason="needs root and a cgroup CPU controller")
def test_supervisor_caps_its_workers(capped_cluster: Any) -> None:
    from nstorm.client import ClusterClient

    with ClusterClient(capped_cluster.address, capped_cluster.root) as client:
        # As fast as it goes: uncapped, this worker would use a whole core.
        client.submit(WORDCOUNT, conf={"wordcount.workers": 1, "topology.workers": 1})
        try:
            client.wait_running("wordcount", 60)
            worker = wait_until(lambda: next((w for w in client.status("wordcount")["workers"]
                                              if w.get("pid") and w.get("cpu_limit")), None), 30, what="heartbeat")
            assert worker["cpu_limit"] == 0.3
            groups = [p for p in CGROUP_ROOT.rglob("cgroup.procs") if str(worker["pid"]) in p.read_text().split()
                      and p.parent.name.startswith(worker["node"] + "-")]
            assert groups, "the worker is in no slot cgroup"
            slot = groups[0].parent
            quota = slot / "cpu.cfs_quota_us"
            assert (quota.read_text().strip() if quota.exists() else (slot / "cpu.max").read_text().split()[0]) == "30000"
            proc = psutil.Process(worker["pid"])
            before, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
            wait_until(lambda: time.monotonic() - t0 > 3, 10)
            used = (sum(proc.cpu_times()[:2]) - before) / (time.monotonic() - t0)
            assert used < 0.5, f"a worker capped at 0.3 cores used {used:.2f}"
        finally:
            client.kill("wordcount")
            client.wait_removed("wordcount", 30)
        wait_until(lambda: not slot.exists(), 30, what="slot cgroup removed after its worker stopped")
