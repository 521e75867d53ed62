"""The OTD algorithm (paper section 4): classify workers, then pick at most one migration.

Everything is vectorised with numpy so that a round over 10,000 executors and 1,000
workers takes well under a second (``python -m benchmarks.otd_scale``):

- ``comm[e, n]``, the communication between executor ``e`` and the executors placed on
  node ``n`` (both directions), is built from the sparse edge list with ``np.add.at``;
- equation (5), ``ASC(e, n0 -> n) = comm[e, n] - comm[e, n0]``, is then one fancy index
  and one subtraction for every candidate pair at once.

The four cases of section 4.2:

1. high- and low-load workers: Algorithm 1 (load balancing) moves one executor of the most
   loaded worker to the least loaded low-load worker of some node, the one with the best ASC;
2. high-load workers but no low-load one: a warning (resources are short), no move;
3. low-load workers but no high-load one: Algorithm 2 (communication optimisation) moves the
   executor with the best ASC to a low-load worker, if that ASC exceeds ``otd.threshold.asc``;
4. neither: nothing to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["HIGH", "LOW", "NORMAL", "Decision", "WorkerLoad", "allocation_scores", "classify", "otd_round"]

HIGH, NORMAL, LOW = "high", "normal", "low"


@dataclass(frozen=True)
class WorkerLoad:
    """What load collection reports for a worker: CPU share (0..1 of a core) and queued batches."""

    cpu: float
    queue: float


@dataclass
class Decision:
    """The outcome of one OTD round."""

    case: int
    executor: str | None = None
    target: str | None = None
    asc: float = 0.0
    warning: str | None = None
    classes: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"case": self.case, "executor": self.executor, "target": self.target, "asc": self.asc,
                "warning": self.warning, "classes": self.classes}


def classify(loads: Mapping[str, WorkerLoad], conf: Mapping[str, Any]) -> dict[str, str]:
    """high if CPU or queue is above its high mark; low if both are below their low marks."""
    cpu_high = float(conf.get("otd.cpu.high", 0.8))
    cpu_low = float(conf.get("otd.cpu.low", 0.5))
    queue_high = float(conf.get("otd.queue.high", 32))
    queue_low = float(conf.get("otd.queue.low", 4))
    classes = {}
    for worker, load in loads.items():
        if load.cpu >= cpu_high or load.queue >= queue_high:
            classes[worker] = HIGH
        elif load.cpu <= cpu_low and load.queue <= queue_low:
            classes[worker] = LOW
        else:
            classes[worker] = NORMAL
    return classes


def allocation_scores(
    executors: Sequence[str],
    placement: Mapping[str, str],
    worker_node: Mapping[str, str],
    edges: Sequence[tuple[str, str, float]],
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """``comm[e, n]``: traffic between executor ``e`` and the executors on node ``n``.

    :returns: (comm, node names, node index of each executor).
    """
    index = {e: i for i, e in enumerate(executors)}
    nodes = sorted(set(worker_node.values()))
    node_index = {n: i for i, n in enumerate(nodes)}
    home = np.array([node_index[worker_node[placement[e]]] for e in executors], dtype=np.int64)
    comm = np.zeros((len(executors), len(nodes)), dtype=np.float64)
    pairs = [(index[s], index[d], float(c)) for s, d, c in edges if s in index and d in index and s != d]
    if pairs:
        src = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
        dst = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))
        weight = np.fromiter((p[2] for p in pairs), dtype=np.float64, count=len(pairs))
        np.add.at(comm, (src, home[dst]), weight)  # CC(e -> e') counts for e ...
        np.add.at(comm, (dst, home[src]), weight)  # ... and for e' (CC(e' -> e))
    return comm, nodes, home


def _best(comm: np.ndarray, home: np.ndarray, rows: np.ndarray, targets: list[str],
          target_nodes: np.ndarray) -> tuple[int, int, float]:
    """argmax over (executor row, target) of equation (5)."""
    asc = comm[np.ix_(rows, target_nodes)] - comm[rows, home[rows]][:, None]
    flat = int(np.argmax(asc))
    r, t = divmod(flat, len(targets))
    return int(rows[r]), t, float(asc[r, t])


def otd_round(
    executors: Sequence[str],
    placement: Mapping[str, str],
    worker_node: Mapping[str, str],
    loads: Mapping[str, WorkerLoad],
    edges: Sequence[tuple[str, str, float]],
    conf: Mapping[str, Any],
    movable: Sequence[str] | None = None,
) -> Decision:
    """One OTD round: at most one (executor, target worker) pair, or a warning, or nothing.

    :arg executors: every executor of the topology (ids).
    :arg placement: executor -> worker.
    :arg worker_node: worker -> node.
    :arg loads: worker -> :class:`WorkerLoad` (workers without a report count as normal).
    :arg edges: (src executor, dst executor, tuples) over the window: CC(e -> e').
    :arg movable: executors that may move (default: all but ackers).
    """
    classes = classify(loads, conf)
    high = [w for w, c in classes.items() if c == HIGH and w in worker_node]
    low = [w for w, c in classes.items() if c == LOW and w in worker_node]
    movable_set = set(movable if movable is not None else [e for e in executors if not e.startswith("__acker")])
    if high and not low:
        return Decision(2, warning=f"workers {sorted(high)} are overloaded and no worker has spare capacity: "
                                   "add workers or supervisors", classes=classes)
    if not high and not low:
        return Decision(4, classes=classes)
    comm, nodes, home = allocation_scores(executors, placement, worker_node, edges)
    node_index = {n: i for i, n in enumerate(nodes)}
    if high:
        # Algorithm 1: executors of the most loaded worker -> the least loaded low worker of each node.
        source = max(high, key=lambda w: (loads[w].cpu, loads[w].queue))
        rows = np.array([i for i, e in enumerate(executors) if placement[e] == source and e in movable_set],
                        dtype=np.int64)
        per_node: dict[str, str] = {}
        for w in low:
            n = worker_node[w]
            if n not in per_node or (loads[w].cpu, loads[w].queue) < (loads[per_node[n]].cpu, loads[per_node[n]].queue):
                per_node[n] = w
        targets = sorted(per_node.values())
        if rows.size == 0 or not targets:
            return Decision(1, classes=classes)
        target_nodes = np.array([node_index[worker_node[w]] for w in targets], dtype=np.int64)
        row, t, asc = _best(comm, home, rows, targets, target_nodes)
        return Decision(1, executors[row], targets[t], asc, classes=classes)
    # Algorithm 2: every executor -> every low-load worker, only if worth it.
    rows = np.array([i for i, e in enumerate(executors) if e in movable_set], dtype=np.int64)
    targets = sorted(low)
    target_nodes = np.array([node_index[worker_node[w]] for w in targets], dtype=np.int64)
    if rows.size == 0:
        return Decision(3, classes=classes)
    asc_matrix = comm[np.ix_(rows, target_nodes)] - comm[rows, home[rows]][:, None]
    # a target on the executor's own node, or its own worker, is no migration
    same = home[rows][:, None] == target_nodes[None, :]
    asc_matrix[same] = -np.inf
    flat = int(np.argmax(asc_matrix))
    r, t = divmod(flat, len(targets))
    asc = float(asc_matrix[r, t])
    if not np.isfinite(asc) or asc <= float(conf.get("otd.threshold.asc", 0)):
        return Decision(3, asc=asc if np.isfinite(asc) else 0.0, classes=classes)
    return Decision(3, executors[int(rows[r])], targets[t], asc, classes=classes)
