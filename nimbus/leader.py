"""Nimbus high availability: one leader among several Nimbus processes, through ZooKeeper.

Every Nimbus contends for a kazoo ``Lock`` on ``<root>/nimbus/election``; the
holder is the leader and the only writer of plans. The lock's node is
ephemeral, so a killed leader hands over within its session timeout. A
leader whose session is lost stops leading at once (it may no longer hold
the lock) and contends again; while the connection is merely suspended it
pauses, because it cannot tell yet whether another Nimbus took over.

:func:`nimbus_contenders` is what the CLI uses to find the leader: the lock's
contenders in order, the first being the holder.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import CancelledError, KazooException
from kazoo.recipe.lock import Lock

from nstorm.zkschema import ZkPaths

__all__ = ["Leadership", "nimbus_identity"]

log = logging.getLogger(__name__)


def nimbus_identity() -> str:
    """``host:pid`` of this Nimbus, as stored in its lock node."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Leadership:
    """Contend for leadership and run ``lead`` while holding it (see the module docstring)."""

    def __init__(self, zk: KazooClient, paths: ZkPaths, identity: str | None = None) -> None:
        self.zk = zk
        self.identity = identity or nimbus_identity()
        self.lock = Lock(zk, paths.nimbus_election, self.identity)
        self.lost = threading.Event()  # set when the session (and the lock with it) is gone
        self.suspended = threading.Event()  # set while the connection is down
        self._stopping = False
        zk.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.lost.set()
            self.suspended.set()
        elif state == KazooState.SUSPENDED:
            self.suspended.set()
        else:
            self.suspended.clear()

    @property
    def leading(self) -> bool:
        """True while this Nimbus holds the lock and may write plans."""
        return self.lock.is_acquired and not self.lost.is_set() and not self.suspended.is_set()

    def run(self, lead: Callable[[], None], stopped: threading.Event) -> None:
        """Until ``stopped``: wait for the lock, call ``lead()`` (it returns when leadership ends), repeat."""
        while not stopped.is_set():
            self.lost.clear()
            self.lock = Lock(self.zk, self.lock.path, self.identity)  # a lost lock cannot be reused
            try:
                log.info("nimbus %s waits to lead", self.identity)
                if not self.lock.acquire():
                    continue
            except CancelledError:
                break
            except KazooException as exc:
                log.warning("leader election interrupted (%s); contending again", type(exc).__name__)
                stopped.wait(1.0)
                continue
            log.info("nimbus %s is the leader", self.identity)
            try:
                lead()
            finally:
                self._release()
            if not stopped.is_set():
                log.warning("nimbus %s lost leadership (ZooKeeper session lost); contending again", self.identity)

    def _release(self) -> None:
        try:
            self.lock.release()
        except KazooException:
            pass  # the session is gone, and the lock node with it

    def cancel(self) -> None:
        """Stop waiting for the lock (on shutdown)."""
        self.lock.cancel()
