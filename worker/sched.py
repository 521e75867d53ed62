"""A worker's threads run under Linux's ``SCHED_BATCH``: a thread that wakes does not preempt.

A worker's Python threads share one GIL. When a socket or a queue wakes one of them, the
kernel's default policy lets it preempt whatever runs on that core: often another thread of the
same worker, which holds the GIL, so the woken thread runs only to wait for the GIL, and the
preempted one waits for the core. ``SCHED_BATCH`` (``sched(7)``) is the default policy without
that wake-up preemption: a woken thread runs when the running one blocks or its time slice
ends. ``benchmarks.latency --only compare --compare worker.sched.batch=false`` (3 interleaved
rounds, 2026-11-26) measured at half of word count's peak an arrival p99 of 7.8 ms against
11.4 ms with the default policy, and half the context switches; ``benchmarks.hotpath`` with
acking 1.05x the words a second at 0.93x the CPU a word (docs/benchmarks.md, session 12).

It is on by default (``worker.sched.batch = false`` turns it off); it needs no privilege (any
process may move its own threads between ``SCHED_OTHER`` and ``SCHED_BATCH``), and other
processes of the machine (ZooKeeper, the supervisors) lose nothing: the policy only makes the
workers' threads defer to running ones. Threads inherit it, so it is set before the worker
starts its sockets and executors, on every thread it has then (twice, as ``worker.cpupin``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from nstorm.config import flag

__all__ = ["batch_enabled", "batch_in_effect", "batch_threads", "each_thread", "thread_ids"]

log = logging.getLogger(__name__)


def batch_enabled(conf: Mapping[str, Any]) -> bool:
    """``worker.sched.batch`` (default true)."""
    return flag(conf, "worker.sched.batch", True)


def thread_ids() -> list[int]:
    """Thread ids of this process (Linux: /proc/self/task), else just the calling thread (0)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def each_thread(apply: Callable[[int], None]) -> None:
    """``apply(tid)`` to every thread of this process, twice: a thread started meanwhile by a thread
    not yet reached is caught the second time (what the kernel's attributes are inherited from).
    A thread that ended meanwhile is skipped; any other ``OSError`` is raised."""
    for _ in range(2):
        for tid in thread_ids():
            try:
                apply(tid)
            except ProcessLookupError:
                continue


def batch_threads(conf: Mapping[str, Any]) -> bool:
    """Put every thread of this process under ``SCHED_BATCH`` (and so every thread they start);
    False when off, not Linux, or refused (the worker runs on under the default policy)."""
    if not batch_enabled(conf) or not hasattr(os, "SCHED_BATCH"):
        return False
    param = os.sched_param(0)
    try:
        each_thread(lambda tid: os.sched_setscheduler(tid, os.SCHED_BATCH, param))
    except OSError as exc:
        log.info("SCHED_BATCH off: %s", exc)
        return False
    return True


def batch_in_effect() -> bool:
    """The calling thread runs under ``SCHED_BATCH`` (what a heartbeat reports: what the kernel
    applied, whatever was asked)."""
    try:
        return hasattr(os, "SCHED_BATCH") and os.sched_getscheduler(0) == os.SCHED_BATCH
    except OSError:
        return False
