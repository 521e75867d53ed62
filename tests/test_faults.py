"""Faults on a real cluster: a worker killed, garbage on a worker's ports, user code that raises."""

from __future__ import annotations

import os
import random
import signal
import socket
from pathlib import Path

import psutil
import zmq

from conftest import TOPOLOGIES, read_outputs, wait_every_sentence_acked, wait_until


def test_killed_worker_is_restarted_and_its_tuples_replayed(client, tmp_path: Path) -> None:
    per_spout = 4000
    client.submit(TOPOLOGIES / "exact_wordcount.py", name="wckill",
                  conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout,
                        "topology.message.timeout.secs": 4, "topology.max.spout.pending": 300})
    try:
        client.wait_running("wckill", 60)
        wait_until(lambda: any(k.startswith("count-") for k in read_outputs(tmp_path)), 30, what="counting")
        victim = client.status("wckill")["workers"][1]
        os.kill(victim["pid"], signal.SIGKILL)

        def restarted():
            w = next(w for w in client.status("wckill")["workers"] if w["id"] == victim["id"])
            return w["pid"] and w["pid"] != victim["pid"] and psutil.pid_exists(w["pid"])

        wait_until(restarted, 60, what="the supervisor to restart the worker")

        wait_every_sentence_acked(tmp_path, per_spout)
    finally:
        client.kill("wckill")
        client.wait_removed("wckill", 30)


def test_stopped_worker_is_killed_for_its_stale_heartbeat_and_restarted(client, tmp_path: Path) -> None:
    """A worker that is alive but does nothing (SIGSTOP here; a deadlock or C code holding the GIL
    alike) is killed once its local heartbeat is older than topology.worker.timeout.secs, and
    restarted; its tuples are replayed, as for a crash."""
    per_spout = 2000  # about 7 s of input: the SIGSTOP lands a second or two in
    client.submit(TOPOLOGIES / "exact_wordcount.py", name="wchung",
                  conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout, "test.rate": 300,
                        "topology.message.timeout.secs": 4, "topology.worker.timeout.secs": 4})
    victim: dict | None = None
    try:
        client.wait_running("wchung", 60)
        wait_until(lambda: any(k.startswith("count-") for k in read_outputs(tmp_path)), 30, what="counting")
        workers = wait_until(lambda: (ws := client.status("wchung")["workers"]) and all(w["pid"] for w in ws) and ws,
                             30, what="a heartbeat from every worker")
        victim = workers[1]
        os.kill(victim["pid"], signal.SIGSTOP)

        def replaced():
            w = next(w for w in client.status("wchung")["workers"] if w["id"] == victim["id"])
            return w["pid"] and w["pid"] != victim["pid"] and psutil.pid_exists(w["pid"])

        wait_until(replaced, 60, what="the supervisor to kill the stopped worker and start another")
        wait_until(lambda: not psutil.pid_exists(victim["pid"])
                   or psutil.Process(victim["pid"]).status() == psutil.STATUS_ZOMBIE, 10, what="the stopped worker gone")
        wait_every_sentence_acked(tmp_path, per_spout)
        others = {w["id"]: w["pid"] for w in workers if w["id"] != victim["id"]}
        now = {w["id"]: w["pid"] for w in client.status("wchung")["workers"] if w["id"] in others}
        assert now == others, "a worker that kept beating was restarted"
    finally:
        if victim is not None and psutil.pid_exists(victim["pid"]):
            os.kill(victim["pid"], signal.SIGKILL)
        client.kill("wchung")
        client.wait_removed("wchung", 30)


def test_garbage_on_worker_ports_is_dropped_and_counted(client, cluster, tmp_path: Path) -> None:
    per_spout = 2000
    client.submit(TOPOLOGIES / "exact_wordcount.py", name="garbage",
                  conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout, "test.rate": 200})
    try:
        plan = client.wait_running("garbage", 60)
        worker = sorted(plan.workers.values(), key=lambda w: w.port)[0]
        wid = worker.worker_id
        pid = next(w["pid"] for w in client.status("garbage")["workers"] if w["id"] == wid)
        rng = random.Random(5)
        context = zmq.Context()
        try:
            for port in (worker.port, worker.ctl_port):
                push = context.socket(zmq.PUSH)
                push.setsockopt(zmq.LINGER, 2000)
                push.connect(f"tcp://{worker.host}:{port}")
                for size in (0, 1, 7, 100, 5000):
                    push.send(bytes(rng.getrandbits(8) for _ in range(size)))
                    push.send_multipart([b"\x93\x00\x05", bytes(rng.getrandbits(8) for _ in range(size))])
                    push.send_multipart([b"a", b"b", b"c"])
                push.send_multipart([b"\x93\x00\xcd\x30\x39\x00", b"\x91"])  # a task id that does not exist
                push.close()
                raw = socket.create_connection((worker.host, port), timeout=2)  # not even zmq
                raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(rng.getrandbits(8) for _ in range(3000)))
                raw.close()
        finally:
            context.term()

        def dropped():
            beat = client.zk.get(client.paths.workerbeat("garbage", wid))[0]
            import json

            return json.loads(beat).get("dropped_frames", 0) > 0

        wait_until(dropped, 20, what="the worker to count dropped frames")
        assert psutil.pid_exists(pid)
        assert next(w["pid"] for w in client.status("garbage")["workers"] if w["id"] == wid) == pid
        before = client.status("garbage")["spouts"]["acked"]
        wait_until(lambda: client.status("garbage")["spouts"]["acked"] > before + 100, 30, what="processing goes on")

        wait_every_sentence_acked(tmp_path, per_spout)
    finally:
        client.kill("garbage")
        client.wait_removed("garbage", 30)


def test_user_code_errors_are_reported_and_contained(client, tmp_path: Path) -> None:
    numbers = 3000
    client.submit(TOPOLOGIES / "faulty.py", conf={"test.numbers": numbers, "test.output.dir": str(tmp_path)})
    try:
        client.wait_running("faulty", 60)
        pids = {w["id"]: w["pid"] for w in client.status("faulty")["workers"]}

        def reported():
            comps = client.status("faulty")["components"]
            return comps if comps["flaky"]["errors"] > 5 and comps["broken"]["errors"] >= 1 else None

        comps = wait_until(reported, 30, what="errors in status")
        assert "ValueError: bad tuple" in comps["flaky"]["last_error"]
        assert "cannot connect to the database" in comps["broken"]["last_error"]
        assert "process" in comps["flaky"]["last_error"] and "open/prepare" in comps["broken"]["last_error"]
        assert {w["id"]: w["pid"] for w in client.status("faulty")["workers"]} == pids
        assert all(psutil.pid_exists(p) for p in pids.values())
        # Every tuple is accounted for: acked, or failed back to its spout (the broken bolt fails
        # what it gets, flaky every tenth), none silently lost.
        def settled():
            out = read_outputs(tmp_path).get("numbers", {})
            return out if out.get("emitted") == numbers and len(out["acked"]) + len(out["failed"]) >= numbers else None

        out = wait_until(settled, 60, what="every tuple acked or failed")
        assert sorted(out["acked"] + out["failed"]) == list(range(1, numbers + 1))
    finally:
        client.kill("faulty")
        client.wait_removed("faulty", 30)


def _log_count(pattern: str, glob: str) -> int:
    from nstorm.home import logs_dir

    return sum(p.read_text(errors="replace").count(pattern) for p in logs_dir().glob(glob))


def test_malformed_plan_in_zookeeper_is_rejected_and_the_last_good_one_kept(client, tmp_path: Path) -> None:
    import json

    # The input runs until the good plan is back ("go"), then 200 sentences more a spout (2 s):
    # every bad plan lands mid-run, whatever the rejections take; 3000 is only a cap (30 s).
    cap, after_go = 3000, 200
    client.submit(TOPOLOGIES / "exact_wordcount.py", name="badplan",
                  conf={"test.output.dir": str(tmp_path), "test.sentences": cap, "test.rate": 100,
                        "test.after.go": after_go})
    client.wait_running("badplan", 60)
    pids = wait_until(lambda: (p := {w["id"]: w["pid"] for w in client.status("badplan")["workers"]})
                      and all(p.values()) and p, 30, what="worker heartbeats")
    path = client.paths.assignment("badplan")
    good = client.zk.get(path)[0]
    plan = json.loads(good)
    bad_plans = [
        b"\x00 not json {",
        json.dumps({**plan, "version": "seven"}).encode(),
        json.dumps({**plan, "workers": {w: {**v, "port": "http"} for w, v in plan["workers"].items()}}).encode(),
        json.dumps([1, 2, 3]).encode(),
    ]
    try:
        for n, bad in enumerate(bad_plans, 1):
            client.zk.set(path, bad)
            wait_until(lambda n=n: _log_count("malformed plan for badplan", "supervisor-*.log") >= n, 20,
                       what=f"the supervisors to reject bad plan {n}")
            wait_until(lambda n=n: _log_count("badplan", "nimbus*.log") and
                       _log_count("malformed", "nimbus*.log") >= n, 20, what=f"Nimbus to reject bad plan {n}")
        acked = sum(len(o.get("acks", {})) for k, o in read_outputs(tmp_path).items() if k.startswith("spout-"))
        wait_until(lambda: sum(len(o.get("acks", {})) for k, o in read_outputs(tmp_path).items()
                               if k.startswith("spout-")) > acked + 100, 30, what="processing goes on")
    finally:
        client.zk.set(path, good)
        (tmp_path / "go").touch()

    def totals() -> list[int] | None:
        out = read_outputs(tmp_path)
        t = [out.get(f"spout-{i}", {}).get("total") for i in range(2)]
        return t if all(n is not None for n in t) else None

    per_spout = wait_until(totals, 30, what="the spouts to see go")
    assert all(n < cap for n in per_spout), f"the input ran out before the bad plans were over: {per_spout}"
    wait_every_sentence_acked(tmp_path, per_spout)
    assert {w["id"]: w["pid"] for w in client.status("badplan")["workers"]} == pids
    client.kill("badplan")
    client.wait_removed("badplan", 30)
