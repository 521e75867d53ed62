"""Running the UI: bind, serve with uvicorn, stop on SIGTERM/SIGINT; and the health probe."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from nstorm.errors import ClusterError
from nstorm.uiauth import resolve_ui_auth
from nstorm.zkauth import AUTH_KEY

__all__ = ["allowed_hosts", "bind", "ping", "serve"]

log = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port), or :class:`ClusterError` saying it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        msg = f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        raise ClusterError(msg) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def allowed_hosts(conf: Mapping[str, Any]) -> frozenset[str]:
    """``nstorm.ui.allowed.hosts``: names (a comma-separated string or a list) a UI on a loopback
    address answers to besides loopback ones (a proxy's, say)."""
    value = conf.get("nstorm.ui.allowed.hosts") or ()
    names = value.split(",") if isinstance(value, str) else value if isinstance(value, list | tuple) else ()
    return frozenset(str(n).strip().lower() for n in names if str(n).strip())


def serve(zk_address: str, root: str, host: str, port: int, conf: Mapping[str, Any], announce: Any = None) -> int:
    """Serve until SIGTERM/SIGINT. ``announce(url)`` is called once listening."""
    import uvicorn

    from ui.app import create_app
    from ui.source import ClusterSource

    credentials = resolve_ui_auth(conf)  # ConfigError (exit 2) for a malformed value
    sock = bind(host, port)
    port = sock.getsockname()[1]
    source = ClusterSource(zk_address, root, auth=conf.get(AUTH_KEY),
                           session_timeout=float(conf.get("nstorm.zookeeper.session.timeout.secs") or 10))
    source.start()
    app = create_app(source, credentials, allowed_hosts(conf))
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    url = url_of(host, port)
    log.info("UI on %s (ZooKeeper %s%s, auth %s)", url, zk_address, root, "on" if credentials else "off")
    if announce is not None:
        announce(url)
    try:
        server.run(sockets=[sock])
    finally:
        source.stop()
        sock.close()
    log.info("UI stopped")
    return 0


def ping(host: str, port: int, timeout: float = 3.0) -> bool:
    """True if a UI answers ``/healthz`` on ``host:port`` (a container's health check)."""
    try:
        with urllib.request.urlopen(f"{url_of(host, port)}healthz", timeout=timeout) as resp:  # noqa: S310 - our own URL
            return resp.status == 200 and json.loads(resp.read()).get("status") == "ok"
    except (OSError, ValueError, urllib.error.URLError, http.client.HTTPException):  # InvalidURL: a bad host
        return False
