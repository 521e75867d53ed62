"""The ZooKeeper schema of nstorm: every path and node format, in one place.

Layout under the root (``nstorm.zookeeper.root``, default ``/nstorm``)::

    topologies/<name>         JSON: definition, conf, code sha256, main file, submitted_at
    code/<name>               the code archive (zip bytes)
    status/<name>             JSON: {"status": ACTIVE|INACTIVE|KILLED, "kill_at": t}
    assignments/<name>        JSON: the versioned allocation plan (written by Nimbus only)
    supervisors/<node>        ephemeral JSON: {"node", "host", "slots": [[port, ctl_port]]}
    workerbeats/<name>/<wid>  ephemeral JSON: a worker's heartbeat and executor counters
    requests/<name>/req-N     JSON: rebalance requests for Nimbus (it writes the result back)
    migrations/<name>/m-N     JSON: one record per executor move (the new copy completes it)
    otd/<name>                JSON: the last OTD round (case, move, warning, inter-node ratio)
    otd/<name>/rounds         JSON: the last otd.history.size rounds in short, and rounds per case
    latency/<name>            JSON: the latency constraints' controller record (windows, actions, warnings)
    logconfig/<name>          JSON: dynamic log levels (nstorm.loglevels), mirrored by supervisors to workers

Everything is JSON: nothing read from ZooKeeper is ever unpickled.

With ``nstorm.zookeeper.auth`` (or ``$NSTORM_ZK_AUTH``) set, :func:`connect` authenticates
and every node created carries a digest ACL for that identity only (:mod:`nstorm.zkauth`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.retry import KazooRetry

from nstorm.errors import AuthError, ClusterError, ConfigError, ZooKeeperError
from nstorm.records import TopologyStatus
from nstorm.zkauth import AUTH_ENV, AUTH_KEY, ZkCredentials, lock_down

__all__ = [
    "ACTIVE",
    "INACTIVE",
    "KILLED",
    "ZkPaths",
    "check_zk_root",
    "auth_error",
    "connect",
    "decode",
    "encode",
    "resolve_zk_address",
]

log = logging.getLogger(__name__)

ACTIVE = TopologyStatus.ACTIVE
INACTIVE = TopologyStatus.INACTIVE
KILLED = TopologyStatus.KILLED


def encode(data: Any) -> bytes:
    """JSON-encode a node's data."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def decode(raw: bytes | None) -> Any:
    """Decode a node's JSON data (None for an empty node); ValueError on garbage."""
    if not raw:
        return None
    return json.loads(raw.decode())


def check_zk_root(root: object) -> str:
    """``root`` if it is an absolute ZooKeeper path without '.', '..' or empty parts: kazoo
    refuses the others only at the first read, with a traceback.

    :raises UsageError: one line naming the root.
    """
    from nstorm.errors import UsageError

    parts = root.strip("/").split("/") if isinstance(root, str) else []
    if (not isinstance(root, str) or not root.startswith("/") or "//" in root
            or (root != "/" and any(p in ("", ".", "..") for p in parts))
            or any(ord(c) < 32 or ord(c) == 127 for c in root)):
        msg = f"ZooKeeper root {root!r} (--zk-root): expected an absolute path such as /nstorm, without '.' or '..' parts"
        raise UsageError(msg)
    return root


@dataclass(frozen=True)
class ZkPaths:
    """Paths of the nstorm tree under ``root`` (checked: a bad one fails here, before any read)."""

    root: str = "/nstorm"

    def __post_init__(self) -> None:
        check_zk_root(self.root)

    def _p(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def topologies(self) -> str:
        return self._p("topologies")

    def topology(self, name: str) -> str:
        return self._p("topologies", name)

    def code(self, name: str) -> str:
        return self._p("code", name)

    @property
    def statuses(self) -> str:
        return self._p("status")

    def status(self, name: str) -> str:
        return self._p("status", name)

    @property
    def assignments(self) -> str:
        return self._p("assignments")

    def assignment(self, name: str) -> str:
        return self._p("assignments", name)

    @property
    def supervisors(self) -> str:
        return self._p("supervisors")

    def supervisor(self, node: str) -> str:
        return self._p("supervisors", node)

    def workerbeats(self, name: str) -> str:
        return self._p("workerbeats", name)

    def workerbeat(self, name: str, worker_id: str) -> str:
        return self._p("workerbeats", name, worker_id)

    def requests(self, name: str) -> str:
        return self._p("requests", name)

    def migrations(self, name: str) -> str:
        return self._p("migrations", name)

    def latency(self, name: str) -> str:
        """The latency constraints' controller record of ``name`` (nimbus/latency.py)."""
        return self._p("latency", name)

    def otd(self, name: str) -> str:
        return self._p("otd", name)

    def logconfig(self, name: str) -> str:
        """The dynamic log levels of ``name`` (nstorm.loglevels; ``nstorm set-log-level``)."""
        return self._p("logconfig", name)

    def otd_rounds(self, name: str) -> str:
        """The last OTD rounds of ``name`` and their count per case (scheduler_otd/history.py)."""
        return self._p("otd", name, "rounds")

    def checkpoints(self, name: str) -> str:
        """The coordinator's orders and record of ``name``'s checkpoints (nimbus/checkpoints.py)."""
        return self._p("checkpoints", name)

    def rollback_requests(self, name: str) -> str:
        """Workers that lost state ask for a rollback here (sequential children)."""
        return self._p("checkpoints", name, "requests")

    def lives(self, name: str, worker_id: str) -> str:
        """Made by a worker process of ``name`` when it starts: found there, it is a restart."""
        return self._p("checkpoints", name, "lives", worker_id)

    @property
    def nimbus_election(self) -> str:
        return self._p("nimbus", "election")

    def ensure(self, zk: KazooClient) -> None:
        """Create the top-level nodes (idempotent) and check that ``zk`` may use the tree.

        With ACLs on (``zk.default_acl``), a tree created open is locked down first.

        :raises AuthError: if ZooKeeper refuses access (credentials missing or wrong).
        """
        try:
            for path in (self.topologies, self._p("code"), self.statuses, self.assignments,
                         self.supervisors, self._p("workerbeats"), self._p("requests"), self._p("migrations"), self._p("checkpoints")):
                zk.ensure_path(path)
            if zk.default_acl and list(zk.get_acls(self.root)[0]) != list(zk.default_acl):
                changed = lock_down(zk, self.root, zk.default_acl)
                log.info("ACLs turned on for %s: %d node(s) locked down", self.root, changed)
            zk.get_children(self.root)  # READ: a root guarded by other credentials fails here
        except NoAuthError as exc:
            raise auth_error(zk, self.root) from exc


    def check_access(self, zk: KazooClient) -> None:
        """:class:`AuthError` if ``zk`` may not read the tree (credentials missing or wrong)."""
        try:
            zk.get_children(self.root)
        except NoAuthError as exc:
            raise auth_error(zk, self.root) from exc
        except NoNodeError:
            pass  # nothing there yet: nothing to be refused


def auth_error(zk: KazooClient, root: str) -> AuthError:
    """The one-line error for a ``NoAuth`` answer, saying what to set."""
    if zk.auth_data:
        msg = (f"ZooKeeper denied access to {root}: wrong credentials in {AUTH_ENV} / {AUTH_KEY} "
               f"for this cluster")
    else:
        msg = (f"ZooKeeper denied access to {root}: the cluster uses ACLs; "
               f"set {AUTH_ENV}=user:password (or -c {AUTH_KEY}=user:password)")
    return AuthError(msg)


def resolve_zk_address(explicit: str | None = None) -> str:
    """The ZooKeeper to talk to: ``--zk``, else ``$NSTORM_ZK``, else the embedded one of ``$NSTORM_HOME``.

    :raises ClusterError: if none is given and no embedded ZooKeeper runs.
    """
    if explicit:
        return explicit
    env = os.environ.get("NSTORM_ZK")
    if env:
        return env
    from nstorm.background import embedded_address

    address = embedded_address()
    if address is None:
        msg = "no ZooKeeper: start one with 'nstorm zookeeper start' or 'nstorm cluster up', or pass --zk HOST:PORT"
        raise ClusterError(msg)
    return address


def connect(
    address: str, timeout: float = 10.0, session_timeout: float = 10.0, auth: str | None = None
) -> KazooClient:
    """A started kazoo client, or :class:`ZooKeeperError` naming the address.

    :arg auth: ``user:password`` (``nstorm.zookeeper.auth``); None falls back to
        ``$NSTORM_ZK_AUTH``; neither set: no authentication and open ACLs.
    :raises ConfigError: for malformed credentials.
    """
    creds = ZkCredentials.resolve(auth)
    extra: dict[str, Any] = {"auth_data": creds.auth_data, "default_acl": creds.acl} if creds else {}
    # Reconnect at least every second: kazoo's default back-off grows to an hour, so after a
    # ZooKeeper restart of a few seconds clients came back after their sessions had expired.
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
    try:
        zk = KazooClient(hosts=address, timeout=session_timeout, connection_retry=retry, **extra)
    except ValueError as exc:  # a port that is not a number, an empty host list
        msg = f"bad ZooKeeper address {address!r} (HOST:PORT[,HOST:PORT...]): {exc}"
        raise ConfigError(msg) from None
    try:
        zk.start(timeout=timeout)
    except Exception as exc:
        try:
            zk.stop()
            zk.close()
        except Exception:  # noqa: BLE001 - best effort cleanup on a failed connect
            pass
        msg = f"cannot connect to ZooKeeper at {address}: {type(exc).__name__}"
        raise ZooKeeperError(msg) from exc
    return zk
