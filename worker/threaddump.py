"""A dump of the worker's threads, on request (Storm UI's "JStack", Flink's thread dump).

Where is an executor stuck, which thread spins: every thread's stack, name (an executor's
thread is named after its executor id), CPU time and run-queue wait so far. The supervisor asks
by leaving ``worker-<node>-<port>.dump-request`` beside the worker's log and nudging it
(SIGUSR1, which every worker answers); the worker's signal thread (:mod:`nstorm.signals`), not
its main loop, writes ``worker-<node>-<port>.dump``, so that a worker whose loop is stuck still
answers. The logviewer (``supervisor/logserver.py``) hands the file to the UI and the CLI.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from nstorm.logtail import dump_file, dump_request

__all__ = ["ThreadDumps", "format_dump"]

log = logging.getLogger(__name__)


def _task_times(native_id: int | None) -> tuple[float, float] | None:
    """Seconds a thread ran on a CPU and waited for one (Linux' ``schedstat``), None elsewhere."""
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            ran, waited = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(ran) / 1e9, int(waited) / 1e9


def format_dump(header: str) -> str:
    """``header``, then every thread of this process: name, daemon or not, CPU and wait, stack."""
    frames = sys._current_frames()
    parts = [header, ""]
    for thread in sorted(threading.enumerate(), key=lambda t: t.name):
        times = _task_times(thread.native_id)
        about = f"cpu {times[0]:.2f}s, waited for a cpu {times[1]:.2f}s" if times else "cpu ?"
        parts.append(f'"{thread.name}"{" daemon" if thread.daemon else ""} tid {thread.native_id}: {about}')
        frame = frames.get(thread.ident) if thread.ident is not None else None
        stack = traceback.format_stack(frame) if frame is not None else ["  (no Python frame)\n"]
        parts.append("".join(stack).rstrip("\n"))
        parts.append("")
    return "\n".join(parts)


class ThreadDumps:
    """Answers the supervisor's requests: :meth:`answer` when nudged."""

    def __init__(self, logs: Path, worker_id: str, describe: Callable[[], str]) -> None:
        self.request = dump_request(logs, worker_id)
        self.path = dump_file(logs, worker_id)
        self.worker_id = worker_id
        self.describe = describe  # what the header says of the worker (topology, plan version)

    def answer(self) -> bool:
        """Write a dump if one is asked for (the request removed); whether one was."""
        try:
            self.request.unlink()
        except FileNotFoundError:
            return False
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = format_dump(f"thread dump of worker {self.worker_id} (pid {os.getpid()}, {self.describe()}) at {stamp}")
        tmp = self.path.with_suffix(".dump.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.path)  # the logviewer never reads half a dump
        log.info("thread dump written to %s (%d threads)", self.path.name, threading.active_count())
        return True
