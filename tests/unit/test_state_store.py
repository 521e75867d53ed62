"""The LMDB checkpoint store on a temporary directory, and the state settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from nstorm.config import merge_conf
from nstorm.errors import ConfigError
from nstorm.state import open_store, state_config

from _stores import check_store_contract


def test_the_lmdb_store_keeps_the_contract(tmp_path: Path) -> None:
    config = state_config(merge_conf({"topology.state.provider": "lmdb", "topology.state.dir": str(tmp_path)}))
    store = open_store(config, "t", "sub1")
    check_store_contract(store)
    assert not (tmp_path / "t-sub1").exists()  # drop removes the environment


def test_two_submissions_do_not_share_checkpoints(tmp_path: Path) -> None:
    config = state_config(merge_conf({"topology.state.provider": "lmdb", "topology.state.dir": str(tmp_path)}))
    with open_store(config, "t", "one") as one, open_store(config, "t", "two") as two:
        one.write(1, "a:0", b"x", {})
        assert two.executor(1, "a:0") is None


@pytest.mark.parametrize("conf, needle", [
    ({"topology.state.provider": "rocksdb"}, "expected one of memory, lmdb, redis"),
    ({"topology.state.provider": "redis", "topology.state.provider.config": "{not json"}, "JSON object"),
    ({"topology.state.provider": "redis", "topology.state.provider.config": [1]}, "JSON object"),
    ({"topology.state.checkpoint.interval.ms": 0}, "interval.ms"),
    ({"topology.max.parallelism": "many"}, "max.parallelism"),
    ({"topology.state.max.rollbacks": -1}, "max.rollbacks"),
    ({"topology.state.max.rollbacks": 0.5}, "whole number"),
])
def test_bad_state_settings_are_one_line_errors(conf: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        state_config(merge_conf(conf))


def test_defaults_keep_no_checkpoints() -> None:
    config = state_config(merge_conf({}))
    assert config.provider == "memory" and not config.durable
    assert config.interval_ms == 1000 and config.max_parallelism == 128 and config.max_rollbacks == 10


def test_nimbus_deletes_a_killed_topologys_checkpoints_again_after_its_workers_stopped(tmp_path: Path) -> None:
    """A worker may finish a checkpoint write after the kill deleted the store: Nimbus deletes it
    again once the workers have surely stopped (LMDB here; Redis takes the same path)."""
    import time

    from nimbus import daemon

    conf = {"topology.state.provider": "lmdb", "topology.state.dir": str(tmp_path)}
    topo = {"submission": "sub1", "definition": {"conf": conf}, "conf": {}}
    nimbus = daemon.Nimbus("127.0.0.1:1", conf=conf)
    nimbus._drop_again.append((time.monotonic() + 3600, "t", topo))
    with open_store(state_config(merge_conf(conf)), "t", "sub1") as late:  # the late write, after the kill
        late.write(1, "a:0", b"x", {})
    nimbus._drop_checkpoints_again()
    assert (tmp_path / "t-sub1").exists() and nimbus._drop_again, "not due yet"
    nimbus._drop_again = [(time.monotonic() - 1, "t", topo)]  # DROP_AGAIN_SECS later
    nimbus._drop_checkpoints_again()
    assert not (tmp_path / "t-sub1").exists() and not nimbus._drop_again
