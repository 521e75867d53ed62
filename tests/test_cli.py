"""The CLI end to end: the demo (`nstorm local`), `cluster up/down`, `zookeeper`, each in its own home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from conftest import wait_until

ROOT = Path(__file__).parents[1]


def _nstorm(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NSTORM_HOME": str(home), "COLUMNS": "200"}
    env.pop("NSTORM_ZK", None)
    env.pop("NSTORM_ZK_ROOT", None)
    return subprocess.run([sys.executable, "-m", "nstorm", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd=home)


def _processes_of(home: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.info.get("environ") or {}
            if env.get("NSTORM_HOME") == str(home) or str(home) in cmd:
                if proc.status() != psutil.STATUS_ZOMBIE and proc.pid != os.getpid():
                    found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def home(tmp_path: Path):
    yield tmp_path
    for proc in _processes_of(tmp_path):  # backstop: nothing a test started outlives it
        proc.kill()


def test_version() -> None:
    result = subprocess.run([sys.executable, "-m", "nstorm", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("nstorm ")


def test_local_demo_runs_and_tears_down(home: Path) -> None:
    result = _nstorm(home, "local", str(ROOT / "topologies" / "wordcount.py"), "--duration", "7",
                     "--migrate-every", "2")
    assert result.returncode == 0, result.stderr
    assert "cluster up" in result.stderr and "cluster stopped" in result.stderr
    assert "spout tuples acked" in result.stderr
    acked = int(result.stderr.split("done: ")[1].split(" spout")[0].replace(",", ""))
    assert acked > 0
    assert "moved count:" in result.stderr and "no worker restarted" in result.stderr
    assert "UI: http://127.0.0.1:" in result.stderr and "/topology/wordcount" in result.stderr
    migrations = int(result.stderr.split(" live migrations")[0].rsplit(" ", 1)[1])
    assert migrations >= 1
    wait_until(lambda: not _processes_of(home), 20, what="every process of the demo to end")
    assert (home / "logs" / "nimbus.log").exists()


def test_local_takes_a_free_ui_port_when_its_own_is_taken(home: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = _nstorm(home, "local", str(ROOT / "topologies" / "linear.py"), "--duration", "2",
                         "--migrate-every", "0", "--ui-port", str(port), "-c", "linear.rate=50")
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if x.startswith("UI: "))
    assert f"(port {port} is taken)" in line and f":{port}/" not in line
    wait_until(lambda: not _processes_of(home), 20, what="every process of the demo to end")


def test_local_rejects_bad_file_before_starting_anything(home: Path) -> None:
    result = _nstorm(home, "local", str(ROOT / "tests" / "topologies" / "bad_cycle.py"))
    assert result.returncode == 2 and "cycle" in result.stderr
    assert not _processes_of(home)


_NON_PATH = 'topology.latency.constraints=[{"path": ["sentences", "count"], "p99_ms": 10}]'


@pytest.mark.parametrize("command", ["submit", "local"])
def test_a_latency_constraint_on_a_non_path_is_exit_2_before_any_cluster(home: Path, command: str) -> None:
    # no cluster runs in `home`: the check comes before connecting (submit) or starting one (local)
    result = _nstorm(home, command, str(ROOT / "topologies" / "wordcount.py"), "-c", _NON_PATH, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "'sentences>count' is not a path of the topology: 'count' has no input from 'sentences'" in lines[0]
    assert not _processes_of(home) and not any(home.iterdir())  # nothing started, nothing written


def test_cluster_up_submit_status_down(home: Path) -> None:
    up = _nstorm(home, "cluster", "up", "--supervisors", "2", "--slots", "2", "--port-base", "0")
    try:
        assert up.returncode == 0, up.stderr
        status = _nstorm(home, "cluster", "status")
        assert status.returncode == 0 and "supervisor registered: n1" in status.stdout
        ui_url = next(x for x in up.stdout.splitlines() if x.startswith("UI: ")).split()[1]
        assert f"UI: {ui_url}" in status.stdout and "ui: pid" in status.stdout
        import urllib.request

        with urllib.request.urlopen(ui_url + "api/v1/cluster/summary", timeout=10) as resp:
            assert json.loads(resp.read())["supervisors"] == 2
        assert _nstorm(home, "zookeeper", "status").returncode == 0
        sub = _nstorm(home, "submit", str(ROOT / "topologies" / "linear.py"), "-c", "linear.rate=100", "-c",
                      'topology.latency.constraints=[{"path": ["source", "stage1"], "p99_ms": 50}]')
        assert sub.returncode == 0, sub.stderr

        def running():
            out = _nstorm(home, "status", "linear", "--json")
            data = json.loads(out.stdout) if out.returncode == 0 else None
            return data if data and all(w["pid"] for w in data["workers"]) else None

        data = wait_until(running, 60, interval=0.5, what="linear to run")
        assert len(data["workers"]) == 2
        listing = _nstorm(home, "list", "--json")
        assert json.loads(listing.stdout)[0]["name"] == "linear"
        assert _nstorm(home, "deactivate", "linear").returncode == 0
        assert _nstorm(home, "activate", "linear").returncode == 0
    finally:
        down = _nstorm(home, "cluster", "down")
    assert down.returncode == 0, down.stderr
    wait_until(lambda: not _processes_of(home), 30, what="every cluster process to end")
    assert _nstorm(home, "zookeeper", "status").returncode == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_cluster_up_netns_puts_nodes_on_their_own_links(home: Path) -> None:
    from nstorm import netns

    up = _nstorm(home, "cluster", "up", "--netns", "--supervisors", "2", "--slots", "1", "--port-base", "0",
                 "--link-rate", "50mbit")
    try:
        assert up.returncode == 0, up.stderr
        assert "nstorm-n1 10.77.0.11" in up.stdout
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "nstorm-n1" in namespaces and "nstorm-n2" in namespaces
        sub = _nstorm(home, "submit", str(ROOT / "topologies" / "wordcount.py"), "-c", "wordcount.rate=200")
        assert sub.returncode == 0, sub.stderr

        def running():
            out = _nstorm(home, "status", "wordcount", "--json")
            data = json.loads(out.stdout) if out.returncode == 0 else None
            return data if data and data["spouts"]["acked"] > 200 else None

        data = wait_until(running, 90, interval=1.0, what="word count to run across namespaces")
        assert {w["host"] for w in data["workers"]} == {"10.77.0.11", "10.77.0.12"}
        rx, tx = netns.link_bytes("nstorm-v1")
        assert rx > 10_000 and tx > 10_000  # tuples really crossed the veth
    finally:
        down = _nstorm(home, "cluster", "down")
    assert down.returncode == 0, down.stderr
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "nstorm-n" not in namespaces
    assert subprocess.run(["ip", "link", "show", "nstorm-br0"], capture_output=True).returncode != 0
    wait_until(lambda: not _processes_of(home), 30, what="every cluster process to end")
