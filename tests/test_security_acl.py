"""ZooKeeper digest ACLs on a real cluster: with them on a topology runs to the end, and a
client without the credentials (or with wrong ones) can neither read nor change the plans.

Its own module because a module's cluster owns the nodes n1, n2 of the shared $NSTORM_HOME.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from nstorm.errors import AuthError

from _exactwc import counts_of, expected_counts, wait_finished
from conftest import TOPOLOGIES, run_cli

PER_SPOUT = 1500


# -- ZooKeeper ACLs on a real cluster ---------------------------------------------------------

AUTH = f"nstorm:{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def acl_cluster(zookeeper: str) -> Iterator[Any]:
    from nstorm.localcluster import LocalCluster

    c = LocalCluster(supervisors=2, slots=2, zk_address=zookeeper, root=f"/acl-{uuid.uuid4().hex[:8]}",
                     conf={"nstorm.zookeeper.auth": AUTH})
    try:
        c.start(timeout=60)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def acl_topology(acl_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The exact word count running on the ACL cluster, submitted with the credentials."""
    from nstorm.client import ClusterClient

    out = tmp_path_factory.mktemp("acl-out")
    with ClusterClient(acl_cluster.address, acl_cluster.root, auth=AUTH) as client:
        client.submit(TOPOLOGIES / "exact_wordcount.py",
                      conf={"test.output.dir": str(out), "test.sentences": PER_SPOUT, "nstorm.zookeeper.auth": AUTH})
        try:
            client.wait_running("exactwc", 60)
            yield client, out
        finally:
            client.kill("exactwc")
            client.wait_removed("exactwc", 30)


def _stranger(address: str, auth: str | None) -> KazooClient:
    zk = KazooClient(hosts=address, auth_data=[("digest", auth)] if auth else None)
    zk.start(timeout=10)
    return zk


@pytest.mark.parametrize("auth", [None, "nstorm:wrong", "intruder:" + AUTH.split(":", 1)[1]])
def test_without_the_credentials_plans_cannot_be_read_or_changed(acl_topology: tuple[Any, Path], auth: str | None) -> None:
    client, _ = acl_topology
    paths = client.paths
    assert client.plan("exactwc").workers, "the credentials holder reads the plan"
    expected_acl = [make_digest_acl(*AUTH.split(":", 1), all=True)]
    for path in (paths.root, paths.topologies, paths.topology("exactwc"), paths.code("exactwc"),
                 paths.assignment("exactwc"), paths.status("exactwc"), paths.supervisor("n1")):
        assert client.zk.get_acls(path)[0] == expected_acl, path
    zk = _stranger(client.address, auth)
    try:
        for read in (lambda: zk.get(paths.assignment("exactwc")), lambda: zk.get(paths.topology("exactwc")),
                     lambda: zk.get(paths.code("exactwc")), lambda: zk.get_children(paths.root),
                     lambda: zk.get_children(paths.assignments)):
            with pytest.raises(NoAuthError):
                read()
        with pytest.raises(NoAuthError):
            zk.set(paths.assignment("exactwc"), b'{"version": 999, "workers": {}}')
        with pytest.raises(NoAuthError):
            zk.set(paths.status("exactwc"), b'{"status": "KILLED"}')
        with pytest.raises(NoAuthError):
            zk.delete(paths.assignment("exactwc"))
        with pytest.raises(NoAuthError):
            zk.delete(paths.root, recursive=True)
        with pytest.raises(NoAuthError):
            zk.create(paths.topology("evil"), b"{}")
        with pytest.raises(NoAuthError):
            zk.set_acls(paths.assignment("exactwc"), [make_digest_acl("intruder", "x", all=True)])
    finally:
        zk.stop()
        zk.close()
    assert client.plan("exactwc").workers, "the plan is untouched"


def test_topology_with_acls_counts_exactly_and_acks_everything(acl_topology: tuple[Any, Path]) -> None:
    client, out_dir = acl_topology
    out = wait_finished(client, out_dir, "exactwc", PER_SPOUT)
    assert counts_of(out) == expected_counts(PER_SPOUT)
    stored = json.loads(client.zk.get(client.paths.topology("exactwc"))[0])
    assert "nstorm.zookeeper.auth" not in stored["conf"], "credentials are never stored with a topology"
    secret = AUTH.split(":", 1)[1]
    for proc in psutil.process_iter(["cmdline"]):
        assert secret not in " ".join(proc.info["cmdline"] or []), "credentials never on a command line"


def test_cli_without_credentials_fails_in_one_line(acl_cluster: Any, acl_topology: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NSTORM_ZK_AUTH", raising=False)
    for args in (("list",), ("status", "exactwc", "--json"), ("kill", "exactwc")):
        result = run_cli(*args, cluster=acl_cluster)
        assert result.returncode == 2, result
        assert "denied access" in result.stderr and "NSTORM_ZK_AUTH" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    monkeypatch.setenv("NSTORM_ZK_AUTH", "nstorm:wrong")
    result = run_cli("list", cluster=acl_cluster)
    assert result.returncode == 2 and "wrong credentials" in result.stderr
    monkeypatch.setenv("NSTORM_ZK_AUTH", "no-colon")
    result = run_cli("list", cluster=acl_cluster)
    assert result.returncode == 2 and "user:password" in result.stderr
    monkeypatch.setenv("NSTORM_ZK_AUTH", AUTH)
    result = run_cli("list", cluster=acl_cluster)
    assert result.returncode == 0 and "exactwc" in result.stdout


def test_an_open_tree_is_locked_down_when_acls_are_turned_on(zookeeper: str) -> None:
    from nstorm.client import ClusterClient

    root = f"/open-{uuid.uuid4().hex[:8]}"
    with ClusterClient(zookeeper, root, auth=None) as open_client:  # ACLs off: world-readable nodes
        open_client.zk.create(open_client.paths.topology("old"), b"{}")
    with ClusterClient(zookeeper, root, auth=AUTH):
        pass
    zk = _stranger(zookeeper, None)
    try:
        for path in (root, f"{root}/topologies", f"{root}/topologies/old"):
            with pytest.raises(NoAuthError):
                zk.get(path)
    finally:
        zk.stop()
        zk.close()
    with pytest.raises(AuthError, match="the cluster uses ACLs"):
        ClusterClient(zookeeper, root, auth=None)


def test_a_worker_with_wrong_credentials_says_so_in_one_line_and_exits(acl_cluster: Any, tmp_path: Path) -> None:
    """A worker ZooKeeper refuses stops at once (exit 1, one log line naming the credentials),
    rather than running without heartbeats or logging a traceback at every turn."""
    import os
    import subprocess
    import sys

    from kvstore import LMDBPlanStore
    from nstorm.config import merge_conf
    from nstorm.loader import load_topology
    from nstorm.net import free_port
    from nstorm.plan import LocalPlan, Plan, Slot

    topology = load_topology(TOPOLOGIES / "exact_wordcount.py", {"test.output.dir": str(tmp_path)})
    definition = dict(topology.definition)
    port = free_port("127.0.0.1")
    slot = Slot("nx", "127.0.0.1", port, free_port("127.0.0.1"))
    tasks = [f"{name}:{i}" for name, comp in definition["components"].items() for i in range(comp["parallelism"])]
    plan = Plan.first("lonely", tasks, {t: slot.worker_id for t in tasks}, [slot]).replace(code_sha256="x")
    local = LocalPlan(plan, definition, merge_conf(definition.get("conf")), {"test.output.dir": str(tmp_path)},
                      str(TOPOLOGIES), "exact_wordcount.py")
    store_path = tmp_path / "store"
    store = LMDBPlanStore(store_path)
    store.put_plan("lonely", 1, local.to_json())
    store.close()
    env = {**os.environ, "NSTORM_ZK_AUTH": "nstorm:wrong"}
    proc = subprocess.run([sys.executable, "-m", "worker", "--node", "nx", "--port", str(port), "--topology", "lonely",
                           "--store", str(store_path), "--zk", acl_cluster.address, "--root", acl_cluster.root],
                          env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    log = (Path(os.environ["NSTORM_HOME"]) / "logs" / f"worker-nx-{port}.log").read_text()
    refused = [line for line in log.splitlines() if "cannot run" in line]
    assert len(refused) == 1 and "wrong credentials" in refused[0], log
    assert "Traceback" not in log


def test_the_ui_reads_with_the_clusters_credentials_and_never_shows_them(acl_cluster: Any,
                                                                          acl_topology: Any) -> None:
    from _ui import UiProcess, wait_json

    password = AUTH.partition(":")[2]
    trusted = UiProcess(acl_cluster.address, acl_cluster.root, zk_auth=AUTH)
    stranger = UiProcess(acl_cluster.address, acl_cluster.root)
    try:
        wait_json(trusted.http, "/api/v1/topology/exactwc", lambda d: d["workers"], what="the UI to read exactwc")
        for path in ("/api/v1/topology/exactwc", "/metrics", "/api/v1/cluster/summary"):
            reply = trusted.http.get(path)
            assert reply.status == 200 and password not in reply.text
        denied = stranger.http.get("/api/v1/topology/summary")
        assert denied.status == 503 and "denied" in denied.json["errorMessage"]
    finally:
        trusted.stop()
        stranger.stop()

