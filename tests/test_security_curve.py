"""CurveZMQ between workers on a real cluster: word count stays exact (across a live move), and
zmq peers without the cluster's client key (plain, or curve with another key) inject nothing.

Its own module because a module's cluster owns the nodes n1, n2 of the shared $NSTORM_HOME.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from nstorm.curvekeys import generate_keys, load_keys
from worker import wire

from _exactwc import counts_of, expected_counts, wait_finished
from conftest import TOPOLOGIES, run_cli, wait_until

ROOT = Path(__file__).parents[1]

PER_SPOUT = 1500


# -- CurveZMQ between workers on a real cluster --------------------------------------------------

@pytest.fixture(scope="module")
def curve_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keys = tmp_path_factory.mktemp("curve") / "keys"
    generate_keys(keys)
    return keys


@pytest.fixture(scope="module")
def curve_cluster(zookeeper: str, curve_keys: Path) -> Iterator[Any]:
    from nstorm.localcluster import LocalCluster

    c = LocalCluster(supervisors=2, slots=2, zk_address=zookeeper, root=f"/curve-{uuid.uuid4().hex[:8]}",
                     conf={"nstorm.transport.curve": True, "nstorm.transport.curve.keys.dir": str(curve_keys)})
    try:
        c.start(timeout=60)
        yield c
    finally:
        c.stop()


def _inject(context: zmq.Context, address: str, frames: list[list[bytes]], keys: tuple[bytes, bytes, bytes] | None,
            linger: int) -> zmq.Socket:
    """A PUSH peer sending ``frames`` to ``address``; ``keys`` = (server public, client public, client secret).

    A stranger's messages may not even be queued (its handshake is refused): a send gives up
    after a second, so nothing here waits on the workers' word."""
    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, linger)
    sock.setsockopt(zmq.SNDTIMEO, 1000)
    if keys is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys
    sock.connect(address)
    for message in frames:
        try:
            sock.send_multipart(message)
        except zmq.Again:
            break
    return sock


def test_curve_wordcount_is_exact_and_strangers_inject_nothing(curve_cluster: Any, curve_keys: Path,
                                                                tmp_path: Path) -> None:
    from nstorm.client import ClusterClient

    keys = load_keys(curve_keys)
    with ClusterClient(curve_cluster.address, curve_cluster.root) as client:
        client.submit(TOPOLOGIES / "exact_wordcount.py", name="curvewc",
                      conf={"test.output.dir": str(tmp_path), "test.sentences": PER_SPOUT})
        try:
            plan = client.wait_running("curvewc", 60)
            workers = client.status("curvewc")["workers"]
            pids = {w["id"]: w["pid"] for w in workers}
            for w in workers:
                assert "--curve-keys" in psutil.Process(w["pid"]).cmdline()
                assert w["curve"] is True, "each worker reports its transport"
            tasks = plan.tasks
            split = tasks.index("split:0")

            def frames(word: str, dst: int) -> tuple[list[list[bytes]], list[list[bytes]]]:
                """Valid-looking data and control messages, and garbage, as a stranger would send."""
                data = [[wire.data_header(dst, split, count=1), wire.pack([[(word,)], None, None])],  # one untracked tuple
                        [b"garbage"], [b"\x93\x00\x05", os.urandom(64)]]
                ctl = [[wire.control_message(wire.BACKPRESSURE, -1, -1, ["evil:1", True])],
                       [wire.control_message(wire.FAILED, tasks.index("sentences:0"), 0, [1, 2, 3])],
                       [b"garbage"]]
                return data, ctl

            stranger_key = zmq.curve_keypair()
            context = zmq.Context()
            socks = []
            try:
                for wid, w in plan.workers.items():
                    count = next(tasks.index(e) for e, where in plan.executors.items()
                                 if where == wid and e.startswith("count:"))
                    for label, peer in (("PLAIN", None), ("WRONGKEY", (keys.server_public, *stranger_key))):
                        data, ctl = frames(f"INJECTED-{label}", count)
                        socks.append(_inject(context, f"tcp://{w.host}:{w.port}", data, peer, 0))
                        socks.append(_inject(context, f"tcp://{w.host}:{w.ctl_port}", ctl, peer, 0))

                def beats() -> dict[str, dict[str, Any]]:
                    return {wid: json.loads(client.zk.get(client.paths.workerbeat("curvewc", wid))[0])
                            for wid in plan.workers}

                # The ZAP handler of each worker refuses the stranger's key on both ports.
                wait_until(lambda: all(b.get("curve_refused", 0) >= 2 for b in beats().values()), 30,
                           what="every worker to refuse the stranger's key")
                # Control experiment: the same frames with the cluster's client key do get in
                # (one tuple counted, the garbage counted as dropped) - so the strangers' did not.
                target_wid, target = sorted(plan.workers.items())[0]
                count = next(tasks.index(e) for e, where in plan.executors.items()
                             if where == target_wid and e.startswith("count:"))
                data, ctl = frames("INJECTED-WITHKEY", count)
                member = (keys.server_public, keys.client_public, keys.client_secret)
                socks.append(_inject(context, f"tcp://{target.host}:{target.port}", data[:2], member, 2000))
                socks.append(_inject(context, f"tcp://{target.host}:{target.ctl_port}", ctl[2:], member, 2000))
                wait_until(lambda: beats()[target_wid].get("dropped_frames", 0) >= 2, 30,
                           what="the member's garbage to reach the receivers")
            finally:
                context.destroy(linger=0)  # every socket made here, whatever happened

            # A live move of a stateful executor: its state and the markers go over curve sockets too.
            plan = client.plan("curvewc")
            here = plan.executors["count:0"]
            target_worker = next(w for w in sorted(plan.workers) if w != here)
            result = client.rebalance("curvewc", moves=[("count:0", target_worker)])
            done = client.wait_migrations("curvewc", result["records"], timeout=60)
            assert done[0].target == target_worker and not done[0].state_lost

            out = wait_finished(client, tmp_path, "curvewc", PER_SPOUT, extra=1)
            counts = counts_of(out)
            assert counts.pop("INJECTED-WITHKEY") == 1
            assert "INJECTED-PLAIN" not in counts and "INJECTED-WRONGKEY" not in counts
            assert counts == expected_counts(PER_SPOUT)
            final = beats()
            assert final[target_wid]["dropped_frames"] == 2, "only the member's two garbage frames got in"
            assert all(b["dropped_frames"] == 0 for wid, b in final.items() if wid != target_wid)
            assert {w["id"]: w["pid"] for w in client.status("curvewc")["workers"]} == pids, "no worker died"
        finally:
            client.kill("curvewc")
            client.wait_removed("curvewc", 30)


def test_curve_on_without_keys_is_bad_input_everywhere(tmp_path: Path) -> None:
    """CLI: exit 2 with one line before anything starts; daemon: a log line and a non-zero exit."""
    missing = tmp_path / "nokeys"
    curve = ["-c", "nstorm.transport.curve=true", "-c", f"nstorm.transport.curve.keys.dir={missing}"]
    for args in (("local", str(ROOT / "topologies" / "wordcount.py"), "--duration", "1", *curve),
                 ("cluster", "up", "--supervisors", "1", *curve),
                 ("supervisor", "--zk", "127.0.0.1:1", "--node-id", "nokeys", *curve)):
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "server.key" in result.stderr and "nstorm keys generate" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    result = run_cli("local", str(ROOT / "topologies" / "wordcount.py"), "-c", "nstorm.transport.curve=maybe")
    assert result.returncode == 2 and "expected true or false" in result.stderr

    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "supervisor", "--zk", "127.0.0.1:1", "--node-id", "nokeys2", *curve],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    log = (Path(os.environ["NSTORM_HOME"]) / "logs" / "supervisor-nokeys2.log").read_text()
    assert "cannot run: curve key file" in log and "Traceback" not in log
