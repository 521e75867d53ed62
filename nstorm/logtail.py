"""The tail of a worker's log file, read where the worker ran.

Workers log to ``$NSTORM_HOME/logs/worker-<node>-<port>.log`` (:mod:`nstorm.logs`) on their node.
Each supervisor serves its node's (``supervisor/logserver.py``, Storm's logviewer) and the UI and
the CLI ask it (:mod:`nstorm.logfetch`); a file is named by a worker id only, never by a path from
a request. A worker's thread dump goes beside its log (:func:`dump_file`), written when the
supervisor leaves a request (:func:`dump_request`) and nudges it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["MAX_LINES", "WORKER_ID", "dump_file", "dump_request", "tail", "worker_log"]

MAX_LINES = 5000
_CHUNK = 64 * 1024
WORKER_ID = re.compile(r"[^/\\\x00]+:[0-9]{1,5}")  # node:port, no separator in the node: a file name


def worker_log(logs: Path, worker_id: str) -> Path:
    """The log file of worker ``node:port`` under ``logs`` (ValueError for anything else: no
    separator or path reaches a file name)."""
    if not WORKER_ID.fullmatch(worker_id):
        msg = f"not a worker id (node:port): {worker_id[:80]!r}"
        raise ValueError(msg)
    node, _, port = worker_id.rpartition(":")
    return logs / f"worker-{node}-{port}.log"


def dump_file(logs: Path, worker_id: str) -> Path:
    """Where worker ``node:port`` writes its last thread dump (``worker/threaddump.py``)."""
    return worker_log(logs, worker_id).with_suffix(".dump")


def dump_request(logs: Path, worker_id: str) -> Path:
    """The file whose presence asks worker ``node:port`` for a thread dump (it removes it)."""
    return worker_log(logs, worker_id).with_suffix(".dump-request")


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
