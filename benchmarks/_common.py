"""Shared helpers for benchmarks: a cluster in a temporary home, sampling counters, output."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def machine() -> dict[str, Any]:
    import psutil

    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """SIGTERM raises ``SystemExit(143)`` meanwhile, so the ``finally`` blocks that stop a
    benchmark's clusters run (by default SIGTERM ends Python at once and leaves them running).
    Only in the main thread, where Python handles signals; the old handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM does not cut the cleanup short
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


@contextmanager
def temporary_home() -> Iterator[Path]:
    """Run with ``NSTORM_HOME`` in a fresh directory (daemon logs end up there), with SIGTERM
    turned into an exit that stops what the benchmark started (:func:`sigterm_exits`).

    Removed afterwards, unless the run failed or ``NSTORM_BENCH_KEEP_HOME=1``: then its logs
    stay, and stderr says where (a home with nothing in it is removed all the same).
    """
    old = os.environ.get("NSTORM_HOME")
    home = Path(tempfile.mkdtemp(prefix="nstorm-bench-"))
    os.environ["NSTORM_HOME"] = str(home)
    keep = os.environ.get("NSTORM_BENCH_KEEP_HOME") == "1"
    try:
        with sigterm_exits():
            yield home
    except BaseException:
        keep = True
        raise
    finally:
        if old is None:
            os.environ.pop("NSTORM_HOME", None)
        else:
            os.environ["NSTORM_HOME"] = old
        if keep and any(home.iterdir()):
            print(f"nstorm home (daemon logs) kept in {home}", file=sys.stderr)
        else:  # an empty home keeps no logs: not left in the temporary folder
            shutil.rmtree(home, ignore_errors=True)


def beat_rate(before: Any, after: Any, component: str, key: str) -> float:
    """Per second, a component's counter ``key`` between two reads of the heartbeats
    (``client.heartbeats(name)``), each worker's difference over its own heartbeats' times.

    A heartbeat is up to ``worker.heartbeat.interval.secs`` old when it is read, so a counter read
    twice through ``status`` and divided by the reader's clock is off by up to one interval over
    the window (7% of a 15 s window); the heartbeats' own times are not. A worker that restarted
    in between (another pid) is left out."""
    rate = 0.0
    for wid, b1 in after.items():
        b0 = before.get(wid)
        if b0 is None or b0.pid != b1.pid or b1.time <= b0.time:
            continue
        n0 = sum(int(c.get(key) or 0) for e, c in b0.executors.items() if e.rpartition(":")[0] == component)
        n1 = sum(int(c.get(key) or 0) for e, c in b1.executors.items() if e.rpartition(":")[0] == component)
        rate += (n1 - n0) / (b1.time - b0.time)
    return rate


def sample_rate(client: Any, name: str, component: str, key: str, warmup: float, seconds: float) -> float:
    """Steady-state rate of a component counter (per second), after ``warmup`` seconds (:func:`beat_rate`)."""
    time.sleep(warmup)
    first = client.heartbeats(name)
    time.sleep(seconds)
    return beat_rate(first, client.heartbeats(name), component, key)


class FaultInjector:
    """What the chaos benchmark's fault injectors share: the client, a seeded rng, a console,
    and the faults injected so far (``{"kind", "at", ...}``), for the analysis."""

    def __init__(self, client: Any, rng: Any, console: Any, topology: str) -> None:
        self.client = client
        self.rng = rng
        self.console = console
        self.topology = topology
        self.faults: list[dict[str, Any]] = []

    def _workers(self) -> list[dict[str, Any]]:
        """The topology's workers that report a pid (``status --json``'s ``workers``)."""
        return [w for w in self.client.status(self.topology)["workers"] if w.get("pid")]
