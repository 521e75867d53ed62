"""The PySpark traffic job: communication matrices and worker load from the metrics store.

Over a time window it aggregates the load-collection records (``worker/metrics.py``) into
the executor communication matrix CC(e -> e'), the worker and node matrices, the share of
tuples that crossed nodes, and per-worker load. ``nstorm traffic`` runs it once; the OTD
scheduler keeps one :class:`TrafficJob` (one SparkSession) alive across its rounds, since
starting a session costs seconds.

Spark runs in local mode by default (``local[2]``); pass a master URL for a real cluster
(the metrics directory must then be readable by the executors).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nstorm.home import home_dir

__all__ = ["TrafficJob", "empty_traffic"]

log = logging.getLogger(__name__)

_SCHEMA = (
    "kind STRING, ts DOUBLE, topology STRING, src STRING, dst STRING, tuples LONG, bytes LONG, "
    "src_worker STRING, dst_worker STRING, src_node STRING, dst_node STRING, inter_node BOOLEAN, "
    "worker STRING, node STRING, cpu DOUBLE, queue LONG"
)


def empty_traffic(window_secs: float) -> dict[str, Any]:
    return {"window_secs": window_secs, "edges": [], "inter_node_ratio": 0.0, "total_tuples": 0,
            "workers": [], "worker_matrix": [], "node_matrix": []}


class TrafficJob:
    """One SparkSession, reused for every run.

    Example::

        job = TrafficJob()
        print(job.run("wordcount", window_secs=60)["inter_node_ratio"])
        job.stop()
    """

    def __init__(self, master: str = "local[2]", metrics_dir: Path | str | None = None) -> None:
        self.master = master
        self.metrics_dir = Path(metrics_dir) if metrics_dir else home_dir() / "metrics"
        self._spark: Any = None

    def session(self) -> Any:
        if self._spark is None:
            from pyspark.sql import SparkSession

            t0 = time.monotonic()
            self._spark = (
                SparkSession.builder.master(self.master)
                .appName("nstorm-traffic")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.memory", "512m")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            self._spark.sparkContext.setLogLevel("ERROR")
            log.info("SparkSession (%s) started in %.1fs", self.master, time.monotonic() - t0)
        return self._spark

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def run(self, topology: str, window_secs: float = 60.0, now: float | None = None) -> dict[str, Any]:
        """Aggregate the last ``window_secs`` of ``topology``'s records (schema of ``traffic --json``)."""
        from pyspark.sql import functions as F  # noqa: N812 - pyspark's convention

        root = self.metrics_dir / topology
        if not root.exists() or not any(root.rglob("*.jsonl")):
            return empty_traffic(window_secs)
        now = time.time() if now is None else now
        # Only the hour partitions the window touches (the store grows for as long as the topology runs).
        hours = []
        t = now - window_secs
        while t < now + 3600:
            stamp = datetime.fromtimestamp(min(t, now), UTC)
            part = root / f"date={stamp:%Y-%m-%d}" / f"hour={stamp:%H}"
            if part.exists() and str(part) not in hours:
                hours.append(str(part))
            t += 3600
        if not hours:
            return empty_traffic(window_secs)
        spark = self.session()
        frame = (spark.read.schema(_SCHEMA).json(hours)
                 .where((F.col("ts") > now - window_secs) & (F.col("ts") <= now)))
        edges_df = frame.where(F.col("kind") == "edge")
        edges = [
            {"src": r["src"], "dst": r["dst"], "tuples": int(r["tuples"]), "bytes": int(r["bytes"]),
             "inter_node": bool(r["inter_node"])}
            for r in edges_df.groupBy("src", "dst")
            .agg(F.sum("tuples").alias("tuples"), F.sum("bytes").alias("bytes"),
                 F.max_by("inter_node", "ts").alias("inter_node"))
            .orderBy("src", "dst").collect()
        ]
        totals = edges_df.agg(
            F.coalesce(F.sum("tuples"), F.lit(0)).alias("all"),
            F.coalesce(F.sum(F.when(F.col("inter_node"), F.col("tuples")).otherwise(0)), F.lit(0)).alias("inter"),
        ).collect()[0]
        worker_matrix = [
            {"src": r["src_worker"], "dst": r["dst_worker"], "tuples": int(r["tuples"])}
            for r in edges_df.groupBy("src_worker", "dst_worker").agg(F.sum("tuples").alias("tuples"))
            .orderBy("src_worker", "dst_worker").collect()
        ]
        node_matrix = [
            {"src": r["src_node"], "dst": r["dst_node"], "tuples": int(r["tuples"])}
            for r in edges_df.groupBy("src_node", "dst_node").agg(F.sum("tuples").alias("tuples"))
            .orderBy("src_node", "dst_node").collect()
        ]
        workers = [
            {"id": r["worker"], "node": r["node"], "cpu": round(float(r["cpu"]), 4), "queue": round(float(r["queue"]), 2)}
            for r in frame.where(F.col("kind") == "load").groupBy("worker")
            .agg(F.max_by("node", "ts").alias("node"), F.avg("cpu").alias("cpu"), F.avg("queue").alias("queue"))
            .orderBy("worker").collect()
        ]
        total = int(totals["all"])
        return {
            "window_secs": window_secs,
            "edges": edges,
            "inter_node_ratio": (int(totals["inter"]) / total) if total else 0.0,
            "total_tuples": total,
            "workers": workers,
            "worker_matrix": worker_matrix,
            "node_matrix": node_matrix,
        }
