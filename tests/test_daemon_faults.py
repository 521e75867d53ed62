"""Daemons killed and restarted on a real cluster: nothing is lost and no worker restarts.

The cluster of this module has its own ZooKeeper (so that it can be restarted),
two Nimbus processes (one leads) and two supervisors. Each test runs the exact
word count at a limited rate through a fault and ends with every sentence of
every spout acked, each exactly once unless replayed, and the words counted.

The input lasts as long as the fault: the spouts emit at a fixed rate until the test, its
fault over, creates ``go`` in the output directory, and end ``AFTER_GO`` sentences later
(``tests/topologies/exact_wordcount.py``, ``test.after.go``). So every fault lands mid-run
whatever it takes, and ``_finish`` checks it: each spout was still emitting when it saw ``go``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kazoo.exceptions import NoNodeError

from nstorm.moves import RebalanceError
from nstorm.topology import is_acker

from conftest import TOPOLOGIES, read_outputs, run_cli, wait_every_sentence_acked, wait_until

RATE = 120  # sentences per second per spout
AFTER_GO = 240  # sentences per spout after the fault is over: 2 s of input through the repaired cluster
PER_SPOUT = 3600  # a cap only (30 s of input): a spout that reaches it before "go" fails the test


@pytest.fixture(scope="module")
def ha_cluster() -> Iterator[Any]:
    from nstorm.localcluster import LocalCluster

    conf = {"nstorm.zookeeper.session.timeout.secs": 4, "nimbus.supervisor.timeout.secs": 4}
    c = LocalCluster(supervisors=2, slots=4, root=f"/f-{uuid.uuid4().hex[:8]}", conf=conf, nimbuses=2)
    try:
        c.start(timeout=90)
        yield c
    finally:
        c.stop()


@pytest.fixture
def ha_client(ha_cluster: Any) -> Iterator[Any]:
    from nstorm.client import ClusterClient

    with ClusterClient(ha_cluster.address, ha_cluster.root, timeout=30) as cl:
        yield cl


def _submit(client: Any, name: str, out: Path) -> dict[str, int]:
    client.submit(TOPOLOGIES / "exact_wordcount.py", name=name,
                  conf={"test.output.dir": str(out), "test.sentences": PER_SPOUT, "test.rate": RATE,
                        "test.after.go": AFTER_GO, "topology.message.timeout.secs": 10, "nstorm.zookeeper.session.timeout.secs": 4})
    client.wait_running(name, 60)
    wait_until(lambda: any(k.startswith("count-") for k in read_outputs(out)), 30, what="counting")
    return _worker_pids(client, name)


def _worker_pids(client: Any, name: str) -> dict[str, int]:
    def complete() -> dict[str, int] | None:
        workers = client.status(name)["workers"]
        pids = {w["id"]: w["pid"] for w in workers}
        return pids if workers and all(pids.values()) else None

    return wait_until(complete, 30, what="a heartbeat from every worker")


def _acked(out: Path) -> int:
    data = read_outputs(out)
    return sum(len(data.get(f"spout-{i}", {}).get("acks", {})) for i in range(2))


def _totals(out: Path) -> list[int] | None:
    """Each spout's sentences in all, once every spout has seen ``go``."""
    data = read_outputs(out)
    totals = [data.get(f"spout-{i}", {}).get("total") for i in range(2)]
    return totals if all(t is not None for t in totals) else None


def _finish(client: Any, name: str, out: Path, pids: dict[str, int]) -> None:
    """The fault is over: ``go``, then every sentence acked, the words all counted, and the same
    worker processes throughout."""
    (out / "go").touch()
    totals = wait_until(lambda: _totals(out), 30, what="the spouts to see go")
    # Below the cap: each spout still had input to emit when the fault was over, and emits AFTER_GO more.
    assert all(t < PER_SPOUT for t in totals), f"the input ran out before the fault was over: {totals}"
    wait_every_sentence_acked(out, totals)
    from topologies.sentences import sentences

    words = sum(len(s.split()) for i in range(2) for s in sentences(totals[i], seed=100 + i))
    wait_until(lambda: sum(sum(v.values()) for k, v in read_outputs(out).items() if k.startswith("count-")) >= words,
               30, what="every word counted")
    assert {w: p for w, p in _worker_pids(client, name).items()} == pids, "a worker was restarted"
    assert all(psutil.pid_exists(p) for p in pids.values())
    client.kill(name)
    client.wait_removed(name, 30)


def _leader(client: Any) -> str | None:
    return client.nimbuses()["leader"]


def test_supervisor_killed_leaves_workers_running_and_adopts_them(ha_cluster, ha_client, tmp_path: Path) -> None:
    pids = _submit(ha_client, "supkill", tmp_path)
    version = ha_client.plan("supkill").version
    node = next(iter(pids)).split(":")[0]
    ha_cluster.kill_daemon(f"supervisor-{node}")
    acked = _acked(tmp_path)
    wait_until(lambda: _acked(tmp_path) > acked + 200, 30, what="processing goes on without the supervisor")
    # Its workers read no plan meanwhile: a move from one would leave the executor running there
    # beside its new copy (and one to it would never start), so it is refused.
    wait_until(lambda: node not in ha_client.cluster.supervisors(), 30, what="the supervisor's registration to end")
    plan = ha_client.plan("supkill")
    executor = next(e for e, w in sorted(plan.executors.items()) if w.startswith(f"{node}:") and not is_acker(e))
    target = next(w for w in sorted(plan.workers) if not w.startswith(f"{node}:"))
    with pytest.raises(RebalanceError, match=f"its supervisor '{node}' is down"):
        ha_client.rebalance("supkill", moves=[(executor, target)])
    new_pid = ha_cluster.restart_supervisor(node).pid

    def registered() -> bool:
        try:  # the killed one's ephemeral node may be gone before the new one has made its own
            raw = ha_client.zk.get(ha_client.paths.supervisor(node))[0]
        except NoNodeError:
            return False
        return json.loads(raw or b"{}").get("pid") == new_pid

    wait_until(registered, 30, what="the restarted supervisor to register")
    # It adopted its workers (and so started none: the pids are checked at the end).
    from nstorm.home import logs_dir

    here = sum(1 for w in pids if w.startswith(f"{node}:"))
    wait_until(lambda: (logs_dir() / f"supervisor-{node}.log").read_text().count("adopted worker") >= here, 10,
               what="the restarted supervisor to adopt its workers")
    assert ha_client.plan("supkill").version == version  # Nimbus reassigned nothing
    _finish(ha_client, "supkill", tmp_path, pids)


def test_nimbus_leader_killed_hands_over(ha_cluster, ha_client, tmp_path: Path) -> None:
    leader = wait_until(lambda: _leader(ha_client), 30, what="a Nimbus leader")
    assert len(ha_client.nimbuses()["standby"]) == 1
    pids = _submit(ha_client, "failover", tmp_path)
    pid = int(leader.rsplit(":", 1)[1])
    name = next(n for n, p in ha_cluster.nimbuses.items() if p.pid == pid)
    ha_cluster.kill_daemon(name)
    new = wait_until(lambda: (lead := _leader(ha_client)) and lead != leader and lead, 30,
                     what="the standby Nimbus to lead")
    assert int(new.rsplit(":", 1)[1]) != pid
    cli = run_cli("leader", "--json", cluster=ha_cluster)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["leader"] == new
    # The new leader serves requests: a live move completes.
    plan = ha_client.plan("failover")
    executor = "count:0"
    target = next(w for w in sorted(plan.workers) if w != plan.executors[executor])
    result = ha_client.rebalance("failover", moves=[(executor, target)], timeout=30)
    records = ha_client.wait_migrations("failover", result["records"], 60)
    assert all(r.completed_at for r in records)
    ha_cluster.start_nimbus(name)  # back as a standby
    wait_until(lambda: len(ha_client.nimbuses()["standby"]) == 1, 30, what="the old leader back as standby")
    assert _leader(ha_client) == new
    _finish(ha_client, "failover", tmp_path, pids)


def test_every_nimbus_killed_then_restarted(ha_cluster, ha_client, tmp_path: Path) -> None:
    pids = _submit(ha_client, "nimbuskill", tmp_path)
    version = ha_client.plan("nimbuskill").version
    for name in list(ha_cluster.nimbuses):
        ha_cluster.kill_daemon(name)
    acked = _acked(tmp_path)
    wait_until(lambda: _acked(tmp_path) > acked + 200, 30, what="processing goes on without Nimbus")
    for name in list(ha_cluster.nimbuses):
        ha_cluster.start_nimbus(name)
    wait_until(lambda: _leader(ha_client), 30, what="a Nimbus leader again")
    assert ha_client.plan("nimbuskill").version == version  # picked up from ZooKeeper, nothing redone
    plan = ha_client.plan("nimbuskill")
    executor = "split:1"
    target = next(w for w in sorted(plan.workers) if w != plan.executors[executor])
    result = ha_client.rebalance("nimbuskill", moves=[(executor, target)], timeout=30)
    assert all(r.completed_at for r in ha_client.wait_migrations("nimbuskill", result["records"], 60))
    _finish(ha_client, "nimbuskill", tmp_path, pids)


def test_zookeeper_restarted(ha_cluster, ha_client, tmp_path: Path) -> None:
    pids = _submit(ha_client, "zkrestart", tmp_path)
    ha_cluster.zookeeper.stop()
    acked = _acked(tmp_path)
    wait_until(lambda: _acked(tmp_path) > acked + 200, 30, what="processing goes on without ZooKeeper")
    ha_cluster.zookeeper.start(timeout=60)
    wait_until(lambda: _leader(ha_client), 60, what="a Nimbus leader after the restart")
    ha_cluster.wait_supervisors({"n1", "n2"}, 60)
    plan = ha_client.plan("zkrestart")
    executor = "count:2"
    target = next(w for w in sorted(plan.workers) if w != plan.executors[executor])

    def moved() -> dict[str, Any] | None:
        # Daemons are still re-registering right after the restart: a refused move is retried.
        from nstorm.moves import RebalanceError

        try:
            return ha_client.rebalance("zkrestart", moves=[(executor, target)], timeout=30)
        except RebalanceError:
            return None

    result = wait_until(moved, 60, interval=1.0, what="a live move after the restart")
    assert all(r.completed_at for r in ha_client.wait_migrations("zkrestart", result["records"], 60))
    _finish(ha_client, "zkrestart", tmp_path, pids)


def test_corrupt_plan_store_is_rebuilt_by_the_restarted_supervisor(ha_cluster, ha_client, tmp_path: Path) -> None:
    from nstorm.home import logs_dir, supervisor_dir

    pids = _submit(ha_client, "corrupt", tmp_path)
    node = next(iter(pids)).split(":")[0]
    ha_cluster.kill_daemon(f"supervisor-{node}")
    data = supervisor_dir(node) / "store" / "data.mdb"
    size = data.stat().st_size
    with open(data, "r+b") as f:  # overwritten in place, under the workers' read-only mappings
        f.write((b"\xde\xad\xbe\xef garbage " * size)[:size])
    ha_cluster.restart_supervisor(node)
    log = logs_dir() / f"supervisor-{node}.log"
    wait_until(lambda: "plan store was corrupt: rebuilt" in log.read_text(), 30, what="the store to be rebuilt")
    wait_until(lambda: "plan of corrupt" in log.read_text().rsplit("plan store was corrupt", 1)[1], 30,
               what="the plan to be mirrored into the rebuilt store")
    _finish(ha_client, "corrupt", tmp_path, pids)
