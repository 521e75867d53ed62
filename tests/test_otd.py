"""Unit tests of OTD: equations (4) and (5), both algorithms, the threshold and the four cases."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_otd.otd import HIGH, LOW, NORMAL, WorkerLoad, allocation_scores, classify, otd_round

# Two nodes A and B; workers wA (A) and wB (B); x, y on wA, z on wB.
EXECUTORS = ["x", "y", "z"]
PLACEMENT = {"x": "wA", "y": "wA", "z": "wB"}
NODES = {"wA": "A", "wB": "B"}
EDGES = [("x", "z", 10), ("z", "x", 2), ("x", "y", 3), ("y", "z", 5)]
CONF = {"otd.cpu.high": 0.8, "otd.cpu.low": 0.5, "otd.queue.high": 32, "otd.queue.low": 4, "otd.threshold.asc": 0}


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


def test_classify() -> None:
    loads = {"a": WorkerLoad(0.9, 0), "b": WorkerLoad(0.1, 50), "c": WorkerLoad(0.2, 1), "d": WorkerLoad(0.6, 1)}
    assert classify(loads, CONF) == {"a": HIGH, "b": HIGH, "c": LOW, "d": NORMAL}


def test_case_1_load_balancing_moves_best_asc_executor_of_busiest_worker() -> None:
    loads = {"wA": WorkerLoad(0.95, 10), "wB": WorkerLoad(0.1, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target, d.asc) == (1, "x", "wB", 9)


def test_case_1_picks_the_least_loaded_low_worker_per_node() -> None:
    nodes = {**NODES, "wB2": "B"}
    loads = {"wA": WorkerLoad(0.95, 0), "wB": WorkerLoad(0.4, 0), "wB2": WorkerLoad(0.05, 0)}
    d = otd_round(EXECUTORS, PLACEMENT, nodes, loads, EDGES, CONF)
    assert (d.case, d.executor, d.target) == (1, "x", "wB2")


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


def test_case_4_does_nothing() -> None:
    loads = {"wA": WorkerLoad(0.6, 5), "wB": WorkerLoad(0.7, 5)}
    assert otd_round(EXECUTORS, PLACEMENT, NODES, loads, EDGES, CONF).case == 4


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
