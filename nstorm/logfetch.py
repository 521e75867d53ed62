"""A worker's log and a thread dump of it, for the UI and the CLI: from its node's supervisor
(``supervisor/logserver.py``, Storm's logviewer), or a log, where that supervisor serves none,
from this machine.

The UI and the CLI seldom run where the workers do (the compose cluster's ``ui`` container, a
network namespace's node, another host): the logs are on the workers' nodes, and each
supervisor registers where it serves them (``supervisors/<node>``' ``logviewer``: port and
bearer token).
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nstorm.logtail import MAX_LINES, events_file, search, tail, worker_log

__all__ = ["LogUnavailable", "fetch_daemon_log", "fetch_events", "fetch_log", "gather_events", "open_log", "search_log", "search_workers",
           "thread_dump"]

TIMEOUT_SECS = 5.0
DUMP_TIMEOUT_SECS = 10.0  # the logviewer waits up to 5 s for the worker's dump
SEARCH_TIMEOUT_SECS = 30.0  # a search reads the whole log and its rotated files (up to 80 MB)


class LogUnavailable(Exception):
    """No log or dump to show: ``status`` is the HTTP status the UI answers (404; 409 for a worker
    that is starting; 502 for a logviewer that did not answer, 504 for a worker that wrote no dump)
    and the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def fetch_log(worker: str, lines: int, supervisor: Mapping[str, Any] | None, local_logs: Path) -> dict[str, Any]:
    """``{"file", "size", "lines"}`` of ``worker``'s log: the last ``lines`` lines.

    :arg supervisor: the registration of the worker's node (None: not registered now).
    :arg local_logs: the UI's own logs directory, read when the node serves no logs.
    :raises LogUnavailable: no such log, or its node's logviewer did not answer.
    """
    why = "its supervisor is not registered" if supervisor is None else "its supervisor serves no logs"
    return _tail_of(worker, lines, supervisor, local_logs, "log", worker_log,
                    f"no log of worker {worker}: {why}, and the UI's {local_logs} has none")


def _tail_of(worker: str, lines: int, supervisor: Mapping[str, Any] | None, local_logs: Path, route: str,
             make: Callable[[Path, str], Path], missing: str) -> dict[str, Any]:
    """The last ``lines`` lines of a worker's file from its node's logviewer (``route``), else of
    ``make``'s file on this machine (LogUnavailable 404 ``missing`` when there is none)."""
    viewer = _viewer(supervisor)
    if viewer is not None:
        return _ask(worker, "GET", route, {"lines": lines}, str(supervisor["host"]),  # type: ignore[index]
                    viewer, TIMEOUT_SECS, "lines", ("file", "size"))
    path = make(local_logs, worker)
    try:
        text, size = tail(path, lines)
    except FileNotFoundError:
        raise LogUnavailable(404, missing) from None
    return {"file": path.name, "size": size, "lines": text}


def fetch_daemon_log(node: str, lines: int, supervisor: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"file", "size", "lines"}``: the last ``lines`` lines of supervisor ``node``'s own log, from
    its logviewer (Storm's daemonlog).

    :raises LogUnavailable: the supervisor is not registered or serves no logviewer (404), or its
        logviewer did not answer (502).
    """
    viewer = _viewer(supervisor)
    if viewer is None:
        why = "is not registered" if supervisor is None else "serves no logviewer"
        raise LogUnavailable(404, f"no log of supervisor {node}: it {why}")
    return _ask("", "GET", "daemonlog", {"lines": lines}, str(supervisor["host"]),  # type: ignore[index]
                viewer, TIMEOUT_SECS, "lines", ("file", "size"))


def fetch_events(worker: str, lines: int, supervisor: Mapping[str, Any] | None, local_logs: Path) -> dict[str, Any]:
    """``{"file", "size", "lines"}``: the last ``lines`` events ``worker``'s event sampling wrote
    (``worker/eventlog.py``: a JSON object a line), from its node (else this machine).

    :raises LogUnavailable: as :func:`fetch_log` (404: none written there).
    """
    return _tail_of(worker, lines, supervisor, local_logs, "events", events_file,
                    f"worker {worker} logged no events here (its supervisor serves no logs)")


def gather_events(workers: Sequence[str], lines: int, supervisors: Mapping[str, Mapping[str, Any]],
                  local_logs: Path, component: str | None = None) -> dict[str, Any]:
    """The last ``lines`` events of ``workers`` together (each read on its node at once), of
    ``component`` only if given, oldest first: ``{"events": [{"time", "component", "executor",
    "stream", "values", "worker"}], "errors": {worker: why}}`` (a worker that wrote none is no error)."""
    read = MAX_LINES if component is not None else lines  # (a component's last N: among the others')

    def one(worker: str) -> tuple[str, dict[str, Any] | str | None]:
        try:
            return worker, fetch_events(worker, read, supervisors.get(worker.rpartition(":")[0]), local_logs)
        except LogUnavailable as exc:
            return worker, None if exc.status == 404 else str(exc)
        except ValueError as exc:
            return worker, str(exc)

    events: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(workers)))) as pool:
        for worker, answer in pool.map(one, workers):
            if isinstance(answer, str):
                errors[worker] = answer
            elif answer is not None:
                events.extend(e | {"worker": worker} for e in map(_event, answer["lines"])
                              if e is not None and (component is None or e["component"] == component))
    events.sort(key=lambda e: e["time"])
    return {"events": events[-lines:], "errors": errors}


def _event(line: Any) -> dict[str, Any] | None:
    """An events file's line as its event, None for one cut short or of the wrong shape."""
    try:
        event = json.loads(line)
    except (TypeError, ValueError):
        return None
    if (not isinstance(event, dict) or not isinstance(event.get("time"), (int, float))
            or not isinstance(event.get("component"), str)):
        return None
    return event


def open_log(worker: str, supervisor: Mapping[str, Any] | None, local_logs: Path) -> tuple[str, int, Iterator[bytes]]:
    """The whole of ``worker``'s log file as it is now, from its node (else this machine): its
    name, its size and its bytes in chunks (the source is closed when they end or are dropped).

    :raises LogUnavailable: as :func:`fetch_log`.
    """
    name = worker_log(local_logs, worker).name
    viewer = _viewer(supervisor)
    if viewer is None:
        try:
            fh: Any = (local_logs / name).open("rb")
        except FileNotFoundError:
            raise LogUnavailable(404, f"no log of worker {worker}: its supervisor serves no logs") from None
        return name, os.fstat(fh.fileno()).st_size, _chunks(fh)
    reply = _open(worker, "GET", "download", {}, str(supervisor["host"]), viewer, TIMEOUT_SECS)  # type: ignore[index]
    try:
        size = int(reply.headers.get("Content-Length", ""))
    except ValueError:
        reply.close()
        raise LogUnavailable(502, f"the logviewer of worker {worker}'s node sent no length") from None
    return name, size, _chunks(reply)


def _chunks(source: Any, size: int = 256 * 1024) -> Iterator[bytes]:
    """``source``'s bytes in chunks; closes it at the end, or when the reader drops them."""
    try:
        while chunk := source.read(size):
            yield chunk
    finally:
        source.close()


def search_log(worker: str, needle: str, limit: int, supervisor: Mapping[str, Any] | None,
               local_logs: Path) -> dict[str, Any]:
    """``{"matches": [{"file", "line", "text"}], "found"}``: the last ``limit`` lines of ``worker``'s
    log (and its rotated files) that contain ``needle``, from its node (else this machine's).

    :raises LogUnavailable: as :func:`fetch_log`.
    """
    viewer = _viewer(supervisor)
    if viewer is not None:
        return _ask(worker, "GET", "search", {"q": needle, "max": limit}, str(supervisor["host"]),  # type: ignore[index]
                    viewer, SEARCH_TIMEOUT_SECS, "matches", ("found",))
    try:
        matches, found = search(worker_log(local_logs, worker), needle, limit)
    except FileNotFoundError:
        raise LogUnavailable(404, f"no log of worker {worker}: its supervisor serves no logs") from None
    return {"matches": matches, "found": found}


def search_workers(workers: Sequence[str], needle: str, limit: int, supervisors: Mapping[str, Mapping[str, Any]],
                   local_logs: Path) -> dict[str, Any]:
    """:func:`search_log` over ``workers`` at once (each on its node): ``{"matches": [{"worker",
    "file", "line", "text"}], "found": {worker: lines matched}, "errors": {worker: why}}``, the
    matches by worker, each worker's in its log's order."""
    def one(worker: str) -> tuple[str, dict[str, Any] | str]:
        try:
            return worker, search_log(worker, needle, limit, supervisors.get(worker.rpartition(":")[0]), local_logs)
        except (LogUnavailable, ValueError) as exc:
            return worker, str(exc)

    matches: list[dict[str, Any]] = []
    found: dict[str, int] = {}
    errors: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(workers)))) as pool:
        for worker, answer in pool.map(one, workers):
            if isinstance(answer, str):
                errors[worker] = answer
                continue
            count = answer.get("found")
            found[worker] = count if isinstance(count, int) else 0
            matches.extend({"worker": worker, **m} for m in answer["matches"] if isinstance(m, dict))
    return {"matches": matches, "found": found, "errors": errors}


def thread_dump(worker: str, supervisor: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"file", "at", "lines"}``: a new dump of ``worker``'s threads (Storm's jstack, Flink's thread
    dump), which its node's supervisor asks it for.

    :raises LogUnavailable: its supervisor is not registered or serves no logviewer (404), the
        worker does not run there (404), or it or the logviewer did not answer (502, 504).
    """
    viewer = _viewer(supervisor)
    if viewer is None:
        why = "is not registered" if supervisor is None else "serves no logviewer"
        raise LogUnavailable(404, f"no thread dump of worker {worker}: its supervisor {why}")
    return _ask(worker, "POST", "dump", {}, str(supervisor["host"]), viewer,  # type: ignore[index]
                DUMP_TIMEOUT_SECS, "lines", ("file", "at"))


def _viewer(supervisor: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The ``logviewer`` a supervisor registered (port and token), or None if it serves none."""
    viewer = (supervisor or {}).get("logviewer")
    if isinstance(viewer, Mapping) and isinstance(viewer.get("port"), int) and viewer["port"] > 0:
        return viewer
    return None


def _ask(worker: str, method: str, what: str, params: Mapping[str, Any], host: str, viewer: Mapping[str, Any],
         timeout: float, listed: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """One request to a node's logviewer; its answer's ``keys`` and its list ``listed``."""
    where = _where(host, viewer)
    try:
        with _open(worker, method, what, params, host, viewer, timeout) as reply:
            body = json.loads(reply.read())
    except (OSError, ValueError, http.client.HTTPException) as exc:  # cut off, not JSON
        raise LogUnavailable(502, f"the logviewer at {where} did not answer ({exc})") from None
    if not isinstance(body, dict) or not isinstance(body.get(listed), list):
        raise LogUnavailable(502, f"the logviewer at {where} answered no {listed}")
    return {k: body.get(k) for k in keys} | {listed: body[listed]}


def _open(worker: str, method: str, what: str, params: Mapping[str, Any], host: str, viewer: Mapping[str, Any],
          timeout: float) -> Any:
    """Send one request to a node's logviewer; its open answer (LogUnavailable for any other)."""
    where = _where(host, viewer)
    query = urllib.parse.urlencode({"worker": worker, **params} if worker else params)  # (no worker: the daemon's)
    request = urllib.request.Request(f"http://{where}/{what}?{query}",  # noqa: S310 - a registered node
                                     headers={"Authorization": f"Bearer {viewer.get('token', '')}"}, method=method)
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 409, 504):
            raise LogUnavailable(exc.code, f"{_error_of(exc)} ({host})") from None
        raise LogUnavailable(502, f"the logviewer at {where} answered {exc.code}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out, not HTTP
        raise LogUnavailable(502, f"the logviewer at {where} did not answer ({exc})") from None


def _where(host: str, viewer: Mapping[str, Any]) -> str:
    return f"[{host}]:{viewer['port']}" if ":" in host else f"{host}:{viewer['port']}"


def _error_of(exc: urllib.error.HTTPError) -> str:
    """The ``error`` a logviewer's answer gives (its own words), else its status."""
    try:
        message = json.loads(exc.read()).get("error")
    except (OSError, ValueError, AttributeError):
        message = None
    return str(message)[:200] if message else f"HTTP {exc.code}"
