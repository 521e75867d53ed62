"""``benchmarks._common``: a SIGTERM'd benchmark still runs the ``finally`` that stops its clusters;
rates over the heartbeats' own times."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]

_SCRIPT = """
import sys, time
from pathlib import Path
from benchmarks._common import temporary_home
marker = Path(sys.argv[1])
with temporary_home():
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        marker.write_text("stopped")
"""


def test_sigterm_runs_the_benchmarks_finally(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    # TMPDIR: the benchmark's own home (temporary_home) is made under tmp_path, not in /tmp.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSTORM_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(marker)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.returncode == 128 + signal.SIGTERM
        assert marker.read_text() == "stopped"
        assert not list(tmp_path.glob("nstorm-bench-*")), "an empty home is not kept"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_beat_rate_counts_over_each_workers_own_heartbeat_times() -> None:
    from benchmarks._common import beat_rate
    from nstorm.records import Heartbeat

    def beat(wid: str, pid: int, at: float, **executed: int) -> Heartbeat:
        return Heartbeat(worker_id=wid, pid=pid, time=at, version=1,
                         executors={k.replace("_", ":"): {"executed": v} for k, v in executed.items()})

    before = {"a": beat("a", 1, 100.0, count_0=1000, split_0=5), "b": beat("b", 2, 100.5, count_1=0),
              "c": beat("c", 3, 100.0, count_2=500)}
    # a: 4,000 in 2 s; b: 3,000 in 1.5 s (read 0.5 s apart, each over its own times); c restarted
    after = {"a": beat("a", 1, 102.0, count_0=5000, split_0=9), "b": beat("b", 2, 102.0, count_1=3000),
             "c": beat("c", 4, 102.0, count_2=10)}
    assert beat_rate(before, after, "count", "executed") == 2000.0 + 2000.0
