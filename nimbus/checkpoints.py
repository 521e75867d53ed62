"""The checkpoint coordinator: one thread of the leading Nimbus.

For every topology with ``topology.state.provider`` ``lmdb`` or ``redis`` it keeps the
checkpoint record in ZooKeeper (:class:`~nstorm.state.record.CheckpointRecord`), which the
workers watch for their orders. Each pass:

1. **Rollback.** A worker that lost data asked for one (a request of the current epoch), or
   Nimbus reassigned the executors of lost workers (:meth:`CheckpointCoordinator.roll_back`):
   the epoch grows, ``restore`` is the last committed checkpoint that is whole in the store
   (else the one before it, else the empty start), and the pending checkpoint is dropped.
   After ``topology.state.max.rollbacks`` rollbacks in a row while the topology is active, with
   fewer than two checkpoints committed in between (a poison tuple that fails on every replay,
   a worker that dies whenever it starts), the topology is also deactivated, with
   ``last_error`` saying why: a rollback loop without end otherwise. One commit is no sign of
   progress: the spouts of a worker that rolls back late take the checkpoint already ordered
   at their restored position, before they emit anything. The first rollback is at once; each
   further one in a row waits out a backoff (``topology.state.rollback.backoff.ms``, doubled
   each time up to ``topology.state.rollback.backoff.max.ms``: Flink's exponential delay), so
   that a fault that comes back at once (a dependency down, a worker that dies whenever it
   starts) is not restored in a tight loop, and has time to pass before the bound gives up. The
   due time is in the record (``rollback_at``); no checkpoint is ordered meanwhile. A rollback
   asked for while a checkpoint is being taken does not wait: that checkpoint cannot complete
   (the worker that lost data passes no barrier on) and the bolts aligning it hold their other
   inputs until the rollback.
2. **Commit** (two phases: every executor wrote its part, then the record says committed,
   and the workers call ``on_commit``): once every user executor of the plan wrote the pending
   checkpoint. What the last two committed checkpoints need is kept, the rest pruned. A
   checkpoint not whole after ``topology.state.checkpoint.timeout.secs`` is abandoned.
3. **Order** the next checkpoint, ``topology.state.checkpoint.interval.ms`` after the last
   was ordered, while the topology is active.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from nstorm.clusterstate import ClusterState
from nstorm.config import merge_conf
from nstorm.errors import ConfigError
from nstorm.records import TopologyStatus
from nstorm.state.config import StateConfig, state_config
from nstorm.state.record import CheckpointRecord
from nstorm.state.store import StateError, StateStore, open_store, unpack_snapshot
from nstorm.topology import is_acker
from nstorm.zkschema import ACTIVE, INACTIVE, ZkPaths, decode, encode

__all__ = ["CheckpointCoordinator", "drop_checkpoints"]

log = logging.getLogger(__name__)

PASS_SECS = 0.05  # how often the coordinator looks at its topologies


class CheckpointCoordinator:
    """See the module docstring."""

    def __init__(self, zk: KazooClient, paths: ZkPaths, conf: Any = None) -> None:
        self.zk = zk
        self.paths = paths
        self.conf = conf
        self.cluster = ClusterState(zk, paths)
        self._stores: dict[str, tuple[str, StateStore]] = {}  # name -> (submission, store)
        self._rollbacks: dict[str, str] = {}  # name -> why Nimbus wants a rollback
        self._desired: dict[str, TopologyStatus] = {}  # name -> its status at the last pass
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoints", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for _sub, store in self._stores.values():
            store.close()
        self._stores.clear()

    def drop(self, name: str, topo: dict[str, Any] | None) -> None:
        """``name`` was killed: close its store here, then delete its checkpoints (any thread)."""
        with self._lock:
            held = self._stores.pop(name, None)
        self._desired.pop(name, None)
        if held is not None:
            held[1].close()
        drop_checkpoints(topo, name)

    def roll_back(self, name: str, reason: str) -> None:
        """Nimbus lost executors of ``name`` (their workers are gone): roll it back (any thread).

        Asked in memory and, for a topology with a checkpoint record, as a rollback request in
        ZooKeeper too, as a worker asks: a Nimbus that stops (or fails over) right after writing
        the repaired plan would otherwise lose it, and the lost executors start from the
        epoch's first checkpoint beside the others' live state (a mix the next commit keeps)."""
        with self._lock:
            self._rollbacks[name] = reason
        try:
            raw, _ = self.zk.get(self.paths.checkpoints(name))
            record = CheckpointRecord.from_json(raw)
            if record is None:
                return  # no durable state (or no checkpoint yet): nothing to roll back to
            body = {"epoch": record.epoch, "reason": reason, "worker": "nimbus", "at": time.time()}
            self.zk.create(f"{self.paths.rollback_requests(name)}/r-", encode(body), sequence=True, makepath=True)
        except Exception:  # noqa: BLE001 - no record, or ZooKeeper trouble: the request in memory stands
            log.debug("topology %s: rollback request not written to ZooKeeper", name, exc_info=True)

    def _run(self) -> None:
        while not self._stop.wait(PASS_SECS):
            try:
                names = self.cluster.names()
            except Exception:  # noqa: BLE001 - ZooKeeper away: the next pass tries again
                continue
            for name in names:
                try:
                    self.step(name)
                except Exception:
                    log.exception("checkpoints of %s: pass failed", name)
            for name in set(self._stores) - set(names):
                self._stores.pop(name)[1].close()

    # -- one pass over one topology --------------------------------------------------------
    def _config(self, topo: dict[str, Any]) -> StateConfig | None:
        conf = merge_conf(topo.get("definition", {}).get("conf"), topo.get("conf"))
        try:
            return state_config(conf)
        except ConfigError:
            return None

    def _store(self, name: str, config: StateConfig, submission: str) -> StateStore:
        with self._lock:
            held = self._stores.get(name)
            if held is not None and held[0] == submission:
                return held[1]
            if held is not None:
                held[1].close()
            store = open_store(config, name, submission)
            self._stores[name] = (submission, store)
            return store

    def step(self, name: str) -> None:
        """One pass over topology ``name`` (see the module docstring)."""
        topo = self.cluster.topology(name)
        if topo is None:
            return
        config = self._config(topo)
        if config is None or not config.durable:
            with self._lock:
                self._rollbacks.pop(name, None)  # nothing to roll back: state lives in memory
            return
        plan, _ = self.cluster.plan(name)
        submission = topo.get("submission")
        if plan is None or plan.submission != submission or submission is None:
            return
        desired, _ = self.cluster.status(name)
        if desired is TopologyStatus.KILLED:
            return
        path = self.paths.checkpoints(name)
        try:
            raw, stat = self.zk.get(path)
            version = stat.version
        except NoNodeError:
            raw, version = None, -1
        record = CheckpointRecord.from_json(raw)
        fresh = record is None or record.submission != submission
        if fresh:
            record = CheckpointRecord(submission=submission, provider=config.provider, interval_ms=config.interval_ms,
                                      pending_at=time.time())
        # A fresh record is written even where its node exists: a worker registering under it
        # (``lives``, makepath) may have created the node, empty, before this first pass.
        before = b"" if fresh else record.to_json()
        if self._desired.get(name) is TopologyStatus.INACTIVE and desired is TopologyStatus.ACTIVE:
            record.rollbacks_in_a_row = 0  # activated again (by a user): as many tries again
        self._desired[name] = desired
        try:
            store = self._store(name, config, submission)
        except StateError as exc:
            record.last_error = str(exc)
            self._write(path, record, before, version)
            return
        executors = sorted(e for e in plan.executors if not is_acker(e))
        reason = self._requested(name, record)
        wait = config.backoff_secs(record.rollbacks_in_a_row)
        # A checkpoint being taken waits for a barrier the worker that lost data will not pass on, and
        # the bolts that align it hold their other inputs meanwhile: no waiting then (nor during a
        # rescale, whose rollbacks are not counted).
        may_wait = desired is TopologyStatus.ACTIVE and not plan.rescales and not record.pending
        if reason is not None and not record.rollback_at and may_wait and wait > 0:
            record.rollback_at, record.rollback_reason = time.time() + wait, reason
            log.warning("topology %s: rollback %d in a row waits %.1f s (topology.state.rollback.backoff.ms): %s",
                        name, record.rollbacks_in_a_row + 1, wait, reason)
        if record.rollback_at:
            now = time.time()
            # Capped, so that a clock that stepped back (or another leader's) cannot stretch it.
            record.rollback_at = min(record.rollback_at, now + wait)
            if now < record.rollback_at and may_wait:
                self._write(path, record, before, version)  # (no checkpoint ordered while it waits)
                return
            reason = record.rollback_reason or reason or "a rollback that waited out its backoff"
            record.rollback_at, record.rollback_reason = 0.0, ""
        give_up = False
        if reason is not None:
            try:
                self._roll_back(name, record, store, reason)
            except StateError as exc:
                # Which checkpoint is whole cannot be told now: the rollback waits for the store
                # (the workers that lost data stay tainted; no checkpoint is ordered meanwhile).
                record.last_error = f"a rollback waits for the state store: {exc}"
                log.warning("topology %s: %s (%s)", name, record.last_error, reason)
                with self._lock:
                    self._rollbacks.setdefault(name, reason)
                self._write(path, record, before, version)
                return
            if desired is TopologyStatus.ACTIVE and not plan.rescales:  # (no checkpoint is ordered otherwise)
                record.rollbacks_in_a_row += 1
            give_up = bool(config.max_rollbacks) and record.rollbacks_in_a_row >= config.max_rollbacks
            if give_up:
                record.last_error = (
                    f"rolled back {record.rollbacks_in_a_row} times in a row with no progress (topology.state."
                    f"max.rollbacks; the last: {reason}): deactivated at checkpoint {record.restore}; "
                    f"`nstorm activate {name}` tries again")
                record.rollbacks_in_a_row = 0  # a fresh count once a user activates it again
        elif plan.rescales:
            # Key groups change owners: a checkpoint now would mix the layouts. The one being
            # taken is abandoned, the next is ordered once the rescale is done (in the new layout).
            if record.pending:
                log.info("topology %s: checkpoint %d abandoned: a rescale of %s started", name, record.pending,
                         ", ".join(sorted(plan.rescales)))
                self._drop_abandoned(name, store, record.pending)
                record.pending = 0
                record.abandoned += 1
            self._write(path, record, before, version)
            return
        elif record.pending:
            self._check_pending(name, record, store, executors, config)
        if not record.pending and plan.status is TopologyStatus.ACTIVE and reason is None:
            now = time.time()
            if now - record.pending_at >= config.interval_ms / 1000.0:
                record.pending = record.next_id
                record.next_id += 1
                record.pending_at = now
        if self._write(path, record, before, version) and give_up:
            self._deactivate(name, record)

    def _requested(self, name: str, record: CheckpointRecord) -> str | None:
        """Why ``name`` must roll back now (requests of older epochs are stale); None if it need not."""
        with self._lock:
            reason = self._rollbacks.pop(name, None)
        base = self.paths.rollback_requests(name)
        try:
            children = sorted(self.zk.get_children(base))
        except NoNodeError:
            children = []
        for child in children:
            try:
                raw, _ = self.zk.get(f"{base}/{child}")
                self.zk.delete(f"{base}/{child}")
                body = json.loads(raw.decode())
            except (NoNodeError, ValueError, UnicodeDecodeError):
                continue
            if isinstance(body, dict) and int(body.get("epoch", -1)) >= record.epoch and reason is None:
                reason = f"{body.get('worker')}: {body.get('reason')}"
        return reason

    def _whole(self, store: StateStore, cid: int, executors: int) -> bool:
        """True if the ``executors`` snapshots ``cid`` was committed with are in the store and decode
        (the topology's executors may have changed since: a rescale restores in its new layout).

        :raises StateError: the store cannot be read now: that says nothing of the checkpoint
            (an unreachable Redis is not a damaged checkpoint; restoring an older one, or none,
            would throw committed state away).
        """
        try:
            written = store.written(cid)
            if len(written) < executors:
                return False
            for executor in written:
                blob = store.executor(cid, executor)
                if blob is None:
                    return False
                unpack_snapshot(blob)
        except ValueError as exc:
            log.warning("checkpoint %d cannot be restored (%s): skipped", cid, exc)
            return False
        return True

    def _roll_back(self, name: str, record: CheckpointRecord, store: StateStore, reason: str) -> None:
        restore = 0
        for cid, count in ((record.committed, record.committed_executors), (record.previous, record.previous_executors)):
            if cid and self._whole(store, cid, count):
                restore = cid
                break
            if cid:
                log.warning("topology %s: checkpoint %d is incomplete or damaged: skipped", name, cid)
        record.epoch += 1
        record.restore = restore
        if record.pending:
            self._drop_abandoned(name, store, record.pending)
        record.pending = 0
        record.pending_at = time.time()
        record.restores += 1
        record.commits_since_rollback = 0
        record.last_restore = {"id": restore, "at": time.time(), "epoch": record.epoch, "reason": reason}
        log.warning("topology %s: rolling back to checkpoint %d (epoch %d): %s", name, restore, record.epoch, reason)

    @staticmethod
    def _drop_abandoned(name: str, store: StateStore, cid: int) -> None:
        """An abandoned checkpoint's snapshots go at once: while commits keep failing (state that
        is not msgpack, an ``on_checkpoint`` that raises), the next commit's prune never comes
        and every interval would add a snapshot per executor until the store is full."""
        try:
            store.drop_snapshots(cid)
        except StateError as exc:
            log.warning("topology %s: %s", name, exc)

    def _deactivate(self, name: str, record: CheckpointRecord) -> None:
        """Too many rollbacks in a row (the record saying so is written): the topology stays at its
        restored checkpoint, inactive (its spouts emit nothing), until a user activates it again.
        Only an active topology is deactivated: a kill or a user's change meanwhile wins."""
        log.error("topology %s: %s", name, record.last_error)
        path = self.paths.status(name)
        try:
            raw, stat = self.zk.get(path)
            current = decode(raw)
            if not isinstance(current, dict) or current.get("status") != ACTIVE:
                return
            self.zk.set(path, encode({"status": INACTIVE, "updated_at": time.time()}), version=stat.version)
        except (NoNodeError, BadVersionError, ValueError):
            pass  # killed or changed meanwhile (or garbage): left as it is

    def _check_pending(self, name: str, record: CheckpointRecord, store: StateStore, executors: list[str],
                       config: StateConfig) -> None:
        cid = record.pending
        store_error = None
        try:
            written = store.written(cid)
        except StateError as exc:
            store_error = str(exc)
            written = {}
        now = time.time()
        if set(executors) <= set(written):
            record.previous, record.committed = record.committed, cid
            record.previous_executors, record.committed_executors = record.committed_executors, len(executors)
            record.committed_at = now
            record.duration_ms = (now - record.pending_at) * 1000.0
            record.bytes = sum(written[e] for e in executors)
            record.pending = 0
            record.commits_since_rollback += 1
            if record.commits_since_rollback >= 2:  # (see the module docstring)
                record.rollbacks_in_a_row = 0
            record.last_error = None
            keep = record.previous or record.committed
            try:
                store.prune(keep)
            except StateError as exc:
                log.warning("topology %s: %s", name, exc)
            return
        if now - record.pending_at > config.timeout_secs:
            missing = [e for e in executors if e not in written]
            errors = store_error or self._executor_errors(name, missing)
            record.last_error = (f"checkpoint {cid} abandoned after {config.timeout_secs:g}s: no snapshot from "
                                 f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
                                 + (f" ({errors})" if errors else ""))
            record.abandoned += 1
            self._drop_abandoned(name, store, cid)
            record.pending = 0
            log.warning("topology %s: %s", name, record.last_error)
        elif store_error and not record.last_error:
            record.last_error = store_error

    def _executor_errors(self, name: str, executors: list[str]) -> str:
        """The checkpoint errors the workers' heartbeats report for ``executors``."""
        found = []
        try:
            beats = self.cluster.heartbeats(name)
        except Exception:  # noqa: BLE001
            return ""
        for beat in beats.values():
            for eid, counters in beat.executors.items():
                error = (counters.get("checkpoint") or {}).get("error") if isinstance(counters, dict) else None
                if eid in executors and error:
                    found.append(str(error))
        return "; ".join(found[:3])

    def _write(self, path: str, record: CheckpointRecord, before: bytes, version: int) -> bool:
        """Write ``record`` if it changed; False if the node changed meanwhile (nothing written)."""
        data = record.to_json()
        if data == before and version >= 0:
            return True
        try:
            if version < 0:
                self.zk.create(path, data, makepath=True)
            else:
                self.zk.set(path, data, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False  # changed meanwhile (a kill, another leader): the next pass reads it again
        return True


def drop_checkpoints(topo: dict[str, Any] | None, name: str) -> None:
    """Delete a killed topology's checkpoints from its store (its record goes with its ZooKeeper nodes)."""
    if not topo or not topo.get("submission"):
        return
    conf = merge_conf(topo.get("definition", {}).get("conf"), topo.get("conf"))
    try:
        config = state_config(conf)
        if not config.durable:
            return
        store = open_store(config, name, topo["submission"])
        store.drop()
        store.close()
    except (ConfigError, StateError) as exc:
        log.warning("topology %s: its checkpoints could not be deleted: %s", name, exc)
