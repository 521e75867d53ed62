"""A supervisor stops the workers it no longer wants without waiting for them in its loop.

One worker slow to stop (SIGTERM ignored or a deadlocked main thread: SIGKILL after the
timeout) used to hold the supervisor's loop for the whole timeout, and with it every other
topology's plans and nudges on that node. The stop now runs in a thread of its own; the port
stays taken until the process is gone, and the thread wakes the loop when it is.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.daemon import Supervisor
from supervisor.workers import WorkerHandle, WorkerRegistry

# A process that ignores SIGTERM and says so once it does: only SIGKILL ends it.
_STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('ready', flush=True); time.sleep(120)")


def _until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(1, 2)], "127.0.0.1:1")
    sup.registry = WorkerRegistry(tmp_path / "workers", "n9", "/nstorm")
    sup.stop_timeout = 2.0  # (5 s in a supervisor): the stubborn workers are SIGKILLed sooner
    started: list[subprocess.Popen[bytes]] = []
    sup._test_started = started  # type: ignore[attr-defined]
    try:
        yield sup
    finally:
        for popen in started:
            popen.kill()
            popen.wait()
        for _proc, thread in sup.stopping.values():
            thread.join()


def _stubborn(sup: Supervisor, topology: str, port: int) -> WorkerHandle:
    popen = subprocess.Popen([sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE)
    sup._test_started.append(popen)  # type: ignore[attr-defined]
    assert popen.stdout is not None and popen.stdout.readline() == b"ready\n"  # SIGTERM is ignored from here
    handle = sup.registry.record(topology, port, popen)  # type: ignore[arg-type]
    sup.workers[(topology, port)] = handle
    return handle


def test_a_worker_slow_to_stop_does_not_hold_the_loop(supervisor: Supervisor) -> None:
    sup = supervisor
    old = _stubborn(sup, "gone", 7001)
    starts: list[tuple[str, int]] = []
    sup._start_worker = lambda topology, port, restarts=0: starts.append((topology, port))  # type: ignore[assignment, method-assign, return-value]

    sup._reconcile({("other", 7002)})  # "gone" was killed; "other" has a new worker here

    assert old.poll() is None  # SIGTERM ignored: the loop went on before the SIGKILL
    assert starts == [("other", 7002)]  # ... and started the other topology's worker meanwhile
    assert ("gone", 7001) not in sup.workers and 7001 in sup.stopping
    assert (sup.registry.dir / "gone@7001.json").exists()  # still ours until it is gone

    sup._wake.clear()
    _until(lambda: old.poll() is not None)  # SIGKILLed after the timeout
    _until(sup._wake.is_set)  # the stopping thread woke the loop
    sup._reconcile({("other", 7002)})
    assert sup.stopping == {}
    assert not (sup.registry.dir / "gone@7001.json").exists()


def test_a_port_is_not_used_again_before_its_worker_is_gone(supervisor: Supervisor) -> None:
    sup = supervisor
    old = _stubborn(sup, "before", 7003)
    starts: list[tuple[str, int]] = []
    sup._start_worker = lambda topology, port, restarts=0: starts.append((topology, port))  # type: ignore[assignment, method-assign, return-value]

    sup._reconcile({("after", 7003)})  # another topology's worker gets the same slot
    assert starts == []  # the old worker still holds the port
    sup._reconcile({("after", 7003)})
    assert starts == []

    _until(lambda: old.poll() is not None)
    _until(lambda: not sup.stopping[7003][1].is_alive())
    sup._reconcile({("after", 7003)})
    assert starts == [("after", 7003)]
