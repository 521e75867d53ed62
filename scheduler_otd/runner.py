"""The OTD loop Nimbus runs: every ``otd.period.secs``, one round per OTD topology.

A round reads the topology's plan and its workers' heartbeats (load: CPU share and queued
batches), runs the PySpark traffic job over ``otd.window.secs`` (one SparkSession kept
alive for all rounds), and hands the decision of :func:`~scheduler_otd.otd.otd_round` to
Nimbus as an ordinary thread-mode rebalance request with ``by: otd``, so Nimbus stays the
only writer of plans. The last decision (and the Case 2 warning) is kept in
``otd/<topology>`` for ``nstorm status``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from nstorm.config import merge_conf
from nstorm.zkschema import ZkPaths, decode, encode
from scheduler_otd.otd import WorkerLoad, otd_round

__all__ = ["OtdRunner"]

log = logging.getLogger(__name__)


class OtdRunner:
    """A thread beside Nimbus's loop. See the module docstring."""

    def __init__(self, zk: KazooClient, paths: ZkPaths, conf: dict[str, Any]) -> None:
        self.zk = zk
        self.paths = paths
        self.conf = conf
        self._job: Any = None
        self._next: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otd", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._job is not None:
            self._job.stop()

    def _get(self, path: str) -> Any:
        try:
            return decode(self.zk.get(path)[0])
        except (NoNodeError, ValueError):
            return None

    def _otd_topologies(self) -> dict[str, dict[str, Any]]:
        result = {}
        for name in self.zk.get_children(self.paths.topologies):
            topo = self._get(self.paths.topology(name))
            if not topo:
                continue
            conf = merge_conf(topo["definition"].get("conf"), topo.get("conf"))
            if conf.get("topology.scheduler") == "otd":
                result[name] = conf
        return result

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                topologies = self._otd_topologies()
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: try again
                log.warning("OTD: cannot list topologies", exc_info=True)
                continue
            now = time.monotonic()
            for name, conf in topologies.items():
                if now < self._next.get(name, 0):
                    continue
                self._next[name] = now + float(conf.get("otd.period.secs", 5))
                try:
                    self.round(name, conf)
                except Exception:  # noqa: BLE001 - one bad round must not stop the loop
                    log.exception("OTD round for %s failed", name)

    def _busy(self, name: str) -> bool:
        try:
            children = self.zk.get_children(self.paths.migrations(name))
        except NoNodeError:
            return False
        for child in children:
            record = self._get(f"{self.paths.migrations(name)}/{child}")
            if record and not record.get("completed_at"):
                return True
        try:
            return bool(self.zk.get_children(self.paths.requests(name)))
        except NoNodeError:
            return False

    def loads(self, name: str) -> dict[str, WorkerLoad]:
        loads = {}
        try:
            children = self.zk.get_children(self.paths.workerbeats(name))
        except NoNodeError:
            return loads
        for wid in children:
            beat = self._get(self.paths.workerbeat(name, wid))
            if beat:
                loads[wid] = WorkerLoad(float(beat.get("cpu") or 0), float(beat.get("queue") or 0))
        return loads

    def round(self, name: str, conf: dict[str, Any]) -> dict[str, Any] | None:
        """One OTD round for ``name``; returns the recorded decision."""
        plan = self._get(self.paths.assignment(name))
        if not plan or plan.get("rebalance") or plan.get("status") != "ACTIVE" or self._busy(name):
            return None
        if self._job is None:
            from scheduler_otd.traffic import TrafficJob

            self._job = TrafficJob(master=str(conf.get("otd.spark.master", "local[2]")),
                                   metrics_dir=conf.get("nstorm.metrics.dir"))
        window = float(conf.get("otd.window.secs", 20))
        started = time.monotonic()
        traffic = self._job.run(name, window_secs=window)
        worker_node = {w: info["node"] for w, info in plan["workers"].items()}
        executors = sorted(plan["executors"])
        edges = [(e["src"], e["dst"], float(e["tuples"])) for e in traffic["edges"]]
        decision = otd_round(executors, plan["executors"], worker_node, self.loads(name), edges, conf)
        record = {**decision.as_json(), "at": time.time(), "inter_node_ratio": traffic["inter_node_ratio"],
                  "window_tuples": traffic["total_tuples"]}
        log.info("OTD %s: round in %.1fs, case %d, inter-node ratio %.1f%% over %d tuples", name,
                 time.monotonic() - started, decision.case, 100 * traffic["inter_node_ratio"], traffic["total_tuples"])
        if decision.warning:
            log.warning("OTD %s: %s", name, decision.warning)
        if decision.executor and decision.target:
            log.info("OTD %s: case %d moves %s -> %s (ASC %.0f)", name, decision.case, decision.executor,
                     decision.target, decision.asc)
            request = {"mode": "thread", "moves": [[decision.executor, decision.target]], "random": 0,
                       "by": "otd", "requested_at": time.time()}
            self.zk.create(f"{self.paths.requests(name)}/req-", encode(request), sequence=True, makepath=True)
        path = self.paths.otd(name)
        data = json.dumps(record, default=str).encode()
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)
        return record
