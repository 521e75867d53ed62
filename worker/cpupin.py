"""One core per worker: a worker's threads share the GIL, so they run best on one core.

A CPython process hands its GIL from thread to thread many thousand times a second (an
executor's wake-up, the transport's receive, the acker). When its threads float over every
core, each hand-off may wake a thread on another core, and the GIL's cache lines move with it;
on one core a hand-off is a plain switch. ``benchmarks.latency`` (``--only pinning``) measured
this: word count's peak rose by about 10%, and at half of it the workers needed about 8% less
CPU, with a lower p99.

It is off by default (``worker.cpu.pin = true`` turns it on): on this project's 2-core machine,
with ZooKeeper on the same cores, pinned workers that kept their cores busy (word count without
acking, as fast as it goes) made ZooKeeper answer after up to 5 s (floating: 15 ms at most),
while an ordinary process's sleeps and a file's fsync there were not held up. For nodes whose
cores run workers only, with ZooKeeper on other machines.

A worker claims a core that no other worker of the machine holds by an exclusive ``flock`` on
``<lock dir>/cpu-<n>.lock``: the lock lives as long as the process (the kernel drops it when the
worker exits or is killed), so nothing is ever cleaned up. With every core of its allowed set
taken (more workers than cores, or the workers of a killed topology still stopping), a worker
runs unpinned and tries again at each heartbeat, so it takes a core once one is free. The lock dir is
``$NSTORM_CPU_LOCK_DIR``, else ``nstorm-cpus-<uid>`` in the system's temporary directory: the
workers of every supervisor on this machine meet there. Containers that share a host's cores
need a shared volume there (docker-compose.yml mounts one).
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nstorm.config import flag
from worker.sched import each_thread

__all__ = ["ENV_LOCK_DIR", "CorePin", "lock_dir", "pin_enabled", "pin_worker"]

log = logging.getLogger(__name__)

ENV_LOCK_DIR = "NSTORM_CPU_LOCK_DIR"


def lock_dir() -> Path:
    """Where the workers of this machine claim their cores."""
    given = os.environ.get(ENV_LOCK_DIR)
    return Path(given) if given else Path(tempfile.gettempdir()) / f"nstorm-cpus-{os.getuid()}"


def pin_enabled(conf: Mapping[str, Any]) -> bool:
    """``worker.cpu.pin`` (default false); true, "true", 1 or "1" turn pinning on."""
    return flag(conf, "worker.cpu.pin")


class CorePin:
    """The core a worker holds, and the open lock file that holds it (closed: released)."""

    def __init__(self, core: int, fd: int) -> None:
        self.core = core
        self._fd = fd

    def release(self) -> None:
        """Give the core back (a worker that exits releases it anyway)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def claim_core(directory: Path, cores: Iterable[int]) -> CorePin | None:
    """An exclusive lock on the first of ``cores`` no other process holds; None if all are held
    or the directory cannot be used."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        log.info("cpu pinning off: cannot use %s (%s)", directory, exc)
        return None
    for core in cores:
        try:
            fd = os.open(directory / f"cpu-{core}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.info("cpu pinning off: cannot open a lock in %s (%s)", directory, exc)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return CorePin(core, fd)
    return None


def pin_worker(conf: Mapping[str, Any], directory: Path | None = None, again: bool = False) -> CorePin | None:
    """Pin this process (its threads now, and so every thread they start) to a core of its own;
    None when off, unsupported, on a single allowed core, or when every core is held (``again``:
    a retry, which says nothing then)."""
    if not pin_enabled(conf) or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    pin = claim_core(directory or lock_dir(), allowed)
    if pin is None:
        if not again:
            log.info("cpu pinning: every core of %s is held by another worker; unpinned until one is free", allowed)
        return None
    try:
        each_thread(lambda tid: os.sched_setaffinity(tid, {pin.core}))
    except OSError as exc:
        log.info("cpu pinning off: %s", exc)
        pin.release()
        return None
    log.info("cpu pinning: this worker's threads run on core %d", pin.core)
    return pin
