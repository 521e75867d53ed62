"""Where the UI reads the cluster: one ZooKeeper connection, snapshots read in one pipelined pass.

The UI is stateless, as the other daemons: everything it shows is read from ZooKeeper (and the
metrics store) when asked. Its connection reconnects by itself; while it is down, every read
raises :class:`Unreachable` at once (the API answers 503, the page says "cluster unreachable")
instead of waiting for kazoo's queue, and the UI starts even when ZooKeeper is not up yet.

A request reads through a :class:`Snapshot` connection: listing a node's children also asks
for every child's data at once, so that the hundreds of heartbeat and migration nodes of a
large topology cost one round trip rather than one each, and each node is read at most once
per snapshot. Built documents are kept for :data:`TTL_SECS`, so that many open pages (each
polling every two seconds) cost ZooKeeper no more than one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from nstorm.client import ClusterClient
from nstorm.clusterstate import CURRENT, ClusterState
from nstorm.records import Heartbeat, MigrationRecord
from nstorm.zkauth import ZkCredentials
from nstorm.zkschema import ZkPaths

__all__ = ["TTL_SECS", "ClusterSource", "Snapshot", "Unreachable", "ZOOKEEPER_TROUBLE"]

log = logging.getLogger(__name__)

TTL_SECS = 0.5  # a built document serves every request within this long
_READ_TIMEOUT = 5.0  # a read that gets no answer by then: ZooKeeper went away under it

# What kazoo raises when ZooKeeper is away or refuses: the API's 503.
ZOOKEEPER_TROUBLE = (AuthFailedError, ConnectionLoss, SessionExpiredError, ConnectionClosedError, OperationTimeoutError,
                     KazooTimeoutError, NoAuthError)

T = TypeVar("T")


class Unreachable(Exception):
    """ZooKeeper is not connected (or refuses this UI's credentials) right now."""


class Snapshot:
    """A kazoo client for one request: memoized reads, and children's data fetched all at once.

    Only reads are changed; everything else (creates, sets, transactions) goes to the real client.
    """

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self._data: dict[str, Any] = {}  # path -> async result of get
        self._children: dict[str, list[str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)

    def get_children(self, path: str, watch: Any = None, include_data: bool = False) -> list[str]:
        if watch is not None or include_data:
            return self._zk.get_children(path, watch=watch, include_data=include_data)  # type: ignore[no-any-return]
        children = self._children.get(path)
        if children is None:
            children = self._children[path] = list(self._zk.get_children_async(path).get(timeout=_READ_TIMEOUT))
            base = path.rstrip("/")
            for child in children:  # one round trip for all of them
                self._data.setdefault(f"{base}/{child}", self._zk.get_async(f"{base}/{child}"))
        return children

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        if watch is not None:
            return self._zk.get(path, watch=watch)  # type: ignore[no-any-return]
        pending = self._data.get(path)
        if pending is None:
            pending = self._data[path] = self._zk.get_async(path)
        return pending.get(timeout=_READ_TIMEOUT)  # type: ignore[no-any-return]

    def exists(self, path: str, watch: Any = None) -> Any:
        if watch is None and path in self._data:
            try:
                return self.get(path)[1]
            except NoNodeError:
                return None
        return self._zk.exists(path, watch=watch)


class SnapshotState(ClusterState):
    """:class:`~nstorm.clusterstate.ClusterState` over a :class:`Snapshot` that also keeps the
    records it parsed: ``status()`` and the UI's documents ask for the same heartbeats and
    migration records, which are then decoded once per request, not twice."""

    def __init__(self, zk: Any, paths: ZkPaths) -> None:
        super().__init__(zk, paths)
        self._beats: dict[tuple[str, Any], dict[str, Heartbeat]] = {}
        self._moves: dict[str, list[MigrationRecord]] = {}

    def heartbeats(self, name: str, submission: Any = CURRENT) -> dict[str, Heartbeat]:
        key = (name, "current" if submission is CURRENT else submission)
        if key not in self._beats:
            self._beats[key] = super().heartbeats(name, submission)
        return self._beats[key]

    def migrations(self, name: str) -> list[MigrationRecord]:
        if name not in self._moves:
            self._moves[name] = super().migrations(name)
        return self._moves[name]


class ClusterSource:
    """The UI's connection to one cluster (see the module docstring).

    :arg auth: ``user:password`` of a cluster with ZooKeeper ACLs (None: ``$NSTORM_ZK_AUTH``); it
        is only ever sent to ZooKeeper.
    """

    def __init__(self, address: str, root: str = "/nstorm", auth: str | None = None,
                 session_timeout: float = 10.0) -> None:
        creds = ZkCredentials.resolve(auth)
        extra: dict[str, Any] = {"auth_data": creds.auth_data, "default_acl": creds.acl} if creds else {}
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
        self.address = address
        self.paths = ZkPaths(root)
        self.zk = KazooClient(hosts=address, timeout=session_timeout, connection_retry=retry, **extra)
        self.zk.add_listener(self._on_state)
        self._cache: dict[Any, tuple[float, Any]] = {}
        self._building: dict[Any, threading.Lock] = {}
        self._lock = threading.Lock()

    def _on_state(self, state: KazooState) -> None:
        if state is not KazooState.CONNECTED:
            log.warning("ZooKeeper at %s: %s; the API answers 503 until it is back", self.address, state)
        else:
            log.info("ZooKeeper at %s: connected", self.address)

    def start(self) -> None:
        """Connect in the background (the UI serves, with 503s, until ZooKeeper answers)."""
        self.zk.start_async()

    def stop(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 - best effort at shutdown
            pass

    @property
    def connected(self) -> bool:
        return bool(self.zk.connected)

    def check(self) -> None:
        """:class:`Unreachable` unless connected."""
        if not self.connected:
            msg = f"cluster unreachable: no connection to ZooKeeper at {self.address}"
            raise Unreachable(msg)

    def client(self) -> ClusterClient:
        """A :class:`~nstorm.client.ClusterClient` reading through a fresh :class:`Snapshot`."""
        self.check()
        client = ClusterClient.over(Snapshot(self.zk), self.paths.root)
        client.cluster = SnapshotState(client.zk, client.paths)
        return client

    def cached(self, key: Any, build: Callable[[], T], ttl: float = TTL_SECS) -> T:
        """``build()``'s result, shared by every request for ``key`` within ``ttl`` seconds; one
        request builds while the others for the same key wait for it."""
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < ttl:
            return hit[1]  # type: ignore[no-any-return]
        with self._lock:
            lock = self._building.setdefault(key, threading.Lock())
        with lock:
            hit = self._cache.get(key)
            if hit is not None and time.monotonic() - hit[0] < ttl:
                return hit[1]  # type: ignore[no-any-return]
            value = build()
            self._cache[key] = (time.monotonic(), value)
            if len(self._cache) > 512:
                self._prune()
            return value

    def forget(self, *prefix: Any) -> None:
        """Drop cached documents whose key starts with ``prefix`` (after a POST changed them)."""
        for key in list(self._cache):
            if isinstance(key, tuple) and key[: len(prefix)] == prefix:
                self._cache.pop(key, None)

    def _prune(self) -> None:
        now = time.monotonic()
        for key, (at, _) in list(self._cache.items()):
            if now - at > 60:
                self._cache.pop(key, None)
        with self._lock:
            for key in [k for k in self._building if k not in self._cache]:
                del self._building[key]  # a builder holding it keeps its reference
