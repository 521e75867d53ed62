"""A large topology that exists only in ZooKeeper, for the UI's benchmark and its 1,000-executor test.

It writes what the daemons would: supervisors registered (ephemeral, with their slots), the
topology's record and status, the plan Nimbus's scheduler makes (round robin), migration records,
a history of OTD rounds, and every worker's heartbeat, rewritten every second with growing
counters, rates, capacity and latency histograms, as workers write them. No process runs the
executors: the UI cannot tell, and the UI is what is measured.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from typing import Any

from kazoo.client import KazooClient

from nimbus.scheduler import EvenScheduler
from nstorm import Bolt, Spout, TopologyBuilder
from nstorm.config import merge_conf
from nstorm.latency import add
from nstorm.plan import interleave_slots
from nstorm.zkschema import ZkPaths, connect, encode

__all__ = ["SimulatedTopology"]


class _Source(Spout):
    outputs = ("key", "value")


class _Parse(Bolt):
    outputs = ("key", "value")


class _Store(Bolt):
    pass


def definition(name: str, executors: int, workers: int) -> dict[str, Any]:
    """A four-component topology with ``executors`` executors (4% spouts, the rest in three bolts)."""
    spouts = max(1, executors // 25)
    rest = executors - spouts
    parse, enrich = rest // 3, rest // 3
    store = rest - parse - enrich
    builder = TopologyBuilder(name)
    builder.set_spout("source", _Source, parallelism=spouts)
    builder.set_bolt("parse", _Parse, parallelism=parse).shuffle_grouping("source")
    builder.set_bolt("enrich", _Parse, parallelism=enrich).shuffle_grouping("parse")
    builder.set_bolt("store", _Store, parallelism=store).fields_grouping("enrich", ["key"])
    return dict(builder.build(workers=workers).definition)


class SimulatedTopology:
    """See the module docstring. ``start()`` writes it all and starts the heartbeat thread."""

    def __init__(self, zk_address: str, root: str, name: str = "big", executors: int = 1000, nodes: int = 4,
                 workers_per_node: int = 10, migrations: int = 100, otd_rounds: int = 200, seed: int = 1) -> None:
        self.zk_address = zk_address
        self.paths = ZkPaths(root)
        self.name = name
        self.nodes = nodes
        self.workers_per_node = workers_per_node
        self.definition = definition(name, executors, nodes * workers_per_node)
        self.n_migrations = migrations
        self.n_otd = otd_rounds
        self.rng = random.Random(seed)
        self.zk: KazooClient | None = None
        self.plan: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="simulated-heartbeats", daemon=True)
        self._counters: dict[str, dict[str, Any]] = {}

    def start(self) -> SimulatedTopology:
        zk = self.zk = connect(self.zk_address)
        self.paths.ensure(zk)
        supervisors = {}
        for n in range(1, self.nodes + 1):
            node = f"n{n}"
            supervisors[node] = {"node": node, "host": f"10.0.0.{n}",
                                 "slots": [[6700 + i, 7700 + i] for i in range(self.workers_per_node)]}
            zk.create(self.paths.supervisor(node), encode(supervisors[node]), ephemeral=True, makepath=True)
        slots = interleave_slots(supervisors)  # as Nimbus takes them
        conf = merge_conf(self.definition.get("conf"))
        submission = uuid.uuid4().hex
        plan = EvenScheduler().initial_plan(self.name, self.definition, conf, slots)
        assert plan is not None
        self.plan = plan = plan.replace(submission=submission, code_sha256="simulated", updated_at=time.time())
        record = {"definition": self.definition, "conf": {}, "user_conf": {}, "code_sha256": "simulated",
                  "main": "simulated.py", "submitted_at": time.time() - 3600, "submission": submission}
        zk.create(self.paths.topology(self.name), encode(record), makepath=True)
        zk.create(self.paths.code(self.name), b"", makepath=True)
        zk.create(self.paths.status(self.name), encode({"status": "ACTIVE", "updated_at": time.time()}), makepath=True)
        zk.create(self.paths.assignment(self.name), encode(plan.to_json()), makepath=True)
        self._write_history(plan)
        for eid in plan.executors:
            self._counters[eid] = {"emitted": 0, "executed": 0, "acked": 0, "busy": 0.0,
                                   "rate": self.rng.uniform(50, 2000), "load": self.rng.uniform(0.0, 0.9),
                                   "hist": {}}
        self._write_beats()
        self._thread.start()
        return self

    def _write_history(self, plan: Any) -> None:
        assert self.zk is not None
        now = time.time()
        movable = sorted(e for e in plan.executors if not e.startswith("__"))
        workers = sorted(plan.workers)
        for i in range(self.n_migrations):
            executor = self.rng.choice(movable)
            at = now - 600 + i * 600 / max(1, self.n_migrations)
            data = {"executor": executor, "from": plan.executors[executor], "to": self.rng.choice(workers),
                    "mode": "thread", "by": self.rng.choice(["user", "otd", "ui"]), "requested_at": at,
                    "version": 1, "completed_at": at + 0.2, "stall_secs": 0.006, "state_lost": False}
            self.zk.create(f"{self.paths.migrations(self.name)}/m-", encode(data), sequence=True, makepath=True)
        rounds = [{"at": now - 1000 + 5 * i, "case": self.rng.choice([1, 3, 4, 4]), "engine": "spark",
                   "executor": None, "target": None, "asc": None, "warning": None, "inter_node_ratio": 0.4,
                   "window_tuples": 10000, "round_secs": 0.3} for i in range(self.n_otd)]
        cases: dict[str, int] = {}
        for r in rounds:
            cases[str(r["case"])] = cases.get(str(r["case"]), 0) + 1
        self.zk.create(self.paths.otd(self.name), json.dumps(rounds[-1]).encode(), makepath=True)
        self.zk.create(self.paths.otd_rounds(self.name), json.dumps({"rounds": rounds, "cases": cases}).encode(),
                       makepath=True)

    def _write_beats(self) -> None:
        assert self.zk is not None
        now = time.time()
        by_worker: dict[str, dict[str, Any]] = {}
        spouts = {n for n, c in self.definition["components"].items() if c["kind"] == "spout"}
        for eid, wid in self.plan.executors.items():
            c = self._counters[eid]
            n = int(c["rate"] * self.rng.uniform(0.8, 1.2))
            c["emitted"] += n
            c["executed"] += n
            c["acked"] += n
            c["busy"] += c["load"]
            component = eid.rpartition(":")[0]
            kind = "acker" if component == "__acker" else "spout" if component in spouts else "bolt"
            counters: dict[str, Any] = {"kind": kind, "emitted": c["emitted"], "batches": c["emitted"] // 64,
                                        "control_messages": 0, "executed": c["executed"], "acked": c["acked"],
                                        "failed": 0, "queue": self.rng.randint(0, 5), "errors": 0, "last_error": None,
                                        "executed_rate": float(n), "emitted_rate": float(n)}
            if kind == "bolt":
                counters.update(busy_secs=round(c["busy"], 3), capacity=round(c["load"], 4),
                                execute_ms=round(1000 * c["load"] / max(1, n), 4))
                add(c["hist"], self.rng.uniform(0.001, 0.02))
                counters["arrival_hist"] = dict(c["hist"])
                counters["arrival_ms"] = {"p50": 5.0, "p99": 18.0, "samples": 2000, "mean": 6.0}
            elif kind == "spout":
                add(c["hist"], self.rng.uniform(0.002, 0.03))
                counters.update(pending=100, replayed=0, started_at=now - 3600, last_acked_at=now,
                                latency_hist=dict(c["hist"]),
                                latency_ms={"p50": 8.0, "p99": 25.0, "samples": 2000, "mean": 9.0})
            by_worker.setdefault(wid, {})[eid] = counters
        for wid, executors in by_worker.items():
            beat = {"worker_id": wid, "submission": self.plan.submission, "pid": 10000 + len(wid) * 7 + int(wid.rpartition(":")[2]),
                    "time": now, "version": self.plan.version, "cpu": self.rng.uniform(0.1, 0.9), "queue": 3,
                    "cpu_limit": None, "executors": executors, "dropped_frames": 0, "forwarded": 0,
                    "curve_refused": 0, "backpressure_events": 0}
            path = self.paths.workerbeat(self.name, wid)
            data = encode(beat)
            if self.zk.exists(path):
                self.zk.set(path, data)
            else:
                self.zk.create(path, data, ephemeral=True, makepath=True)

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._write_beats()
            except Exception:  # noqa: BLE001 - ZooKeeper stopping under the benchmark
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()
