"""The hand-made pyzmq pipeline's side of the peers benchmark: the floor nstorm is measured against.

``../shared/reference/handmade_pipeline.py`` (relative to the repository) is word count
written by hand on pyzmq and msgpack: one OS process per stage, ``--topo 3stage`` (spout ->
split -> count), up to ``--batch 100`` tuples per message, no acking, no replay. It runs as a
subprocess with ``PEERS_DIR`` in a temporary folder (its data file, ipc sockets and results
go there) and prints one JSON line; its ``words_per_s`` is the words its count stage counted
divided by the time from the first message to the last one it received: words counted per
second at the count stage, the notion nstorm's ``executed`` counter of the count bolt gives.

It counts a fixed number of sentences, not a time window: :class:`Handmade` sizes each run to
last about ``duration`` s at the rate it measured last (a short calibration run, untimed, after
the data file is generated once per benchmark run). Its sentences are the first 1,000,000 of
``topologies.sentences`` with seed 42 (the same generator), cycled. A half run offers
``--rate`` sentences/s; its latency is per message: from the spout's stamp of the oldest
sentence of a batch to the count stage's receipt, one message in 10.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._workload import WORDS_PER_SENTENCE, RunResult

__all__ = ["SYSTEM", "Handmade", "locate"]

SYSTEM = "hand-made pyzmq (3 stages)"
TOPO = "3stage"
BATCH = 100
CALIBRATION_SENTENCES = 200_000
FIRST_GUESS = 200_000  # sentences/s before anything was measured
MAX_SECS = 80.0  # the script gives up on its count stage after 110 s
LATENCY = "spout stamp of a message's oldest sentence -> count stage receives it (per message, 1 in 10)"


def locate(repo: Path) -> Path:
    """Where the script is expected: ``../shared/reference/`` next to the repository."""
    return (Path(repo) / ".." / "shared" / "reference" / "handmade_pipeline.py").resolve()


class Handmade:
    """Runs the script; :meth:`close` removes its temporary ``PEERS_DIR``."""

    def __init__(self, script: Path) -> None:
        self.script = Path(script)
        self.dir: Path | None = None
        self.rate = 0.0  # sentences/s at peak, last measured
        self.prepared: str | None = None  # why it cannot run, once prepare() failed

    def available(self) -> str | None:
        """None if the pipeline can run here, else why not."""
        if not self.script.is_file():
            return f"{self.script} not found"
        missing = [m for m in ("zmq", "msgpack") if importlib.util.find_spec(m) is None]
        if missing:
            return f"{' and '.join(missing)} not installed (pip install pyzmq msgpack)"
        return None

    def prepare(self) -> str | None:
        """Generate its data file (once) and calibrate the rate, untimed; None or why it failed."""
        if self.dir is not None:
            return self.prepared
        self.dir = Path(tempfile.mkdtemp(prefix="handmade-peers-"))
        if why := self.available():
            self.prepared = why
            return why
        try:
            gen = subprocess.run([sys.executable, "-c", "import common; common.generate()"], cwd=self.script.parent,
                                 env=self._env(), capture_output=True, text=True, timeout=300,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.prepared = "generating its data took over 300 s"
            return self.prepared
        if gen.returncode != 0:
            self.prepared = f"generating its data failed: {_last_line(gen.stderr)}"
            return self.prepared
        try:
            out = self._run(CALIBRATION_SENTENCES, 0.0)
        except RuntimeError as exc:
            self.prepared = f"calibration run failed: {exc}"
            return self.prepared
        self.rate = out["sentences_per_s"]["median"]
        return None

    def close(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, kind: str, rate: float, duration: float) -> RunResult:
        """A peak run (as fast as it goes) or a half run (``rate`` sentences/s), about ``duration`` s."""
        if why := self.prepare():
            return RunResult(system=SYSTEM, run=kind, error=why)
        per_sec = rate if kind == "half" else (self.rate or FIRST_GUESS)
        n = max(10_000, int(per_sec * min(duration, MAX_SECS)))
        t0 = time.monotonic()
        try:
            out = self._run(n, rate if kind == "half" else 0.0)
        except RuntimeError as exc:
            return RunResult(system=SYSTEM, run=kind, error=str(exc))
        wall = time.monotonic() - t0
        words = out["words_per_s"]["median"]
        if kind == "peak":
            self.rate = out["sentences_per_s"]["median"]
        return RunResult(
            system=SYSTEM, run=kind, sentences_per_sec=words / WORDS_PER_SENTENCE, words_per_sec=words,
            latency_p50_ms=out["lat_p50_ms"]["median"], latency_p99_ms=out["lat_p99_ms"]["median"],
            latency_kind=LATENCY, offered_sentences_per_sec=rate if kind == "half" else None,
            details={"sentences": n, "wall_secs": wall, "script": str(self.script), "output": out})

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PEERS_DIR": str(self.dir)}

    def _run(self, n: int, rate: float) -> dict[str, Any]:
        argv = [sys.executable, str(self.script), "--topo", TOPO, "--batch", str(BATCH), "--n", str(n),
                "--reps", "1", "--rate", str(rate)]
        try:
            proc = subprocess.run(argv, cwd=self.script.parent, env=self._env(), capture_output=True, text=True,
                                  timeout=MAX_SECS + 60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"did not finish in {exc.timeout:.0f} s") from None
        if proc.returncode != 0:
            raise RuntimeError(f"exited with {proc.returncode}: {_last_line(proc.stderr or proc.stdout)}")
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"printed no result: {_last_line(proc.stdout)}")
        return json.loads(lines[-1])


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""
