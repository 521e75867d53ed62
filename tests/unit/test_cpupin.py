"""worker.cpupin: a core per worker, claimed by a lock the kernel drops with the process.

The pinning itself runs in child interpreters, so that the test process keeps all its cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worker.cpupin import claim_core, pin_enabled

ROOT = Path(__file__).parents[2]
CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
ON = {"worker.cpu.pin": True}


def _child(code: str, lock_dir: Path, conf: dict[str, object] | None = None) -> subprocess.Popen[str]:
    """A child interpreter that runs ``code`` with ``pin_worker(conf, lock_dir)``'s result as ``pin``."""
    prelude = textwrap.dedent(f"""
        import json, os, sys, threading
        from pathlib import Path
        from worker.cpupin import pin_worker
        started = threading.Event()
        before = threading.Thread(target=started.wait, daemon=True)
        before.start()  # a thread that exists before the pinning
        pin = pin_worker({conf or {}!r}, Path({str(lock_dir)!r}))
    """)
    return subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _run(code: str, lock_dir: Path, conf: dict[str, object] | None = None) -> dict[str, object]:
    proc = _child(code, lock_dir, conf)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


REPORT = """
    after = threading.Thread(target=started.wait, daemon=True)
    after.start()  # a thread started after the pinning inherits the core
    masks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
    print(json.dumps({"core": pin.core if pin else None, "masks": sorted(set(map(tuple, masks.values()))),
                      "threads": len(masks)}))
    started.set()
"""


@pytest.mark.parametrize(("value", "on"), [(True, True), ("true", True), (1, True), (False, False), ("false", False),
                                           (0, False), ("0", False), ("off", False)])
def test_pin_enabled_reads_the_setting(value: object, on: bool) -> None:
    assert pin_enabled({"worker.cpu.pin": value}) is on
    assert pin_enabled({}) is False  # off by default


def test_each_claim_takes_a_core_no_one_holds_and_none_when_all_are_held(tmp_path: Path) -> None:
    first, second = claim_core(tmp_path, [0, 1]), claim_core(tmp_path, [0, 1])
    assert first is not None and second is not None
    assert {first.core, second.core} == {0, 1}
    assert claim_core(tmp_path, [0, 1]) is None  # more workers than cores: unpinned
    first.release()
    again = claim_core(tmp_path, [0, 1])
    assert again is not None and again.core == first.core
    again.release()
    second.release()


def test_a_lock_dir_that_cannot_be_made_means_no_pinning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert claim_core(blocker / "locks", [0, 1]) is None


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_a_worker_pins_every_thread_and_the_ones_it_starts_later(tmp_path: Path) -> None:
    got = _run(REPORT, tmp_path, ON)
    assert got["core"] == CORES[0]
    assert got["masks"] == [[CORES[0]]]
    assert got["threads"] >= 3


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_two_workers_get_two_cores_and_a_dead_one_gives_its_core_back(tmp_path: Path) -> None:
    holder = _child("print(pin.core, flush=True); sys.stdin.readline()", tmp_path, ON)
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        other = _run(REPORT, tmp_path, ON)
        assert other["core"] != held and other["masks"] == [[other["core"]]]
    finally:
        holder.kill()  # killed, not closed: the kernel drops its lock
        holder.wait(10)
    assert _run(REPORT, tmp_path, ON)["core"] == CORES[0]


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_off_or_every_core_held_leaves_the_worker_unpinned(tmp_path: Path) -> None:
    off = _run(REPORT, tmp_path, {})
    assert off["core"] is None and off["masks"] == [CORES]
    held = [claim_core(tmp_path, [c]) for c in CORES]
    try:
        full = _run(REPORT, tmp_path, ON)
        assert full["core"] is None and full["masks"] == [CORES]
    finally:
        for pin in held:
            assert pin is not None
            pin.release()
