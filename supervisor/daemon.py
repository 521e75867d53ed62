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

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from kvstore import LMDBPlanStore
from nstorm.config import merge_conf
from nstorm.curvekeys import checked_keys_dir
from nstorm.home import logs_dir, supervisor_dir
from nstorm.loader import unpack_archive
from nstorm.zkauth import credentials_env
from nstorm.zkschema import ZkPaths, connect, decode, encode

__all__ = ["Supervisor"]

log = logging.getLogger(__name__)


@dataclass
class _WorkerProc:
    topology: str
    port: int
    popen: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)
    restarts: int = 0


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
        self.state = "STARTING"
        self.dir = supervisor_dir(node)
        self.store_path = self.dir / "store"
        self.store: LMDBPlanStore | None = None
        self.zk: KazooClient | None = None
        self.workers: dict[tuple[str, int], _WorkerProc] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._topo_cache: dict[str, tuple[str, dict[str, Any]]] = {}
        self._restarted: set[tuple[str, int, int]] = set()  # process-mode restarts already done
        # N-Storm+ reacts to a plan change through a watch at once; without it only TS applies.
        self._use_watch = bool(self.conf.get("supervisor.sync.watch", True))

    # -- ZooKeeper ------------------------------------------------------------------------
    def _watch(self, *_: Any) -> None:
        self._wake.set()

    @property
    def _watcher(self) -> Any:
        return self._watch if self._use_watch else None

    def _register(self) -> None:
        assert self.zk is not None
        path = self.paths.supervisor(self.node)
        data = encode({"node": self.node, "host": self.host, "slots": self.slots, "pid": os.getpid(), "started_at": time.time()})
        deadline = time.monotonic() + float(self.conf["nstorm.zookeeper.session.timeout.secs"]) * 2
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                # A previous session of ours (killed supervisor) may still hold it until it expires.
                if time.monotonic() > deadline:
                    self.zk.delete(path)
                else:
                    time.sleep(0.5)

    def _on_state(self, state: str) -> None:
        log.info("ZooKeeper connection %s", state)
        if state == "CONNECTED":
            self._wake.set()

    # -- sync ------------------------------------------------------------------------------
    def _topology_info(self, name: str, sha: str) -> dict[str, Any]:
        cached = self._topo_cache.get(name)
        if cached and cached[0] == sha:
            return cached[1]
        assert self.zk is not None
        info = decode(self.zk.get(self.paths.topology(name))[0])
        code, _ = self.zk.get(self.paths.code(name))
        code_dir = unpack_archive(code, sha, self.dir / "code" / name / sha[:16])
        info["code_dir"] = str(code_dir)
        self._topo_cache[name] = (sha, info)
        return info

    def sync(self) -> None:
        """Mirror the plans of this node into LMDB and reconcile worker processes."""
        assert self.zk is not None and self.store is not None
        zk = self.zk
        try:
            names = zk.get_children(self.paths.assignments, watch=self._watcher)
        except NoNodeError:
            names = []
        desired: set[tuple[str, int]] = set()
        planned: set[str] = set()
        for name in names:
            try:
                raw, _ = zk.get(self.paths.assignment(name), watch=self._watcher)
                plan = decode(raw)
            except NoNodeError:
                continue
            except ValueError:
                log.error("malformed plan for %s in ZooKeeper: ignored", name)
                continue
            ports = [int(w["port"]) for w in plan.get("workers", {}).values() if w.get("node") == self.node]
            if not ports:
                continue
            planned.add(name)
            try:
                if self.store.latest_version(name) != plan["version"]:
                    info = self._topology_info(name, plan["code_sha256"])
                    record = {
                        **plan,
                        "definition": info["definition"],
                        "conf": merge_conf(info["definition"].get("conf"), info.get("conf")),
                        "user_conf": info.get("user_conf", {}),
                        "code_dir": info["code_dir"],
                        "main": info["main"],
                    }
                    self.store.put_plan(name, int(plan["version"]), record)
                    log.info("plan of %s v%d written to the store (ports %s)", name, plan["version"], ports)
            except NoNodeError:
                continue
            except Exception:
                log.exception("cannot write the plan of %s", name)
                continue
            desired.update((name, p) for p in ports)
            version = int(plan["version"])
            for port in ports:
                key = (name, port, version)
                if (plan.get("restart") or {}).get(f"{self.node}:{port}") == version and key not in self._restarted:
                    self._restarted.add(key)
                    proc = self.workers.pop((name, port), None)
                    if proc is not None:
                        log.info("process-mode rebalance: restarting worker %s:%d of %s", self.node, port, name)
                        self._stop_worker(proc)
        for name in self.store.topologies():
            if name not in planned:
                self.store.remove(name)
                log.info("topology %s has no workers here any more: removed from the store", name)
        self._reconcile(desired)

    # -- worker processes ---------------------------------------------------------------------
    def _start_worker(self, topology: str, port: int) -> subprocess.Popen[bytes]:
        record = self.store.latest(topology) if self.store else None
        seed = str((record[1]["conf"] if record else self.conf).get("topology.hash.seed", 0))
        env = {**os.environ, "PYTHONHASHSEED": seed, **credentials_env(self.conf)}  # secrets not in argv
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
        log.info("started worker %s:%d for %s (pid %d)", self.node, port, topology, popen.pid)
        return popen

    def _reconcile(self, desired: set[tuple[str, int]]) -> None:
        for key, proc in list(self.workers.items()):
            if key not in desired:
                self._stop_worker(proc)
                del self.workers[key]
        busy_ports = {port: key for key, port in ((k, k[1]) for k in self.workers)}
        for key in sorted(desired):
            topology, port = key
            proc = self.workers.get(key)
            if proc is not None:
                code = proc.popen.poll()
                if code is None:
                    continue
                how = "after an unhandled error" if code == 1 else f"with code {code}"
                log.warning("worker %s:%d of %s exited %s: restarting", self.node, port, topology, how)
                restarts = proc.restarts + 1
            else:
                if port in busy_ports:
                    continue  # slot still used by another topology's worker being stopped
                restarts = 0
            self.workers[key] = _WorkerProc(topology, port, self._start_worker(topology, port), restarts=restarts)

    def _stop_worker(self, proc: _WorkerProc, timeout: float = 5.0) -> None:
        if proc.popen.poll() is None:
            log.info("stopping worker %s:%d of %s (pid %d)", self.node, proc.port, proc.topology, proc.popen.pid)
            proc.popen.terminate()
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(5)

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> int:
        self.store, rebuilt = LMDBPlanStore.open_or_rebuild(self.store_path)
        if rebuilt:
            log.warning("plan store was corrupt: rebuilt empty, resyncing from ZooKeeper")
        self.zk = connect(self.zk_address, session_timeout=float(self.conf["nimbus.supervisor.timeout.secs"]),
                          auth=self.conf["nstorm.zookeeper.auth"])
        self.zk.add_listener(self._on_state)
        self.paths.ensure(self.zk)
        self._register()
        self.state = "RUNNING"
        log.info("supervisor %s running on %s with slots %s", self.node, self.host, self.slots)
        interval = float(self.conf["supervisor.sync.interval.ms"]) / 1000.0
        self._wake.set()
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.sync()
            except Exception:
                log.exception("sync failed; retrying in %.1fs", interval)
        self.shutdown()
        return 0

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        self._wake.set()

    def shutdown(self) -> None:
        self.state = "STOPPING"
        for proc in self.workers.values():
            if proc.popen.poll() is None:
                proc.popen.terminate()
        for proc in self.workers.values():
            self._stop_worker(proc)
        self.workers.clear()
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
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)


def pick_slots(count: int, port_base: int, host: str) -> list[tuple[int, int]]:
    """``count`` (data, control) port pairs: ``base+i``/``base+1000+i``, or free ports if base is 0."""
    if port_base:
        return [(port_base + i, port_base + 1000 + i) for i in range(count)]
    from nstorm.net import free_port

    ports: list[int] = []
    while len(ports) < 2 * count:
        p = free_port(host)
        if p not in ports:
            ports.append(p)
    return [(ports[2 * i], ports[2 * i + 1]) for i in range(count)]
