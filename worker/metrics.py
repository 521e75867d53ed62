"""Load collection (paper Fig. 5): per-interval traffic between executors and worker load.

Every ``worker.metrics.interval.secs`` a thread turns the outboxes' cumulative counters
into deltas and appends JSON lines to the metrics store, partitioned by topology and
hour, one file per worker and minute:
``$NSTORM_HOME/metrics/<topology>/date=YYYY-MM-DD/hour=HH/<node>-<port>-<pid>-<MM>.jsonl``
(so that a round of OTD over the last few seconds reads one or two small files per
worker, not the whole hour).
Two kinds of record::

    {"kind": "edge", "ts", "topology", "src", "dst", "tuples", "bytes",
     "src_worker", "dst_worker", "src_node", "dst_node", "inter_node"}
    {"kind": "load", "ts", "topology", "worker", "node", "cpu", "queue", "wait", "executors", "executor_cpu"}

``wait`` is how long the worker's threads were ready to run but waited for a CPU, in cores (the
second field of ``/proc/self/task/*/schedstat``, the kernel's run-queue delay): a worker whose
CPU is low because its machine has none to give (more runnable threads than cores) is not one
that can take load, and OTD's load balancing reads it (``otd.cpu.wait.high``). Threads waiting
for the GIL sleep on a futex and do not count.

``executor_cpu`` is each executor thread's CPU over the interval, in cores (its thread's user
and system time, from ``/proc`` through psutil: one read per interval, nothing per tuple);
OTD's autoscaling and the heartbeats' ``cpu`` per executor come from it.

It reads counters the executors own without locks (a dict copy is atomic under the
GIL), so nothing is added to the tuple path but one addition per batch.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from nstorm.home import metrics_dir
from worker.host import Host

__all__ = ["MetricsCollector", "runqueue_waits"]

log = logging.getLogger(__name__)


class MetricsCollector:
    """The worker's load collection thread."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.interval = float(host.conf.get("worker.metrics.interval.secs", 1.0))
        self.root = metrics_dir(host.conf) / host.topology
        self._last: dict[tuple[int, int], tuple[int, int]] = {}
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._stop = threading.Event()
        self.last_load: dict[str, Any] = {"cpu": 0.0, "queue": 0}
        self.executor_cpu: dict[str, float] = {}  # executor -> cores over the last interval
        self._thread_times: dict[int, float] = {}
        self._times_at = time.monotonic()
        self._waits: dict[str, int] = runqueue_waits()
        self._waits_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def collect(self) -> list[dict[str, Any]]:
        """One interval's records (edges with traffic, and this worker's load)."""
        host = self.host
        routing = host.routing
        if routing is None:
            return []
        now = time.time()
        records: list[dict[str, Any]] = []
        executors = host.executor_stats()
        node_of = {wid: ep.node for wid, ep in routing.endpoints.items()}
        for ex in executors:
            for dst, (tuples, nbytes) in dict(ex.traffic).items():
                key = (ex.task, dst)
                last_t, last_b = self._last.get(key, (0, 0))
                self._last[key] = (tuples, nbytes)
                if tuples <= last_t or dst >= len(routing.tasks):
                    continue
                dst_worker = routing.location[dst]
                src_node, dst_node = host.node, node_of.get(dst_worker, "")
                records.append({
                    "kind": "edge", "ts": now, "topology": host.topology,
                    "src": ex.executor_id, "dst": routing.tasks[dst], "tuples": tuples - last_t,
                    "bytes": nbytes - last_b, "src_worker": host.worker_id, "dst_worker": dst_worker,
                    "src_node": src_node, "dst_node": dst_node, "inter_node": src_node != dst_node,
                })
        queues = {ex.executor_id: ex.queue for ex in executors}
        cpu = self._process.cpu_percent(None) / 100.0
        self.last_load = {"cpu": cpu, "queue": sum(queues.values())}
        self.executor_cpu = self._executor_cpu(executors)
        records.append({"kind": "load", "ts": now, "topology": host.topology, "worker": host.worker_id,
                        "node": host.node, "cpu": cpu, "queue": sum(queues.values()), "wait": self._wait(),
                        "executors": queues,
                        "executor_cpu": {e: round(c, 4) for e, c in self.executor_cpu.items()}})
        return records

    def _executor_cpu(self, executors: list[Any]) -> dict[str, float]:
        """Each executor thread's CPU (cores) since the last call."""
        try:
            times = {t.id: t.user_time + t.system_time for t in self._process.threads()}
        except (psutil.Error, OSError):
            return {}
        now = time.monotonic()
        elapsed = max(now - self._times_at, 1e-3)
        out = {}
        for ex in executors:
            tid = ex.thread_id
            if tid is None or tid not in times:
                continue
            before = self._thread_times.get(tid)
            if before is not None:
                out[ex.executor_id] = max(0.0, (times[tid] - before) / elapsed)
        self._thread_times, self._times_at = times, now
        return out

    def _wait(self) -> float:
        """Cores' worth of run-queue delay of the worker's threads since the last call (a thread
        that ended since is not counted; one that started counts from its start)."""
        waits = runqueue_waits()
        now = time.monotonic()
        elapsed = max(now - self._waits_at, 1e-3)
        last = self._waits
        delta = sum(ns - last.get(tid, 0) for tid, ns in waits.items())
        self._waits, self._waits_at = waits, now
        return round(max(0, delta) / 1e9 / elapsed, 4)

    def _path(self, now: float) -> Path:
        stamp = datetime.fromtimestamp(now, UTC)
        directory = self.root / f"date={stamp:%Y-%m-%d}" / f"hour={stamp:%H}"
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{self.host.node}-{self.host.port}-{os.getpid()}-{stamp:%M}.jsonl"

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                records = self.collect()
                if records:
                    with self._path(records[-1]["ts"]).open("a") as out:
                        out.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
            except Exception:  # noqa: BLE001 - metrics must never take the worker down
                log.warning("load collection failed", exc_info=True)


def runqueue_waits(task_dir: str = "/proc/self/task") -> dict[str, int]:
    """Each thread's time (ns) spent ready to run but waiting for a CPU, from the kernel's
    ``schedstat``; empty where the kernel does not expose it."""
    waits: dict[str, int] = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return waits
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/schedstat", "rb") as f:
                waits[tid] = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended, or no schedstat
    return waits
