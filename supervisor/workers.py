"""Worker processes as the supervisor sees them: started by it, or adopted after it restarted.

A supervisor is stateless (paper, section 3.5): if it is killed, its workers
keep running, and the supervisor that comes back must find and adopt them
rather than start second copies. Each started worker is therefore recorded in
``<supervisor dir>/workers/<topology>@<port>.json`` with its pid and process
start time (which tells a live worker from a reused pid); on start-up the
supervisor reads these records and adopts every worker still alive. A worker started with
another transport setting than the supervisor's now (CurveZMQ turned on or off, or other keys
between the two starts) is stopped instead, and the supervisor starts it again: adopted, it would
go on sending in the clear, or be refused by its peers.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

__all__ = ["WorkerHandle", "WorkerRegistry", "write_json_atomic"]

log = logging.getLogger(__name__)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON through a temporary file and a rename: readers never see half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


@dataclass
class WorkerHandle:
    """One worker process, whether this supervisor started it or adopted it."""

    topology: str
    port: int
    process: psutil.Process
    popen: subprocess.Popen[bytes] | None = None  # None when adopted: not our child
    restarts: int = 0  # restarts in a row of workers that died young (the restart back-off counts them)
    submission: str | None = None  # the submission of the topology it runs (a resubmission is another)
    started_at: float = field(default_factory=time.monotonic)
    exited_at: float | None = None
    # Its local heartbeat file (written every worker.heartbeat.interval.secs): the mtime last seen
    # and the monotonic time it was seen to change; None until the first beat since its start.
    beat_mtime: int | None = None
    beat_at: float | None = None
    beat_timeout: float = 30.0  # seconds without a beat after which the supervisor kills it
    hung: bool = False  # killed for a stale heartbeat (the restart says so)
    _code: int | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        """None while the worker runs, else its exit code (-1 when it was not our child)."""
        if self._code is not None:
            return self._code
        if self.popen is not None:
            self._code = self.popen.poll()
            if self._code is not None:
                self.exited_at = time.monotonic()
            return self._code
        try:
            code = self.process.wait(timeout=0)
        except psutil.TimeoutExpired:
            # Not our child (adopted after a restart): a zombie nobody reaps still "exists".
            try:
                if self.process.status() != psutil.STATUS_ZOMBIE:
                    return None
            except psutil.Error:
                pass
            code = None
        except psutil.Error:
            code = None
        self._code = -1 if code is None else int(code)
        self.exited_at = time.monotonic()
        return self._code

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; waits for the process to end."""
        if self.poll() is not None:
            return
        try:
            self.process.terminate()
            self._wait(timeout)
        except (psutil.TimeoutExpired, subprocess.TimeoutExpired):
            try:
                self.process.kill()
                self._wait(5)
            except (psutil.Error, subprocess.TimeoutExpired):
                pass
        except psutil.Error:
            pass
        self.poll()

    def beat_age(self, beat_file: Path, now: float) -> tuple[float, bool]:
        """Seconds since this worker's last heartbeat (since its start when it has not beaten yet),
        and whether it has beaten since its start. A change of the file's mtime is a beat: the
        supervisor's own monotonic clock times it, so a step of the wall clock fakes no stall."""
        try:
            mtime: int | None = beat_file.stat().st_mtime_ns
        except OSError:
            mtime = None
        if mtime is not None and mtime != self.beat_mtime:
            self.beat_mtime = mtime
            self.beat_at = now
        if self.beat_at is None:
            return now - self.started_at, False
        return now - self.beat_at, True

    def _wait(self, timeout: float) -> None:
        if self.popen is not None:
            self.popen.wait(timeout)
        else:
            self.process.wait(timeout)


class WorkerRegistry:
    """Records of the workers a supervisor runs, kept as small JSON files in its directory."""

    def __init__(self, directory: Path, node: str, root: str, curve_keys: str | None = None) -> None:
        self.dir = directory
        self.node = node
        self.root = root  # the ZooKeeper root: a node name is only unique within one cluster
        self.curve_keys = curve_keys  # the CurveZMQ keys directory its workers get (None: plain zmq)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, topology: str, port: int) -> Path:
        return self.dir / f"{topology}@{port}.json"

    def record(self, topology: str, port: int, popen: subprocess.Popen[bytes], submission: str | None = None) -> WorkerHandle:
        """Wrap a freshly started worker and write its record."""
        process = psutil.Process(popen.pid)
        try:
            started = process.create_time()
        except psutil.Error:
            started = 0.0
        write_json_atomic(self._path(topology, port),
                          {"topology": topology, "port": port, "pid": popen.pid, "create_time": started, "root": self.root,
                           "submission": submission, "curve_keys": self.curve_keys})
        handle = WorkerHandle(topology, port, process, popen=popen, submission=submission)
        try:  # a file left by the slot's previous worker is not a beat of this one
            handle.beat_mtime = self.beat_file(port).stat().st_mtime_ns
        except OSError:
            pass
        return handle

    def beat_file(self, port: int) -> Path:
        """The local heartbeat file the worker on ``port`` writes (``worker/process.py``)."""
        return self.dir.parent / f"heartbeat-{port}.json"

    def forget(self, topology: str, port: int) -> None:
        self._path(topology, port).unlink(missing_ok=True)

    def adopt(self) -> list[WorkerHandle]:
        """Handles for every recorded worker still running; stale records are removed."""
        handles = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                data: dict[str, Any] = json.loads(path.read_text())
                process = psutil.Process(int(data["pid"]))
                # A second's slack: create_time is the boot time plus the start, and the boot time
                # moves with every step of the wall clock (the command line is checked as well).
                same = abs(process.create_time() - float(data["create_time"])) < 1.0 and data["root"] == self.root
                cmd = process.cmdline()
                ours = "worker" in cmd and f"{self.node}" in cmd and str(data["port"]) in cmd
                alive = process.status() != psutil.STATUS_ZOMBIE
            except (OSError, ValueError, KeyError, psutil.Error):
                same = ours = alive = False
            if same and ours and alive:
                submission = data.get("submission")
                handle = WorkerHandle(str(data["topology"]), int(data["port"]), process,
                                      submission=submission if isinstance(submission, str) else None)
                if data.get("curve_keys") != self.curve_keys:  # (a record without it: started in the clear)
                    log.warning("worker %s:%s of %s (pid %d) was started with %s, this supervisor runs with %s: "
                                "stopped, to be started again", self.node, data["port"], data["topology"], process.pid,
                                _transport(data.get("curve_keys")), _transport(self.curve_keys))
                    handle.stop()
                    path.unlink(missing_ok=True)
                    continue
                handle.beat_at = time.monotonic()  # adopted running: a whole timeout from now for its next beat
                handles.append(handle)
                log.info("adopted worker %s:%s of %s (pid %d)", self.node, data["port"], data["topology"], process.pid)
            else:
                path.unlink(missing_ok=True)
        return handles


def _transport(curve_keys: str | None) -> str:
    return f"CurveZMQ (keys in {curve_keys})" if curve_keys else "plain zmq (no CurveZMQ)"
