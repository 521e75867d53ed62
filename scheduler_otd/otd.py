"""The OTD algorithm (paper section 4): classify workers, then pick at most one migration.

Everything is vectorised with numpy so that a round over 10,000 executors and 1,000
workers takes well under a second (``python -m benchmarks.otd_scale``):

- ``comm[e, n]``, the communication between executor ``e`` and the executors placed on
  node ``n`` (both directions), is built from the sparse edge list with ``np.add.at``;
- equation (5), ``ASC(e, n0 -> n) = comm[e, n] - comm[e, n0]``, is then one fancy index
  and one subtraction for every candidate pair at once.

Classification (section 4.2 classifies "according to the length of message queues and the CPU
utilization of each Worker"): over the round's window, a worker is

- high-load if it uses ``otd.cpu.high`` of its capacity or more (a Python worker is bound to
  one core by the GIL; a capped one to its cgroup quota), or its backlog is deep (>= ``otd.queue.high`` batches) or growing
  (>= ``otd.queue.growth.high`` batches/s): it receives more than it can process;
- low-load if it uses at most ``otd.cpu.low`` of its capacity and its backlog is not growing
  (<= ``otd.queue.growth.low``): a worker that keeps up;
- normal otherwise.

The backlog is the shortest queue a worker had over the load window, and its growth how
fast that floor rose from the first half of the window to the second
(:func:`scheduler_otd.traffic.fold`): queues on a busy machine come in bursts (0, 200, 0
batches a second apart), so the mean and a fitted slope flip a worker between classes
from one round to the next, while a worker that falls behind never empties its queue.

The four cases of section 4.2:

1. high- and low-load workers: Algorithm 1 (load balancing) moves one executor of the most
   loaded high-load worker to the least loaded low-load worker of some node, the pair with
   the best ASC, except the worker's busiest executor (most tuples in and out over the window):
   moving that one carries the hot spot to the target, which is high-load by the next round,
   and the busiest executor then travels from worker to worker (we saw a word count's
   hottest ``count`` move eight times in 70 s); moving its neighbours away gives it the
   worker. A worker with no other movable executor is skipped for the next most loaded one;
   when no high-load worker has one, no move can relieve them: the round warns (raise the
   parallelism) and goes on as Case 3, whose moves only go to low-load workers. Nor can a move
   onto a worker whose machine has no CPU to give: a low-load worker whose threads waited for a
   CPU (``otd.cpu.wait.high`` of a core or more over the window: more runnable threads than
   cores; not asked of a worker capped by a cgroup quota, whose delay counts its throttling) is
   low because it is starved, not because it has room, and moving load there only
   moves the queue (on a saturated 2-core machine such moves cost a quarter of word count's
   throughput, docs/benchmarks.md). With no other target the round warns and goes on as Case 3
   too: communication optimisation still pays on a saturated machine (co-located executors
   skip the network and the serialisation);
2. high-load workers but no low-load one: a warning (resources are short), no move; with
   ``otd.autoscale`` it scales out instead (:func:`autoscale`, below), unless the machine has no
   CPU for one executor more (:func:`no_cpu_for_more`);
3. low-load workers but no high-load one: Algorithm 2 (communication optimisation) moves the
   executor with the best ASC to the least loaded low-load worker of another node, if that
   ASC exceeds ``otd.threshold.asc`` (the paper's line 1 takes the least loaded low-load
   worker of each node);
4. neither: nothing to do (the paper: "we need not take any actions").

Ties of ASC (a move inside a node scores 0 for every executor) go to the executor with the
most traffic in the window, the busiest one.

Autoscaling (``otd.autoscale``; Aeolus finds each operator's parallelism at runtime, and the
paper's Case 2 can only warn): in Case 2, when a high-load worker also falls behind (its
backlog deep or growing: a worker busy near its cap that keeps up needs nothing), the bolt
component whose executors on the high-load workers use the most CPU gets one executor more,
live, in a new worker from a free slot if there is one; and a bolt component whose executors
would all stay below ``otd.cpu.low`` with one executor fewer (its CPU spread over ``n - 1``),
round after round for ``otd.autoscale.cooldown.secs``, gets one fewer. Not out when the lagging
workers are starved for CPU (their threads waited ``otd.cpu.wait.high`` of a core) and the new
executor would be too: every free slot on a machine (the supervisors' registered ``machine``,
the kernel's boot id: network namespaces and containers of one machine share it) where a worker of the
topology is starved, or, with no free slot, in workers that all are; on a saturated machine
another thread only waits (the round warns instead). Workers capped by a cgroup quota are never
starved (their wait is their own throttling) and gain only from a new worker: not out when
every free slot is on a machine whose workers' caps already take its cores (the supervisors
register their machine's cores and the cap they give, :func:`cap_room`). A new worker goes to
a free slot on a machine with CPU to give first (the request names those machines,
:func:`hosts_with_cpu`). One
step a round at most: out again once a whole window (``otd.window.secs``) has passed since the
last step, in only after the cool-down; executor CPU is each executor thread's (the workers
measure it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nstorm.topology import component_of, is_acker

__all__ = ["HIGH", "LOW", "NORMAL", "Decision", "ScaleStep", "WorkerLoad", "allocation_scores", "autoscale", "behind",
           "cap_room", "classify", "hosts_with_cpu", "no_cpu_for_more", "otd_round"]

HIGH, NORMAL, LOW = "high", "normal", "low"


@dataclass(frozen=True)
class WorkerLoad:
    """A worker's load over the window: CPU (share of its capacity: one core, the GIL's bound, or
    the cgroup cap its supervisor set, ``supervisor.worker.cpu.limit``), backlog (queued batches
    it did not get below), the backlog's trend (batches per second; > 0: it grows) and how long
    its threads waited for a CPU of its machine."""

    cpu: float
    queue: float
    trend: float = 0.0
    capacity: float = 1.0  # cores behind ``cpu`` = 1.0
    wait: float = 0.0  # cores' worth of run-queue delay: its threads ready, no CPU free (worker/metrics.py)
    capped: bool = False  # a cgroup quota: its wait includes the time it was throttled at it

    def starved(self, wait_high: float) -> bool:
        """Whether its machine has no CPU to give it: its threads waited ``wait_high`` of a core for
        one. Not asked of a capped worker, whose delay counts its own throttling (its ``cpu``
        against its cap says whether it has room)."""
        return not self.capped and self.wait >= wait_high

    def key(self) -> tuple[float, float, float]:
        """Order of load: "the highest load" and "the lowest load" of Algorithm 1."""
        return (self.cpu, self.trend, self.queue)


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
    """high / normal / low for each worker (the rules are in the module docstring)."""
    cpu_high = float(conf.get("otd.cpu.high", 0.8))
    cpu_low = float(conf.get("otd.cpu.low", 0.5))
    growth_low = float(conf.get("otd.queue.growth.low", 0.25))
    lagging = behind(loads, conf)
    classes = {}
    for worker, load in loads.items():
        if load.cpu >= cpu_high or worker in lagging:
            classes[worker] = HIGH
        elif load.cpu <= cpu_low and load.trend <= growth_low:
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


def _least_loaded_per_node(low: Sequence[str], loads: Mapping[str, WorkerLoad],
                           worker_node: Mapping[str, str]) -> list[str]:
    """min_load_workers: the least loaded low-load worker of each node (ties: by id)."""
    per_node: dict[str, str] = {}
    for w in sorted(low):
        n = worker_node[w]
        if n not in per_node or loads[w].key() < loads[per_node[n]].key():
            per_node[n] = w
    return sorted(per_node.values())


def _argmax(asc: np.ndarray, busy: np.ndarray) -> tuple[int, int, float] | None:
    """argmax over (row, target) of ASC; ties to the row with the most traffic (``busy``), then order."""
    best = float(asc.max()) if asc.size else -np.inf
    if not np.isfinite(best):
        return None
    flat = np.flatnonzero(asc.ravel() == best)
    rows = flat // asc.shape[1]
    pick = int(flat[int(np.argmax(busy[rows]))])
    r, t = divmod(pick, asc.shape[1])
    return r, t, best


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
    :arg loads: worker -> :class:`WorkerLoad` (workers without a report are in no class).
    :arg edges: (src executor, dst executor, tuples) over the window: CC(e -> e').
    :arg movable: executors that may move (default: all but ackers).
    """
    classes = classify(loads, conf)
    high = [w for w, c in classes.items() if c == HIGH and w in worker_node]
    low = [w for w, c in classes.items() if c == LOW and w in worker_node]
    movable_set = set(movable if movable is not None else [e for e in executors if not is_acker(e)])
    if high and not low:
        return Decision(2, warning=f"workers {sorted(high)} are overloaded and no worker has spare capacity: "
                                   "add workers or supervisors", classes=classes)
    if not high and not low:
        return Decision(4, classes=classes)
    comm, nodes, home = allocation_scores(executors, placement, worker_node, edges)
    node_index = {n: i for i, n in enumerate(nodes)}
    busy = comm.sum(axis=1)
    targets = _least_loaded_per_node(low, loads, worker_node)
    target_nodes = np.array([node_index[worker_node[w]] for w in targets], dtype=np.int64)
    wait_high = float(conf.get("otd.cpu.wait.high", 0.25))
    spare = _least_loaded_per_node([w for w in low if not loads[w].starved(wait_high)], loads, worker_node)
    spare_nodes = np.array([node_index[worker_node[w]] for w in spare], dtype=np.int64)
    warning = None
    if high and not spare:
        warning = (f"workers {sorted(high)} are overloaded and the low-load workers' machines have no CPU to "
                   f"give (their threads waited for one: {_waits(low, loads)}): add cores or supervisors")
    elif high:
        # Algorithm 1: executors of the most loaded worker -> min_load_workers (one per node) that
        # have CPU to give, all but the busiest executor (it would carry the hot spot along).
        for source in sorted(high, key=lambda w: loads[w].key(), reverse=True):
            rows = np.array([i for i, e in enumerate(executors) if placement[e] == source and e in movable_set],
                            dtype=np.int64)
            if rows.size < 2:
                continue
            rows = np.delete(rows, int(np.argmax(busy[rows])))
            asc_matrix = comm[np.ix_(rows, spare_nodes)] - comm[rows, home[rows]][:, None]
            best = _argmax(asc_matrix, busy[rows])
            assert best is not None  # rows and targets are not empty, and every entry is finite
            r, t, asc = best
            return Decision(1, executors[int(rows[r])], spare[t], asc, classes=classes)
        warning = (f"the overloaded workers {sorted(high)} host no movable executor besides their busiest one: "
                   "raise the parallelism of its component")
    # Algorithm 2: every executor -> min_load_workers, only if worth it.
    rows = np.array([i for i, e in enumerate(executors) if e in movable_set], dtype=np.int64)
    if rows.size == 0:
        return Decision(3, warning=warning, classes=classes)
    asc_matrix = comm[np.ix_(rows, target_nodes)] - comm[rows, home[rows]][:, None]
    asc_matrix[home[rows][:, None] == target_nodes[None, :]] = -np.inf  # within a node: no gain
    best = _argmax(asc_matrix, busy[rows])
    if best is None:
        return Decision(3, warning=warning, classes=classes)
    r, t, asc = best
    if asc <= float(conf.get("otd.threshold.asc", 0)):
        return Decision(3, asc=asc, warning=warning, classes=classes)
    return Decision(3, executors[int(rows[r])], targets[t], asc, warning=warning, classes=classes)


@dataclass(frozen=True)
class ScaleStep:
    """An autoscaling decision: ``component`` to ``parallelism`` executors (``workers``: that
    many workers, one more than now from a free slot; None: the workers it has)."""

    component: str
    parallelism: int
    workers: int | None
    why: str

    def as_json(self) -> dict[str, Any]:
        return {"component": self.component, "parallelism": self.parallelism, "workers": self.workers, "why": self.why}


def _waits(workers: Sequence[str], loads: Mapping[str, WorkerLoad]) -> str:
    """``w1 0.62, w2 0.40``: how much of a core each worker's threads waited for a CPU."""
    return ", ".join(f"{w} {loads[w].wait:.2f}" for w in sorted(workers))


def behind(loads: Mapping[str, WorkerLoad], conf: Mapping[str, Any]) -> set[str]:
    """The workers that do not keep up: a deep backlog (``otd.queue.high`` batches) or a growing
    one (``otd.queue.growth.high`` batches/s). A worker busy near its cap that keeps up is not."""
    queue_high = float(conf.get("otd.queue.high", 16))
    growth_high = float(conf.get("otd.queue.growth.high", 2.0))
    return {w for w, load in loads.items() if load.queue >= queue_high or load.trend >= growth_high}


def cap_room(host: str, loads: Mapping[str, WorkerLoad], worker_host: Mapping[str, str], cap: float,
             cores: float) -> bool:
    """Whether a new worker capped at ``cap`` cores has room on ``host`` (``cores`` usable there):
    the caps of the topology's capped workers on it, and the CPU its uncapped ones use, leave
    that much. Capped workers' caps may add up past a machine's cores; then each gets less."""
    used = sum(load.capacity if load.capped else load.cpu * load.capacity
               for w, load in loads.items() if worker_host.get(w) == host)
    return used + min(cap, 1.0) <= cores + 1e-9


def hosts_with_cpu(free_hosts: Sequence[str], loads: Mapping[str, WorkerLoad], worker_host: Mapping[str, str],
                   wait_high: float, machines: Mapping[str, tuple[float, float]] | None = None,
                   machine_of: Mapping[str, str] | None = None) -> list[str]:
    """The hosts of free slots on machines where no worker of the topology is starved and, where
    supervisors cap their workers (``machines``: host -> (the cap of a new worker there, the cores
    the topology may use on its machine: the machine's, less the caps of other topologies' workers
    on it)), a new capped worker has room (:func:`cap_room`), in Nimbus's order: a new worker goes
    there first.
    ``machine_of`` (host -> machine, from the supervisors' registrations) joins the hosts of one
    machine (network namespaces, containers: an address each, one machine's cores); a host it
    does not name is a machine of its own."""
    machine = (lambda host: machine_of.get(host, host)) if machine_of else (lambda host: host)
    worker_machine = {w: machine(h) for w, h in worker_host.items()}
    starved = {worker_machine[w] for w, load in loads.items() if w in worker_machine and load.starved(wait_high)}
    machines = machines or {}

    def room(host: str) -> bool:
        cap, cores = machines.get(host, (0.0, 0.0))
        return cap <= 0 or cap_room(machine(host), loads, worker_machine, cap, cores)

    return list(dict.fromkeys(h for h in free_hosts if machine(h) not in starved and room(h)))


def no_cpu_for_more(lagging_high: set[str], loads: Mapping[str, WorkerLoad], worker_host: Mapping[str, str],
                    free_hosts: Sequence[str], wait_high: float,
                    machines: Mapping[str, tuple[float, float]] | None = None,
                    machine_of: Mapping[str, str] | None = None) -> str | None:
    """Why one executor more would find no CPU, or None: every lagging high-load worker is starved
    (its threads wait for a CPU of its machine), and so would the new executor be: every free slot
    (``free_hosts``: their machines) is on a machine where a worker of the topology is starved, or,
    with no free slot, every worker it has is. A machine with no worker of the topology, or none
    starved, may have CPU to give (:func:`hosts_with_cpu`). Workers capped by a cgroup quota are
    never starved (their wait is their throttling) and gain only from a new worker: not when every
    free slot is on a machine whose workers' caps already take its cores (``machines``). Machines
    as in :func:`hosts_with_cpu` (``machine_of``)."""
    if lagging_high and all(w in loads and loads[w].capped for w in lagging_high):
        if not free_hosts or not machines or hosts_with_cpu(free_hosts, loads, worker_host, wait_high, machines, machine_of):
            return None
        return (f"workers {sorted(lagging_high)} fall behind at their CPU caps, and a new capped worker would "
                "find no cores free: the caps of the workers on every machine with a free slot take its cores "
                f"({', '.join(sorted(set(free_hosts)))})")
    if not lagging_high or not all(w in loads and loads[w].starved(wait_high) for w in lagging_high):
        return None
    if free_hosts:
        if hosts_with_cpu(free_hosts, loads, worker_host, wait_high, machines, machine_of):
            return None
        where = ("every free slot is on a machine where the topology's workers wait for a CPU too "
                 f"({', '.join(sorted(set(free_hosts)))})")
    elif all(w in loads and loads[w].starved(wait_high) for w in worker_host):
        where = "no free slot, and every worker's threads wait for a CPU"
    else:
        return None
    return (f"workers {sorted(lagging_high)} fall behind but their machine has no CPU to give (waited "
            f"{_waits(sorted(lagging_high), loads)} of a core); one executor more would wait as well: {where}")


def autoscale(
    decision: Decision,
    placement: Mapping[str, str],
    bolts: set[str],
    executor_cpu: Mapping[str, float],
    capacity: Mapping[str, float],
    conf: Mapping[str, Any],
    free_slots: int,
    low_since: dict[str, float],
    now: float,
    lagging: set[str],
    no_cpu: str | None = None,
) -> ScaleStep | None:
    """One autoscaling step or None (see the module docstring). ``low_since`` (component -> when its
    executors were first seen idle, kept by the caller between rounds) is updated here.

    :arg placement: executor -> worker (the component's executors now).
    :arg bolts: the components that are bolts (spouts are not scaled: more of them is more load).
    :arg executor_cpu: executor -> cores it used lately.
    :arg capacity: worker -> cores it may use.
    :arg lagging: the workers :func:`behind` (a scale-out needs one of the high-load workers among
        them: CPU alone, near a cgroup cap, over-provisioned).
    :arg no_cpu: why one executor more would find no CPU (:func:`no_cpu_for_more`): no scale-out,
        the reason goes into the round's warning.
    """
    share = {e: executor_cpu.get(e, 0.0) / max(capacity.get(w, 1.0), 1e-6) for e, w in placement.items()}
    per_component: dict[str, list[str]] = {}
    for e in placement:
        component = component_of(e)
        if component in bolts:
            per_component.setdefault(component, []).append(e)
    groups = int(conf.get("topology.max.parallelism", 128))
    workers = len(set(placement.values()))
    if decision.case == 2:
        high = {w for w, c in decision.classes.items() if c == HIGH}
        low_since.clear()
        if not high & lagging:
            return None  # busy, but keeping up: one more executor would only be idle
        if no_cpu:
            decision.warning = no_cpu
            return None
        load = {c: sum(share[e] for e in es if placement[e] in high) for c, es in per_component.items()}
        candidates = [c for c in sorted(load, key=lambda c: -load[c]) if load[c] > 0 and len(per_component[c]) < groups]
        if not candidates:
            return None
        component = candidates[0]
        n = len(per_component[component])
        return ScaleStep(component, n + 1, workers + 1 if free_slots > 0 else None,
                         f"workers {sorted(high & lagging)} fall behind; {component} uses {load[component]:.2f} "
                         f"of workers {sorted(high)}")
    cpu_low = float(conf.get("otd.cpu.low", 0.5))
    cooldown = float(conf.get("otd.autoscale.cooldown.secs", 30))
    idle = []
    for component, es in per_component.items():
        n = len(es)
        spread = sum(share[e] for e in es) / (n - 1) if n > 1 else float("inf")
        if spread < cpu_low:
            low_since.setdefault(component, now)
            if now - low_since[component] >= cooldown:
                idle.append((spread, component))
        else:
            low_since.pop(component, None)
    for component in list(low_since):
        if component not in per_component:
            del low_since[component]
    if not idle:
        return None
    spread, component = min(idle)
    low_since.pop(component, None)
    return ScaleStep(component, len(per_component[component]) - 1, None,
                     f"{component} would use {spread:.2f} of a core per executor with one fewer")
