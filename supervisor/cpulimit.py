"""CPU caps for worker processes through Linux cgroups (Storm's cgroup resource isolation).

With ``supervisor.worker.cpu.limit`` set to a number of cores (``0.25``: a quarter of a
core), the supervisor puts each worker it starts into a cgroup of its own whose CFS
quota allows that much CPU time per period. A worker slot then behaves like a machine
with that much compute, whatever else runs on the host: this is how a cluster of many
small nodes is emulated on one machine (the OTD load-balancing experiment), and how a
shared node keeps one topology from starving the others.

Both hierarchies are supported: cgroup v1 (``<root>/cpu/cpu.cfs_quota_us``) and v2
(``<root>/cpu.max``, with the ``cpu`` controller enabled for the children). Without
root or without a CPU controller the limiter says so once in the log and workers run
uncapped; nothing else changes. Each slot's cgroup is named after the node, the port
and a hash of ``$NSTORM_HOME``, so that two clusters on one host never share one.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from nstorm.config import ENV_CPU_LIMIT

__all__ = ["CGROUP_ROOT", "CpuLimiter", "ENV_CPU_LIMIT"]

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


class CpuLimiter:
    """Creates, fills and removes the per-slot cgroups of one supervisor."""

    def __init__(self, cores: float | None, node: str, home: str, root: Path = CGROUP_ROOT) -> None:
        self.cores = float(cores) if cores else 0.0
        self.node = node
        self.root = root
        self.group = f"nstorm-{hashlib.sha1(home.encode()).hexdigest()[:8]}"
        self.base: Path | None = None  # the parent cgroup of the slots, once it works
        self.version = 0
        self.reason = ""
        if self.cores > 0:
            self._detect()

    @property
    def enabled(self) -> bool:
        return self.base is not None

    def _detect(self) -> None:
        v1 = self.root / "cpu"
        v2 = self.root / "cgroup.controllers"
        try:
            if (v1 / "cpu.cfs_quota_us").exists():
                self.version, base = 1, v1 / self.group
                base.mkdir(exist_ok=True)
            elif v2.exists() and "cpu" in v2.read_text().split():
                self.version, base = 2, self.root / self.group
                base.mkdir(exist_ok=True)
                (base / "cgroup.subtree_control").write_text("+cpu")
            else:
                self.reason = f"no cgroup CPU controller under {self.root}"
                log.warning("supervisor.worker.cpu.limit=%s ignored: %s; workers run uncapped", self.cores,
                            self.reason)
                return
        except OSError as exc:
            self.reason = f"cannot create a cgroup under {self.root} ({exc.strerror or exc})"
            log.warning("supervisor.worker.cpu.limit=%s ignored: %s; workers run uncapped", self.cores, self.reason)
            return
        self.base = base
        log.info("workers are capped at %s cores each (cgroup v%d, %s)", self.cores, self.version, base)

    def slot_path(self, port: int) -> Path | None:
        return self.base / f"{self.node}-{port}" if self.base is not None else None

    def apply(self, pid: int, port: int) -> bool:
        """Put process ``pid`` (all its threads) under the cap of slot ``port``; False if it cannot."""
        path = self.slot_path(port)
        if path is None:
            return False
        quota = max(1000, int(self.cores * PERIOD_US))
        try:
            path.mkdir(exist_ok=True)
            if self.version == 1:
                (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (path / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            (path / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            log.warning("cannot cap worker pid %d of slot %d at %s cores: %s", pid, port, self.cores, exc)
            return False
        return True

    def release(self, port: int) -> None:
        """Remove slot ``port``'s cgroup once its worker has ended (a live one keeps it)."""
        path = self.slot_path(port)
        if path is not None:
            _rmdir(path)

    def close(self) -> None:
        """Remove every slot cgroup that no process uses any more, then the parent."""
        if self.base is None:
            return
        try:
            slots = [p for p in self.base.iterdir() if p.is_dir()]
        except OSError:
            return
        for path in slots:
            _rmdir(path)
        _rmdir(self.base)


def _rmdir(path: Path) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass  # still in use (an adopted worker runs on) or already gone
