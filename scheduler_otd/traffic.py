"""The PySpark traffic job: communication matrices and worker load from the metrics store.

Over a time window it aggregates the load-collection records (``worker/metrics.py``) into
the executor communication matrix CC(e -> e'), the worker and node matrices, the share of
tuples that crossed nodes, and per-worker load (mean CPU, mean queue, the queue's trend and
how long its threads waited for a CPU). ``nstorm traffic`` runs it once; the OTD scheduler
keeps one :class:`TrafficJob` (one SparkSession) alive across its rounds, since starting a
session costs seconds (a minute on a loaded machine).

A run is one Spark job: read the window's files (one per worker and minute), group the
records by every key the outputs need and sum, then fold those few hundred groups into
the result on the driver (:func:`fold`). :func:`aggregate_records` is the same fold over
plain Python sums; the scheduler uses it only while its SparkSession is still starting,
and the tests check that both give the same result.

Spark runs in local mode by default (``local[2]``); pass a master URL for a real cluster
(the metrics directory must then be readable by the executors).
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nstorm.home import metrics_dir as nstorm_metrics_dir

__all__ = ["TrafficJob", "aggregate_records", "empty_traffic", "fold", "read_window", "window_files"]

log = logging.getLogger(__name__)

_SCHEMA = (
    "kind STRING, ts DOUBLE, topology STRING, src STRING, dst STRING, tuples LONG, bytes LONG, "
    "src_worker STRING, dst_worker STRING, src_node STRING, dst_node STRING, inter_node BOOLEAN, "
    "worker STRING, node STRING, cpu DOUBLE, queue LONG, wait DOUBLE"
)
# A record's group: every key an output needs (edges keep their placement, so an executor that
# moved during the window shows up in two groups; ``fold`` merges them).
_KEYS = ("kind", "src", "dst", "src_worker", "dst_worker", "src_node", "dst_node", "inter_node", "worker", "node")


def empty_traffic(window_secs: float) -> dict[str, Any]:
    return {"window_secs": window_secs, "edges": [], "inter_node_ratio": 0.0, "total_tuples": 0,
            "workers": [], "worker_matrix": [], "node_matrix": []}


def window_files(root: Path, window_secs: float, now: float) -> list[Path]:
    """The files (one per worker and minute) that can hold records of ``(now - window, now]``."""
    files: list[Path] = []
    minute = int((now - window_secs) // 60)
    while minute <= int(now // 60):
        stamp = datetime.fromtimestamp(minute * 60, UTC)
        directory = root / f"date={stamp:%Y-%m-%d}" / f"hour={stamp:%H}"
        if directory.is_dir():
            files.extend(sorted(directory.glob(f"*-{stamp:%M}.jsonl")))
        minute += 1
    return files


def read_window(files: Iterable[Path], window_secs: float, now: float) -> list[dict[str, Any]]:
    """The records of ``files`` in ``(now - window, now]`` (a line still being written is skipped)."""
    records = []
    start = now - window_secs
    for path in files:
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        for line in text[: text.rfind("\n") + 1].splitlines():
            if line:
                r = json.loads(line)
                if start < r["ts"] <= now:
                    records.append(r)
    return records


def _new_group() -> dict[str, Any]:
    return {"tuples": 0, "bytes": 0, "last_ts": float("-inf"), "n": 0, "cpu": 0.0, "queue": 0.0, "wait": 0.0,
            "floor1": None, "floor2": None}


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def aggregate_records(records: Iterable[Mapping[str, Any]], window_secs: float, now: float,
                      load_secs: float | None = None) -> dict[str, Any]:
    """The traffic result of the ``records`` in ``(now - window, now]`` with plain Python sums
    (the same groups as the Spark job)."""
    load_secs = window_secs if load_secs is None else min(load_secs, window_secs)
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    start, load_start, half = now - window_secs, now - load_secs, now - load_secs / 2
    for r in records:
        ts = r["ts"]
        if not start < ts <= now:
            continue
        key = tuple(r.get(k) for k in _KEYS)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _new_group()
        g["last_ts"] = max(g["last_ts"], ts)
        if r["kind"] == "edge":
            g["tuples"] += r["tuples"]
            g["bytes"] += r["bytes"]
        elif ts > load_start:
            q = float(r["queue"])
            g["n"] += 1
            g["cpu"] += r["cpu"]
            g["queue"] += q
            g["wait"] += r.get("wait") or 0.0  # records of workers before it: 0
            floor = "floor1" if ts <= half else "floor2"
            g[floor] = _min(g[floor], q)
    return fold(({**dict(zip(_KEYS, key, strict=True)), **g} for key, g in groups.items()), window_secs, load_secs)


def fold(groups: Iterable[Mapping[str, Any]], window_secs: float, load_secs: float | None = None) -> dict[str, Any]:
    """From per-group sums to the result (schema of ``nstorm traffic --json``, plus matrices).

    A group has the keys of ``_KEYS`` and tuples, bytes, last_ts (edges); n, cpu, queue and wait
    (sums over the last ``load_secs`` of load records) and floor1, floor2 (the shortest queue seen in
    the first and in the second half of those seconds). A worker's ``backlog`` is the shortest
    queue it had over ``load_secs``: a worker that keeps up empties its queue now and then, one
    that falls behind never does, and transient bursts do not count. Its ``trend`` is how fast
    that floor rose from the first half to the second (batches/s). Its ``wait`` is the mean
    run-queue delay of its threads (cores: ready to run, no CPU free; ``worker/metrics.py``).
    """
    load_secs = window_secs if load_secs is None else min(load_secs, window_secs)
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    worker_matrix: dict[tuple[str, str], int] = {}
    node_matrix: dict[tuple[str, str], int] = {}
    loads: dict[str, dict[str, Any]] = {}
    total = inter = 0
    for g in groups:
        if g["kind"] == "edge":
            tuples, nbytes = int(g["tuples"]), int(g["bytes"])
            e = edges.setdefault((g["src"], g["dst"]), {"src": g["src"], "dst": g["dst"], "tuples": 0, "bytes": 0,
                                                         "inter_node": False, "_ts": float("-inf")})
            e["tuples"] += tuples
            e["bytes"] += nbytes
            if g["last_ts"] > e["_ts"]:  # where the pair was last seen
                e["_ts"], e["inter_node"] = g["last_ts"], bool(g["inter_node"])
            total += tuples
            inter += tuples if g["inter_node"] else 0
            wk, nk = (g["src_worker"], g["dst_worker"]), (g["src_node"], g["dst_node"])
            worker_matrix[wk] = worker_matrix.get(wk, 0) + tuples
            node_matrix[nk] = node_matrix.get(nk, 0) + tuples
        elif g["kind"] == "load":
            w = loads.setdefault(g["worker"], {"node": g["node"], "n": 0, "cpu": 0.0, "queue": 0.0, "wait": 0.0,
                                               "floor1": None, "floor2": None, "_ts": float("-inf")})
            for k in ("n", "cpu", "queue", "wait"):
                w[k] += g[k]
            for k in ("floor1", "floor2"):
                w[k] = _min(w[k], g[k])
            if g["last_ts"] > w["_ts"]:
                w["_ts"], w["node"] = g["last_ts"], g["node"]
    workers = []
    for wid, w in sorted(loads.items()):
        if not w["n"]:
            continue
        f1, f2 = w["floor1"], w["floor2"]
        trend = (f2 - f1) / (load_secs / 2) if f1 is not None and f2 is not None else 0.0
        workers.append({"id": wid, "node": w["node"], "cpu": round(w["cpu"] / w["n"], 4),
                        "queue": round(w["queue"] / w["n"], 2), "backlog": _min(f1, f2), "trend": round(trend, 3),
                        "wait": round(w["wait"] / w["n"], 4)})
    return {
        "window_secs": window_secs,
        "edges": [{k: v for k, v in e.items() if k != "_ts"} for _, e in sorted(edges.items())],
        "inter_node_ratio": inter / total if total else 0.0,
        "total_tuples": total,
        "workers": workers,
        "worker_matrix": [{"src": s, "dst": d, "tuples": n} for (s, d), n in sorted(worker_matrix.items())],
        "node_matrix": [{"src": s, "dst": d, "tuples": n} for (s, d), n in sorted(node_matrix.items())],
    }


class TrafficJob:
    """One SparkSession, reused for every run; thread-safe start and stop.

    Example::

        job = TrafficJob()
        print(job.run("wordcount", window_secs=60)["inter_node_ratio"])
        job.stop()

    :ivar ready: set once the session is up and has run a first (warm-up) job.
    """

    def __init__(self, master: str = "local[2]", metrics_dir: Path | str | None = None) -> None:
        self.master = master
        self.metrics_dir = Path(metrics_dir) if metrics_dir else nstorm_metrics_dir()
        self.ready = threading.Event()
        self._spark: Any = None
        self._lock = threading.Lock()  # guards _spark and _closed, never held while Spark starts
        self._closed = False

    def session(self) -> Any:
        if self._spark is not None:
            return self._spark
        from pyspark.sql import SparkSession

        t0 = time.monotonic()
        spark = (
            SparkSession.builder.master(self.master)
            .appName("nstorm-traffic")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.memory", "512m")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        with self._lock:
            if self._closed:  # stop() came while the session started
                spark.stop()
                msg = "traffic job stopped"
                raise RuntimeError(msg)
            self._spark = spark
        log.info("SparkSession (%s) started in %.1fs", self.master, time.monotonic() - t0)
        return spark

    def warm_up(self) -> None:
        """Start the session and run the job once on two records, so the first real round is warm."""
        t0 = time.monotonic()
        self.session()
        with tempfile.TemporaryDirectory(prefix="nstorm-spark-warm-") as tmp:
            now = time.time()
            stamp = datetime.fromtimestamp(now, UTC)
            part = Path(tmp) / "warm" / f"date={stamp:%Y-%m-%d}" / f"hour={stamp:%H}"
            part.mkdir(parents=True)
            records = [
                {"kind": "edge", "ts": now - 1, "topology": "warm", "src": "a:0", "dst": "b:0", "tuples": 1, "bytes": 1,
                 "src_worker": "n:1", "dst_worker": "n:1", "src_node": "n", "dst_node": "n", "inter_node": False},
                {"kind": "load", "ts": now - 1, "topology": "warm", "worker": "n:1", "node": "n", "cpu": 0.0,
                 "queue": 0},
            ]
            (part / f"n-1-0-{stamp:%M}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            self._aggregate(window_files(Path(tmp) / "warm", 60, now), 60, now)
        self.ready.set()
        log.info("Spark traffic job warm after %.1fs", time.monotonic() - t0)

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            spark, self._spark = self._spark, None
        self.ready.clear()
        if spark is not None:
            spark.stop()

    def run(self, topology: str, window_secs: float = 60.0, now: float | None = None,
            load_secs: float | None = None) -> dict[str, Any]:
        """Aggregate the last ``window_secs`` of ``topology``'s records (schema of ``traffic --json``);
        worker load over the last ``load_secs`` of them (default: all)."""
        now = time.time() if now is None else now
        files = window_files(self.metrics_dir / topology, window_secs, now)
        if not files:
            return empty_traffic(window_secs)
        return self._aggregate(files, window_secs, now, load_secs)

    def _aggregate(self, files: list[Path], window_secs: float, now: float,
                   load_secs: float | None = None) -> dict[str, Any]:
        from pyspark.sql import functions as F  # noqa: N812 - pyspark's convention

        load_secs = window_secs if load_secs is None else min(load_secs, window_secs)
        spark = self.session()
        frame = (spark.read.schema(_SCHEMA).json([str(f) for f in files])
                 .where((F.col("ts") > now - window_secs) & (F.col("ts") <= now)))
        is_edge = F.col("kind") == "edge"
        in_load = (F.col("kind") == "load") & (F.col("ts") > now - load_secs)
        first = in_load & (F.col("ts") <= now - load_secs / 2)
        second = in_load & (F.col("ts") > now - load_secs / 2)
        q = F.col("queue").cast("double")
        rows = frame.groupBy(*_KEYS).agg(
            F.coalesce(F.sum(F.when(is_edge, F.col("tuples"))), F.lit(0)).alias("tuples"),
            F.coalesce(F.sum(F.when(is_edge, F.col("bytes"))), F.lit(0)).alias("bytes"),
            F.max("ts").alias("last_ts"),
            F.coalesce(F.sum(F.when(in_load, F.lit(1))), F.lit(0)).alias("n"),
            F.coalesce(F.sum(F.when(in_load, F.col("cpu"))), F.lit(0.0)).alias("cpu"),
            F.coalesce(F.sum(F.when(in_load, q)), F.lit(0.0)).alias("queue"),
            F.coalesce(F.sum(F.when(in_load, F.coalesce(F.col("wait"), F.lit(0.0)))), F.lit(0.0)).alias("wait"),
            F.min(F.when(first, q)).alias("floor1"),
            F.min(F.when(second, q)).alias("floor2"),
        ).collect()
        return fold((r.asDict() for r in rows), window_secs, load_secs)
