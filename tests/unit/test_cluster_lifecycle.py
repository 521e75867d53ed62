"""What the cluster commands start, they end: `nstorm local`, `cluster up|down` and `zookeeper run`
on failures, signals and homes shared by two commands (a review of session 31). The neighbours
(ZooKeeper, the daemons) are fakes: nothing here starts a JVM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nstorm.cli.main import app


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    return tmp_path


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


class _FakeZooKeeper:
    """``EmbeddedZooKeeper`` for ``zookeeper run``: ``dies`` makes the JVM exit on its own at once."""

    dies: int | None = None

    def __init__(self, data_dir: Path, port: int, log_file: Path, host: str = "127.0.0.1") -> None:
        self.address = f"{host}:{port}"
        self.pid = 4242
        self.log_file = log_file
        self.stopped = False

    def start(self) -> None:
        pass

    @property
    def exit_code(self) -> int | None:
        return type(self).dies

    @property
    def running(self) -> bool:
        return type(self).dies is None

    def stop(self) -> None:
        self.stopped = True


def test_zookeeper_run_exits_1_when_the_jvm_dies_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """It exited 0, so a container's ``restart: on-failure`` never started it again."""
    monkeypatch.setattr("nstorm.zookeeper.EmbeddedZooKeeper", _FakeZooKeeper)
    monkeypatch.setattr(_FakeZooKeeper, "dies", 3)
    monkeypatch.setattr("nstorm.signals.relay_signals", lambda actions: None)
    result = CliRunner().invoke(app, ["zookeeper", "run", "--port", "2181"])
    assert result.exit_code == 1, result.output
    assert "ZooKeeper exited on its own with code 3" in _lines(result.output)[-1]
    assert "Traceback" not in result.output


def test_zookeeper_run_exits_0_when_asked_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    monkeypatch.setattr("nstorm.zookeeper.EmbeddedZooKeeper", _FakeZooKeeper)
    actions: dict[int, Any] = {}
    monkeypatch.setattr("nstorm.signals.relay_signals", actions.update)
    monkeypatch.setattr(_FakeZooKeeper, "start", lambda self: actions[signal.SIGTERM]())  # SIGTERM at once
    result = CliRunner().invoke(app, ["zookeeper", "run", "--port", "2181"])
    assert result.exit_code == 0, result.output


WORDCOUNT = str(Path(__file__).parents[2] / "topologies" / "wordcount.py")


class _FakeCluster:
    """``LocalCluster`` for ``nstorm local``: ``on_start`` and ``on_stop`` say what happens then."""

    on_start: Any = staticmethod(lambda cluster: None)
    on_stop: Any = staticmethod(lambda cluster: None)
    last: _FakeCluster | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.spawned = False
        self.had_processes = False
        self.stopped = False
        type(self).last = self

    def start(self) -> None:
        type(self).on_start(self)

    def stop(self) -> None:
        self.had_processes = self.had_processes or self.spawned
        type(self).on_stop(self)
        self.stopped = True


def _signal_self(signum: int) -> None:
    """Send ``signum`` to this process and give its handler the bytecodes to run in (it raises)."""
    import os
    import time

    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake, and the test process's handlers put back (a SIGTERM or SIGHUP the command did not
    handle raises here rather than ending pytest)."""
    import signal

    def not_handled(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGTERM, not_handled)
    signal.signal(signal.SIGHUP, not_handled)
    handlers = {s: signal.getsignal(s) for s in saved}
    monkeypatch.setattr("nstorm.localcluster.LocalCluster", _FakeCluster)
    monkeypatch.setattr(_FakeCluster, "last", None)
    yield _FakeCluster
    after = {s: signal.getsignal(s) for s in saved}
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    assert after == handlers, "nstorm local put back the handlers it found"


def test_local_says_cluster_stopped_only_when_something_started(fake_cluster: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from nstorm.errors import ZooKeeperError

    def no_java(cluster: _FakeCluster) -> None:
        raise ZooKeeperError("Java not found: install Java 17 or set JAVA_HOME")

    monkeypatch.setattr(fake_cluster, "on_start", no_java)
    result = CliRunner().invoke(app, ["local", WORDCOUNT, "--ui-port", "0"])
    assert result.exit_code == 1, result.output
    assert _lines(result.output) == ["error: Java not found: install Java 17 or set JAVA_HOME"]


@pytest.mark.parametrize(("signame", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_local_tears_down_on_ctrl_c_sigterm_and_sighup_and_exits_128_plus_the_signal(
        fake_cluster: Any, monkeypatch: pytest.MonkeyPatch, signame: str, code: int) -> None:
    """SIGHUP (the terminal closed) had no handler: the command died and left its ZooKeeper, in a
    session of its own, running; Ctrl-C and SIGTERM exited 0."""
    import signal

    def start(cluster: _FakeCluster) -> None:
        cluster.spawned = True
        _signal_self(getattr(signal, signame))
        raise AssertionError(f"{signame} did not interrupt the start")

    monkeypatch.setattr(fake_cluster, "on_start", start)
    result = CliRunner().invoke(app, ["local", WORDCOUNT, "--ui-port", "0"])
    assert result.exit_code == code, result.output
    assert fake_cluster.last.stopped
    assert _lines(result.output) == ["interrupted: tearing down", "cluster stopped"]


def test_signals_during_the_teardown_do_not_cut_it_short(fake_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C, or a SIGTERM, during "stopping the cluster..." left ZooKeeper running."""
    import os
    import signal

    def start(cluster: _FakeCluster) -> None:
        cluster.spawned = True
        raise KeyboardInterrupt

    def stop(cluster: _FakeCluster) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(os.getpid(), signum)
            for _ in range(10_000):  # bytecodes: a handler would run between two of them
                pass

    monkeypatch.setattr(fake_cluster, "on_start", start)
    monkeypatch.setattr(fake_cluster, "on_stop", stop)
    result = CliRunner().invoke(app, ["local", WORDCOUNT, "--ui-port", "0"])
    assert fake_cluster.last.stopped, result.output
    assert result.exit_code == 130, result.output


def test_ignoring_signals_ignores_them_and_puts_the_handlers_back() -> None:
    import os
    import signal
    import time

    from nstorm.signals import ignoring_signals

    got: list[int] = []
    old = signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
    try:
        with ignoring_signals((signal.SIGUSR2,)):
            os.kill(os.getpid(), signal.SIGUSR2)
            assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
            for _ in range(10_000):  # bytecodes: a handler would run between two of them
                pass
        assert not got
        os.kill(os.getpid(), signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [signal.SIGUSR2]  # the one sent after the block only
    finally:
        signal.signal(signal.SIGUSR2, old)


@pytest.fixture
def recorded_cluster(home: Path) -> Any:
    """A `cluster up` cluster of this home as `cluster status` sees it: cluster.json naming a live
    "nimbus" (a sleeping process whose command line is one)."""
    import json
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "nimbus", "--root", "/nstorm"])
    try:
        (home / "run").mkdir(exist_ok=True)
        (home / "run" / "cluster.json").write_text(json.dumps(
            {"zk": "127.0.0.1:1", "root": "/nstorm", "pids": {"nimbus": proc.pid}, "netns": False, "ui": None}))
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_local_refuses_to_run_beside_a_cluster_up_cluster_of_its_home(fake_cluster: Any, recorded_cluster: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Both are supervisors n1.. under /nstorm with their stores in $NSTORM_HOME/supervisor/n1: the
    demo's supervisor adopted the cluster's workers or dropped their plans, and its teardown
    killed them."""
    def start(cluster: _FakeCluster) -> None:
        raise AssertionError("nothing starts")

    monkeypatch.setattr(fake_cluster, "on_start", start)
    result = CliRunner().invoke(app, ["local", WORDCOUNT, "--ui-port", "0"])
    assert result.exit_code == 1, result.output
    [line] = _lines(result.output)
    assert "a `nstorm cluster up` cluster runs in this NSTORM_HOME" in line and "nstorm cluster down" in line
    assert "another directory" in line
    assert recorded_cluster.poll() is None


def test_a_second_local_or_a_cluster_up_in_the_home_is_refused(fake_cluster: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two clusters in one home (two `nstorm local`, or `cluster up` during one) share the
    supervisors' stores the same way."""
    import os

    from nstorm.localcluster import home_cluster

    def start(cluster: _FakeCluster) -> None:
        raise AssertionError("nothing starts")

    def no_zookeeper(**kwargs: Any) -> str:
        raise AssertionError("no ZooKeeper starts")

    monkeypatch.setattr(fake_cluster, "on_start", start)
    monkeypatch.setattr("nstorm.background.start_background", no_zookeeper)
    with home_cluster("local"):
        for args in (["local", WORDCOUNT, "--ui-port", "0"], ["cluster", "up", "--ui-port", "0"]):
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 1, result.output
            [line] = _lines(result.output)
            assert f"nstorm local (pid {os.getpid()}) runs in this NSTORM_HOME" in line, line
            assert "another directory" in line


def test_the_home_is_free_again_once_local_ended(fake_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from nstorm.errors import ZooKeeperError
    from nstorm.home import run_dir, try_home_lock

    def start(cluster: _FakeCluster) -> None:
        raise ZooKeeperError("Java not found")

    monkeypatch.setattr(fake_cluster, "on_start", start)
    result = CliRunner().invoke(app, ["local", WORDCOUNT, "--ui-port", "0", "--duration", "0.1"])
    assert fake_cluster.last.stopped, result.output
    with try_home_lock(run_dir() / "cluster.lock") as held:
        assert held


@pytest.fixture
def background(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """This home's background ZooKeeper, faked: ``running`` before the command, what was called."""
    calls: dict[str, Any] = {"running": False, "started": 0, "stopped": 0, "destroyed": 0}

    def start_background(host: str = "127.0.0.1", **kwargs: Any) -> str:
        calls["started"] += 1
        calls["running"] = True
        return f"{host}:2181"

    def stop_background() -> bool:
        calls["stopped"] += 1
        was, calls["running"] = calls["running"], False
        return was

    monkeypatch.setattr("nstorm.background.start_background", start_background)
    monkeypatch.setattr("nstorm.background.stop_background", stop_background)
    monkeypatch.setattr("nstorm.background.background_status",
                        lambda: {"running": calls["running"], "pid": 7 if calls["running"] else None, "address": None})
    return calls


def _spawned_and_recorded(cluster: _FakeCluster) -> None:
    """What LocalCluster.start does before it waits: daemons spawned, recorded in cluster.json."""
    import json

    from nstorm.home import run_dir

    cluster.spawned = True
    (run_dir() / "cluster.json").write_text(json.dumps({"zk": "127.0.0.1:2181", "root": "/nstorm", "pids": {}}))


@pytest.mark.parametrize(("how", "code"), [("fails", 1), ("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_cluster_up_that_fails_or_is_interrupted_stops_what_it_started(
        fake_cluster: Any, background: dict[str, Any], monkeypatch: pytest.MonkeyPatch, home: Path,
        how: str, code: int) -> None:
    """Its background ZooKeeper was left running, and `cluster down` then said "no cluster
    recorded here" and left it too."""
    import signal

    from nstorm.errors import ClusterError

    def start(cluster: _FakeCluster) -> None:
        _spawned_and_recorded(cluster)
        if how == "fails":
            raise ClusterError("supervisors ['n2'] did not register within 60s")
        _signal_self(getattr(signal, how))
        raise AssertionError(f"{how} did not interrupt the start")

    monkeypatch.setattr(fake_cluster, "on_start", start)
    result = CliRunner().invoke(app, ["cluster", "up", "--ui-port", "0"])
    assert result.exit_code == code, result.output
    assert len(_lines(result.output)) == 1 and "Traceback" not in result.output, result.output
    assert fake_cluster.last.stopped
    assert background["started"] == 1 and not background["running"], "its ZooKeeper is stopped"
    assert not (home / "run" / "cluster.json").exists()


def test_a_failed_cluster_up_leaves_a_zookeeper_it_did_not_start(fake_cluster: Any, background: dict[str, Any],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from nstorm.errors import ClusterError

    def start(cluster: _FakeCluster) -> None:
        raise ClusterError("a daemon exited during start-up")

    background["running"] = True  # `nstorm zookeeper start` ran before
    monkeypatch.setattr(fake_cluster, "on_start", start)
    result = CliRunner().invoke(app, ["cluster", "up", "--ui-port", "0"])
    assert result.exit_code == 1, result.output
    assert background["running"] and background["stopped"] == 0


def test_a_cluster_up_with_netns_whose_zookeeper_fails_removes_the_namespaces(
        fake_cluster: Any, background: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from nstorm import netns
    from nstorm.errors import ZooKeeperError

    def no_java(**kwargs: Any) -> str:
        raise ZooKeeperError("Java not found: install Java 17 or set JAVA_HOME")

    made: list[int] = []
    monkeypatch.setattr(netns, "available", lambda: True)
    monkeypatch.setattr(netns, "create", lambda count, rate: made.append(count) or [])
    monkeypatch.setattr(netns, "destroy", lambda: made.clear() or True)
    monkeypatch.setattr("nstorm.background.start_background", no_java)
    result = CliRunner().invoke(app, ["cluster", "up", "--netns", "--supervisors", "2", "--ui-port", "0"])
    assert result.exit_code == 1, result.output
    assert _lines(result.output) == ["error: Java not found: install Java 17 or set JAVA_HOME"]
    assert made == [], "the namespaces are removed"


def test_cluster_down_with_no_cluster_recorded_stops_a_background_zookeeper(background: dict[str, Any]) -> None:
    background["running"] = True  # left by a `cluster up` killed before it recorded its daemons
    result = CliRunner().invoke(app, ["cluster", "down"])
    assert result.exit_code == 0, result.output
    assert _lines(result.output) == ["no cluster recorded here; stopped its ZooKeeper"]
    assert not background["running"]
    result = CliRunner().invoke(app, ["cluster", "down"])
    assert _lines(result.output) == ["no cluster recorded here"]


def test_a_detached_cluster_is_recorded_before_it_waits_for_its_supervisors(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `cluster up` killed (SIGKILL) while it waited left daemons that no record named."""
    import json

    from nstorm.errors import ClusterError
    from nstorm.localcluster import LocalCluster

    class Proc:
        def __init__(self, pid: int) -> None:
            self.pid = pid
            self.ended = False

        def poll(self) -> int | None:
            return 0 if self.ended else None

        def send_signal(self, signum: int) -> None:
            self.ended = True

        def wait(self, timeout: float | None = None) -> int:
            return 0

    pids = iter(range(90001, 90100))
    cluster = LocalCluster(2, 1, zk_address="127.0.0.1:1", detach=True)
    monkeypatch.setattr(cluster, "_spawn", lambda *args, **kwargs: Proc(next(pids)))
    recorded: list[dict[str, Any]] = []

    def wait_supervisors(nodes: set[str], timeout: float) -> None:
        recorded.append(json.loads((home / "run" / "cluster.json").read_text()))
        raise ClusterError("supervisors ['n2'] did not register within 60s")

    monkeypatch.setattr(cluster, "wait_supervisors", wait_supervisors)
    with pytest.raises(ClusterError):
        cluster.start()
    assert recorded and set(recorded[0]["pids"]) == {"nimbus", "supervisor-n1", "supervisor-n2"}


@pytest.mark.parametrize("port_base", [1024, 6700, 63536])
@pytest.mark.parametrize("slots", [1, 4, 100])
@pytest.mark.parametrize("supervisors", [1, 2, 10])
def test_the_port_layouts_cluster_up_accepts_give_every_port_once(supervisors: int, slots: int, port_base: int) -> None:
    """--supervisors 11 gave n11 the control ports of n1, --slots 101 a port of the next node, and
    --port-base 65000 ports above 65535."""
    from nstorm.localcluster import check_port_layout, supervisor_port_base
    from supervisor.daemon import pick_slots

    check_port_layout(supervisors, slots, port_base)
    ports = [p for i in range(1, supervisors + 1)
             for slot in pick_slots(slots, supervisor_port_base(port_base, f"n{i}"), "127.0.0.1") for p in slot]
    assert len(ports) == len(set(ports)) == 2 * supervisors * slots
    assert min(ports) >= port_base and max(ports) <= 65535


@pytest.mark.parametrize(("args", "needle"), [
    (["--supervisors", "11"], "--supervisors 11 with --port-base: at most 10"),
    (["--slots", "101"], "--slots 101 with --port-base: at most 100"),
    (["--port-base", "65000"], "--port-base 65000: the last control port would be 66103 (> 65535); at most 64432"),
    (["--port-base", "63537", "--supervisors", "10", "--slots", "100"], "at most 63536"),
])
def test_cluster_up_refuses_a_port_layout_whose_ports_collide_or_overflow(
        args: list[str], needle: str, fake_cluster: Any, background: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["cluster", "up", *args])
    assert result.exit_code == 2, result.output
    [line] = _lines(result.output)
    assert needle in line, line
    assert background["started"] == 0 and fake_cluster.last is None, "nothing started"


def test_free_ports_take_no_layout() -> None:
    from nstorm.localcluster import check_port_layout

    check_port_layout(64, 1024, 0)
