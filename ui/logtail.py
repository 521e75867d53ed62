"""Storm's log viewer, the small version: the tail of a worker's log file.

Workers log to ``$NSTORM_HOME/logs/worker-<node>-<port>.log`` (:mod:`nstorm.logs`); the UI reads
the file of a worker of the topology's plan only (no path comes from the request), on the
machine it runs on: on a cluster of several hosts, run a UI beside the workers whose logs you
want, or read them where they are.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MAX_LINES", "tail", "worker_log"]

MAX_LINES = 5000
_CHUNK = 64 * 1024


def worker_log(logs: Path, worker_id: str) -> Path:
    """The log file of worker ``node:port`` under ``logs``."""
    node, _, port = worker_id.rpartition(":")
    return logs / f"worker-{node}-{port}.log"


def tail(path: Path, lines: int) -> tuple[list[str], int]:
    """The last ``lines`` lines of ``path`` and the file's size (FileNotFoundError if missing);
    reads from the end, so a large log costs what is shown, not its size."""
    lines = max(1, min(int(lines), MAX_LINES))
    with path.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        data = b""
        position = size
        while position > 0 and data.count(b"\n") <= lines:
            step = min(_CHUNK, position)
            position -= step
            fh.seek(position)
            data = fh.read(step) + data
    text = data.decode("utf-8", errors="replace").splitlines()
    return text[-lines:], size
