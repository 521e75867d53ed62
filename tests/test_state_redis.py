"""The Redis checkpoint store against a real ``redis-server``; and Redis away is a StateError."""

from __future__ import annotations

import pytest

from nstorm.config import merge_conf
from nstorm.net import free_port
from nstorm.state import StateError, open_store, state_config

from _stores import check_store_contract


def _config(url: str) -> object:
    return state_config(merge_conf({"topology.state.provider": "redis", "topology.state.provider.config": {"url": url}}))


def test_the_redis_store_keeps_the_contract(redis_server: str) -> None:
    store = open_store(_config(redis_server), "t", "sub1")
    try:
        check_store_contract(store)
        assert not list(store.redis.scan_iter(match="nstorm:t-sub1:*"))  # drop leaves nothing behind
    finally:
        store.close()


def test_an_unreachable_redis_is_a_state_error() -> None:
    store = open_store(_config(f"redis://127.0.0.1:{free_port('127.0.0.1')}/0"), "t", "sub1")
    try:
        with pytest.raises(StateError, match="Redis at redis://127.0.0.1"):
            store.write(1, "a:0", b"x", {})
    finally:
        store.close()
