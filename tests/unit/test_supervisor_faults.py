"""A supervisor's and ``cluster down``'s fault handling (review, session 30): a plan that cannot be
written stops no running worker; an adopted worker that died a zombie is seen as exited; a pid
recorded by ``cluster up`` that another process has now is never signalled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from nstorm.localcluster import _recorded_daemon
from nstorm.plan import Plan, Slot
from nstorm.records import Heartbeat
from supervisor.daemon import Supervisor
from supervisor.workers import WorkerHandle, WorkerRegistry


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "nimbus", "--root", "/r"])
    try:
        yield popen
    finally:
        popen.kill()
        popen.wait()


def test_a_plan_that_cannot_be_written_stops_no_running_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                sleeper: subprocess.Popen[bytes]) -> None:
    """Disk full (or ZooKeeper gone while the code was read) skipped the topology's slots in the
    set of wanted ones, and the running worker was stopped for as long as the write failed."""
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1")
    sup.registry = WorkerRegistry(tmp_path / "workers", "n9", "/nstorm")
    places = {"a:0": "n9:7005"}
    plan = Plan.first("t", list(places), places, [Slot("n9", "127.0.0.1", 7005, 7105)]).replace(submission="s1")

    class Store:
        def latest_version(self, name: str) -> int | None:
            return 1 if name == "t" else None

        def put_plan(self, name: str, version: int, data: Any) -> None:
            raise OSError(28, "No space left on device")

        def topologies(self) -> list[str]:
            return ["t"]

        def get_meta(self, key: str) -> Any:
            return {"at": 0}

        def replaced(self) -> bool:
            return False

        def clear_stale_readers(self) -> None:
            pass

    sup.zk = object()  # type: ignore[assignment]
    sup.store = Store()  # type: ignore[assignment]
    sup.cluster = types.SimpleNamespace(children=lambda path, watch=False: ["t"],  # type: ignore[assignment]
                                        plan=lambda name, watch=False: (plan.replace(version=2), object()))
    sup._stored_submission["t"] = "s1"
    monkeypatch.setattr(sup, "_reregister_if_lost", lambda: None)
    monkeypatch.setattr(sup, "_topology_info", lambda *args: {"definition": {}, "code_dir": "x", "main": "t.py"})
    handle = sup.registry.record("t", 7005, sleeper)  # type: ignore[arg-type]
    sup.workers[("t", 7005)] = handle
    sup.sync()
    assert sup.workers.get(("t", 7005)) is handle and 7005 not in sup.stopping and sleeper.poll() is None


def test_an_adopted_worker_that_is_a_zombie_has_exited() -> None:
    class Zombie:
        pid = 12345

        def wait(self, timeout: float = 0) -> int:
            raise psutil.TimeoutExpired(timeout)

        def status(self) -> str:
            return psutil.STATUS_ZOMBIE

    assert WorkerHandle("t", 1, Zombie()).poll() == -1  # type: ignore[arg-type]


def test_cluster_down_signals_only_the_daemons_it_recorded(sleeper: subprocess.Popen[bytes]) -> None:
    assert _recorded_daemon(sleeper.pid, "/r") is not None
    assert _recorded_daemon(sleeper.pid, "/other") is None, "another cluster's"
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert _recorded_daemon(unrelated.pid, "/r") is None, "a pid the system gave to another process"
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_worker_started_after_a_plan_asked_for_its_restart_is_not_restarted_again(
        sleeper: subprocess.Popen[bytes]) -> None:
    """The restarts done were kept in memory only: a supervisor restarted after a process-mode
    move restarted the worker it had already restarted (and adopted) once more."""
    from supervisor.daemon import _started_after

    handle = WorkerHandle("t", 1, psutil.Process(sleeper.pid))
    started = handle.process.create_time()
    assert _started_after(handle, started - 5) and not _started_after(handle, started + 5)
    assert not _started_after(None, started) and not _started_after(handle, None)


def test_while_zookeeper_is_away_a_crashed_worker_is_restarted_without_a_sync(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZooKeeper call while disconnected waits for the reconnect (kazoo queues it): the
    supervisor's pass hung in its sync, its crashed workers stayed down and SIGTERM went unanswered."""
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(7006, 7106)], "127.0.0.1:1")
    sup.registry = WorkerRegistry(tmp_path / "workers", "n9", "/nstorm")
    sup.zk = types.SimpleNamespace(connected=False)  # type: ignore[assignment]
    sup._desired = {("t", 7006)}
    starts: list[tuple[str, int]] = []

    def start(topology: str, port: int, restarts: int = 0) -> Any:
        starts.append((topology, port))
        return types.SimpleNamespace(poll=lambda: None, topology=topology, port=port)

    def no_sync() -> None:
        raise AssertionError("no ZooKeeper call while it is away")

    monkeypatch.setattr(sup, "_start_worker", start)
    monkeypatch.setattr(sup, "sync", no_sync)
    assert sup._pass(False, 1.0) is True and starts == [("t", 7006)]
    sup.zk = types.SimpleNamespace(connected=True)  # type: ignore[assignment]
    monkeypatch.setattr(sup, "sync", lambda: None)
    assert sup._pass(True, 1.0) is False, "back: synced again"


def _hang_supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **conf: Any) -> Supervisor:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1", conf=conf)
    sup.registry = WorkerRegistry(tmp_path / "workers", "n9", "/nstorm")
    started: list[int] = []
    monkeypatch.setattr(sup, "_start_worker", lambda topology, port, restarts=0: started.append(port))
    sup.started = started  # type: ignore[attr-defined]
    return sup


def _beat(path: Path, n: int) -> None:
    path.write_text("{}")
    os.utime(path, ns=(n * 10**9, n * 10**9))


def test_a_worker_whose_heartbeat_goes_stale_is_killed_and_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]) -> None:
    """Storm's supervisor restarts a worker whose local heartbeat is older than
    supervisor.worker.timeout.secs; nstorm's wrote one that nobody read (a stopped worker, or one
    stuck in C code holding the GIL, ran on forever doing nothing)."""
    sup = _hang_supervisor(tmp_path, monkeypatch, **{"supervisor.worker.timeout.secs": 0.3})
    beat = sup.registry.beat_file(7005)
    _beat(beat, 1)  # left by the slot's previous worker: not a beat of this one
    handle = sup.registry.record("t", 7005, sleeper)  # type: ignore[arg-type]
    handle.beat_timeout = sup._beat_timeout({"topology.worker.timeout.secs": 0})
    assert handle.beat_timeout == 0.3
    sup.workers[("t", 7005)] = handle
    _beat(beat, 2)  # its first beat
    sup._reconcile({("t", 7005)})
    assert handle.beat_at is not None and sleeper.poll() is None
    beating = time.monotonic() + 0.6  # twice its timeout, beating: left alone
    while time.monotonic() < beating:
        _beat(beat, 3 + int(time.monotonic() * 100))
        sup._reconcile({("t", 7005)})
        assert sleeper.poll() is None and not handle.hung
        time.sleep(0.05)
    stale = time.monotonic() + 0.35
    while time.monotonic() < stale:
        time.sleep(0.05)
    sup._reconcile({("t", 7005)})
    assert handle.hung
    assert sleeper.wait(5) == -signal.SIGKILL
    handle.started_at -= 20  # not a worker that died young: restarted without a back-off
    sup._reconcile({("t", 7005)})
    assert sup.started == [7005]  # type: ignore[attr-defined]


def test_a_worker_that_never_beats_is_killed_after_the_start_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]) -> None:
    sup = _hang_supervisor(tmp_path, monkeypatch, **{"supervisor.worker.start.timeout.secs": 0.2})
    handle = sup.registry.record("t", 7005, sleeper)  # type: ignore[arg-type]
    sup.workers[("t", 7005)] = handle
    sup._reconcile({("t", 7005)})
    assert not handle.hung  # its 30 s heartbeat timeout does not apply before the first beat
    handle.started_at -= 0.3
    sup._reconcile({("t", 7005)})
    assert handle.hung and sleeper.wait(5) == -signal.SIGKILL


def test_heartbeat_timeouts_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nstorm.config import check_topology_conf
    from nstorm.errors import ConfigError

    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="supervisor.worker.timeout.secs"):
        Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1", conf={"supervisor.worker.timeout.secs": "soon"})
    with pytest.raises(ConfigError, match="topology.worker.timeout.secs"):
        check_topology_conf({"topology.worker.timeout.secs": -1})
    sup = Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1")
    assert sup._beat_timeout({"topology.worker.timeout.secs": 5}) == 5.0
    assert sup._beat_timeout(None) == 30.0


def test_a_plan_store_removed_or_damaged_under_a_running_supervisor_is_rebuilt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Section 6: a corrupt or unreadable store is rebuilt from ZooKeeper. Only a starting
    supervisor did; a running one wrote on into removed files (workers never saw a plan again)
    or logged a damaged record on every pass."""
    import shutil

    from kvstore import LMDBPlanStore, StoreCorruptError

    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1")
    sup.store, _ = LMDBPlanStore.open_or_rebuild(sup.store_path)
    sup.store.put_plan("t", 1, {"version": 1})
    sup._stored_submission["t"] = "s1"
    shutil.rmtree(sup.store_path)
    sup._check_store()
    assert not sup.store.replaced() and sup.store.latest("t") is None and not sup._stored_submission
    sup.store.put_plan("t", 2, {"version": 2})

    class Zk:
        connected = True

    sup.zk = Zk()  # type: ignore[assignment]
    old = sup.store

    def damaged() -> None:
        raise StoreCorruptError("plan/t/2: undecodable")

    monkeypatch.setattr(sup, "sync", damaged)
    assert sup._pass(False, 1.0) is False
    assert sup.store is not old and sup.store is not None
    sup.store.close()


def test_a_worker_beats_locally_while_zookeeper_is_away(tmp_path: Path) -> None:
    """kazoo queues a call made while disconnected until the reconnect: the heartbeat thread
    waited in it, stopped writing its local beat, and the supervisor would kill every worker of
    a cluster whose ZooKeeper was away longer than supervisor.worker.timeout.secs."""
    import threading

    from worker.process import Worker

    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.conf = {"worker.heartbeat.interval.secs": 0.02}
    worker.core_pin = object()  # type: ignore[assignment]
    worker.heartbeat = lambda: {"worker_id": "n1:1", "time": time.time()}  # type: ignore[method-assign]

    class AwayZk:
        connected = False

        def exists(self, path: str) -> bool:
            worker._stop.wait(30)  # as kazoo: queued until the reconnect
            return False

    worker._zk = AwayZk()  # type: ignore[assignment]
    beat = tmp_path / "heartbeat-1.json"
    thread = threading.Thread(target=worker._heartbeat_loop, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        first = beat.stat().st_mtime_ns
        while beat.stat().st_mtime_ns == first and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beat.stat().st_mtime_ns != first  # still beating
    finally:
        worker._stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_a_beat_that_cannot_be_written_touches_the_last_one(tmp_path: Path) -> None:
    """A full disk failed every write of the local beat, and the supervisor killed the live worker
    as hung every supervisor.worker.timeout.secs: its time is touched instead."""
    from worker.process import write_local_beat

    beat = tmp_path / "heartbeat-1.json"
    assert write_local_beat(beat, {"worker_id": "n1:1", "time": 1.0}) is None
    handle = WorkerHandle("t", 1, None)  # type: ignore[arg-type]  # no process: only its beat is read
    assert handle.beat_age(beat, time.monotonic())[1] is True
    os.utime(beat, ns=(1, 1))  # an old beat ...
    (tmp_path / "heartbeat-1.tmp").mkdir()  # ... and no new file can be written
    assert isinstance(write_local_beat(beat, {"worker_id": "n1:1", "time": 2.0}), OSError)
    assert beat.stat().st_mtime_ns > 1  # touched
    assert '"time": 1.0' in beat.read_text()  # the last beat's contents stay
    now = time.monotonic() + 60
    assert handle.beat_age(beat, now) == (0.0, True)  # a beat for the supervisor
    assert isinstance(write_local_beat(tmp_path / "gone" / "heartbeat-2.json", {}), OSError)  # nothing to touch


def test_a_worker_started_with_another_transport_is_stopped_not_adopted(tmp_path: Path) -> None:
    """A supervisor restarted with CurveZMQ turned on adopted the workers it had started in the
    clear (they went on sending plaintext; nothing reported it): now a worker whose recorded keys
    differ from the supervisor's is stopped, to be started again with them."""
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "worker", "n9", "7005"])
    try:
        WorkerRegistry(tmp_path / "workers", "n9", "/nstorm").record("t", 7005, popen)  # type: ignore[arg-type]
        again = WorkerRegistry(tmp_path / "workers", "n9", "/nstorm").adopt()
        assert [h.pid for h in again] == [popen.pid], "the same transport: adopted"
        assert WorkerRegistry(tmp_path / "workers", "n9", "/nstorm", "/keys").adopt() == []
        assert popen.wait(10) is not None, "stopped"
        assert not list((tmp_path / "workers").glob("*.json"))
    finally:
        popen.kill()
        popen.wait()


def _restart_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes],
                  beat: dict[str, Any] | None) -> tuple[Supervisor, Any]:
    """One sync of a supervisor that runs ``sleeper`` as worker n9:7005 of ``t`` and reads plan v6,
    which carries the process-mode restart that v5 asked for it (``restart: {n9:7005: 5}``): v5
    itself was written and replaced before this supervisor read it. ``beat``: the worker's
    heartbeat in ZooKeeper."""
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1")
    sup.registry = WorkerRegistry(tmp_path / "workers", "n9", "/nstorm")
    places = {"a:0": "n9:7005"}
    plan = Plan.first("t", list(places), places, [Slot("n9", "127.0.0.1", 7005, 7105)]).replace(
        submission="s1", version=6, restart={"n9:7005": 5}, updated_at=time.time())
    written: list[int] = []

    class Store:
        def latest_version(self, name: str) -> int | None:
            return written[-1] if written else 4

        def put_plan(self, name: str, version: int, data: Any) -> None:
            written.append(version)

        def topologies(self) -> list[str]:
            return ["t"]

        def get_meta(self, key: str) -> Any:
            return {"at": 0}

        def put_meta(self, key: str, value: Any) -> None:
            pass

        def replaced(self) -> bool:
            return False

        def clear_stale_readers(self) -> None:
            pass

    sup.zk = types.SimpleNamespace(exists=lambda path, watch=None: None)  # type: ignore[assignment]
    sup.store = Store()  # type: ignore[assignment]
    sup.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        children=lambda path, watch=False: ["t"], plan=lambda name, watch=False: (plan, object()),
        read=lambda path, watch=False: (None, None),
        heartbeat=lambda name, wid: Heartbeat.from_json(beat) if beat is not None and wid == "n9:7005" else None)
    sup._stored_submission["t"] = "s1"
    monkeypatch.setattr(sup, "_reregister_if_lost", lambda: None)
    monkeypatch.setattr(sup, "_topology_info", lambda *args: {"definition": {}, "code_dir": "x", "main": "t.py"})
    monkeypatch.setattr(sup, "_nudge", lambda name: None)
    monkeypatch.setattr(sup, "_reconcile", lambda desired: None)
    handle = sup.registry.record("t", 7005, sleeper)  # type: ignore[arg-type]
    sup.workers[("t", 7005)] = handle
    sup.sync()
    return sup, handle


def test_a_restart_asked_in_a_plan_version_never_read_is_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              sleeper: subprocess.Popen[bytes]) -> None:
    """A process-mode restart was asked only in the version that moved (``restart`` replaced by
    the next move, and checked against the plan's own version): two versions written in one
    Nimbus pass, and the first's workers were never restarted. It is carried on, keyed by the
    version that asked, until the worker runs that version."""
    sup, handle = _restart_sync(tmp_path, monkeypatch, sleeper, None)
    assert ("t", 7005) not in sup.workers and sup.stopping[7005][0] is handle, "stopped to be started again"
    assert sleeper.wait(10) is not None
    again = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # the worker started again (by the next pass) is not restarted for the same ask
        sup.stopping.clear()
        sup.workers[("t", 7005)] = new = sup.registry.record("t", 7005, again)  # type: ignore[arg-type]
        new.started_at -= 20
        monkeypatch.setattr("supervisor.daemon._started_after", lambda proc, when: False)
        sup.sync()
        assert sup.workers.get(("t", 7005)) is new and 7005 not in sup.stopping and again.poll() is None
    finally:
        again.kill()
        again.wait()


def test_a_worker_that_ran_the_version_that_asked_is_not_restarted_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]) -> None:
    """A supervisor restarted after it restarted a worker for v5 reads v6, which still carries the
    ask: the worker's heartbeat (this process's, at v5 or later) says it was done."""
    beat = {"worker_id": "n9:7005", "pid": sleeper.pid, "time": time.time(), "version": 5}
    sup, handle = _restart_sync(tmp_path, monkeypatch, sleeper, beat)
    assert sup.workers.get(("t", 7005)) is handle and 7005 not in sup.stopping and sleeper.poll() is None
    stale = {**beat, "pid": sleeper.pid + 1}  # the previous process's heartbeat: not this one's
    sup, handle = _restart_sync(tmp_path, monkeypatch, sleeper, stale)
    assert sup.stopping[7005][0] is handle
