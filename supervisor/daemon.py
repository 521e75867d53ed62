"""The supervisor daemon: one per node; mirrors its node's plans into LMDB and keeps workers alive.

It registers an ephemeral ``supervisors/<node>`` node with its slots, then syncs
on every ZooKeeper watch event and at least every ``supervisor.sync.interval.ms``
(TS): for each assignment with workers on this node it writes the local plan
(the plan, the topology definition and conf, the unpacked code directory) into
the node's LMDB store, then starts a worker process per used slot, restarts
workers that died and stops workers no longer planned here.

States: ``STARTING -> RUNNING`` once registered; ``RUNNING -> STOPPING`` on
SIGTERM/SIGINT; ``STOPPING -> STOPPED`` after its workers are stopped.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from kvstore import LMDBPlanStore, StoreCorruptError
from nstorm.clusterstate import ClusterState
from nstorm.config import daemon_flag, merge_conf, positive_number
from nstorm.curvekeys import checked_keys_dir
from nstorm.errors import ConfigError
from nstorm.home import home_dir, home_lock, logs_dir, supervisor_dir
from nstorm.loader import unpack_archive
from nstorm.loglevels import LogConfig, store_key
from nstorm.logtail import dump_request
from nstorm.plan import LocalPlan
from nstorm.signals import relay_signals
from nstorm.ticker import passes
from nstorm.zkauth import credentials_env
from nstorm.zkschema import ZkPaths, connect, decode, encode
from supervisor.cpulimit import ENV_CPU_LIMIT, CpuLimiter
from supervisor.logserver import LogServer
from supervisor.machine import machine_id
from supervisor.workers import WorkerHandle, WorkerRegistry, write_json_atomic

__all__ = ["Supervisor", "pick_slots"]

log = logging.getLogger(__name__)

_YOUNG_SECS = 10.0  # a worker that exits sooner than this after its start died young
_NUDGE_AFTER_SECS = 1.0  # a younger worker reads the latest plan as it starts: no nudge
_BACKOFF_MAX_SECS = 30.0


def _started_after(proc: WorkerHandle | None, when: float | None) -> bool:
    """True if ``proc`` started after wall-clock time ``when`` (a plan's write): it runs that plan
    from its start, so a process-mode restart asked in it is done."""
    if proc is None or when is None:
        return False
    try:
        return proc.process.create_time() > when
    except psutil.Error:
        return False


def check_supervisor_conf(conf: Mapping[str, Any]) -> None:
    """A supervisor's own settings, checked as it is built (and by ``nstorm supervisor`` before it
    prints a word): run() reads some only after it has connected, where a bad one was a traceback.

    :raises ConfigError: one line naming the setting.
    """
    for key in ("supervisor.worker.timeout.secs", "supervisor.worker.start.timeout.secs",
                "supervisor.sync.interval.ms", "nimbus.supervisor.timeout.secs", "nstorm.zookeeper.session.timeout.secs"):
        positive_number(conf, key)
    if conf.get("supervisor.worker.cpu.limit") is not None:  # None (or 0): uncapped
        positive_number(conf, "supervisor.worker.cpu.limit", zero_ok=True)
    daemon_flag(conf, "supervisor.sync.watch", True)
    logviewer_port(conf)


def logviewer_port(conf: Mapping[str, Any]) -> int | None:
    """``supervisor.logviewer.port``: a port (0: one the OS picks), or None: no logviewer.

    :raises ConfigError: one line naming the setting.
    """
    value = conf.get("supervisor.logviewer.port")
    if value is None:
        return None
    number = positive_number(conf, "supervisor.logviewer.port", zero_ok=True)
    if number != int(number) or number > 65535:
        msg = f"-c supervisor.logviewer.port={value!r}: expected a port (0: a free one) or null (none)"
        raise ConfigError(msg)
    return int(number)


class Supervisor:
    """The node daemon. See the module docstring."""

    def __init__(
        self,
        node: str,
        host: str,
        slots: list[tuple[int, int]],
        zk_address: str,
        zk_root: str = "/nstorm",
        conf: Mapping[str, Any] | None = None,
    ) -> None:
        self.node = node
        self.host = host
        self.slots = slots
        self.zk_address = zk_address
        self.paths = ZkPaths(zk_root)
        self.conf = merge_conf(conf)
        self.curve_keys = checked_keys_dir(self.conf)  # ConfigError now, not in every worker later
        check_supervisor_conf(self.conf)
        self.beat_timeout = float(self.conf["supervisor.worker.timeout.secs"])
        self.start_timeout = float(self.conf["supervisor.worker.start.timeout.secs"])
        self.state = "STARTING"
        self.dir = supervisor_dir(node)
        self.store_path = self.dir / "store"
        self.store: LMDBPlanStore | None = None
        self.zk: KazooClient | None = None
        self.cluster: ClusterState | None = None
        self.registry = WorkerRegistry(self.dir / "workers", node, zk_root,
                                       str(self.curve_keys) if self.curve_keys else None)
        self.workers: dict[tuple[str, int], WorkerHandle] = {}
        self.stopping: dict[int, tuple[WorkerHandle, threading.Thread]] = {}  # port -> a worker on its way out
        self.stop_timeout = 5.0  # seconds from a worker's SIGTERM to its SIGKILL
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._topo_cache: dict[str, tuple[str, dict[str, Any]]] = {}
        self._stored_submission: dict[str, str | None] = {}  # topology -> submission of its plans in the store
        self._restarted: set[tuple[str, str | None, int, int]] = set()  # process-mode restarts already done
        self._log_levels: dict[str, dict[str, Any]] = {}  # topology -> the log levels mirrored last
        self._desired: set[tuple[str, int]] | None = None  # the worker slots the last sync wanted
        # N-Storm+ reacts to a plan change through a watch at once; without it only TS applies.
        self._use_watch = daemon_flag(self.conf, "supervisor.sync.watch", True)  # bool("false") was True
        self._lost = False
        self.cpu = CpuLimiter(self.conf.get("supervisor.worker.cpu.limit"), node, str(home_dir()))
        port = logviewer_port(self.conf)
        own_log = logs_dir() / f"supervisor-{node}.log"  # (nstorm.logs: where `nstorm supervisor` writes)
        self.logviewer = LogServer(logs_dir(), host, port, self._ask_dump, own_log) if port is not None else None

    # -- ZooKeeper ------------------------------------------------------------------------
    def _watch(self, *_: Any) -> None:
        self._wake.set()

    @property
    def _watcher(self) -> Any:
        return self._watch if self._use_watch else None

    def _register(self) -> None:
        assert self.zk is not None
        path = self.paths.supervisor(self.node)
        # cores and worker_cpu_limit: OTD's autoscaling adds no capped worker to a machine whose caps
        # take its cores; machine: which supervisors share those cores (their hosts may differ)
        data = encode({"node": self.node, "host": self.host, "slots": self.slots, "pid": os.getpid(),
                       "started_at": time.time(), "cores": len(os.sched_getaffinity(0)), "machine": machine_id(),
                       "worker_cpu_limit": self.cpu.cores if self.cpu.enabled else 0,
                       **({"logviewer": self.logviewer.registration()} if self.logviewer else {})})
        deadline = time.monotonic() + float(self.conf["nstorm.zookeeper.session.timeout.secs"]) * 2
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                # A previous session of ours (a killed supervisor) holds it until the session expires.
                # If that supervisor is dead, take the node over now; else wait for it to go.
                if time.monotonic() > deadline or self._predecessor_dead(path):
                    log.info("taking over %s from a previous session", path)
                    try:
                        self.zk.delete(path)
                    except NoNodeError:
                        pass
                else:
                    time.sleep(0.5)

    def _predecessor_dead(self, path: str) -> bool:
        """True if ``path`` was registered from this host by a process that no longer runs."""
        assert self.zk is not None
        try:
            info = decode(self.zk.get(path)[0]) or {}
        except (NoNodeError, ValueError):
            return False
        pid = int(info.get("pid") or 0)
        if info.get("host") != self.host or not pid or pid == os.getpid():
            return False
        try:
            return "supervisor" not in " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            return True

    def _on_state(self, state: str) -> None:
        log.info("ZooKeeper connection %s", state)
        if state == KazooState.LOST:
            self._lost = True  # the ephemeral registration went with the session
        if state == KazooState.CONNECTED:
            self._wake.set()

    def _reregister_if_lost(self) -> None:
        """After a session expired (ZooKeeper restarted empty, or a long cut), register again."""
        assert self.zk is not None
        if not self._lost and self.zk.exists(self.paths.supervisor(self.node)):
            return
        self._lost = False
        self.paths.ensure(self.zk)
        self._register()
        log.info("registered again after the ZooKeeper session was lost")

    # -- sync ------------------------------------------------------------------------------
    def _topology_info(self, name: str, submission: str | None, sha: str) -> dict[str, Any]:
        """The stored topology (definition, conf, unpacked code) of one submission of ``name``.

        Cached by submission and code: the same file submitted again under the same name, with
        other ``-c`` options, is another submission and gets its own options.
        """
        key = f"{submission}/{sha}"
        cached = self._topo_cache.get(name)
        if cached and cached[0] == key:
            return cached[1]
        assert self.zk is not None and self.cluster is not None
        info = self.cluster.topology(name)
        if info is None:
            msg = f"topology {name} has no record"
            raise NoNodeError(msg)
        code, _ = self.zk.get(self.paths.code(name))
        code_dir = unpack_archive(code, sha, self.dir / "code" / name / sha[:16])
        info["code_dir"] = str(code_dir)
        if info.get("submission") != submission:
            msg = f"topology {name} was submitted again meanwhile"
            raise NoNodeError(msg)  # this plan is stale: the next sync reads the new one
        self._topo_cache[name] = (key, info)
        return info

    def _retire_other_submission(self, name: str, submission: str | None) -> None:
        """``name`` was killed and submitted again: stop the workers of the old submission and
        forget its plans, before anything of the new one is written or started."""
        if submission is None:
            return
        for key, proc in list(self.workers.items()):
            if key[0] == name and proc.submission is not None and proc.submission != submission:
                log.info("worker %s:%d runs an earlier submission of %s: stopping it", self.node, key[1], name)
                self._stop_worker(proc)
                del self.workers[key]
        assert self.store is not None
        if name not in self._stored_submission:  # read once: kept up to date with every write
            latest = self.store.latest(name)
            self._stored_submission[name] = latest[1].get("submission") if latest else None
        stored = self._stored_submission[name]
        if stored is not None and stored != submission:
            self.store.remove(name)
            del self._stored_submission[name]
            log.info("plans of an earlier submission of %s removed from the store", name)

    def sync(self) -> None:
        """Mirror the plans of this node into LMDB and reconcile worker processes."""
        self._check_store()
        assert self.zk is not None and self.store is not None and self.cluster is not None
        self._reregister_if_lost()
        desired: set[tuple[str, int]] = set()
        planned: set[str] = set()
        for name in self.cluster.children(self.paths.assignments, watch=True):
            plan, stat = self.cluster.plan(name, watch=True)
            if plan is None:
                if stat is not None and self.store.latest_version(name) is not None:
                    planned.add(name)  # damaged (logged once): the last good plan stays in force
                    desired.update(k for k in self.workers if k[0] == name)
                continue
            ports = [slot.port for slot in plan.workers.values() if slot.node == self.node]
            if not ports:
                continue
            planned.add(name)
            try:
                self._retire_other_submission(name, plan.submission)
                if self.store.latest_version(name) != plan.version:
                    info = self._topology_info(name, plan.submission, plan.code_sha256)
                    local = LocalPlan(plan, info["definition"], merge_conf(info["definition"].get("conf"), info.get("conf")),
                                      info.get("user_conf", {}), info["code_dir"], info["main"])
                    self.store.put_plan(name, plan.version, local.to_json())
                    self._stored_submission[name] = plan.submission
                    log.info("plan of %s v%d written to the store (ports %s)", name, plan.version, ports)
                    self._nudge(name)
            except NoNodeError:
                continue
            except StoreCorruptError:
                raise  # the pass rebuilds the store
            except Exception:
                # Disk full, ZooKeeper gone while reading the code...: the workers running here
                # keep the last plan in the store (as for a damaged plan), none is stopped for it.
                log.exception("cannot write the plan of %s", name)
                desired.update(k for k in self.workers if k[0] == name)
                continue
            desired.update((name, p) for p in ports)
            try:
                self._mirror_log_levels(name)
            except StoreCorruptError:
                raise  # the pass rebuilds the store
            except Exception:  # noqa: BLE001 - the plans are written: the workers keep the levels they have
                log.exception("cannot mirror the log levels of %s", name)
            for port in ports:
                # Keyed by the version that asked: a later plan carries the ask on, so a restart
                # asked in a version this supervisor never read (two written in one Nimbus pass) is done too.
                asked = plan.restart.get(f"{self.node}:{port}")
                key = (name, plan.submission, port, asked)
                if asked is not None and key not in self._restarted:
                    self._restarted.add(key)
                    if self._ran_since(name, port, asked, plan.updated_at):
                        continue  # restarted for it already (by this supervisor before it restarted itself)
                    proc = self.workers.pop((name, port), None)
                    if proc is not None:
                        log.info("process-mode rebalance: restarting worker %s:%d of %s", self.node, port, name)
                        self._stop_in_background(proc)  # started again once it is gone (its port is busy)
        for name in self.store.topologies():
            if name not in planned:
                self.store.remove(name)
                self.store.remove_meta(store_key(name))
                self._log_levels.pop(name, None)
                self._stored_submission.pop(name, None)
                log.info("topology %s has no workers here any more: removed from the store", name)
        if self.store.get_meta("synced") is None:
            # Workers take a missing topology for "stop" only once a store has been synced:
            # a store rebuilt empty must not stop them before their plans are back.
            self.store.put_meta("synced", {"at": time.time()})
        self._desired = desired
        self._reconcile(desired)

    def _mirror_log_levels(self, name: str) -> None:
        """Mirror ``name``'s dynamic log levels (nstorm.loglevels) into the store, and nudge its
        workers here when they changed: they read them at once."""
        assert self.cluster is not None and self.store is not None and self.zk is not None
        path = self.paths.logconfig(name)
        raw, stat = self.cluster.read(path, watch=True)
        if stat is None:
            self.zk.exists(path, watch=self._watcher)  # a watch for its creation (a read sets none)
        config = LogConfig.from_json(raw).to_json()
        key = store_key(name)
        if self._log_levels.get(name) == config:
            return
        if self.store.get_meta(key) != config:
            self.store.put_meta(key, config)
            self._nudge(name)
        self._log_levels[name] = config

    def _ran_since(self, name: str, port: int, asked: int, written_at: float | None) -> bool:
        """Whether the worker running on ``port`` runs plan ``asked`` or later from its start: it
        started after the plan read now was written, or its heartbeat (this process's) says it
        applied ``asked`` (a worker waiting for its restart applies no plan from then on)."""
        proc = self.workers.get((name, port))
        if proc is None or _started_after(proc, written_at):
            return proc is not None
        assert self.cluster is not None
        beat = self.cluster.heartbeat(name, f"{self.node}:{port}")
        return beat is not None and beat.pid == proc.pid and beat.version >= asked

    def _check_store(self) -> None:
        """Free the reader slots of workers that died (LMDB's table is full after ~126, and then
        nothing reads); rebuild a store removed or swapped under this writer."""
        if self.store is None:  # a rebuild failed (permissions, disk): try again each pass
            self._rebuild_store("could not be opened")
        assert self.store is not None
        if self.store.replaced():
            self._rebuild_store("its files were removed or replaced")
        self.store.clear_stale_readers()

    def _rebuild_store(self, why: str) -> None:
        """Reopen the plan store (moved aside and started empty if corrupt) and write every plan
        again on this pass: section 6, a corrupt or unreadable store is rebuilt from ZooKeeper."""
        log.warning("plan store %s %s: rebuilding it from ZooKeeper", self.store_path, why)
        if self.store is not None:
            self.store.close()
        self.store = None
        self._stored_submission.clear()
        self._log_levels.clear()  # written again too
        self.store, _ = LMDBPlanStore.open_or_rebuild(self.store_path)

    def _nudge(self, name: str) -> None:
        """Tell the running workers of ``name`` that a new plan is in the store (SIGUSR1): they
        read it at once instead of at their next poll (TW), so that every worker of a topology
        applies a move within milliseconds of the others. N-Storm+ reacts to a plan change at
        once (``supervisor.sync.watch``); without it, workers keep to TW, as in N-Storm."""
        if not self._use_watch:
            return
        for (topology, _port), proc in self.workers.items():
            if topology == name and proc.poll() is None and time.monotonic() - proc.started_at > _NUDGE_AFTER_SECS:
                try:
                    proc.process.send_signal(signal.SIGUSR1)
                except psutil.Error:
                    pass

    # -- worker processes ---------------------------------------------------------------------
    def _start_worker(self, topology: str, port: int, restarts: int = 0) -> WorkerHandle:
        record = self.store.latest(topology) if self.store else None
        seed = str((record[1]["conf"] if record else self.conf).get("topology.hash.seed", 0))
        env = {**os.environ, "PYTHONHASHSEED": seed, **credentials_env(self.conf)}  # secrets not in argv
        if self.cpu.enabled:
            env[ENV_CPU_LIMIT] = str(self.cpu.cores)
        cmd = [
            sys.executable, "-m", "worker",
            "--node", self.node, "--port", str(port), "--topology", topology,
            "--store", str(self.store_path), "--zk", self.zk_address, "--root", self.paths.root,
            *(["--curve-keys", str(self.curve_keys)] if self.curve_keys else []),
        ]
        out = open(logs_dir() / f"worker-{self.node}-{port}.out", "ab")  # noqa: SIM115 - owned by the child
        try:
            popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            out.close()
        capped = self.cpu.apply(popen.pid, port)
        log.info("started worker %s:%d for %s (pid %d%s)", self.node, port, topology, popen.pid,
                 f", capped at {self.cpu.cores} cores" if capped else "")
        submission = record[1].get("submission") if record else None
        try:
            handle = self.registry.record(topology, port, popen, submission if isinstance(submission, str) else None)
        except BaseException:
            # Not recorded (disk full): a worker nobody tracks would run on unmanaged, and the
            # next pass would start another beside it.
            popen.kill()
            popen.wait()
            raise
        handle.restarts = restarts
        handle.beat_timeout = self._beat_timeout(record[1]["conf"] if record else None)
        return handle

    def _beat_timeout(self, topology_conf: Mapping[str, Any] | None) -> float:
        """How stale a worker's local heartbeat may get: its topology's
        ``topology.worker.timeout.secs`` (Storm 2's), else ``supervisor.worker.timeout.secs``."""
        try:
            own = float((topology_conf or {}).get("topology.worker.timeout.secs") or 0)
        except (TypeError, ValueError):
            own = 0.0  # checked at submit: a stored plan from before the check
        return own if own > 0 else self.beat_timeout

    def _kill_if_hung(self, proc: WorkerHandle) -> None:
        """Kill a running worker whose local heartbeat went stale (stopped, deadlocked, or stuck in C
        code that holds the GIL): the next pass restarts it, as Storm's supervisor does."""
        if proc.hung:
            return  # killed already: the next pass, once it is reaped, restarts it
        age, beaten = proc.beat_age(self.registry.beat_file(proc.port), time.monotonic())
        limit = proc.beat_timeout if beaten else self.start_timeout
        if age <= limit:
            return
        proc.hung = True
        log.warning("worker %s:%d of %s (pid %d) has sent no heartbeat for %.0fs (%s %.0fs): killing it",
                    self.node, proc.port, proc.topology, proc.pid, age,
                    "timeout" if beaten else "start timeout", limit)
        try:
            proc.process.kill()  # SIGKILL: a stopped or GIL-stuck process handles no SIGTERM
        except psutil.Error:
            pass

    def _reconcile(self, desired: set[tuple[str, int]]) -> None:
        self._reap_stopped()
        for key, proc in list(self.workers.items()):
            if key not in desired:
                self._stop_in_background(proc)
                del self.workers[key]
        busy_ports = {port for _, port in self.workers} | self.stopping.keys()
        for key in sorted(desired):
            topology, port = key
            proc = self.workers.get(key)
            if proc is not None:
                code = proc.poll()
                if code is None:
                    self._kill_if_hung(proc)
                    continue
                # A worker that dies young (a bad key file, wrong credentials, a port taken) is
                # restarted after 0.5, 1, 2 ... 30 s, not every sync: its log is not flooded.
                young = (proc.exited_at or 0.0) - proc.started_at < _YOUNG_SECS
                restarts = proc.restarts + 1 if young else 0
                delay = min(_BACKOFF_MAX_SECS, 0.5 * 2 ** (restarts - 1)) if restarts else 0.0
                if time.monotonic() < (proc.exited_at or 0.0) + delay:
                    continue
                how = "after an unhandled error" if code == 1 else f"with code {code}"
                if proc.hung:
                    how = "after its heartbeat went stale"
                log.warning("worker %s:%d of %s exited %s: restarting%s", self.node, port, topology, how,
                            f" (restart {restarts} in a row after {delay:.1f}s)" if restarts else "")
            else:
                if port in busy_ports:
                    continue  # slot still used by another topology's worker being stopped
                restarts = 0
            self.workers[key] = self._start_worker(topology, port, restarts)

    def _stop_worker(self, proc: WorkerHandle) -> None:
        """Stop ``proc`` and wait for it: where what follows needs it gone (the plans of a
        resubmission are written next)."""
        self._stop_in_background(proc)
        stopping = self.stopping.get(proc.port)
        if stopping is not None:
            stopping[1].join()  # bounded: SIGKILL after the timeout
        self._reap_stopped()

    def _wait_stopped(self) -> None:
        """Wait for every background stop (bounded: each SIGKILLs after its timeout), then forget them."""
        for _proc, thread in self.stopping.values():
            thread.join()
        self._reap_stopped()

    def _stop_in_background(self, proc: WorkerHandle) -> None:
        """Stop ``proc`` in a thread of its own (SIGTERM, SIGKILL after ``stop_timeout``): a worker slow
        to stop must not hold this loop, which writes every other topology's plans and nudges their
        workers. Its port stays taken until it is gone; the thread wakes the loop when it is."""
        if proc.poll() is not None:
            self._forget(proc)
            return
        log.info("stopping worker %s:%d of %s (pid %d)", self.node, proc.port, proc.topology, proc.pid)

        timeout = self.stop_timeout

        def stop() -> None:
            proc.stop(timeout)
            self._wake.set()

        thread = threading.Thread(target=stop, name=f"stop-{proc.port}", daemon=True)
        self.stopping[proc.port] = (proc, thread)
        thread.start()

    def _reap_stopped(self) -> None:
        """Forget the workers whose background stop has ended (their ports are free again)."""
        for port, (proc, thread) in list(self.stopping.items()):
            if not thread.is_alive():
                del self.stopping[port]
                self._forget(proc)

    def _forget(self, proc: WorkerHandle) -> None:
        self.registry.forget(proc.topology, proc.port)
        self.cpu.release(proc.port)

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> int:
        self.store, rebuilt = LMDBPlanStore.open_or_rebuild(self.store_path)
        if rebuilt:
            log.warning("plan store was corrupt: rebuilt empty, resyncing from ZooKeeper")
        for handle in self.registry.adopt():
            record = self.store.latest(handle.topology)
            handle.beat_timeout = self._beat_timeout(record[1]["conf"] if record else None)
            self.workers[(handle.topology, handle.port)] = handle
        self.zk = connect(self.zk_address, session_timeout=float(self.conf["nimbus.supervisor.timeout.secs"]),
                          auth=self.conf["nstorm.zookeeper.auth"])
        self.zk.add_listener(self._on_state)
        self.paths.ensure(self.zk)
        self.cluster = ClusterState(self.zk, self.paths, watch=self._watcher)
        self._start_logviewer()
        self._register()
        self.state = "RUNNING"
        log.info("supervisor %s running on %s with slots %s", self.node, self.host, self.slots)
        interval = float(self.conf["supervisor.sync.interval.ms"]) / 1000.0
        away = False
        self._wake.set()
        for _ in passes(self._stop, self._wake, interval):
            away = self._pass(away, interval)
        self.shutdown()
        return 0

    def _start_logviewer(self) -> None:
        """Serve the node's worker logs (supervisor/logserver.py); a port that is taken costs the
        UI the logs of this node, not the node its supervisor."""
        if self.logviewer is None:
            return
        try:
            port = self.logviewer.start()
        except OSError as exc:
            log.error("logviewer: cannot serve on port %s (%s); the UI shows no logs of this node",
                      self.logviewer.port, exc)
            self.logviewer = None
            return
        log.info("logviewer serving this node's worker logs on port %d", port)

    def _ask_dump(self, worker_id: str) -> tuple[int, str] | None:
        """Ask this node's worker ``node:port`` for a thread dump (worker/threaddump.py): a request
        file beside its log, then a nudge. None if asked, else why not (an HTTP status and a
        message). A worker that has not beaten yet may not handle SIGUSR1 yet (its default ends a
        process): it is starting. (Called from the logviewer's thread, over a copy of the workers.)"""
        node, _, port = worker_id.rpartition(":")
        handle = next((h for h in list(self.workers.values()) if str(h.port) == port), None) if node == self.node else None
        if handle is None or handle.poll() is not None:
            return 404, f"no worker {worker_id} runs on this node"
        if handle.beat_at is None:  # (beat_mtime may be the slot's previous worker's)
            return 409, f"worker {worker_id} is starting: ask again once it runs"
        dump_request(logs_dir(), worker_id).touch()
        try:
            handle.process.send_signal(signal.SIGUSR1)
        except psutil.Error:
            return 404, f"no worker {worker_id} runs on this node"
        return None

    def _pass(self, away: bool, interval: float) -> bool:
        """One pass of the loop: sync with ZooKeeper, or, while it is away, keep the workers the
        last sync wanted running (a call now would wait for the reconnect, kazoo queues it: a
        crashed worker would stay down and SIGTERM unanswered). True while ZooKeeper is away."""
        assert self.zk is not None
        try:
            if not self.zk.connected and self._desired is not None:
                if not away:
                    log.warning("ZooKeeper unreachable; workers keep running, sync retried")
                self._reconcile(self._desired)
                return True
            self.sync()
            return False
        except (ConnectionLoss, SessionExpiredError, KazooTimeoutError) as exc:
            if not away:  # one line per outage; the workers go on without ZooKeeper
                log.warning("ZooKeeper unreachable (%s); workers keep running, sync retried", type(exc).__name__)
            return True
        except StoreCorruptError as exc:
            self._rebuild_store(f"is damaged ({exc})")
            return away
        except Exception:
            log.exception("sync failed; retrying in %.1fs", interval)
            return away

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        self._wake.set()

    def shutdown(self) -> None:
        self.state = "STOPPING"
        for proc in self.workers.values():
            self._stop_in_background(proc)  # all at once: SIGTERM to every worker, then wait
        self.workers.clear()
        self._wait_stopped()
        self.cpu.close()
        if self.logviewer is not None:
            self.logviewer.stop()
        if self.zk is not None:
            try:
                self.zk.delete(self.paths.supervisor(self.node))
            except Exception:  # noqa: BLE001
                pass
            self.zk.stop()
            self.zk.close()
        if self.store is not None:
            self.store.close()
        self.state = "STOPPED"
        log.info("supervisor %s stopped", self.node)

    def install_signal_handlers(self) -> None:
        relay_signals({signal.SIGTERM: self.request_stop, signal.SIGINT: self.request_stop})


def pick_slots(count: int, port_base: int, host: str, node: str | None = None) -> list[tuple[int, int]]:
    """``count`` (data, control) port pairs: ``base+i``/``base+1000+i``, or free ports if base is 0.

    Free ports are remembered in the node's directory: a restarted supervisor
    gets the same slots back, so the workers it adopts are still in them. Supervisors
    that share a home (a local cluster on one host) never get a port of another's slots:
    a port is free when picked and taken only when a worker starts, so two nodes could
    otherwise both get it, and their workers would then send to each other's.
    """
    if port_base:
        return [(port_base + i, port_base + 1000 + i) for i in range(count)]
    if not node:
        return _free_slots(count, host, set())
    remembered = supervisor_dir(node) / "slots.json"
    nodes = remembered.parent.parent
    with home_lock(nodes / ".slots.lock"):  # two supervisors starting at once see each other's slots
        others = {p for path in nodes.glob("*/slots.json") if path != remembered
                  for p in _ports((_saved_slots(path) or ("", []))[1])}
        saved = _saved_slots(remembered)
        if saved is not None and saved[0] == host and len(saved[1]) == count:
            if not others & _ports(saved[1]):
                return saved[1]
            log.warning("slots of %s %s share ports with another node of this home: picking new ones", node, saved[1])
        slots = _free_slots(count, host, others)
        write_json_atomic(remembered, {"host": host, "slots": slots})
        return slots


def _saved_slots(path: Path) -> tuple[str, list[tuple[int, int]]] | None:
    """``(host, slots)`` remembered in ``path``; None if there is none (or it is unreadable)."""
    try:
        saved = json.loads(path.read_text())
        return str(saved.get("host")), [(int(p), int(c)) for p, c in saved.get("slots", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _ports(slots: list[tuple[int, int]]) -> set[int]:
    return {p for slot in slots for p in slot}


def _free_slots(count: int, host: str, taken: set[int]) -> list[tuple[int, int]]:
    from nstorm.net import free_port

    ports: list[int] = []
    while len(ports) < 2 * count:
        p = free_port(host)
        if p not in ports and p not in taken:
            ports.append(p)
    return [(ports[2 * i], ports[2 * i + 1]) for i in range(count)]

