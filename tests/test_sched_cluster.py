"""Workers' threads under SCHED_BATCH on a real cluster (worker.sched): every thread of every
worker by default, the zmq I/O thread too; none with ``worker.sched.batch=false``; the daemons never."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import wait_until

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")


def _policies(pid: int) -> set[int]:
    """The scheduling policy of every thread of ``pid``."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.add(os.sched_getscheduler(int(tid)))
        except OSError:
            continue  # a thread that ended meanwhile
    return out


def _worker_pids(client: Any, name: str) -> list[int]:
    def ready() -> list[int] | None:
        ws = [w for w in client.status(name)["workers"] if w.get("pid") and w.get("alive")]
        return [w["pid"] for w in ws] if len(ws) == 2 and all(psutil.pid_exists(w["pid"]) for w in ws) else None
    return wait_until(ready, 60, what=f"2 workers of {name} heartbeating")


def test_workers_run_under_sched_batch_unless_turned_off(cluster: Any, client: Any) -> None:
    for name, conf, policy in (("batched", {}, os.SCHED_BATCH),
                               ("other", {"worker.sched.batch": False}, os.SCHED_OTHER)):
        client.submit(WORDCOUNT, name=name, conf={"wordcount.rate": 500, **conf})
        try:
            client.wait_running(name, 60)
            for pid in _worker_pids(client, name):
                assert len(os.listdir(f"/proc/{pid}/task")) > 5  # its executors, receivers and zmq's I/O thread
                assert _policies(pid) == {policy}, f"worker {pid} of {name}"
            # ... and each worker says so in status (a kernel that refused the policy: false)
            assert [w["sched_batch"] for w in client.status(name)["workers"]] == [policy == os.SCHED_BATCH] * 2
            # ... and whether its interpreter has a GIL (the latency controller unchains only without one)
            gil = bool(getattr(sys, "_is_gil_enabled", lambda: True)())
            assert [w["gil"] for w in client.status(name)["workers"]] == [gil] * 2
            assert [w["curve"] for w in client.status(name)["workers"]] == [False] * 2  # plain zmq (the default)
        finally:
            client.kill(name)
            client.wait_removed(name, 30)
    for proc in cluster.supervisors.values():
        assert _policies(proc.pid) == {os.SCHED_OTHER}  # the daemons keep the default policy
