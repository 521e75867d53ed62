"""A request's migration records and its plan write (nimbus/daemon.py): a plan that cannot be
written leaves no open record behind (one would hold OTD and every later request off for good)."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from nimbus.daemon import Nimbus
from nstorm.moves import RebalanceError
from nstorm.zkschema import ZkPaths


class _Zk:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, path: str, recursive: bool = False) -> None:
        self.deleted.append(path)


def _nimbus(write: Any) -> tuple[Nimbus, _Zk]:
    nimbus = object.__new__(Nimbus)  # no thread, no real ZooKeeper
    zk = _Zk()
    nimbus.zk, nimbus.paths = zk, ZkPaths("/n")  # type: ignore[assignment]
    nimbus.write_plan = write  # type: ignore[method-assign]
    return nimbus, zk


def test_records_of_a_plan_that_changed_meanwhile_are_deleted() -> None:
    nimbus, zk = _nimbus(lambda name, plan, version: False)
    with pytest.raises(RebalanceError, match="the plan changed"):
        nimbus._write_plan_with_records("t", object(), 3, {"count": "m-0000000007"})  # type: ignore[arg-type]
    assert zk.deleted == [f"{ZkPaths('/n').migrations('t')}/m-0000000007"]


def test_records_of_a_plan_write_that_failed_are_deleted_and_the_error_passed_on() -> None:
    def fails(name: str, plan: Any, version: int) -> bool:
        raise ConnectionLoss

    nimbus, zk = _nimbus(fails)
    with pytest.raises(ConnectionLoss):
        nimbus._write_plan_with_records("t", object(), 3, {"a:0": "m-1", "a:1": "m-2"})  # type: ignore[arg-type]
    assert len(zk.deleted) == 2


def test_records_of_a_written_plan_stay() -> None:
    nimbus, zk = _nimbus(lambda name, plan, version: True)
    nimbus._write_plan_with_records("t", object(), 3, {"count": "m-1"})  # type: ignore[arg-type]
    assert zk.deleted == []
