"""What the UI's tests share: a real UI process (``python -m ui``) and a small HTTP client.

Every UI is started on a free port with the test session's ``NSTORM_HOME`` and ended in the
fixture's finaliser (or by :meth:`UiProcess.stop`), even when the test fails.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import TOPOLOGIES, stop_process, wait_until

__all__ = ["BROKEN", "MET", "Http", "Reply", "UiProcess", "chromium_path", "start_chained_with_constraints",
           "wait_json"]

# The latency constraints of the UI's tests: a bound every window meets, and one no window can
# meet (the controller acts on it at once: it shrinks lower>count's buffers, then warns; that
# channel is fields-grouped, so never chained and never a reason to touch the chains by hand).
MET = {"path": ["sentences", "split", "lower"], "p99_ms": 60000, "window_secs": 1}
BROKEN = {"path": ["lower", "count"], "p99_ms": 0.001, "window_secs": 1}


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


class Http:
    """GET and POST against one UI; never raises for an HTTP status (the tests check it)."""

    def __init__(self, base: str, auth: tuple[str, str] | None = None) -> None:
        self.base = base.rstrip("/")
        self.auth = auth

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                raw: bytes | None = None, auth: tuple[str, str] | None = None) -> Reply:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        who = auth or self.auth
        if who:
            request.add_header("Authorization", "Basic " + base64.b64encode(f"{who[0]}:{who[1]}".encode()).decode())
        for k, v in (headers or {}).items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - a local test server
                return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.request("POST", path, body=body if body is not None else {}, **kw)


class UiProcess:
    """``python -m ui`` on a free port against ``zk_address``/``root``."""

    def __init__(self, zk_address: str, root: str, auth: str | None = None, conf: list[str] | None = None,
                 zk_auth: str | None = None, connected: bool = True, home: Path | None = None) -> None:
        """Start it and wait until it answers (and, with ``connected``, until it reached ZooKeeper);
        ``home``: its own ``$NSTORM_HOME`` (else the tests')."""
        from nstorm.net import free_port

        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ}
        env.pop("NSTORM_UI_AUTH", None)
        env.pop("NSTORM_ZK_AUTH", None)
        if auth:
            env["NSTORM_UI_AUTH"] = auth
        if zk_auth:
            env["NSTORM_ZK_AUTH"] = zk_auth
        args = [sys.executable, "-m", "ui", "--zk", zk_address, "--root", root, "--port", str(self.port)]
        for option in conf or []:
            args += ["-c", option]
        if home is not None:
            env["NSTORM_HOME"] = str(home)
        home = Path(env["NSTORM_HOME"])
        (home / "logs").mkdir(parents=True, exist_ok=True)
        self.out = open(home / "logs" / f"ui-{self.port}.out", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.http = Http(self.url, tuple(auth.split(":", 1)) if auth else None)  # type: ignore[arg-type]
        self.connected = connected
        try:
            wait_until(self._answers, 30, what=f"the UI on {self.url}" + (" connected to ZooKeeper" if connected else ""))
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the UI exited with {self.proc.returncode}")
        try:
            reply = self.http.get("/healthz")
        except OSError:
            return False
        return reply.status == 200 and (not self.connected or reply.json["zookeeper"] == "connected")

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.proc)
        self.out.close()


def chromium_path() -> str | None:
    """Debian's chromium (``.ci/run`` installs it), or None."""
    import shutil

    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def start_chained_with_constraints(zk_address: str, root: str, out_dir: Path, name: str = "uilat") -> dict[str, str]:
    """Submit ``chained_wordcount`` (two workers) as ``name`` with :data:`MET` and :data:`BROKEN`
    at a low rate (windows of a second are judged at once) and chain each ``split`` executor to its
    worker's spout by hand; returns those chains (downstream -> upstream)."""
    from nstorm.client import ClusterClient

    with ClusterClient(zk_address, root) as client:
        client.submit(TOPOLOGIES / "chained_wordcount.py", name=name,
                      conf={"test.output.dir": str(out_dir), "test.sentences": 20_000, "test.rate": 50,
                            "topology.latency.constraints": [MET, BROKEN]})
        plan = client.wait_running(name, timeout=60)
        spout_of = {w: e for e, w in plan.executors.items() if e.startswith("sentences:")}
        chains = {e: spout_of[w] for e, w in plan.executors.items() if e.startswith("split:")}
        assert len(chains) == 2 and len(set(chains.values())) == 2, plan.executors  # one of each per worker
        client.chain(name, chains)
    return chains


def wait_json(http: Http, path: str, predicate: Any, timeout: float = 60.0, what: str = "") -> Any:
    """Poll ``GET path`` until ``predicate(json)`` is truthy; returns the json."""

    def check() -> Any:
        reply = http.get(path)
        if reply.status != 200:
            return None
        data = reply.json
        return data if predicate(data) else None

    return wait_until(check, timeout, interval=0.3, what=what or f"GET {path}")
