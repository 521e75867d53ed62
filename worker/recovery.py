"""A worker's side of checkpoints and rollbacks: the store, the coordinator's orders, requests.

The coordinator (nimbus/checkpoints.py) writes its orders into the topology's checkpoint
record in ZooKeeper; this worker watches it (:meth:`WorkerCheckpoints.watch`) and its main
loop carries them out (worker.process): a new ``pending`` checkpoint goes to the spouts
(CHECKPOINT), a new ``committed`` one to every executor (COMMITTED), a larger ``epoch`` is a
rollback. When this worker loses data (it was restarted, a moved-in copy got no state, a
tuple tree failed or timed out, queued tuples were dropped) it is *tainted*: its executors
write no checkpoint until the rollback it asks for (a sequential node under the record), and
pass no barrier on. A request not answered within :data:`RESEND_SECS` is made again (one lost
between the coordinator's read and its write would otherwise leave this worker tainted, and the
other workers' bolts waiting for its barriers, until some other failure rolled the topology back).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import NodeExistsError

from nstorm.state.config import StateConfig
from nstorm.state.record import CheckpointRecord
from nstorm.state.store import StateStore, open_store
from nstorm.zkschema import ZkPaths, encode

__all__ = ["WorkerCheckpoints"]

log = logging.getLogger(__name__)

RESEND_SECS = 5.0  # a rollback request still unanswered after this long is made again


class WorkerCheckpoints:
    """See the module docstring; the :class:`worker.host.Checkpoints` of a worker."""

    def __init__(self, config: StateConfig, topology: str, submission: str | None, worker_id: str,
                 wake: Callable[[], None]) -> None:
        self.config = config
        self.topology = topology
        self.submission = submission
        self.worker_id = worker_id
        self.groups = config.max_parallelism
        self.tainted = False
        self.epoch = 0  # the epoch whose rollback requests are asked (set by the worker)
        self.orders: CheckpointRecord | None = None  # the newest record seen
        self._wake = wake
        self._requests: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._asked: tuple[float, str] | None = None  # when this epoch's request was written, and why
        self._store: StateStore | None = None
        self._lock = threading.Lock()

    # -- the store (any executor thread) ---------------------------------------------------
    @property
    def store(self) -> StateStore:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.config, self.topology, self.submission)
            return self._store

    def write(self, cid: int, executor: str, blob: bytes, groups: Mapping[tuple[str, int], tuple[bool, bytes]]) -> int:
        return self.store.write(cid, executor, blob, groups)

    def read(self, cid: int, executor: str) -> bytes | None:
        return self.store.executor(cid, executor)

    def chain(self, component: str, group: int, upto: int) -> list[tuple[int, bool, bytes]]:
        return self.store.group_chain(component, group, upto)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    # -- rollbacks ----------------------------------------------------------------------------
    def request_rollback(self, reason: str) -> None:
        """Data was lost here (any thread): no checkpoint of this epoch is written here any
        more, and the main loop asks the coordinator for a rollback (once per epoch)."""
        if self.tainted:
            return
        self.tainted = True
        log.warning("state lost (%s): checkpoints stop here until the topology rolls back", reason)
        self._requests.put(reason)
        self._wake()

    def rolled_back(self, epoch: int) -> None:
        self.epoch = epoch
        self.tainted = False
        self._asked = None
        while True:
            try:
                self._requests.get_nowait()
            except queue.Empty:
                return

    def send_requests(self, zk: Any, paths: ZkPaths) -> None:
        """Write the rollback requests made since the last call (main loop); kept while ZooKeeper is away."""
        if zk is None:
            return
        try:
            reason = self._requests.get_nowait()
        except queue.Empty:
            asked = self._asked
            if not self.tainted or asked is None or time.monotonic() - asked[0] < RESEND_SECS:
                return
            reason = asked[1]  # not answered: (a request of an epoch the topology has left is ignored)
            log.warning("rollback request of epoch %d unanswered for %.0fs: asking again", self.epoch,
                        time.monotonic() - asked[0])
        body = {"epoch": self.epoch, "reason": reason, "worker": self.worker_id, "at": time.time()}
        try:
            zk.create(f"{paths.rollback_requests(self.topology)}/r-", encode(body), sequence=True, makepath=True)
        except Exception:  # noqa: BLE001 - ZooKeeper away: asked again next pass
            self._requests.put(reason)
            log.warning("cannot ask for a rollback now (ZooKeeper); trying again", exc_info=True)
            return
        self._asked = (time.monotonic(), reason)

    # -- ZooKeeper -------------------------------------------------------------------------
    def watch(self, zk: Any, paths: ZkPaths) -> None:
        """Follow the checkpoint record (kazoo's DataWatch: every change wakes the main loop)."""

        def changed(data: bytes | None, _stat: Any) -> None:
            record = CheckpointRecord.from_json(data)
            if record is not None and record.submission == self.submission:
                self.orders = record
                self._wake()

        zk.DataWatch(paths.checkpoints(self.topology), changed)

    def register_life(self, zk: Any, paths: ZkPaths) -> bool:
        """Note that this worker id has run; True if it had run before (this process is a restart)."""
        try:
            zk.create(paths.lives(self.topology, self.worker_id), encode({"at": time.time()}), makepath=True)
        except NodeExistsError:
            return True
        except Exception:  # noqa: BLE001 - ZooKeeper away: count it as a restart (a rollback is safe)
            return True
        return False

    def forget_life(self, zk: Any, paths: ZkPaths) -> None:
        """This worker left the plan cleanly: a later worker of this id is a new one."""
        try:
            zk.delete(paths.lives(self.topology, self.worker_id))
        except Exception:  # noqa: BLE001
            pass
