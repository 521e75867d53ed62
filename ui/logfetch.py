"""A worker's log for the UI: from its node's supervisor (``supervisor/logserver.py``, Storm's
logviewer), or, where that supervisor serves none, from the UI's own machine.

The UI seldom runs where the workers do (the compose cluster's ``ui`` container, a network
namespace's node): their logs are on their nodes, and each supervisor registers where it serves
them (``supervisors/<node>``' ``logviewer``: port and bearer token).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nstorm.logtail import tail, worker_log

__all__ = ["LogUnavailable", "fetch_log"]

TIMEOUT_SECS = 5.0


class LogUnavailable(Exception):
    """No log to show: ``status`` is the HTTP status the UI answers (404, or 502 for a logviewer
    that did not answer) and the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def fetch_log(worker: str, lines: int, supervisor: Mapping[str, Any] | None, local_logs: Path) -> dict[str, Any]:
    """``{"file", "size", "lines"}`` of ``worker``'s log: the last ``lines`` lines.

    :arg supervisor: the registration of the worker's node (None: not registered now).
    :arg local_logs: the UI's own logs directory, read when the node serves no logs.
    :raises LogUnavailable: no such log, or its node's logviewer did not answer.
    """
    viewer = (supervisor or {}).get("logviewer")
    if isinstance(viewer, Mapping) and isinstance(viewer.get("port"), int) and viewer["port"] > 0:
        return _remote(worker, lines, str(supervisor["host"]), viewer)  # type: ignore[index]
    path = worker_log(local_logs, worker)
    try:
        text, size = tail(path, lines)
    except FileNotFoundError:
        why = "its supervisor is not registered" if supervisor is None else "its supervisor serves no logs"
        raise LogUnavailable(404, f"no log of worker {worker}: {why}, and the UI's {local_logs} has none") from None
    return {"file": path.name, "size": size, "lines": text}


def _remote(worker: str, lines: int, host: str, viewer: Mapping[str, Any]) -> dict[str, Any]:
    where = f"[{host}]:{viewer['port']}" if ":" in host else f"{host}:{viewer['port']}"
    query = urllib.parse.urlencode({"worker": worker, "lines": lines})
    request = urllib.request.Request(f"http://{where}/log?{query}",  # noqa: S310 - a registered node
                                     headers={"Authorization": f"Bearer {viewer.get('token', '')}"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECS) as reply:  # noqa: S310
            body = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise LogUnavailable(404, f"no log of worker {worker} on its node ({host})") from None
        raise LogUnavailable(502, f"the logviewer at {where} answered {exc.code}") from None
    except (OSError, ValueError) as exc:  # refused, timed out, unreachable, not JSON
        raise LogUnavailable(502, f"the logviewer at {where} did not answer ({exc})") from None
    if not isinstance(body, dict) or not isinstance(body.get("lines"), list):
        raise LogUnavailable(502, f"the logviewer at {where} answered no lines")
    return {"file": body.get("file"), "size": body.get("size"), "lines": body["lines"]}
