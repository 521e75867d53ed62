"""Tests for the embedded ZooKeeper launcher, against a real ZooKeeper (real java)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient

from nstorm import zookeeper
from nstorm.background import background_status, embedded_address, start_background, stop_background
from nstorm.errors import NStormError, ZooKeeperError
from nstorm.home import run_dir, zk_address_file
from nstorm.net import free_port
from nstorm.zookeeper import EmbeddedZooKeeper, find_java, ruok, zookeeper_classpath

pytestmark = pytest.mark.timeout(120)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("NSTORM_HOME", str(path))
    return path


@pytest.fixture
def zk(tmp_path: Path) -> Iterator[EmbeddedZooKeeper]:
    server = EmbeddedZooKeeper(tmp_path / "zk")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def background(home: Path) -> Iterator[None]:
    """Make sure the home's background server is gone after the test, even on failure."""
    try:
        yield
    finally:
        stop_background()
        for proc in psutil.process_iter(["cmdline"]):
            if str(home) in " ".join(proc.info.get("cmdline") or []):
                proc.kill()


def test_embedded_zookeeper_serves_kazoo(
    zk: EmbeddedZooKeeper, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    zk.start()
    elapsed = time.monotonic() - started
    print(f"ZooKeeper startup: {elapsed:.2f}s")
    assert zk.running
    pid = zk.pid
    assert pid is not None
    assert ruok(zk.address)

    # A 4 s session must be accepted (minSessionTimeout is low enough).
    client = KazooClient(hosts=zk.address, timeout=4.0)
    try:
        client.start(timeout=10)
        client.create("/nstorm/test", b"hello", makepath=True)
        data, stat = client.get("/nstorm/test")
        assert data == b"hello"
        assert stat.version == 0
    finally:
        client.stop()
        client.close()

    zk.stop()
    assert not zk.running
    assert zk.pid is None
    assert _gone(pid)
    assert not ruok(zk.address)
    zk.stop()  # idempotent

    # Java's output went to the log file, not to the launching terminal.
    out, err = capfd.readouterr()
    assert "ZooKeeperServer" not in out + err
    assert "binding to port" in zk.log_file.read_text()


def test_context_manager_stops_server(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path / "zk")
    try:
        with server as running:
            pid = running.pid
            assert pid is not None and ruok(running.address)
        assert not server.running
        assert _gone(pid)
    finally:
        server.stop()


def test_port_in_use_fails_with_log_tail(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        server = EmbeddedZooKeeper(tmp_path / "zk", port=port)
        try:
            with pytest.raises(ZooKeeperError, match="Address already in use"):
                server.start(timeout=20)
            assert not server.running
            assert server.pid is None
        finally:
            server.stop()


def test_background_round_trip(home: Path, background: None) -> None:
    assert background_status() == {"running": False, "pid": None, "address": None}
    assert embedded_address() is None

    address = start_background()
    status = background_status()
    assert status["running"] is True
    assert status["address"] == address
    pid = status["pid"]
    assert isinstance(pid, int)
    assert (run_dir() / "zookeeper.pid").read_text().strip() == str(pid)
    assert zk_address_file().read_text().strip() == address
    assert embedded_address() == address
    assert (home / "zookeeper" / "zoo.cfg").exists()
    assert (home / "logs" / "zookeeper.log").exists()

    # A second start finds the running server instead of starting another.
    assert start_background() == address
    assert background_status()["pid"] == pid

    assert stop_background() is True
    assert _gone(pid)
    assert not (run_dir() / "zookeeper.pid").exists()
    assert not zk_address_file().exists()
    assert background_status() == {"running": False, "pid": None, "address": None}
    assert embedded_address() is None
    assert stop_background() is False


def test_stop_background_never_signals_a_foreign_pid(home: Path) -> None:
    # The pid file names this test process: it is not a ZooKeeper, so it must survive.
    (run_dir() / "zookeeper.pid").write_text(f"{os.getpid()}\n")
    zk_address_file().write_text("127.0.0.1:1\n")
    assert background_status()["running"] is False
    assert stop_background() is False
    assert not (run_dir() / "zookeeper.pid").exists()
    assert not zk_address_file().exists()


def test_find_java_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "jdk"
    empty.mkdir()
    monkeypatch.setenv("JAVA_HOME", str(empty))
    monkeypatch.setenv("PATH", "")
    with pytest.raises(ZooKeeperError, match="Java") as info:
        find_java()
    assert isinstance(info.value, NStormError)
    assert "\n" not in str(info.value)


def test_find_java_prefers_java_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert find_java() == str(java)


def test_zookeeper_classpath_points_at_pyspark_jars() -> None:
    classpath = zookeeper_classpath()
    jars = Path(classpath).parent
    assert classpath.endswith(os.path.join("jars", "*"))
    assert any(jars.glob("zookeeper-[0-9]*.jar"))


def test_zookeeper_classpath_without_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zookeeper.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ZooKeeperError, match="pyspark"):
        zookeeper_classpath()


def test_ruok_on_closed_port_is_false() -> None:
    assert ruok(f"127.0.0.1:{free_port()}", timeout=0.5) is False
    with pytest.raises(ZooKeeperError, match="host:port"):
        ruok("no-port")
