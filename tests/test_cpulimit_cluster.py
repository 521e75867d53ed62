"""Worker CPU caps on a real cluster: needs root and a cgroup CPU controller; the supervisors cap
their workers, and the kernel holds a word count's worker to its quota."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from supervisor.cpulimit import CGROUP_ROOT, CpuLimiter

from conftest import wait_until

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


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
