"""scripts/compose-check: docker-compose.yml and the Dockerfile, run for real.

It builds the image, brings the compose file up with whichever of ``docker compose`` (with a
running Docker engine) or ``podman-compose`` (with podman) is there, waits for every health
check, then, from the nimbus container:

- submits word count with its checkpoints in the ``redis`` service, and sees workers on both
  supervisor containers and a checkpoint committed;
- moves an executor live from the worker in one supervisor container to the worker in the
  other, with no worker restarted;
- (the ``ui`` service, once docker-compose.yml has one: its REST API answers for the topology);
- kills one supervisor container: its executors come back on live workers, the topology rolls
  back to its last checkpoint in Redis and goes on;
- checks that nothing was lost: once all the input is processed, the word counts of the last
  committed checkpoint equal the words of the input, exactly;
- kills the topology (it is no longer listed, and its checkpoints leave Redis; keys of a
  checkpoint written while the kill ran are reported, not failed on), then takes everything
  down, removes the volumes, and checks that no container, volume or network of the run is left.

Each step is printed; a failure names its step and exits 1 (the services' logs are shown, and
everything is taken down all the same, also on Ctrl-C or SIGTERM). Exit 77: containers cannot
run on this machine (no engine, or the engine cannot start a container); it says why.

Where no image registry answers, the base image is built from Debian's packages by
``scripts/build-base-image`` (once: it is cached by a content hash), and the redis service
runs from the nstorm image, which has ``redis-server`` then. Environment: ``NSTORM_COMPOSE``
(``docker`` or ``podman``: which route), ``NSTORM_BASE_IMAGE`` (a base to use as it is).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROBE = Path(__file__).with_name("compose_probe.py")
BASE_BUILDER = Path(__file__).with_name("build-base-image")
SKIP = 77

PROJECT = "nstorm-check"
ZK = "zookeeper:2181"
SUPERVISORS = {"supervisor1": "s1", "supervisor2": "s2"}  # service -> node id (docker-compose.yml)
KILLED = "supervisor2"
TOPOLOGY = "wordcount"
SENTENCES = 9000  # per spout executor; at RATE a second the input lasts 90 s, through the move and the kill
RATE = 100
REDIS_URL = "redis://redis:6379/0"
UI_URL = "http://ui:8080"  # the ui service, from inside the cluster
PUBLISHED = {"zookeeper": 2181, "ui": 8080}  # host ports docker-compose.yml publishes
HEARTBEAT_FRESH = 10.0  # status --json: a worker is "alive" with a heartbeat this recent (nstorm.client)
OFFICIAL_BASE = "python:3.11-slim"  # the Dockerfile's ARG BASE
PULL_TIMEOUT = 60.0
BUILD_TIMEOUT = 45 * 60.0
STEPS = 14

T = TypeVar("T")


class StepFailed(Exception):
    """The current step did not hold; the message says what was seen."""


class Skipped(Exception):
    """Containers cannot run on this machine; the message says why."""


class Interrupted(Exception):
    """SIGTERM or SIGHUP: stop, and take everything down."""


def _interrupt(signum: int, _frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


# -- running commands ----------------------------------------------------------------------------

@dataclass
class Runner:
    """Runs commands with their output kept in a log (shown on failure, or as they run with -v)."""

    log: Path
    verbose: bool = False

    def __call__(self, args: list[str], *, check: bool = True, timeout: float = 120.0,
                 stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        with self.log.open("a") as log:
            log.write(f"$ {' '.join(args)}\n")
        if self.verbose:
            print(f"    $ {' '.join(args)}", flush=True)
        try:
            result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=stdin,
                                    env=env, stdin=None if stdin is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            msg = f"{' '.join(args[:4])} ... did not finish in {timeout:.0f} s"
            raise StepFailed(msg) from exc
        except FileNotFoundError as exc:
            raise StepFailed(f"{args[0]}: not found") from exc
        with self.log.open("a") as log:
            log.write(result.stdout + result.stderr)
        if self.verbose and (result.stdout or result.stderr):
            print(_indent(result.stdout + result.stderr, "    | "), flush=True)
        if check and result.returncode != 0:
            tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
            msg = f"{' '.join(args[:4])} ... exited {result.returncode}: {' / '.join(tail)}"
            raise StepFailed(msg)
        return result

    def long(self, args: list[str], *, timeout: float, env: dict[str, str], what: str) -> str:
        """A long command (an image build): its output goes to the log as it comes, a line every
        minute says it still runs and what it last printed. Its output (stdout and stderr)."""
        with self.log.open("a") as log:
            log.write(f"$ {' '.join(args)}\n")
            start = log.tell()
            log.flush()
            started = time.monotonic()
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            try:
                while True:
                    try:
                        code = proc.wait(timeout=60)
                        break
                    except subprocess.TimeoutExpired:
                        elapsed = time.monotonic() - started
                        if elapsed > timeout:
                            raise StepFailed(f"{what} did not finish in {timeout:.0f} s") from None
                        last = self.tail(1).strip()[:120]
                        print(f"    ... {what}: {elapsed:.0f} s ({last})", flush=True)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        with self.log.open(errors="replace") as log:
            log.seek(start)
            output = log.read()
        if self.verbose:
            print(_indent(output, "    | "), flush=True)
        if code != 0:
            tail = " / ".join(output.strip().splitlines()[-3:])
            raise StepFailed(f"{what} exited {code}: {tail}")
        return output

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    """Poll ``check`` until it returns something truthy; StepFailed after ``timeout`` seconds,
    with the last thing it said (a StepFailed raised by ``check`` is taken as not yet)."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            value = check()
        except StepFailed as exc:
            value, last = None, str(exc)
        if value:
            return value
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last: {last})" if last else ""))
        time.sleep(interval)


# -- the engine: Docker or podman ------------------------------------------------------------------

@dataclass
class Engine:
    """The container engine (``docker`` or ``podman``) and the compose command that drives it."""

    name: str
    compose: list[str]
    run: Runner
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    containers: dict[str, str] = field(default_factory=dict)  # service -> container name

    def __call__(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run([self.name, *args], env=self.env, **kw)

    def compose_run(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run([*self.compose, "-p", PROJECT, "-f", str(COMPOSE_FILE), *args], env=self.env, **kw)

    def labelled(self, kind: str, service: str | None = None) -> list[str]:
        """This run's containers, volumes or networks (compose labels them with the project)."""
        filters = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        if kind == "container":
            out = self("ps", "-a", *filters, "--format", "{{.Names}}").stdout
        else:
            out = self(kind, "ls", *filters, "--format", "{{.Name}}").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def container(self, service: str) -> str:
        if service not in self.containers:
            names = self.labelled("container", service)
            if not names:
                raise StepFailed(f"no container for service {service}")
            self.containers[service] = names[0]
        return self.containers[service]

    def nstorm(self, *args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``nstorm ARGS --zk zookeeper:2181`` in the nimbus container."""
        return self("exec", "-i", self.container("nimbus"), "nstorm", *args, "--zk", ZK,
                    timeout=timeout, check=check)

    def probe(self, *args: str) -> Any:
        """scripts/compose_probe.py in the nimbus container; its JSON answer."""
        out = self("exec", "-i", self.container("nimbus"), "python", "-", *args, timeout=60.0,
                   stdin=PROBE.read_text()).stdout
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise StepFailed(f"the probe answered {out[-200:]!r}") from exc

    def status(self) -> dict[str, Any]:
        """``nstorm status --json``; a client that could not connect (a loaded machine: its
        ZooKeeper connect timed out) is tried again, twice: a read, nothing repeated."""
        for attempt in range(3):
            try:
                return json.loads(self.nstorm("status", TOPOLOGY, "--json").stdout)
            except StepFailed as exc:
                if attempt == 2 or "cannot connect to ZooKeeper" not in str(exc):
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")


def find_engine(run: Runner) -> Engine:
    """Docker when ``docker compose`` works and its engine answers, else podman with podman-compose."""
    wanted = os.environ.get("NSTORM_COMPOSE", "")
    reasons = []
    if wanted in ("", "docker") and shutil.which("docker"):
        compose_ok = run(["docker", "compose", "version"], check=False, timeout=30).returncode == 0
        engine_ok = compose_ok and run(["docker", "info"], check=False, timeout=30).returncode == 0
        if engine_ok:
            return Engine("docker", ["docker", "compose"], run)
        reasons.append("docker: " + ("no Docker engine answers" if compose_ok else "no 'docker compose' plugin"))
    if wanted in ("", "podman"):
        compose = shutil.which("podman-compose")
        if shutil.which("podman") and compose:
            return Engine("podman", [compose], run)
        reasons.append("podman: " + ("podman-compose is not installed (pip install podman-compose)"
                                     if shutil.which("podman") else "not installed (apt-get install podman)"))
    raise Skipped("no container engine: " + "; ".join(reasons or [f"NSTORM_COMPOSE={wanted}?"]))


# -- the steps -------------------------------------------------------------------------------------

@dataclass
class Check:
    """The steps of one run, in order; each prints what it saw."""

    engine: Engine
    workdir: Path
    base: str = ""
    services: list[str] = field(default_factory=list)
    before_move: dict[str, Any] = field(default_factory=dict)
    moved: str = ""

    # images --------------------------------------------------------------------------------------
    def choose_base(self) -> None:
        """The official base where it is there or can be pulled; else the one built from Debian's
        packages (scripts/build-base-image, once per content hash)."""
        engine = self.engine
        if os.environ.get("NSTORM_BASE_IMAGE"):
            self.base = os.environ["NSTORM_BASE_IMAGE"]
            print(f"    base: {self.base} (NSTORM_BASE_IMAGE)")
            return
        builder_env = {**engine.env, "NSTORM_ENGINE": engine.name}
        local = engine.run([str(BASE_BUILDER), "--name"], env=builder_env).stdout.strip()
        official = OFFICIAL_BASE if engine.name == "docker" else f"docker.io/library/{OFFICIAL_BASE}"
        for image, why in ((local, "built from Debian's packages earlier, cached"), (official, "the official image")):
            if engine("image", "inspect", image, check=False).returncode == 0:
                self.base = image
                print(f"    base: {image} ({why})")
                return
        try:
            pulled = engine("pull", official, check=False, timeout=PULL_TIMEOUT).returncode == 0
        except StepFailed:
            pulled = False
        if pulled:
            self.base = official
            print(f"    base: {official} (pulled)")
            return
        print(f"    no registry answers for {official}: building the base from Debian's packages (once)")
        started = time.monotonic()
        output = engine.run.long([str(BASE_BUILDER)], env=builder_env, timeout=BUILD_TIMEOUT,
                                 what="scripts/build-base-image")
        self.base = output.strip().splitlines()[-1]
        print(f"    base: {self.base} (built in {time.monotonic() - started:.0f} s)")

    def can_run_containers(self) -> None:
        """One throwaway container, with its network (as the cluster's will have). podman as root
        in a sandbox may need a containers.conf: ``default_ulimits = []`` where RLIMIT_NOFILE
        cannot be set, ``runtime = "runc"`` where crun refuses a hybrid cgroup layout (v1
        controllers, a v2 hierarchy with controllers too). This writes one and points
        CONTAINERS_CONF at it, saying why; a user's own CONTAINERS_CONF is left as it is."""
        engine = self.engine
        probe = ["run", "--rm", self.base, "true"]
        fixes: dict[str, tuple[str, str]] = {}  # name -> (section, setting)
        while True:
            result = engine(*probe, check=False, timeout=120)
            if result.returncode == 0:
                return
            output = (result.stderr.strip() or result.stdout.strip())
            error = output.splitlines()[-1] if output else f"exit {result.returncode}"
            fix = self._podman_fix(output.lower(), fixes) if engine.name == "podman" else None
            if fix is None:
                raise Skipped(f"{engine.name} cannot start a container here: {error}")
            fixes[fix[0]] = fix[1]
            lines = ["# Written by scripts/compose-check for podman on this machine."]
            for section in ("containers", "engine"):
                lines.append(f"[{section}]")
                lines.extend(setting for sec, setting in fixes.values() if sec == section)
            conf = self.workdir / "containers.conf"
            conf.write_text("\n".join(lines) + "\n")
            engine.env["CONTAINERS_CONF"] = str(conf)
            print(f"    podman: {error}\n    -> containers.conf: {fix[1][1]} (CONTAINERS_CONF={conf})")

    def _podman_fix(self, error: str, fixes: dict[str, tuple[str, str]]) -> tuple[str, tuple[str, str]] | None:
        if "CONTAINERS_CONF" in os.environ:
            return None  # the user's own configuration: not overridden
        if "rlimit" in error and "ulimits" not in fixes:
            return "ulimits", ("containers", "default_ulimits = []")
        if "hybrid mode not supported" in error and "runtime" not in fixes:
            if not shutil.which("runc"):
                raise Skipped("crun cannot start a container with this machine's hybrid cgroups, and runc "
                              "is not installed (apt-get install runc)")
            return "runtime", ("engine", 'runtime = "runc"')
        return None

    def build(self) -> None:
        engine = self.engine
        engine.env["NSTORM_BASE_IMAGE"] = self.base
        if self.base.startswith("localhost/nstorm-base"):
            # No registry for redis:7 either: the nstorm image has redis-server (from the local base).
            engine.env["NSTORM_REDIS_IMAGE"] = "nstorm:latest"
        before = self._image_id("nstorm:latest")
        engine.run.long([*engine.compose, "-p", PROJECT, "-f", str(COMPOSE_FILE), "build"], env=engine.env,
                        timeout=BUILD_TIMEOUT, what="compose build")
        after = self._image_id("nstorm:latest")
        size = engine("image", "inspect", "nstorm:latest", "--format", "{{.Size}}").stdout.strip()
        print(f"    nstorm:latest built on {self.base} ({int(size) / 1e6:.0f} MB)")
        if before and before != after:  # the image it replaced, untagged now: not kept run after run
            if engine("rmi", before, check=False).returncode == 0:
                print(f"    removed the nstorm:latest it replaced ({before[:12]})")

    def _image_id(self, image: str) -> str:
        result = self.engine("image", "inspect", image, "--format", "{{.Id}}", check=False)
        return result.stdout.strip() if result.returncode == 0 else ""

    # the cluster ---------------------------------------------------------------------------------
    def up(self) -> None:
        engine = self.engine
        engine.compose_run("down", "-v", check=False, timeout=180)  # what a killed earlier run left
        services = engine.compose_run("config", "--services").stdout.split()
        for service, port in PUBLISHED.items():
            if service not in services:
                continue
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("0.0.0.0", port))
                except OSError as exc:
                    raise StepFailed(f"host port {port} ({service}'s, published) is taken: {exc}") from exc
        engine.compose_run("up", "-d", timeout=300)
        print(f"    services: {', '.join(services)}")
        self.services = services

    def health(self) -> None:
        engine = self.engine
        pending = list(self.services)

        def healthy(service: str) -> bool:
            name = engine.container(service)
            state = engine("inspect", name, "--format", "{{.State.Status}}").stdout.strip()
            if state in ("exited", "dead"):
                logs = engine("logs", "--tail", "5", name, check=False)
                raise StepFailed(f"{service} {state}: {(logs.stdout + logs.stderr).strip()[-300:]}")
            if engine.name == "podman":  # podman without systemd runs health checks when asked
                return engine("healthcheck", "run", name, check=False, timeout=60).returncode == 0
            health = engine("inspect", name, "--format", "{{if .State.Health}}{{.State.Health.Status}}{{end}}")
            return health.stdout.strip() in ("healthy", "")  # "": a service without a health check

        def all_healthy() -> bool:
            for service in list(pending):
                if healthy(service):
                    pending.remove(service)
                    print(f"    {service}: healthy", flush=True)
            return not pending

        try:
            wait_for("every health check", all_healthy, timeout=240, interval=2)
        except StepFailed as exc:
            raise StepFailed(f"{exc}; not healthy: {', '.join(pending)}") from None
        registered = wait_for("both supervisors to register",
                              lambda: set(SUPERVISORS.values()) <= set(r := engine.probe("supervisors", ZK)) and r,
                              timeout=60, interval=2)
        print("    supervisors registered: " + ", ".join(f"{n} ({v['host']}, {v['slots']} slots)"
                                                         for n, v in sorted(registered.items())))

    def submit(self) -> None:
        out = self.engine.nstorm(
            "submit", "topologies/wordcount.py", "-c", f"wordcount.sentences={SENTENCES}", "-c", f"wordcount.rate={RATE}",
            "-c", "topology.state.provider=redis",
            "-c", "topology.state.provider.config=" + json.dumps({"url": REDIS_URL}))
        print(_indent(out.stdout))

    def placement(self) -> None:
        """Workers alive in both supervisor containers, and a checkpoint committed in Redis."""
        engine = self.engine

        def spread() -> dict[str, Any] | None:
            st = engine.status()
            nodes = {w["node"] for w in st["workers"] if w["alive"]}
            last = (st.get("checkpoints") or {}).get("last_committed")
            return st if set(SUPERVISORS.values()) <= nodes and last and st["spouts"]["acked"] > 0 else None

        st = wait_for("workers alive on both supervisors, acks and a committed checkpoint", spread, timeout=120, interval=2)
        print(_indent(engine.nstorm("status", TOPOLOGY).stdout))
        cp = st["checkpoints"]
        print(f"    checkpoints in {cp['provider']}: #{cp['last_committed']['id']} committed")
        self.before_move = st

    def move(self) -> None:
        """An executor moves live from the worker in one supervisor container to the other's."""
        engine = self.engine
        st = self.before_move
        by_node = {w["node"]: w for w in st["workers"]}
        source, target = by_node[SUPERVISORS["supervisor1"]], by_node[SUPERVISORS["supervisor2"]]
        executor = next((e for e in source["executors"] if e.startswith("count:")), source["executors"][0])
        pids = {w["id"]: w["pid"] for w in st["workers"]}
        out = engine.nstorm("rebalance", TOPOLOGY, "--move", f"{executor}={target['id']}", timeout=180)
        print(_indent(out.stdout))

        def moved() -> dict[str, Any] | None:
            now = engine.status()
            where = {e: w["id"] for w in now["workers"] for e in w["executors"]}
            return now if where.get(executor) == target["id"] else None

        now = wait_for(f"{executor} on {target['id']}", moved, timeout=30, interval=1)
        after = {w["id"]: w["pid"] for w in now["workers"]}
        if after != pids:
            raise StepFailed(f"a worker restarted: pids {pids} -> {after}")
        record = next((m for m in reversed(now["migrations"]) if m["executor"] == executor), None)
        if record is None or record.get("mode") != "thread":
            raise StepFailed(f"no thread-mode migration of {executor} in status: {now['migrations']}")
        self.moved = executor
        print(f"    {executor}: {source['id']} ({source['host']}) -> {target['id']} ({target['host']}), "
              f"live (mode {record['mode']}), worker pids unchanged: {after}")

    def ui(self) -> None:
        """The ``ui`` service (issue 16): its REST API, asked from inside the cluster, shows the
        workers on both supervisor containers and the move just made, and each worker's log, which
        only its supervisor's container has (its logviewer serves it), and a dump of its threads.

        Written against branch ``ui``'s API (``/api/v1/topology/:id`` with ``workers[].supervisorId``,
        ``/api/v1/topology/:id/migrations``); while docker-compose.yml has no ``ui`` service
        (it is not on main yet) this step says so and checks nothing.
        """
        if "ui" not in self.services:
            print("    no ui service in docker-compose.yml yet (issue 16, branch ui): nothing to check")
            return
        engine = self.engine
        moved = self.moved

        def shown() -> dict[str, Any] | None:
            r = engine.probe("ui", ZK, UI_URL, TOPOLOGY)
            ok = r["supervisors"] == sorted(SUPERVISORS.values()) and moved in r["migrations"]
            return r if (ok and r["logs"] and all(r["logs"].values()) and all(r["threads"].values())
                         and all(r["daemonlogs"].values())) else None

        answer = wait_for("the ui's REST API to show both supervisors, the move, every worker's log, a "
                          "dump of its threads and each supervisor's own log (from the supervisors' logviewers)",
                          shown, timeout=60, interval=2)
        print(f"    {UI_URL}/api/v1/topology/{TOPOLOGY}: workers on {', '.join(answer['supervisors'])}; "
              f"migrations: {', '.join(answer['migrations'])}; log lines from the supervisor containers: "
              + ", ".join(f"{w} {n}" for w, n in sorted(answer["logs"].items()))
              + "; threads dumped: " + ", ".join(f"{w} {n}" for w, n in sorted(answer["threads"].items()))
              + "; supervisors' own log lines: " + ", ".join(f"{s} {n}" for s, n in sorted(answer["daemonlogs"].items())))

    def kill_supervisor(self) -> None:
        """SIGKILL one supervisor container: its workers die with it. Nimbus gives their executors
        to live slots (or the container comes back), and the topology rolls back to its last
        committed checkpoint in Redis and goes on."""
        engine = self.engine
        node = SUPERVISORS[KILLED]
        st = engine.status()
        killed = [w["id"] for w in st["workers"] if w["node"] == node]
        restores = int(st["checkpoints"].get("restores") or 0)
        engine.compose_run("kill", KILLED)
        started = time.monotonic()
        st = engine.status()  # read after the kill: checkpoints went on while the command started
        last = int(st["checkpoints"]["last_committed"]["id"])
        acked = int(st["spouts"]["acked"])
        print(f"    killed {engine.container(KILLED)} (workers {', '.join(killed)}); "
              f"last committed checkpoint #{last}, restores {restores}")

        def recovered() -> dict[str, Any] | None:
            # "alive" is a heartbeat in the last 10 s: after that long, only a worker that runs is.
            if time.monotonic() - started < HEARTBEAT_FRESH + 2:
                return None
            now = engine.status()
            return now if now["workers"] and all(w["alive"] for w in now["workers"]) else None

        now = wait_for("every executor on a live worker again", recovered, timeout=120, interval=2)
        took = time.monotonic() - started
        for w in now["workers"]:
            print(f"    worker {w['id']} on {w['host']} pid {w['pid']}: {len(w['executors'])} executors")

        def going_on() -> dict[str, Any] | None:
            st = engine.status()
            cp = st["checkpoints"]
            done = (int(cp.get("restores") or 0) > restores and (cp.get("last_committed") or {}).get("id", 0) > last
                    and st["spouts"]["acked"] != acked)
            return st if done else None

        st = wait_for("a rollback to the last checkpoint, a new checkpoint committed and new acks", going_on,
                      timeout=120, interval=2)
        cp = st["checkpoints"]
        restore = cp.get("last_restore") or {}
        print(f"    back in {took:.0f} s; rolled back to checkpoint #{restore.get('id')} ({restore.get('reason')}); "
              f"checkpoint #{cp['last_committed']['id']} committed since")

    def nothing_lost(self) -> None:
        engine = self.engine
        started = time.monotonic()

        def finished() -> dict[str, Any] | None:
            r = engine.probe("counts", ZK, TOPOLOGY, str(SENTENCES))
            if "error" in r:
                raise StepFailed(r["error"])
            spouts = r.get("spouts") or {}
            done = spouts and all(s["sent"] == SENTENCES and not s["in_flight"] and not s["replay"] for s in spouts.values())
            return r if done else None

        r = wait_for(f"every spout to emit its {SENTENCES} sentences and have them acked, in a committed checkpoint",
                     finished, timeout=SENTENCES / RATE + 180, interval=3)
        print(f"    checkpoint #{r['checkpoint']} (after {time.monotonic() - started:.0f} s): spouts {r['spouts']}")
        if r["words_counted"] != r["words_expected"] or r["wrong_words"]:
            raise StepFailed(f"counted {r['words_counted']} words, expected {r['words_expected']}; "
                             f"{r['wrong_words']} words counted wrong, e.g. {r['example']}")
        print(f"    {r['words_counted']} words counted, exactly the input's {r['words_expected']}: nothing lost, "
              "nothing counted twice")
        components = engine.status()["components"]
        errors = {name: (c["errors"], c["last_error"]) for name, c in components.items() if c["errors"] or c["last_error"]}
        if errors:
            raise StepFailed(f"executors reported errors (count, last): {errors}")
        print("    no executor reported an error")

    def kill_topology(self) -> None:
        engine = self.engine
        print(_indent(engine.nstorm("kill", TOPOLOGY, timeout=90).stdout))
        listed = engine.nstorm("list").stdout
        if any(line.split()[:1] == [TOPOLOGY] for line in listed.splitlines()):
            raise StepFailed(f"{TOPOLOGY} is still listed after the kill: {listed.strip()}")
        try:
            keys = wait_for("its checkpoints to leave Redis",
                            lambda: (k := engine.probe("keys", ZK, TOPOLOGY))["keys"] == 0 and k, timeout=10, interval=1)
            print(f"    not listed any more; keys of {TOPOLOGY} left in Redis: {keys['keys']}")
        except StepFailed:
            # Nimbus drops the store before the workers stop: a checkpoint they were writing then
            # stays. Known (not what this check is about): said, not failed.
            left = engine.probe("keys", ZK, TOPOLOGY)
            print(f"    not listed any more; note: {left['keys']} keys of {TOPOLOGY} left in Redis, from a "
                  f"checkpoint its workers wrote while the kill ran (nstorm kill drops the store before they "
                  f"stop): {', '.join(left['names'])}")

    def down(self) -> None:
        engine = self.engine
        engine.compose_run("down", "-v", timeout=300)
        left = {kind: engine.labelled(kind) for kind in ("container", "volume", "network")}
        if any(left.values()):
            raise StepFailed(f"left after down -v: {left}")
        print("    no container, volume or network of the run is left")

    # diagnostics ---------------------------------------------------------------------------------
    def show_logs(self) -> None:
        engine = self.engine
        try:
            names = engine.labelled("container")
        except StepFailed:
            return
        for name in names:
            state = engine("inspect", name, "--format", "{{.State.Status}}", check=False).stdout.strip()
            logs = engine("logs", "--tail", "15", name, check=False)
            print(f"--- {name} ({state}): last lines of its output")
            print(_indent((logs.stdout + logs.stderr).strip() or "(nothing)"))
            if state == "running" and "redis" not in name:
                daemon_logs = engine("exec", name, "sh", "-c", "tail -n 15 /var/lib/nstorm/logs/*.log", check=False)
                print(_indent(daemon_logs.stdout.strip() or "(no daemon log)"))


# -- main ------------------------------------------------------------------------------------------

@contextmanager
def step(number: int, total: int, name: str, what: str) -> Iterator[None]:
    print(f"[{number}/{total}] {name}: {what}", flush=True)
    started = time.monotonic()
    try:
        yield
    except StepFailed as exc:
        raise StepFailed(f"step '{name}' failed: {exc}") from None
    print(f"    ok ({time.monotonic() - started:.1f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/compose-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print every command and its output")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up on failure (take it down by hand)")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    workdir = Path(tempfile.mkdtemp(prefix="nstorm-compose-check-"))
    run = Runner(workdir / "commands.log", args.verbose)
    started = time.monotonic()
    check: Check | None = None
    cluster_up = False
    failed = True
    try:
        with step(1, STEPS, "engine", "find docker compose (with an engine) or podman-compose"):
            engine = find_engine(run)
            print(f"    {engine.name}, {' '.join(engine.compose)}")
        check = Check(engine, workdir)
        steps: list[tuple[str, str, Callable[[], None]]] = [
            ("base", "the Dockerfile's base image", check.choose_base),
            ("containers", "can containers run here?", check.can_run_containers),
            ("image", "build nstorm:latest (compose build)", check.build),
            ("up", "compose up -d", check.up),
            ("health", "wait for every health check", check.health),
            ("submit", "submit word count from the nimbus container, checkpoints in the redis service", check.submit),
            ("placement", "status --json: workers on both supervisor containers, a checkpoint committed",
             check.placement),
            ("move", "move an executor live between the supervisor containers", check.move),
            ("ui", "the ui service's REST API", check.ui),
            ("kill", f"kill the {KILLED} container: its workers come back, nothing lost", check.kill_supervisor),
            ("exact", "the counts of the last committed checkpoint against the input", check.nothing_lost),
            ("kill-topology", "nstorm kill: the topology goes, and its checkpoints", check.kill_topology),
            ("down", "compose down -v: nothing left", check.down),
        ]
        assert len(steps) + 1 == STEPS
        for number, (name, what, action) in enumerate(steps, start=2):
            if name == "up":
                cluster_up = True
            with step(number, STEPS, name, what):
                action()
            if name == "down":
                cluster_up = False
        failed = False
        print(f"compose-check: passed in {time.monotonic() - started:.0f} s ({engine.name})")
        return 0
    except Skipped as exc:
        failed = False
        print(f"compose-check: SKIPPED: {exc}")
        return SKIP
    except StepFailed as exc:
        print(f"compose-check: FAILED: {exc}")
        print("--- last commands:")
        print(_indent(run.tail()))
        if check is not None and cluster_up:
            check.show_logs()
        return 1
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"compose-check: interrupted ({exc or 'SIGINT'}): taking everything down")
        return 130
    finally:
        if check is not None and cluster_up and not (failed and args.keep):
            try:
                check.engine.compose_run("down", "-v", check=False, timeout=300)
            except StepFailed as exc:
                print(f"compose-check: could not take the cluster down: {exc}")
        if failed and args.keep and cluster_up:
            print(f"compose-check: --keep: the cluster is still up; take it down with "
                  f"{' '.join(check.engine.compose) if check else 'compose'} -p {PROJECT} down -v")
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
