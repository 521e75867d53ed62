"""worker.sched: SCHED_BATCH on every thread of a worker, and on the threads they start later.

The policy is set in child interpreters, so that the test process keeps its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nstorm.config import flag
from worker.sched import batch_enabled

ROOT = Path(__file__).parents[2]

CHILD = """
    import json, os, threading
    from worker.sched import batch_threads
    started = threading.Event()
    threading.Thread(target=started.wait, daemon=True).start()  # a thread from before
    done = batch_threads({conf!r})
    threading.Thread(target=started.wait, daemon=True).start()  # one started after inherits the policy
    policies = [os.sched_getscheduler(int(t)) for t in os.listdir("/proc/self/task")]
    started.set()
    print(json.dumps({{"done": done, "policies": sorted(set(policies)), "threads": len(policies)}}))
"""


def _child(conf: dict[str, object]) -> dict[str, object]:
    code = textwrap.dedent(CHILD.format(conf=conf))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True, timeout=30,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_every_thread_and_every_later_thread_runs_under_sched_batch() -> None:
    got = _child({})
    assert got == {"done": True, "policies": [os.SCHED_BATCH], "threads": 3}


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_turned_off_the_threads_keep_the_default_policy() -> None:
    got = _child({"worker.sched.batch": "false"})
    assert got == {"done": False, "policies": [os.SCHED_OTHER], "threads": 3}


@pytest.mark.parametrize(("value", "on"), [(True, True), ("true", True), (1, True), ("1", True), (False, False),
                                           ("false", False), (0, False), ("0", False), ("off", False), ("no", False)])
def test_the_setting_reads_as_users_write_it(value: object, on: bool) -> None:
    assert batch_enabled({"worker.sched.batch": value}) is on
    assert flag({"x": value}, "x") is on


def test_on_by_default() -> None:
    assert batch_enabled({}) is True


@pytest.mark.parametrize(("value", "read"), [(True, True), (False, False), (None, None), ("yes", None)])
def test_a_heartbeat_carries_whether_the_policy_took(value: object, read: bool | None) -> None:
    from nstorm.records import Heartbeat

    beat = Heartbeat.from_json({"worker_id": "n1:1", "sched_batch": value})
    assert beat.sched_batch is read and Heartbeat.from_json(beat.to_json()).sched_batch is read
