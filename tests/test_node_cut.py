"""A node cut off by a real network partition (its veth down) and plugged back in.

Each supervisor runs in its own network namespace (needs root). When node n1's link
goes down, its workers fence themselves (spouts pause) once their ZooKeeper sessions
can have expired, Nimbus gives their executors to n2 after the session timeout, and
when the link comes back n1's stale workers stop and Nimbus refills n1's slots with
live moves. Every sentence ends up acked, none lost.

The input lasts as long as the fault: the audited spouts emit at ``RATE`` until the test, the
moves back complete and sentences flowing again, creates ``stop`` in the audit directory
(``topologies/audited.py``); ``PER_SPOUT`` is only a cap, and a spout that reached it before
``stop`` fails the test (its input would have ended before the fault was over).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not __import__("shutil").which("ip"), reason="network namespaces need root and iproute2")

AUDITED = Path(__file__).parents[1] / "topologies" / "audited.py"
PER_SPOUT = 6000  # a cap: 60 s of input; the test ends the input with the audit's stop file
RATE = 100
DK_SECS = 2.0  # worker.lazy.kill.ms default


@pytest.fixture(scope="module")
def cut_cluster() -> Iterator[Any]:
    from nstorm import netns
    from nstorm.localcluster import LocalCluster

    old = os.environ.get("NSTORM_NETNS_INDEX")
    os.environ["NSTORM_NETNS_INDEX"] = "7"  # its own bridge and namespaces: never another cluster's
    nodes = netns.create(2)
    conf = {"nstorm.zookeeper.session.timeout.secs": 4, "nimbus.supervisor.timeout.secs": 4,
            "nimbus.spread.grace.secs": 4}
    c = LocalCluster(supervisors=2, slots=2, root=f"/c-{uuid.uuid4().hex[:8]}", conf=conf, netns=nodes)
    try:
        c.start(timeout=90)
        yield c
    finally:
        c.stop()
        netns.destroy()
        if old is None:
            os.environ.pop("NSTORM_NETNS_INDEX", None)
        else:
            os.environ["NSTORM_NETNS_INDEX"] = old


def _log_time(line: str) -> float:
    stamp = line[:23]
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _first_line(path: Path, pattern: str) -> str | None:
    try:
        return next((ln for ln in path.read_text(errors="replace").splitlines() if re.search(pattern, ln)), None)
    except OSError:
        return None


def test_supervisors_in_namespaces_register_their_addresses_and_one_machine(cut_cluster) -> None:
    """Each namespace's supervisor has an address of its own and registers the machine they share
    (the kernel's boot id): OTD's autoscaling counts their cores once."""
    from nstorm.client import ClusterClient
    from supervisor.machine import machine_id

    with ClusterClient(cut_cluster.address, cut_cluster.root, timeout=30) as client:
        supervisors = wait_until(lambda: (s := client.cluster.supervisors()) and len(s) == 2 and s, 30,
                                 what="both supervisors registered")
    assert len({info["host"] for info in supervisors.values()}) == 2
    assert {info["machine"] for info in supervisors.values()} == {machine_id()}


def test_node_cut_off_loses_its_executors_and_gets_them_back(cut_cluster, tmp_path: Path) -> None:
    from nstorm import netns
    from nstorm.client import ClusterClient
    from nstorm.home import logs_dir
    from topologies.audited import read_audit

    with ClusterClient(cut_cluster.address, cut_cluster.root, timeout=30) as client:
        client.submit(AUDITED, conf={"audit.dir": str(tmp_path), "audit.sentences": PER_SPOUT, "audit.rate": RATE,
                                     "audit.workers": 4, "topology.message.timeout.secs": 10,
                                     "nstorm.zookeeper.session.timeout.secs": 4})
        plan = client.wait_running("audited", 60)
        assert {w.node for w in plan.workers.values()} == {"n1", "n2"}
        n1_workers = sorted(w for w, slot in plan.workers.items() if slot.node == "n1")
        wait_until(lambda: sum(len(a.get("acks", {})) for a in read_audit(tmp_path).values()) > 300, 60,
                   what="sentences acked")

        net = next(n for n in cut_cluster.netns if n.node == "n1")
        netns.set_link(net, up=False)
        try:
            def reassigned() -> dict[str, Any] | None:
                p = client.plan("audited")
                return p if p and all(w.node == "n2" for w in p.workers.values()) else None

            repaired = wait_until(reassigned, 60, what="Nimbus to give n1's executors to n2")
            assert set(repaired.executors.values()) <= set(repaired.workers)
            # The cut-off workers paused their spouts, about when Nimbus reassigned (within DK).
            nimbus_line = wait_until(lambda: _first_line(logs_dir() / "nimbus.log", r"audited: workers .* lost"), 10,
                                     what="Nimbus's log line")
            for wid in n1_workers:
                log = logs_dir() / f"worker-{wid.replace(':', '-')}.log"
                fenced = wait_until(lambda log=log: _first_line(log, "spouts paused"), 30, what=f"{wid} to fence")
                assert _log_time(fenced) <= _log_time(nimbus_line) + DK_SECS, (fenced, nimbus_line)
            acked = sum(len(a.get("acks", {})) for a in read_audit(tmp_path).values())
            wait_until(lambda: sum(len(a.get("acks", {})) for a in read_audit(tmp_path).values()) > acked + 100, 60,
                       what="the sentences to flow on n2 alone")
        finally:
            netns.set_link(net, up=True)

        def spread_back() -> bool:
            p = client.plan("audited")
            on_n1 = [e for e, w in p.executors.items() if p.workers[w].node == "n1"]
            return bool(on_n1)

        wait_until(spread_back, 90, what="n1's slots to be refilled")
        back = [m for m in client.migrations("audited") if m.by == "nimbus"]
        assert back and all(m.target.startswith("n1:") for m in back)
        wait_until(lambda: all(m.completed_at for m in client.migrations("audited") if m.by == "nimbus"),
                   60, what="the moves back to complete")
        acked = sum(len(a.get("acks", {})) for a in read_audit(tmp_path).values())
        wait_until(lambda: sum(len(a.get("acks", {})) for a in read_audit(tmp_path).values()) > acked + 100, 60,
                   what="the sentences to flow on both nodes again")
        (tmp_path / "stop").touch()  # the end of the input: spouts only replay from now on

        def stopped() -> dict[str, int] | None:
            audits = read_audit(tmp_path)
            ok = len(audits) == 2 and all(a.get("stopped") for a in audits.values())
            return {k: int(a["emitted"]) for k, a in audits.items()} if ok else None

        emitted = wait_until(stopped, 30, what="the spouts to see the stop file")
        assert all(n < PER_SPOUT for n in emitted.values()), f"the input ran out before the fault was over: {emitted}"

        def all_acked() -> bool:
            audits = read_audit(tmp_path)
            return len(audits) == 2 and all(len(a.get("acks", {})) >= emitted[k] for k, a in audits.items())

        wait_until(all_acked, 180, interval=0.5, what="every sentence acked")
        time.sleep(0.5)
        for key, audit in read_audit(tmp_path).items():
            assert sorted(int(k) for k in audit["acks"]) == list(range(emitted[key]))
            assert audit["emitted"] == emitted[key]
        client.kill("audited")
        client.wait_removed("audited", 30)
