"""The contract every checkpoint store keeps, run against each store (LMDB in a unit test, a real
Redis in ``tests/test_state_redis.py``)."""

from __future__ import annotations

import pytest

from nstorm.state.store import ChainLostError, StateStore


def check_store_contract(store: StateStore) -> None:
    assert store.executor(1, "sum:0") is None
    assert store.group_chain("sum", 3, 10) == []
    # A delta needs the entries it builds on (a store that lost them, say a Redis restarted
    # without persistence, must not commit a checkpoint whose restore lacks the earlier keys).
    with pytest.raises(ChainLostError, match="sum:4"):
        store.write(1, "sum:0", b"exec-1", {("sum", 3): (True, b"full-1"), ("sum", 4): (False, b"d-1")})
    assert store.executor(1, "sum:0") is None and store.written(1) == {}, "nothing of it written"
    size = store.write(1, "sum:0", b"exec-1", {("sum", 3): (True, b"full-1"), ("sum", 4): (True, b"f-1")})
    assert size == len(b"exec-1") + len(b"full-1") + 1 + len(b"f-1") + 1
    store.write(2, "sum:0", b"exec-2", {("sum", 3): (False, b"d-2")})
    store.write(3, "sum:0", b"exec-3", {("sum", 3): (False, b"d-3"), ("sum", 4): (True, b"full-3")})
    store.write(4, "sum:0", b"exec-4", {("sum", 3): (True, b"full-4")})
    assert store.executor(2, "sum:0") == b"exec-2"
    store.write(2, "split:1", b"x", {})
    assert store.written(2) == {"sum:0": len(b"exec-2") + len(b"d-2") + 1, "split:1": 1} and store.written(5) == {}
    assert store.group_chain("sum", 3, 3) == [(1, True, b"full-1"), (2, False, b"d-2"), (3, False, b"d-3")]
    assert store.group_chain("sum", 3, 4) == [(4, True, b"full-4")]
    assert store.group_chain("sum", 4, 2) == [(1, True, b"f-1")]
    assert store.group_chain("sum", 4, 4) == [(3, True, b"full-3")]
    # Keep what checkpoints 3 and on need: group 3's chain for 3 starts at its full entry 1;
    # group 4's entry 1 goes (its full entry 3 replaces it), and the executor snapshots of 1, 2 (three).
    assert store.prune(3) == 4
    assert store.executor(2, "sum:0") is None and store.executor(3, "sum:0") == b"exec-3"
    assert store.group_chain("sum", 3, 3) == [(1, True, b"full-1"), (2, False, b"d-2"), (3, False, b"d-3")]
    assert store.prune(4) == 4  # the snapshot of 3, and group 3's entries before its full entry 4
    assert store.group_chain("sum", 3, 4) == [(4, True, b"full-4")]
    assert store.group_chain("sum", 4, 4) == [(3, True, b"full-3")]
    # An abandoned checkpoint's snapshots go; its key groups' entries stay (later deltas build on them).
    store.write(5, "sum:0", b"exec-5", {("sum", 3): (False, b"d-5")})
    store.write(5, "split:1", b"y", {})
    assert store.drop_snapshots(5) == 2
    assert store.executor(5, "sum:0") is None and store.written(5) == {} and store.executor(4, "sum:0") == b"exec-4"
    assert store.group_chain("sum", 3, 5) == [(4, True, b"full-4"), (5, False, b"d-5")]
    store.drop()
