"""Storm's logviewer, in the supervisor: its node's worker logs over HTTP, for the UI.

Workers log on their node (``$NSTORM_HOME/logs``), and the UI runs elsewhere: another container
of the compose cluster, another host, the root of ``cluster up --netns``' namespaces. As Storm
runs a logviewer on every node, each supervisor answers ``GET /log?worker=node:port&lines=N``
with the tail of that worker's log (``{"file", "size", "lines"}``) on
``supervisor.logviewer.port`` (0: a port the OS picks; null: none), and registers the port and
a bearer token in ``supervisors/<node>`` (``logviewer``): whoever reads the cluster's ZooKeeper
reads the logs, nobody else on the network. A file is named by a worker id only
(:func:`nstorm.logtail.worker_log`), never by a path from the request.

``GET /download?worker=node:port``: the whole log file as it is (text/plain, an attachment).
``GET /daemonlog?lines=N``: the tail of the supervisor's own log (Storm's daemonlog).
``GET /events?worker=node:port&lines=N``: the tail of the tuples the worker's event sampling
wrote (``worker/eventlog.py``, Storm's events.log; ``{"file", "size", "lines"}``).
``GET /search?worker=node:port&q=TEXT&max=N``: the last N lines of the worker's log (and of its
rotated files) that contain TEXT (``{"file", "matches": [{"file", "line", "text"}], "found"}``,
Storm's log search). ``POST /dump?worker=node:port`` asks a worker of this node for a dump of its threads
(``worker/threaddump.py``: the supervisor leaves a request file and nudges it) and answers it
(``{"file", "at", "lines"}``) once written (a new file: its inode and mtime change), or 504 after
:data:`DUMP_WAIT_SECS`; 409 while the worker is starting (its handler may not be set yet).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nstorm.logtail import (
    MAX_LINES,
    MAX_MATCHES,
    MAX_NEEDLE,
    dump_file,
    events_file,
    search,
    tail,
    worker_log,
)
from nstorm.net import is_ip_address

__all__ = ["LogServer"]

log = logging.getLogger(__name__)

DUMP_WAIT_SECS = 5.0
_CHUNK = 256 * 1024


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # seconds a connection may keep a thread without sending its request

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._serve({"/log": self._log, "/search": self._search, "/download": self._download, "/events": self._events,
                     "/daemonlog": self._daemon_log}, {"/dump"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._serve({"/dump": self._dump}, {"/log", "/search", "/download", "/events", "/daemonlog"})

    def _serve(self, routes: dict[str, Callable[[dict[str, list[str]]], None]], other_method: set[str]) -> None:
        """Route, check the token, answer; an error reading a file is a JSON 500, not a dropped line."""
        url = urlsplit(self.path)
        route = routes.get(url.path)
        if route is None:
            status = 405 if url.path in other_method else 404
            self._answer(status, {"error": f"no {self.command} {url.path[:80]!r}"})
            return
        if not self._authorized():
            return
        try:
            route(parse_qs(url.query))
        except _Refused as refused:
            self._answer(refused.status, {"error": str(refused)})
        except ConnectionError:  # the client went away (a download cut short): nobody to answer
            return
        except (OSError, ValueError) as exc:  # unreadable, a name too long, ...
            log.warning("logviewer: %s %s: %s", self.command, url.path, exc)
            self._answer(500, {"error": f"cannot read it on this node ({type(exc).__name__})"})

    def _log(self, query: dict[str, list[str]]) -> None:
        self._tail(query, worker_log, _no_log)

    def _events(self, query: dict[str, list[str]]) -> None:
        self._tail(query, events_file, lambda worker: _Refused(404, f"worker {worker} logged no events on this node"))

    def _daemon_log(self, query: dict[str, list[str]]) -> None:
        path = self.server.own_log
        lines = _number(query, "lines", 200, MAX_LINES)
        try:
            if path is None:
                raise FileNotFoundError
            text, size = tail(path, lines)
        except FileNotFoundError:
            raise _Refused(404, "this supervisor writes no log file") from None
        self._answer(200, {"file": path.name, "size": size, "lines": text})

    def _tail(self, query: dict[str, list[str]], make: Callable[[Path, str], Path],
              missing: Callable[[str], _Refused]) -> None:
        """The last ``lines`` lines of the request's worker's file (``make``: its log or its events)."""
        worker, path = _worker_file(query, self.server.logs, make)
        lines = _number(query, "lines", 200, MAX_LINES)
        try:
            text, size = tail(path, lines)
        except FileNotFoundError:
            raise missing(worker) from None
        self._answer(200, {"file": path.name, "size": size, "lines": text})

    def _download(self, query: dict[str, list[str]]) -> None:
        """The whole current log file, as it is now (Storm's "Download Full File")."""
        worker, path = _worker_file(query, self.server.logs, worker_log)
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            raise _no_log(worker) from None
        with fh:
            size = os.fstat(fh.fileno()).st_size  # what is there now; lines written meanwhile wait
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(size))
            self.send_header("Content-Disposition", f'attachment; filename="{path.name}"')
            self.end_headers()
            left = size
            while left > 0:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def _search(self, query: dict[str, list[str]]) -> None:
        worker, path = _worker_file(query, self.server.logs, worker_log)
        limit = _number(query, "max", 100, MAX_MATCHES)
        needle = (query.get("q") or [""])[0]
        if not 1 <= len(needle) <= MAX_NEEDLE:
            raise _Refused(400, f"expected q=1..{MAX_NEEDLE} characters")
        try:
            matches, found = search(path, needle, limit)
        except FileNotFoundError:
            raise _no_log(worker) from None
        self._answer(200, {"file": path.name, "matches": matches, "found": found})

    def _dump(self, query: dict[str, list[str]]) -> None:
        worker, path = _worker_file(query, self.server.logs, dump_file)
        before = _identity(path)  # a new dump is a new file (os.replace): no clock compared
        refused = (404, f"no worker {worker} runs on this node") if self.server.dump is None else self.server.dump(worker)
        if refused is not None:
            raise _Refused(*refused)
        deadline = time.monotonic() + DUMP_WAIT_SECS
        while time.monotonic() < deadline:
            now = _identity(path)
            if now is not None and now != before:
                text = path.read_text(encoding="utf-8", errors="replace")
                self._answer(200, {"file": path.name, "at": path.stat().st_mtime, "lines": text.splitlines()})
                return
            time.sleep(0.05)
        raise _Refused(504, f"worker {worker} wrote no thread dump within {DUMP_WAIT_SECS:.0f}s")

    def _authorized(self) -> bool:
        """The registration's bearer token, compared in constant time; else a 401 is sent."""
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {self.server.token}".encode()):
            return True
        self._answer(401, {"error": "a bearer token is needed (the supervisor's registration has it)"})
        return False

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.debug("logviewer %s: " + format, self.client_address[0], *args)


class _Refused(Exception):
    """An answer other than 200 (its status, its error), raised by a route and sent by ``_serve``."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status


def _worker_file(query: dict[str, list[str]], logs: Path, make: Callable[[Path, str], Path]) -> tuple[str, Path]:
    """The request's worker and its file (``make``: its log or its dump) under the logs directory;
    400 for anything but a worker id."""
    worker = (query.get("worker") or [""])[0]
    try:
        return worker, make(logs, worker)
    except ValueError:
        raise _Refused(400, "expected worker=node:port") from None


def _number(query: dict[str, list[str]], key: str, default: int, most: int) -> int:
    """An integer parameter from 1 to ``most``; 400 else."""
    try:
        value = int((query.get(key) or [str(default)])[0])
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise _Refused(400, f"expected {key}=1..{most}")
    return value


def _no_log(worker: str) -> _Refused:
    return _Refused(404, f"no log of worker {worker} on this node")


def _identity(path: Path) -> tuple[int, int] | None:
    """A file's inode and modification time (ns), None if it is missing."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    logs: Path
    token: str
    dump: Callable[[str], tuple[int, str] | None] | None
    own_log: Path | None


class _Server6(_Server):
    address_family = socket.AF_INET6


class LogServer:
    """The node's logviewer: :meth:`start` binds and serves in a thread, :meth:`stop` ends it.

    :arg dump: asks a worker of this node (``node:port``) for a thread dump: None, or why not
        (an HTTP status and a message: 404 none runs here, 409 it is starting).
    :arg own_log: the supervisor's own log file (``/daemonlog``), if it writes one.
    """

    def __init__(self, logs: Path, host: str, port: int,
                 dump: Callable[[str], tuple[int, str] | None] | None = None, own_log: Path | None = None) -> None:
        self.logs = logs
        self.dump = dump
        self.own_log = own_log
        self.bind = host if is_ip_address(host) else ""  # a host name (compose): every interface
        self.port = port
        self.token = secrets.token_urlsafe(24)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind (OSError if the port is taken) and serve; the port bound."""
        server = (_Server6 if ":" in self.bind else _Server)((self.bind, self.port), _Handler)
        server.logs, server.token, server.dump, server.own_log = self.logs, self.token, self.dump, self.own_log
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="logviewer", daemon=True)
        self._thread.start()
        self.port = int(server.server_address[1])
        return self.port

    def registration(self) -> dict[str, Any]:
        """What the supervisor registers (``logviewer``), or {} when it serves nothing."""
        return {"port": self.port, "token": self.token} if self._server is not None else {}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
