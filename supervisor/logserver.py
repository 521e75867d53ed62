"""Storm's logviewer, in the supervisor: its node's worker logs over HTTP, for the UI.

Workers log on their node (``$NSTORM_HOME/logs``), and the UI runs elsewhere: another container
of the compose cluster, another host, the root of ``cluster up --netns``' namespaces. As Storm
runs a logviewer on every node, each supervisor answers ``GET /log?worker=node:port&lines=N``
with the tail of that worker's log (``{"file", "size", "lines"}``) on
``supervisor.logviewer.port`` (0: a port the OS picks; null: none), and registers the port and
a bearer token in ``supervisors/<node>`` (``logviewer``): whoever reads the cluster's ZooKeeper
reads the logs, nobody else on the network. A file is named by a worker id only
(:func:`nstorm.logtail.worker_log`), never by a path from the request.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nstorm.logtail import MAX_LINES, tail, worker_log
from nstorm.net import is_ip_address

__all__ = ["LogServer"]

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        if url.path != "/log":
            self._answer(404, {"error": f"no such path {url.path[:80]!r}"})
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.server.token}".encode()):
            self._answer(401, {"error": "a bearer token is needed (the supervisor's registration has it)"})
            return
        query = parse_qs(url.query)
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


class LogServer:
    """The node's logviewer: :meth:`start` binds and serves in a thread, :meth:`stop` ends it."""

    def __init__(self, logs: Path, host: str, port: int) -> None:
        self.logs = logs
        self.bind = host if is_ip_address(host) else ""  # a host name (compose): every interface
        self.port = port
        self.token = secrets.token_urlsafe(24)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind (OSError if the port is taken) and serve; the port bound."""
        server = _Server((self.bind, self.port), _Handler)
        server.logs, server.token = self.logs, self.token
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="logviewer", daemon=True)
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
