"""Who may use the UI: HTTP basic auth (``nstorm.ui.auth``) and a cross-site check on POSTs.

A pure ASGI middleware, in front of every route (the pages, their assets, the API, ``/metrics``):

- with credentials, a request without them, or with others, gets 401 and a
  ``WWW-Authenticate: Basic`` challenge (compared in constant time);
- a request that changes something (any method but GET, HEAD, OPTIONS) whose ``Origin`` header is
  present and is not this server's own origin is refused with 403, and so is one a browser marks
  ``Sec-Fetch-Site: cross-site``: another web page cannot make a visitor's browser activate, kill or
  move anything, even on 127.0.0.1 without auth. ``curl`` sends no ``Origin`` and still works;
- on a loopback address, a request whose ``Host`` is not a loopback name (nor one of
  ``nstorm.ui.allowed.hosts``) is refused with 403: a page whose DNS name was rebound to
  127.0.0.1 sends its own name, so it can neither read nor change anything (DNS rebinding).

``/healthz`` answers without credentials (a container's health check has none).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["Guard", "host_allowed", "origin_allowed"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SAFE = {"GET", "HEAD", "OPTIONS"}
OPEN_PATHS = {"/healthz"}


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}


def origin_allowed(origin: str | None, scheme: str, host: str | None) -> bool:
    """True when ``origin`` is absent or is ``scheme://host`` (the server's own origin)."""
    if origin is None:
        return True
    if not host:
        return False
    return origin.rstrip("/").lower() == f"{scheme}://{host}".lower()


def _loopback(name: str) -> bool:
    name = name.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(host: str | None, server: Any, allowed: frozenset[str] = frozenset()) -> bool:
    """True unless the server listens on a loopback address and ``host`` (the ``Host`` header,
    with or without a port) names neither a loopback address nor one of ``allowed``."""
    if not host or not server or not _loopback(str(server[0])):
        return True
    name = host.rsplit(":", 1)[0] if not host.endswith("]") and host.count(":") == 1 else host
    if name.startswith("[") and "]" in name:
        name = name[:name.index("]") + 1]
    return _loopback(name) or name.strip("[]").lower() in allowed


class Guard:
    """The ASGI middleware (see the module docstring). ``credentials``: ``(user, password)`` or None;
    ``allowed_hosts``: names besides loopback ones a loopback-bound UI answers to."""

    def __init__(self, app: ASGIApp, credentials: tuple[str, str] | None = None,
                 allowed_hosts: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.credentials = credentials
        self.allowed_hosts = frozenset(h.strip().lower() for h in allowed_hosts if h.strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if not host_allowed(headers.get("host"), scope.get("server"), self.allowed_hosts):
            await _refuse(send, 403, "Forbidden",
                          f"Host {headers.get('host')} is not this server's (add it to nstorm.ui.allowed.hosts)")
            return
        if self.credentials is not None and scope.get("path") not in OPEN_PATHS and not self._authorized(headers):
            await _refuse(send, 401, "Unauthorized", "this nstorm UI needs a user and password (HTTP basic auth)",
                          [(b"www-authenticate", b'Basic realm="nstorm", charset="UTF-8"')])
            return
        if scope.get("method", "GET") not in _SAFE:
            origin = headers.get("origin")
            if not origin_allowed(origin, scope.get("scheme", "http"), headers.get("host")):
                await _refuse(send, 403, "Forbidden",
                              f"cross-site request refused: Origin {origin} is not this server's")
                return
            if origin is None and headers.get("sec-fetch-site") == "cross-site":
                await _refuse(send, 403, "Forbidden", "cross-site request refused")
                return
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[str, str]) -> bool:
        assert self.credentials is not None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic" or not token:
            return False
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        want_user, want_password = self.credentials
        ok_user = hmac.compare_digest(user.encode(), want_user.encode())
        ok_password = hmac.compare_digest(password.encode(), want_password.encode())
        return bool(sep) and ok_user and ok_password


async def _refuse(send: Send, status: int, error: str, message: str,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"error": error, "errorMessage": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
