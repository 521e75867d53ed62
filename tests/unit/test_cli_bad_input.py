"""Bad input the CLI used to answer with a traceback, several lines or a running topology left
stuck (a review of every command, session 29): one line and exit code 2, before anything runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nstorm.cli.main import app
from nstorm.client import ClusterClient
from nstorm.errors import ConfigError, UsageError
from nstorm.zkschema import connect

WORDCOUNT = str(Path(__file__).parents[2] / "topologies" / "wordcount.py")


def _one_line_exit_2(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("address", ["host:notaport", "127.0.0.1:99999", ":2181x", ","])
def test_a_malformed_zookeeper_address_is_one_line_and_exit_2(address: str) -> None:
    with pytest.raises(ConfigError, match="bad ZooKeeper address"):
        connect(address, timeout=1.0)
    _one_line_exit_2(["list", "--zk", address], "bad ZooKeeper address")


@pytest.mark.parametrize("value", ["abc", "NaN", "Infinity", "0", "-3", "true", "2.5", "1" + "0" * 400])
def test_local_checks_its_worker_count_before_starting_a_cluster(value: str) -> None:
    _one_line_exit_2(["local", WORDCOUNT, "-c", f"topology.workers={value}"], "topology.workers")


@pytest.mark.parametrize(("option", "value"), [("--duration", "nan"), ("--duration", "-5"),
                                               ("--migrate-every", "-1"), ("--migrate-every", "inf")])
def test_local_checks_its_durations_before_starting_a_cluster(option: str, value: str) -> None:
    _one_line_exit_2(["local", WORDCOUNT, option, value], option)


@pytest.mark.parametrize("wait", [math.nan, math.inf, -1.0])
def test_a_kill_or_a_stop_mode_wait_that_is_not_finite_is_refused(wait: float, monkeypatch: Any) -> None:
    """``kill --wait nan`` wrote a ``kill_at`` Nimbus never reached: the topology stayed
    deactivated and was never removed; ``rebalance --mode stop --wait nan`` stopped it for good."""
    client = object.__new__(ClusterClient)  # no connection: the check comes before any write
    monkeypatch.setattr(client, "_require", lambda name: {"definition": {"conf": {}}, "conf": {}}, raising=False)
    with pytest.raises(UsageError, match="--wait must be a finite number of seconds >= 0"):
        client.kill("t", wait)
    with pytest.raises(UsageError, match="--wait must be a finite number of seconds >= 0"):
        client.rebalance("t", mode="stop", random_count=1, wait_secs=wait)
