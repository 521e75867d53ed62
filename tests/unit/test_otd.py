"""Unit tests of OTD: equations (4) and (5), both algorithms, the threshold and the four cases."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_otd.otd import HIGH, LOW, NORMAL, WorkerLoad, allocation_scores, classify, otd_round
from scheduler_otd.traffic import aggregate_records

# Two nodes A and B; workers wA (A) and wB (B); x, y on wA, z on wB.
EXECUTORS = ["x", "y", "z"]
PLACEMENT = {"x": "wA", "y": "wA", "z": "wB"}
NODES = {"wA": "A", "wB": "B"}
EDGES = [("x", "z", 10), ("z", "x", 2), ("x", "y", 3), ("y", "z", 5)]
CONF = {"otd.cpu.high": 0.8, "otd.cpu.low": 0.5, "otd.queue.high": 16, "otd.queue.growth.high": 2.0,
        "otd.queue.growth.low": 0.25, "otd.threshold.asc": 0}


def _as(executor: str, node: str) -> float:
    """Equation (4) by hand: intra-node minus inter-node communication of ``executor`` if placed on ``node``."""
    intra = inter = 0.0
    for s, d, c in EDGES:
        if executor not in (s, d) or s == d:
            continue
        other = d if s == executor else s
        if NODES[PLACEMENT[other]] == node:
            intra += c
        else:
            inter += c
    return intra - inter


def test_equation_5_matches_equation_4_and_hand_values() -> None:
    comm, nodes, home = allocation_scores(EXECUTORS, PLACEMENT, NODES, EDGES)
    assert nodes == ["A", "B"]
    assert comm.tolist() == [[3, 12], [3, 5], [17, 0]]
    for i, e in enumerate(EXECUTORS):
        n0 = home[i]
        for n in range(2):
            asc = comm[i, n] - comm[i, n0]
            assert asc == pytest.approx((_as(e, nodes[n]) - _as(e, nodes[n0])) / 2)
    assert comm[0, 1] - comm[0, 0] == 9  # ASC(x, A -> B)
    assert comm[2, 0] - comm[2, 1] == 17  # ASC(z, B -> A)


def test_classify_by_cpu_backlog_depth_and_backlog_growth() -> None:
    loads = {
        "cpu": WorkerLoad(0.9, 0),  # a core's worth of CPU: high
        "deep": WorkerLoad(0.1, 50),  # deep backlog: high
        "growing": WorkerLoad(0.3, 10, trend=2.0),  # backlog grows by 2 batches/s: high
        "idle": WorkerLoad(0.2, 1),
        "steady": WorkerLoad(0.3, 12, trend=0.1),  # a steady queue of 12 batches keeps up: low
        "busy": WorkerLoad(0.6, 1),  # CPU between the marks: normal
        "creeping": WorkerLoad(0.3, 5, trend=0.5),  # slowly growing backlog: normal
    }
    assert classify(loads, CONF) == {"cpu": HIGH, "deep": HIGH, "growing": HIGH, "idle": LOW, "steady": LOW,
                                     "busy": NORMAL, "creeping": NORMAL}


def test_queue_trend_and_window_aggregation_by_hand() -> None:
    now = 1000.0
    records = [  # a worker whose queue grows 0, 2, 4, 6 over 4 s
        {"kind": "load", "ts": now - 3 + i, "worker": "wA", "node": "A", "cpu": 0.1 * (i + 1), "queue": 2 * i}
        for i in range(4)
    ] + [
        {"kind": "load", "ts": now - 3 + i, "worker": "wB", "node": "B", "cpu": 0.2, "queue": 5} for i in range(4)
    ] + [  # x -> z crossed nodes, then z moved next to x: the pair is intra-node now
        {"kind": "edge", "ts": now - 2, "src": "x", "dst": "z", "tuples": 10, "bytes": 100, "src_worker": "wA",
         "dst_worker": "wB", "src_node": "A", "dst_node": "B", "inter_node": True},
        {"kind": "edge", "ts": now - 1, "src": "x", "dst": "z", "tuples": 30, "bytes": 300, "src_worker": "wA",
         "dst_worker": "wA", "src_node": "A", "dst_node": "A", "inter_node": False},
        {"kind": "edge", "ts": now - 50, "src": "x", "dst": "z", "tuples": 999, "bytes": 9, "src_worker": "wA",
         "dst_worker": "wB", "src_node": "A", "dst_node": "B", "inter_node": True},  # outside the window
    ]
    result = aggregate_records(records, 10, now, load_secs=4)
    assert result["edges"] == [{"src": "x", "dst": "z", "tuples": 40, "bytes": 400, "inter_node": False}]
    assert result["total_tuples"] == 40 and result["inter_node_ratio"] == 0.25
    assert result["worker_matrix"] == [{"src": "wA", "dst": "wA", "tuples": 30}, {"src": "wA", "dst": "wB", "tuples": 10}]
    assert result["node_matrix"] == [{"src": "A", "dst": "A", "tuples": 30}, {"src": "A", "dst": "B", "tuples": 10}]
    # load over the last 4 s, halves (now-4, now-2] and (now-2, now]: wA's floor rose from 0 to 4 in 2 s
    assert result["workers"] == [
        {"id": "wA", "node": "A", "cpu": 0.25, "queue": 3.0, "backlog": 0.0, "trend": 2.0, "wait": 0.0},
        {"id": "wB", "node": "B", "cpu": 0.2, "queue": 5.0, "backlog": 5.0, "trend": 0.0, "wait": 0.0},
    ]
    # bursts do not make a backlog: 0, 200, 0, 150 has a floor of 0 in both halves
    bursty = [{"kind": "load", "ts": now - 3 + i, "worker": "wC", "node": "A", "cpu": 0.1, "queue": q}
              for i, q in enumerate([0, 200, 0, 150])]
    (worker,) = aggregate_records(bursty, 10, now, load_secs=4)["workers"]
    assert (worker["queue"], worker["backlog"], worker["trend"]) == (87.5, 0.0, 0.0)


def test_case_1_load_balancing_moves_best_asc_executor_of_busiest_worker() -> None:
    # wA hosts x (3 + 12 = 15 tuples in and out) and y (3 + 5 = 8): x, the busiest, stays;
    # y moves to wB, ASC(y, A -> B) = 5 - 3.
    loads = {"wA": WorkerLoad(0.95, 10), "wB": WorkerLoad(0.1, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (1, "y", "wB", 2)


def test_case_1_picks_the_best_asc_among_the_others() -> None:
    # a, b, c on wA; d on wB.  a (40 tuples) is the busiest and stays.  ASC to node B:
    # b = 20 - 1 = 19, c = 5 - 0 = 5, so b goes.
    placement = {"a": "wA", "b": "wA", "c": "wA", "d": "wB"}
    edges = [("a", "d", 40), ("b", "d", 20), ("c", "d", 5), ("a", "b", 1)]
    loads = {"wA": WorkerLoad(0.9, 0), "wB": WorkerLoad(0.2, 0)}
    d = otd_round(["a", "b", "c", "d"], placement, NODES, loads, edges, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (1, "b", "wB", 19)


def test_case_1_picks_the_least_loaded_low_worker_per_node() -> None:
    nodes = {**NODES, "wB2": "B"}
    loads = {"wA": WorkerLoad(0.95, 0), "wB": WorkerLoad(0.4, 0), "wB2": WorkerLoad(0.05, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target) == (1, "y", "wB2")


def test_case_2_warns_without_moving() -> None:
    loads = {"wA": WorkerLoad(0.95, 0), "wB": WorkerLoad(0.7, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert d.case == 2 and d.executor is None and "wA" in d.warning


def test_case_3_communication_optimisation_and_threshold() -> None:
    loads = {"wA": WorkerLoad(0.1, 0), "wB": WorkerLoad(0.1, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (3, "z", "wA", 17)
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, {**CONF, "otd.threshold.asc": 17})
    assert (d.case, d.executor) == (3, None)
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, {**CONF, "otd.threshold.asc": 16.5})
    assert d.executor == "z"


def test_case_3_never_moves_within_a_node_or_ackers() -> None:
    placement = {"x": "wA", "z": "wA2", "__acker:0": "wB"}
    nodes = {"wA": "A", "wA2": "A", "wB": "B"}
    loads = {w: WorkerLoad(0.1, 0) for w in nodes}
    edges = [("x", "z", 100), ("__acker:0", "z", 1)]
    d = otd_round(["x", "z", "__acker:0"], placement, nodes, loads, edges, CONF)
    assert d.executor is None  # x and z already share a node; the acker may not move


def test_case_3_with_steady_queues_as_in_word_count() -> None:
    # Every worker shares a saturated machine (a quarter of a core each) with a steady backlog:
    # all low-load, so communication optimisation runs instead of Case 4.
    loads = {"wA": WorkerLoad(0.23, 12, trend=0.1), "wB": WorkerLoad(0.25, 9, trend=-0.3)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (3, "z", "wA", 17)


def test_case_3_targets_the_least_loaded_low_worker_of_the_node() -> None:
    nodes = {**NODES, "wA2": "A"}
    loads = {"wA": WorkerLoad(0.4, 0), "wA2": WorkerLoad(0.1, 0), "wB": WorkerLoad(0.2, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (3, "z", "wA2", 17)


def test_case_1_skips_a_worker_with_a_single_executor() -> None:
    # wB (only z) is the busiest, but moving z would carry its load along: wA (x, y) gives up y.
    nodes = {**NODES, "wB2": "B"}
    loads = {"wB": WorkerLoad(0.99, 0), "wA": WorkerLoad(0.9, 0), "wB2": WorkerLoad(0.1, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (1, "y", "wB2", 2)
    # wA is normal now: no high-load worker can give an executor away, so the round warns and
    # optimises communication towards the low-load wB2 (Case 3): x, ASC 12 - 3.
    loads = {"wB": WorkerLoad(0.99, 0), "wA": WorkerLoad(0.6, 0), "wB2": WorkerLoad(0.1, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (3, "x", "wB2", 9) and "wB" in d.warning


def test_case_1_breaks_asc_ties_by_traffic() -> None:
    # The only low-load worker shares node A with wA: every move scores ASC 0.  a (30) stays;
    # of b (20) and c (5) the busier goes.
    placement = {"a": "wA", "b": "wA", "c": "wA", "d": "wB"}
    nodes = {**NODES, "wA2": "A"}
    loads = {"wA": WorkerLoad(0.3, 40), "wA2": WorkerLoad(0.1, 0), "wB": WorkerLoad(0.6, 0)}
    edges = [("a", "d", 30), ("b", "d", 20), ("c", "d", 5)]
    d = otd_round(["a", "b", "c", "d"], placement, nodes, loads, edges, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (1, "b", "wA2", 0)


def test_case_4_does_nothing() -> None:
    loads = {"wA": WorkerLoad(0.6, 5), "wB": WorkerLoad(0.3, 5, trend=0.5)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.warning) == (4, None, None)


def test_vectorised_round_is_consistent_with_brute_force() -> None:
    rng = np.random.default_rng(3)
    executors = [f"e{i}" for i in range(60)]
    workers = [f"w{i}" for i in range(6)]
    nodes = {w: f"n{i % 3}" for i, w in enumerate(workers)}
    placement = {e: workers[rng.integers(6)] for e in executors}
    edges = [(executors[a], executors[b], float(rng.integers(1, 50)))
             for a, b in rng.integers(0, 60, size=(200, 2)) if a != b]
    loads = {w: WorkerLoad(0.1, 0) for w in workers}
    d = otd_round(executors, placement, nodes, loads, edges, CONF)
    best = -1e18
    for e in executors:
        for w in workers:
            if nodes[w] == nodes[placement[e]]:
                continue
            gain = sum(c for s, t, c in edges if e in (s, t) and s != t
                       and nodes[placement[t if s == e else s]] == nodes[w])
            loss = sum(c for s, t, c in edges if e in (s, t) and s != t
                       and nodes[placement[t if s == e else s]] == nodes[placement[e]])
            best = max(best, gain - loss)
    assert d.asc == pytest.approx(best)


def test_case_1_moves_no_load_onto_a_worker_whose_machine_has_no_cpu_to_give() -> None:
    # wB is low-load only because its threads wait for a CPU (0.6 of a core: the machine is
    # saturated): moving y there would only move the queue. No other target: the round warns and
    # goes on as Case 3, whose communication optimisation still pays (x, the busiest, joins z).
    loads = {"wA": WorkerLoad(0.95, 40), "wB": WorkerLoad(0.1, 0, wait=0.6)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (3, "x", "wB", 9)
    assert "no CPU to give" in d.warning and "wB 0.60" in d.warning
    # a starved worker is still low-load (its CPU is low): only load balancing skips it
    assert classify(loads, CONF) == {"wA": HIGH, "wB": LOW}


def test_case_1_takes_a_worker_with_cpu_to_give_over_a_starved_one() -> None:
    nodes = {**NODES, "wB2": "B"}
    loads = {"wA": WorkerLoad(0.95, 0), "wB": WorkerLoad(0.05, 0, wait=0.5), "wB2": WorkerLoad(0.3, 0, wait=0.1)}
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target) == (1, "y", "wB2")
    # the bound is a setting: at 0.05 of a core neither has CPU to give
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, {**CONF, "otd.cpu.wait.high": 0.05})
    assert d.case == 3 and "no CPU to give" in d.warning



def test_a_capped_workers_wait_is_its_own_throttling_and_does_not_exclude_it() -> None:
    # Capped at 0.2 cores, wB at 0.3 of its cap has room; its threads' run-queue delay counts
    # the time its cgroup was throttled at the quota, not a machine short of CPU.
    loads = {"wA": WorkerLoad(0.95, 0, capacity=0.2, capped=True),
             "wB": WorkerLoad(0.3, 0, capacity=0.2, wait=2.0, capped=True)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target) == (1, "y", "wB")


def test_traffic_reports_each_workers_mean_run_queue_wait() -> None:
    now = 1000.0
    records = [{"kind": "load", "ts": now - 3 + i, "worker": "wA", "node": "A", "cpu": 0.2, "queue": 0, "wait": w}
               for i, w in enumerate([0.2, 0.4, 0.6])]
    records.append({"kind": "load", "ts": now - 1, "worker": "wB", "node": "B", "cpu": 0.2, "queue": 0})  # older worker
    workers = {w["id"]: w for w in aggregate_records(records, 10, now)["workers"]}
    assert workers["wA"]["wait"] == pytest.approx(0.4) and workers["wB"]["wait"] == 0.0
