"""A supervisor that writes a new plan nudges its running workers (SIGUSR1): they read it at once.

N-Storm+ reacts to a plan change at once: with ``supervisor.sync.watch`` (the default) the
supervisor signals every running worker of the topology older than a second after it has
written the plan; without it (N-Storm), workers keep to their poll (TW). A worker ignores the
signal until its handler is set, and the handler only wakes its main loop.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from supervisor.daemon import Supervisor
from supervisor.workers import WorkerHandle


class _Process:
    def __init__(self) -> None:
        self.signals: list[int] = []
        self.pid = 4242

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


def _supervisor(watch: bool) -> Supervisor:
    return Supervisor("n9", "127.0.0.1", [(1, 2)], "127.0.0.1:1", conf={"supervisor.sync.watch": watch})


def _handle(topology: str, age: float) -> Any:
    handle = WorkerHandle(topology, 1, _Process())  # type: ignore[arg-type]
    handle.started_at = time.monotonic() - age
    handle._code = None  # running
    handle.poll = lambda: None  # type: ignore[method-assign]
    return handle


def test_running_workers_of_the_topology_are_nudged_after_a_new_plan() -> None:
    sup = _supervisor(watch=True)
    old, young, other = _handle("t", 5.0), _handle("t", 0.1), _handle("u", 5.0)
    sup.workers = {("t", 1): old, ("t", 2): young, ("u", 3): other}
    sup._nudge("t")
    assert old.process.signals == [signal.SIGUSR1]
    assert young.process.signals == []  # it reads the latest plan as it starts
    assert other.process.signals == []


def test_without_the_watch_workers_keep_to_their_poll() -> None:
    sup = _supervisor(watch=False)
    old = _handle("t", 5.0)
    sup.workers = {("t", 1): old}
    sup._nudge("t")
    assert old.process.signals == []


def test_a_worker_wakes_its_main_loop_when_nudged() -> None:
    from worker.process import Worker

    worker = Worker("n1", 1, "t", store_path=None, zk_address=None, zk_root="/t")  # type: ignore[arg-type]
    assert not worker._wake.is_set()
    worker.nudge()
    assert worker._wake.is_set()
