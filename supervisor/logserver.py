"""Storm's logviewer, in the supervisor: its node's worker logs over HTTP, for the UI.

Workers log on their node (``$NSTORM_HOME/logs``), and the UI runs elsewhere: another container
of the compose cluster, another host, the root of ``cluster up --netns``' namespaces. As Storm
runs a logviewer on every node, each supervisor answers ``GET /log?worker=node:port&lines=N``
with the tail of that worker's log (``{"file", "size", "lines"}``) on
``supervisor.logviewer.port`` (0: a port the OS picks; null: none), and registers the port and
a bearer token in ``supervisors/<node>`` (``logviewer``): whoever reads the cluster's ZooKeeper
reads the logs, nobody else on the network. A file is named by a worker id only
(:func:`nstorm.logtail.worker_log`), never by a path from the request.

``GET /search?worker=node:port&q=TEXT&max=N``: the last N lines of the worker's log (and of its
rotated files) that contain TEXT (``{"file", "matches": [{"file", "line", "text"}], "found"}``,
Storm's log search). ``POST /dump?worker=node:port`` asks a worker of this node for a dump of its threads
(``worker/threaddump.py``: the supervisor leaves a request file and nudges it) and answers it
(``{"file", "at", "lines"}``) once written, or 504 after :data:`DUMP_WAIT_SECS`.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nstorm.logtail import MAX_LINES, MAX_MATCHES, MAX_NEEDLE, dump_file, search, tail, worker_log
from nstorm.net import is_ip_address

__all__ = ["LogServer"]

log = logging.getLogger(__name__)

DUMP_WAIT_SECS = 5.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        if url.path not in ("/log", "/search"):
            self._answer(404 if url.path != "/dump" else 405, {"error": f"no GET {url.path[:80]!r}"})
            return
        if not self._authorized():
            return
        query = parse_qs(url.query)
        if url.path == "/search":
            self._search(query)
            return
        worker = (query.get("worker") or [""])[0]
        try:
            lines = int((query.get("lines") or ["200"])[0])
            if not 1 <= lines <= MAX_LINES:
                raise ValueError(lines)
            path = worker_log(self.server.logs, worker)
        except ValueError:
            self._answer(400, {"error": f"expected worker=node:port and lines=1..{MAX_LINES}"})
            return
        try:
            text, size = tail(path, lines)
        except FileNotFoundError:
            self._answer(404, {"error": f"no log of worker {worker} on this node"})
            return
        self._answer(200, {"file": path.name, "size": size, "lines": text})

    def _search(self, query: dict[str, list[str]]) -> None:
        worker, needle = (query.get("worker") or [""])[0], (query.get("q") or [""])[0]
        try:
            limit = int((query.get("max") or ["100"])[0])
            if not 1 <= limit <= MAX_MATCHES or not 1 <= len(needle) <= MAX_NEEDLE:
                raise ValueError(limit)
            path = worker_log(self.server.logs, worker)
        except ValueError:
            self._answer(400, {"error": f"expected worker=node:port, q=1..{MAX_NEEDLE} characters and max=1..{MAX_MATCHES}"})
            return
        try:
            matches, found = search(path, needle, limit)
        except FileNotFoundError:
            self._answer(404, {"error": f"no log of worker {worker} on this node"})
            return
        self._answer(200, {"file": path.name, "matches": matches, "found": found})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        if url.path != "/dump":
            self._answer(404 if url.path != "/log" else 405, {"error": f"no POST {url.path[:80]!r}"})
            return
        if not self._authorized():
            return
        worker = (parse_qs(url.query).get("worker") or [""])[0]
        try:
            path = dump_file(self.server.logs, worker)
        except ValueError:
            self._answer(400, {"error": "expected worker=node:port"})
            return
        asked = time.time()
        if self.server.dump is None or not self.server.dump(worker):
            self._answer(404, {"error": f"no worker {worker} runs on this node"})
            return
        deadline = time.monotonic() + DUMP_WAIT_SECS
        while time.monotonic() < deadline:
            try:
                at = path.stat().st_mtime
                if at >= asked:
                    self._answer(200, {"file": path.name, "at": at, "lines": path.read_text().splitlines()})
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        self._answer(504, {"error": f"worker {worker} wrote no thread dump within {DUMP_WAIT_SECS:.0f}s"})

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    logs: Path
    token: str
    dump: Callable[[str], bool] | None


class LogServer:
    """The node's logviewer: :meth:`start` binds and serves in a thread, :meth:`stop` ends it.

    :arg dump: asks a worker of this node (``node:port``) for a thread dump; False: none runs here.
    """

    def __init__(self, logs: Path, host: str, port: int, dump: Callable[[str], bool] | None = None) -> None:
        self.logs = logs
        self.dump = dump
        self.bind = host if is_ip_address(host) else ""  # a host name (compose): every interface
        self.port = port
        self.token = secrets.token_urlsafe(24)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind (OSError if the port is taken) and serve; the port bound."""
        server = _Server((self.bind, self.port), _Handler)
        server.logs, server.token, server.dump = self.logs, self.token, self.dump
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
