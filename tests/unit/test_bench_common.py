"""``benchmarks._common``: a SIGTERM'd benchmark still runs the ``finally`` that stops its clusters."""

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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSTORM_HOME": str(tmp_path / "home")}
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
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
