"""A whole cluster on this machine: ZooKeeper, Nimbus and supervisors as real processes.

Used by ``nstorm local`` (owned, torn down on exit), ``nstorm cluster up``
(detached, pids under ``$NSTORM_HOME/run``, ended by ``cluster down``) and the
integration tests. Daemons run as ``python -m nimbus`` / ``python -m supervisor``,
and the UI (when asked for) as ``python -m ui``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from nstorm.config import check_security_conf
from nstorm.errors import ClusterError
from nstorm.home import home_dir, logs_dir, run_dir, try_home_lock
from nstorm.net import free_port
from nstorm.signals import ignoring_signals
from nstorm.uiauth import ui_auth_env
from nstorm.zkauth import AUTH_KEY, credentials_env, without_secrets
from nstorm.zkschema import ZkPaths, connect, decode
from nstorm.zookeeper import EmbeddedZooKeeper

__all__ = ["LocalCluster", "check_port_layout", "cluster_down", "cluster_running", "cluster_status", "forget_cluster",
           "home_cluster", "supervisor_port_base"]

log = logging.getLogger(__name__)

_STATE_FILE = "cluster.json"
_LOCK_FILE = "cluster.lock"


#: With a port base, supervisor n<i> takes its slots from ``port_base + 100 * (i - 1)``, and a
#: slot's control port is its data port + 1000 (``supervisor.daemon.pick_slots``).
NODE_PORT_STRIDE = 100
CONTROL_PORT_OFFSET = 1000
MAX_PORTED_SUPERVISORS = CONTROL_PORT_OFFSET // NODE_PORT_STRIDE


def supervisor_port_base(port_base: int, node: str) -> int:
    """Supervisor ``node``'s (n1, n2...) first data port; 0 (free ports) when ``port_base`` is 0."""
    return port_base + NODE_PORT_STRIDE * (int(node.lstrip("n") or 1) - 1) if port_base else 0


def check_port_layout(supervisors: int, slots: int, port_base: int) -> None:
    """Every node's data and control ports apart and below 65536, or a UsageError naming the option.

    Past 100 slots a node's ports run into the next node's, past 10 nodes the data ports run into
    n1's control ports, and a base too high gives ports no system has.
    """
    from nstorm.errors import UsageError

    if not port_base:
        return  # free ports, each picked apart from the others
    if slots > NODE_PORT_STRIDE:
        msg = (f"--slots {slots} with --port-base: at most {NODE_PORT_STRIDE} (each node has "
               f"{NODE_PORT_STRIDE} ports from its base), or --port-base 0 for free ports")
        raise UsageError(msg)
    if supervisors > MAX_PORTED_SUPERVISORS:
        msg = (f"--supervisors {supervisors} with --port-base: at most {MAX_PORTED_SUPERVISORS} (their worker "
               f"ports would reach the control ports, base + {CONTROL_PORT_OFFSET}), or --port-base 0 for free ports")
        raise UsageError(msg)
    last = port_base + NODE_PORT_STRIDE * (supervisors - 1) + slots - 1 + CONTROL_PORT_OFFSET
    if last > 65535:
        highest = port_base - (last - 65535)
        msg = (f"--port-base {port_base}: the last control port would be {last} (> 65535); "
               f"at most {highest} for {supervisors} supervisor(s) x {slots} slots")
        raise UsageError(msg)


def _conf_args(conf: Mapping[str, Any]) -> list[str]:
    """``-c key=value`` options for a daemon; secrets go through the environment instead."""
    args: list[str] = []
    for key, value in without_secrets(conf).items():
        args += ["-c", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return args


class LocalCluster:
    """ZooKeeper + Nimbus + ``supervisors`` supervisors, each with ``slots`` worker slots.

    :arg zk_address: an existing ZooKeeper; None starts an embedded one on a free port.
    :arg root: the ZooKeeper root of this cluster (tests use a fresh one each).
    :arg conf: ``-c`` options given to every daemon (``nstorm.zookeeper.auth`` goes in their
        environment instead, so no command line shows it); checked here (ConfigError).
    :arg detach: daemons in their own sessions, surviving this process (``cluster up``).
    :arg hosts: the address of each supervisor (default 127.0.0.1 for all).
    :arg ui_port: start the UI on 127.0.0.1 at this port, or at a free one if it is taken
        (``ui_url`` and ``ui_port_taken`` say where); None or 0: no UI.
    """

    def __init__(
        self,
        supervisors: int = 1,
        slots: int = 4,
        zk_address: str | None = None,
        root: str = "/nstorm",
        conf: Mapping[str, Any] | None = None,
        detach: bool = False,
        hosts: list[str] | None = None,
        port_base: int = 0,
        netns: list[Any] | None = None,
        nimbuses: int = 1,
        ui_port: int | None = None,
    ) -> None:
        self.n_supervisors = supervisors
        self.slots = slots
        self.zk_address = zk_address
        self.root = root
        self.conf = dict(conf or {})
        check_security_conf(self.conf)
        self.detach = detach
        self.netns = netns or []  # nstorm.netns.NodeNet per supervisor, or none
        self.hosts = [n.address for n in self.netns] or hosts or ["127.0.0.1"] * supervisors
        self.port_base = port_base
        self.zookeeper: EmbeddedZooKeeper | None = None
        self.n_nimbuses = nimbuses
        self.nimbuses: dict[str, subprocess.Popen[bytes]] = {}  # "nimbus", "nimbus-2", ...
        self.supervisors: dict[str, subprocess.Popen[bytes]] = {}
        self.wanted_ui_port = ui_port or 0
        self.ui: subprocess.Popen[bytes] | None = None
        self.ui_url: str | None = None
        self.ui_port_taken = False  # the wanted port was taken: the UI runs on another
        self.had_processes = False  # set by stop(): a start that failed early (no Java) had none to stop
        self._zk_data = Path()

    @property
    def address(self) -> str:
        assert self.zk_address is not None
        return self.zk_address

    def _spawn(self, name: str, args: list[str], prefix: list[str] | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        out = open(logs_dir() / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                [*(prefix or []), sys.executable, *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "NSTORM_HOME": str(home_dir()), **credentials_env(self.conf), **(env or {})},
                start_new_session=self.detach,
            )
        finally:
            out.close()

    @property
    def nimbus(self) -> subprocess.Popen[bytes] | None:
        """The first Nimbus process (the only one unless HA is tested)."""
        return self.nimbuses.get("nimbus")

    def start_nimbus(self, name: str = "nimbus") -> subprocess.Popen[bytes]:
        """Start (or restart) Nimbus ``name``: ``nimbus``, ``nimbus-2``, ..."""
        id_args = ["--id", name.partition("-")[2]] if "-" in name else []
        self.nimbuses[name] = self._spawn(
            name, ["-m", "nimbus", "--zk", self.address, "--root", self.root, *id_args, *_conf_args(self.conf)])
        return self.nimbuses[name]

    def start_supervisor(self, node: str, host: str = "127.0.0.1") -> subprocess.Popen[bytes]:
        base = supervisor_port_base(self.port_base, node)
        net = next((n for n in self.netns if n.node == node), None)
        proc = self._spawn(
            f"supervisor-{node}",
            ["-m", "supervisor", "--node-id", node, "--host", host, "--slots", str(self.slots),
             "--port-base", str(base), "--zk", self.address, "--root", self.root, *_conf_args(self.conf)],
            prefix=net.exec_prefix() if net else None,
        )
        self.supervisors[node] = proc
        return proc

    def restart_supervisor(self, node: str) -> subprocess.Popen[bytes]:
        """Start supervisor ``node`` again (after it was killed); it adopts the workers it left."""
        index = int(node.lstrip("n") or 1) - 1
        return self.start_supervisor(node, self.hosts[index])

    def kill_daemon(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to daemon ``name`` (``nimbus``, ``nimbus-2``, ``supervisor-n1``); returns its pid."""
        proc = self.nimbuses.get(name) or self.supervisors.get(name.removeprefix("supervisor-"))
        if proc is None:
            msg = f"no daemon {name!r} in this cluster"
            raise ClusterError(msg)
        proc.send_signal(sig)
        proc.wait(10)
        return proc.pid

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start everything and wait until every supervisor has registered."""
        try:
            if self.zk_address is None:
                # A fresh data directory: a local cluster starts empty, whatever ran before.
                self._zk_data = Path(tempfile.mkdtemp(prefix="zk-local-", dir=home_dir()))
                from nstorm.netns import host_address

                host = host_address() if self.netns else "127.0.0.1"  # reachable from inside the namespaces
                self.zookeeper = EmbeddedZooKeeper(self._zk_data, 0, logs_dir() / "zookeeper.log", host=host)
                self.zookeeper.start(timeout=timeout)
                self.zk_address = self.zookeeper.address
            for i in range(self.n_nimbuses):
                self.start_nimbus("nimbus" if i == 0 else f"nimbus-{i + 1}")
            for i in range(self.n_supervisors):
                self.start_supervisor(f"n{i + 1}", self.hosts[i])
            if self.wanted_ui_port:
                self.start_ui(self.wanted_ui_port)
            if self.detach:  # recorded now: `cluster down` ends them even if this process is killed
                self.save_state()
            self.wait_supervisors(set(self.supervisors), timeout)
            if self.ui is not None:
                self.wait_ui(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_ui(self, port: int, host: str = "127.0.0.1") -> subprocess.Popen[bytes]:
        """Start the UI on ``host:port``, or on a free port if that one is taken."""
        if not _port_free(host, port):
            port, self.ui_port_taken = free_port(host), True
        self.ui_url = f"http://{host}:{port}/"
        self.ui = self._spawn("ui", ["-m", "ui", "--zk", self.address, "--root", self.root, "--host", host,
                                     "--port", str(port), *_conf_args(self.conf)], env=ui_auth_env(self.conf))
        return self.ui

    def wait_ui(self, timeout: float) -> None:
        """Wait until the UI answers its health check."""
        import urllib.request

        assert self.ui is not None and self.ui_url is not None
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.ui_url + "healthz", timeout=2):  # noqa: S310 - our own URL
                    return
            except OSError:
                pass
            if self.ui.poll() is not None:
                msg = f"the UI exited during start-up; see {logs_dir() / 'ui.log'} and ui.out"
                raise ClusterError(msg)
            if time.monotonic() > deadline:
                msg = f"the UI did not answer on {self.ui_url} within {timeout:.0f}s"
                raise ClusterError(msg)
            time.sleep(0.1)

    def wait_supervisors(self, nodes: set[str], timeout: float) -> None:
        paths = ZkPaths(self.root)
        zk = connect(self.address, auth=self.conf.get(AUTH_KEY))
        try:
            deadline = time.monotonic() + timeout
            while True:
                registered = set(zk.get_children(paths.supervisors)) if zk.exists(paths.supervisors) else set()
                if nodes <= registered:
                    return
                dead = [n for n, p in self.supervisors.items() if p.poll() is not None]
                if dead or any(p.poll() is not None for p in self.nimbuses.values()):
                    msg = f"a daemon exited during start-up (supervisors {dead}); see {logs_dir()}"
                    raise ClusterError(msg)
                if time.monotonic() > deadline:
                    msg = f"supervisors {sorted(nodes - registered)} did not register within {timeout:.0f}s"
                    raise ClusterError(msg)
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()

    def pids(self) -> dict[str, int]:
        pids = {}
        if self.zookeeper is not None and self.zookeeper.pid:
            pids["zookeeper"] = self.zookeeper.pid
        for name, proc in self.nimbuses.items():
            pids[name] = proc.pid
        for node, proc in self.supervisors.items():
            pids[f"supervisor-{node}"] = proc.pid
        if self.ui is not None:
            pids["ui"] = self.ui.pid
        return pids

    def stop(self, timeout: float = 15.0) -> None:
        """Stop supervisors (they stop their workers), Nimbus, then ZooKeeper.

        Ctrl-C, SIGTERM and SIGHUP are ignored until it is done (it is bounded by ``timeout``):
        one in the middle would leave the rest running, ZooKeeper in its own session above all.
        """
        with ignoring_signals():
            self.had_processes = self.had_processes or bool(self.pids())
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        procs = [*([self.ui] if self.ui is not None else []), *self.supervisors.values(), *self.nimbuses.values()]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        _kill_orphan_workers(self.root)
        if self.zookeeper is not None:
            self.zookeeper.stop()
            shutil.rmtree(self._zk_data, ignore_errors=True)
        self.supervisors.clear()
        self.nimbuses.clear()
        self.ui = None

    def save_state(self) -> Path:
        """Record pids for ``cluster down`` (detached clusters)."""
        path = run_dir() / _STATE_FILE
        path.write_text(json.dumps({"zk": self.zk_address, "root": self.root, "pids": self.pids(),
                                    "netns": bool(self.netns), "ui": self.ui_url}))
        return path


def _port_free(host: str, port: int) -> bool:
    """True if nothing listens on ``host:port`` now (so the UI may take it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _kill_orphan_workers(root: str) -> None:
    """Workers outlive a supervisor killed with SIGKILL; end those of this home."""
    home = str(home_dir())
    ended = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "-m" in cmd and "worker" in cmd and "--root" in cmd and cmd[cmd.index("--root") + 1] == root:
                env = proc.info.get("environ") or {}
                store = cmd[cmd.index("--store") + 1] if "--store" in cmd else ""
                if store.startswith(home + os.sep) or env.get("NSTORM_HOME") == home:  # (not /x/.nstorm2's)
                    proc.terminate()
                    ended.append(proc)
        except (psutil.Error, ValueError, IndexError):
            continue
    _, alive = psutil.wait_procs(ended, timeout=5)
    for proc in alive:  # one stuck (in a ZooKeeper call, say) would outlive the cluster
        with contextlib.suppress(psutil.Error):
            proc.kill()


_DAEMON_MODULES = ("nimbus", "supervisor", "ui")


def _recorded_daemon(pid: int, root: str) -> psutil.Process | None:
    """The daemon ``cluster up`` recorded as ``pid``, if that pid is still one of its daemons
    (``python -m nimbus|supervisor|ui ... --root ROOT``): a pid the system gave to another
    process since is never signalled, nor counted as a running cluster."""
    try:
        proc = psutil.Process(pid)
        cmd = proc.cmdline()
    except psutil.Error:
        return None
    try:
        module = cmd[cmd.index("-m") + 1]
        ours = module in _DAEMON_MODULES and cmd[cmd.index("--root") + 1] == root
    except (ValueError, IndexError):
        ours = False
    return proc if ours else None


@contextlib.contextmanager
def home_cluster(command: str) -> Iterator[None]:
    """Hold this home's cluster for ``command`` (``local`` while it runs, ``cluster up`` while it
    starts): one at a time.

    Both name their supervisors n1, n2... under the root /nstorm, and a supervisor's plan store and
    worker records are ``$NSTORM_HOME/supervisor/<node>``: a second cluster in the home would share
    them, adopt the first's workers or drop their plans, and end them at its teardown.

    :raises ClusterError: another command holds it (one line naming it and the way out).
    """
    path = run_dir() / _LOCK_FILE
    with try_home_lock(path) as held:
        if not held:
            try:
                holder = path.read_text().strip()
            except OSError:
                holder = ""
            msg = (f"{holder or 'another nstorm local or cluster up'} runs in this NSTORM_HOME ({home_dir()}): "
                   "wait for it to end, or set NSTORM_HOME to another directory")
            raise ClusterError(msg)
        path.write_text(f"nstorm {command} (pid {os.getpid()})\n")
        yield


def _read_state() -> dict[str, Any] | None:
    """What ``cluster up`` recorded (``cluster.json``), or None."""
    path = run_dir() / _STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def _alive_daemons(state: dict[str, Any]) -> dict[str, bool]:
    return {name: _recorded_daemon(pid, state["root"]) is not None for name, pid in state["pids"].items()}


def cluster_running() -> bool:
    """True while a daemon recorded by ``cluster up`` runs (what ``cluster status`` calls running);
    asks no ZooKeeper, so it answers at once."""
    state = _read_state()
    return state is not None and any(_alive_daemons(state).values())


def cluster_status() -> dict[str, Any]:
    """What ``nstorm cluster status`` shows: the daemons recorded by ``cluster up``."""
    state = _read_state()
    if state is None:
        return {"running": False, "daemons": {}}
    alive = _alive_daemons(state)
    daemons = {name: {"pid": pid, "alive": alive[name]} for name, pid in state["pids"].items()}
    supervisors: list[str] = []
    try:
        zk = connect(state["zk"], timeout=3)
        try:
            paths = ZkPaths(state["root"])
            for node in zk.get_children(paths.supervisors):
                info = decode(zk.get(paths.supervisor(node))[0])
                supervisors.append(f"{node} ({info['host']}, {len(info['slots'])} slots)")
        finally:
            zk.stop()
            zk.close()
    except Exception:  # noqa: BLE001 - status is best effort
        pass
    return {"running": any(d["alive"] for d in daemons.values()), "zk": state["zk"], "daemons": daemons,
            "supervisors": supervisors, "ui": state.get("ui")}


def forget_cluster() -> None:
    """Remove the record of ``cluster up`` (its daemons were stopped)."""
    (run_dir() / _STATE_FILE).unlink(missing_ok=True)


def cluster_down(timeout: float = 15.0) -> str | None:
    """End the daemons recorded by ``cluster up``, then this home's background ZooKeeper.

    :returns: ``"cluster"``, ``"zookeeper"`` when no cluster was recorded but a background
        ZooKeeper ran (left by a ``cluster up`` killed before it recorded anything), else None.
    """
    from nstorm.background import stop_background

    path = run_dir() / _STATE_FILE
    if not path.exists():
        return "zookeeper" if stop_background() else None
    state = json.loads(path.read_text())
    pids = state["pids"]
    order = ([n for n in pids if n == "ui"] + [n for n in pids if n.startswith("supervisor")]
             + [n for n in pids if n.startswith("nimbus")])
    procs = []
    for name in order:
        proc = _recorded_daemon(pids[name], state["root"])
        if proc is None:
            continue  # gone (its pid may be another process's now)
        try:
            proc.terminate()
            procs.append(proc)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        proc.kill()
    _kill_orphan_workers(state["root"])
    stop_background()
    if state.get("netns"):
        from nstorm.netns import destroy

        destroy()
    path.unlink(missing_ok=True)
    return "cluster"
