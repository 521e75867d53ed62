"""A core per worker on a real cluster (worker.cpupin): two workers of a topology hold two cores,
status shows them, a worker killed and restarted claims a core again, and without
``worker.cpu.pin=true`` (the default) workers are not pinned. The workers claim their cores in a lock dir of this module's own
(``NSTORM_CPU_LOCK_DIR``, passed on by the daemons), so other clusters on the machine do not count."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import wait_until

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"
CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")


def _masks(pid: int) -> set[tuple[int, ...]]:
    """The affinity of every thread of ``pid``."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.add(tuple(sorted(os.sched_getaffinity(int(tid)))))
        except OSError:
            continue  # a thread that ended meanwhile
    return out


def _workers(client: Any, name: str, count: int) -> list[dict[str, Any]]:
    """``count`` workers of ``name`` with a heartbeat (pid) from a live process."""
    def ready() -> list[dict[str, Any]] | None:
        ws = [w for w in client.status(name)["workers"] if w.get("pid") and w.get("alive")]
        return ws if len(ws) == count and all(psutil.pid_exists(w["pid"]) for w in ws) else None
    return wait_until(ready, 60, what=f"{count} workers of {name} heartbeating")


def test_workers_hold_a_core_each_and_claim_one_again_after_a_restart(client: Any) -> None:
    client.submit(WORDCOUNT, name="pinned", conf={"wordcount.rate": 500, "worker.cpu.pin": True})
    try:
        client.wait_running("pinned", 60)
        workers = _workers(client, "pinned", 2)
        cores = sorted(w["core"] for w in workers)
        assert cores == CORES[:2], workers
        for w in workers:
            assert _masks(w["pid"]) == {(w["core"],)}, f"a thread of {w['id']} runs off its core"

        victim = workers[0]
        os.kill(victim["pid"], signal.SIGKILL)  # its lock goes with it; the supervisor starts it again

        def restarted() -> dict[str, Any] | None:
            w = next((w for w in client.status("pinned")["workers"] if w["id"] == victim["id"]), None)
            ok = w and w.get("pid") not in (None, victim["pid"]) and w.get("alive") and w.get("core") is not None
            return w if ok else None

        again = wait_until(restarted, 60, what="the killed worker restarted and pinned")
        assert again["core"] == victim["core"]
        assert _masks(again["pid"]) == {(again["core"],)}
    finally:
        client.kill("pinned")
        client.wait_removed("pinned", 30)


def test_by_default_workers_run_on_every_core(client: Any) -> None:
    client.submit(WORDCOUNT, name="floating", conf={"wordcount.rate": 500})
    try:
        client.wait_running("floating", 60)
        for w in _workers(client, "floating", 2):
            assert w["core"] is None
            assert _masks(w["pid"]) == {tuple(CORES)}
    finally:
        client.kill("floating")
        client.wait_removed("floating", 30)
