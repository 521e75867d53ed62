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

Everything is JSON: nothing read from ZooKeeper is ever unpickled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from nstorm.errors import ClusterError, ZooKeeperError

__all__ = [
    "ACTIVE",
    "INACTIVE",
    "KILLED",
    "ZkPaths",
    "connect",
    "decode",
    "encode",
    "resolve_zk_address",
]

ACTIVE = "ACTIVE"
INACTIVE = "INACTIVE"
KILLED = "KILLED"


def encode(data: Any) -> bytes:
    """JSON-encode a node's data."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def decode(raw: bytes | None) -> Any:
    """Decode a node's JSON data (None for an empty node); ValueError on garbage."""
    if not raw:
        return None
    return json.loads(raw.decode())


@dataclass(frozen=True)
class ZkPaths:
    """Paths of the nstorm tree under ``root``."""

    root: str = "/nstorm"

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

    def otd(self, name: str) -> str:
        return self._p("otd", name)

    @property
    def nimbus_election(self) -> str:
        return self._p("nimbus", "election")

    def ensure(self, zk: KazooClient) -> None:
        """Create the top-level nodes (idempotent)."""
        for path in (self.topologies, self._p("code"), self.statuses, self.assignments,
                     self.supervisors, self._p("workerbeats"), self._p("requests"), self._p("migrations")):
            zk.ensure_path(path)


def resolve_zk_address(explicit: str | None = None) -> str:
    """The ZooKeeper to talk to: ``--zk``, else ``$NSTORM_ZK``, else the embedded one of ``$NSTORM_HOME``.

    :raises ClusterError: if none is given and no embedded ZooKeeper runs.
    """
    if explicit:
        return explicit
    env = os.environ.get("NSTORM_ZK")
    if env:
        return env
    from nstorm.zookeeper import embedded_address

    address = embedded_address()
    if address is None:
        msg = "no ZooKeeper: start one with 'nstorm zookeeper start' or 'nstorm cluster up', or pass --zk HOST:PORT"
        raise ClusterError(msg)
    return address


def connect(address: str, timeout: float = 10.0, session_timeout: float = 10.0) -> KazooClient:
    """A started kazoo client, or :class:`ZooKeeperError` naming the address."""
    zk = KazooClient(hosts=address, timeout=session_timeout)
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
