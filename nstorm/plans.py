"""The shape of an allocation plan, checked wherever one is read from ZooKeeper.

Nimbus is the only writer of plans, but ZooKeeper is shared: a plan damaged by
hand, by a buggy tool or by a hostile client must be rejected with a log line
by the supervisor (which then keeps the last good plan in its LMDB store and
its workers running), never half-applied or crash a daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PlanError", "check_plan"]

_STATUSES = {"ACTIVE", "INACTIVE"}


class PlanError(ValueError):
    """A plan that does not have the documented shape (see ``nimbus/scheduler.py``)."""


def _fail(name: str, why: str) -> PlanError:
    return PlanError(f"malformed plan for {name}: {why}")


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def check_plan(name: str, plan: Any) -> dict[str, Any]:
    """Return ``plan`` if it is well formed, else raise :class:`PlanError` saying what is wrong."""
    if not isinstance(plan, Mapping):
        raise _fail(name, f"expected an object, got {type(plan).__name__}")
    version = plan.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(name, f"version must be a positive integer, got {version!r}")
    if plan.get("status", "ACTIVE") not in _STATUSES:
        raise _fail(name, f"unknown status {plan.get('status')!r}")
    if not isinstance(plan.get("code_sha256"), str):
        raise _fail(name, "code_sha256 is missing")
    if not isinstance(plan.get("submission", ""), (str, type(None))):
        raise _fail(name, "submission must be a string")
    tasks = plan.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise _fail(name, "tasks must be a list of executor ids")
    workers = plan.get("workers")
    if not isinstance(workers, Mapping):
        raise _fail(name, "workers must be an object")
    for wid, w in workers.items():
        if not isinstance(w, Mapping) or not isinstance(w.get("node"), str) or not isinstance(w.get("host"), str):
            raise _fail(name, f"worker {wid!r} needs a node and a host")
        if not _is_port(w.get("port")) or not _is_port(w.get("ctl_port")):
            raise _fail(name, f"worker {wid!r} has a bad port")
    executors = plan.get("executors")
    if not isinstance(executors, Mapping):
        raise _fail(name, "executors must be an object")
    known = set(tasks)
    for executor, wid in executors.items():
        if executor not in known:
            raise _fail(name, f"executor {executor!r} is not in tasks")
        if wid not in workers and not (plan.get("rebalance") and isinstance(wid, str)):
            raise _fail(name, f"executor {executor!r} is on unknown worker {wid!r}")
    return dict(plan)
