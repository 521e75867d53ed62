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
from collections import deque
from pathlib import Path

__all__ = ["MAX_LINES", "MAX_MATCHES", "MAX_NEEDLE", "WORKER_ID", "dump_file", "dump_request", "events_file", "search", "tail",
           "worker_log"]

MAX_LINES = 5000
MAX_MATCHES = 1000
MAX_NEEDLE = 200  # characters a search looks for
MAX_TEXT = 500  # a matching line is cut here (a tuple's values logged whole can be long)
ROTATED = 3  # nstorm.logs keeps worker-<node>-<port>.log.1 to .3 (20 MB each)
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


def events_file(logs: Path, worker_id: str) -> Path:
    """Where worker ``node:port`` writes the tuples its executors' event sampling logs
    (``worker/eventlog.py``, Storm's events.log): a JSON object a line."""
    return worker_log(logs, worker_id).with_suffix(".events")


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


def search(log: Path, needle: str, limit: int) -> tuple[list[dict[str, object]], int]:
    """The last ``limit`` lines of a worker's log, with its rotated files before it (oldest first),
    that contain ``needle``, as ``{"file", "line", "text"}`` (line numbers from 1 in each file), and
    how many lines matched in all (FileNotFoundError if the log itself is missing)."""
    if not log.exists():
        raise FileNotFoundError(log)
    files = [log.with_name(f"{log.name}.{i}") for i in range(ROTATED, 0, -1)] + [log]
    target = needle.encode("utf-8", errors="replace")
    kept: deque[tuple[str, int, bytes]] = deque(maxlen=max(1, min(int(limit), MAX_MATCHES)))
    found = 0
    for path in files:
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            continue  # not rotated that often yet
        with fh:
            for number, raw in enumerate(fh, 1):
                if target in raw:
                    found += 1
                    kept.append((path.name, number, raw))
    return [{"file": name, "line": number, "text": raw.decode("utf-8", errors="replace").rstrip("\r\n")[:MAX_TEXT]}
            for name, number, raw in kept], found
