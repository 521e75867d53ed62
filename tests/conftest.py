"""Test harness: one real ZooKeeper per session, real clusters per module, hermetic homes.

Every process a test starts is ended in a fixture finaliser; ``atexit`` is the
backstop for the ZooKeeper server. On a failure the daemon logs are printed.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="nstorm-test-home-"))
os.environ["NSTORM_HOME"] = str(_HOME)
# The tests' workers claim cores among themselves (worker.cpupin), not against the machine's others.
os.environ["NSTORM_CPU_LOCK_DIR"] = str(_HOME / "cpu-locks")
os.environ.pop("NSTORM_ZK", None)

TOPOLOGIES = Path(__file__).parent / "topologies"


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what or predicate}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[str]:
    from nstorm.zookeeper import EmbeddedZooKeeper

    zk = EmbeddedZooKeeper(_HOME / "zookeeper-tests", 0, _HOME / "logs" / "zookeeper-tests.log")
    atexit.register(zk.stop)
    zk.start(timeout=60)
    try:
        yield zk.address
    finally:
        zk.stop()


def start_redis(port: int) -> subprocess.Popen[bytes]:
    """A real ``redis-server`` on ``port`` (no persistence), answering; the caller ends it.

    ``.ci/run`` installs Debian's package when it is missing; without it the tests that need
    Redis are skipped, saying why.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does it)")
    directory = _HOME / f"redis-{port}"
    directory.mkdir(parents=True, exist_ok=True)
    log = open(_HOME / "logs" / "redis.log", "ab") if (_HOME / "logs").is_dir() else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(directory)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    atexit.register(proc.kill)
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        wait_until(lambda: _pings(client), 30, what="redis-server to answer")
    except BaseException:
        proc.kill()
        raise
    finally:
        client.close()
    return proc


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """A real ``redis-server`` on a free port for the session: its ``redis://`` url."""
    from nstorm.net import free_port

    port = free_port("127.0.0.1")
    proc = start_redis(port)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(proc)


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


@pytest.fixture(scope="module")
def cluster(zookeeper: str) -> Iterator[Any]:
    """A real cluster: Nimbus and 2 supervisors with 4 slots each, on a fresh ZooKeeper root."""
    from nstorm.localcluster import LocalCluster

    c = LocalCluster(supervisors=2, slots=4, zk_address=zookeeper, root=f"/t-{uuid.uuid4().hex[:8]}")
    try:
        c.start(timeout=60)
        yield c
    finally:
        c.stop()


@pytest.fixture
def client(cluster: Any) -> Iterator[Any]:
    from nstorm.client import ClusterClient

    with ClusterClient(cluster.address, cluster.root) as cl:
        yield cl


def run_cli(*args: str, cluster: Any = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``python -m nstorm ARGS`` (against ``cluster`` if given) and capture its output."""
    env = dict(os.environ)
    if cluster is not None:
        env["NSTORM_ZK"] = cluster.address
        env["NSTORM_ZK_ROOT"] = cluster.root
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "nstorm", *args], capture_output=True, text=True, timeout=timeout, env=env,
        stdin=subprocess.DEVNULL,
    )


def read_outputs(directory: Path) -> dict[str, Any]:
    """JSON files written by test bolts, by file stem."""
    result = {}
    for path in directory.glob("*.json"):
        try:
            result[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue  # being replaced right now
    return result


def wait_every_sentence_acked(directory: Path, per_spout: int | list[int], spouts: int = 2,
                              timeout: float = 120.0) -> None:
    """Wait until every exact_wordcount spout has all its sentences acked, and each id is among them once.

    ``per_spout``: the sentences of each spout, or a list of them, spout by spout."""
    totals = list(per_spout) if isinstance(per_spout, list) else [per_spout] * spouts

    def all_acked() -> bool:
        out = read_outputs(directory)
        return all(len(out.get(f"spout-{i}", {}).get("acks", {})) >= n for i, n in enumerate(totals))

    wait_until(all_acked, timeout, interval=0.5, what="every sentence acked (replays included)")
    out = read_outputs(directory)
    for i, n in enumerate(totals):
        assert sorted(int(k) for k in out[f"spout-{i}"]["acks"]) == list(range(n))


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Remove the session's home when every test passed (a failure keeps its logs), or when it
    holds no file (a unit test's failure: nothing to keep)."""
    if exitstatus == 0 or not any(path.is_file() for path in _HOME.rglob("*")):
        shutil.rmtree(_HOME, ignore_errors=True)


def pytest_exception_interact(node: Any, call: Any, report: Any) -> None:
    """On failure, show the tail of every daemon log (after kazoo's conftest)."""
    logs = _HOME / "logs"
    if not logs.exists():
        return
    for path in sorted(logs.glob("*.log")):
        if path.name.startswith("zookeeper"):
            continue
        lines = path.read_text(errors="replace").splitlines()[-15:]
        print(f"\n----- {path.name} (last {len(lines)} lines) -----")
        print("\n".join(lines))
