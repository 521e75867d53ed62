"""One measured window of a running word count: what ``benchmarks.latency`` and
``benchmarks.tunings`` both read off a deployment between two instants.

Open a :class:`CountWindow` at the window's start (snapshots of the status, the count's arrival
histogram, the heartbeats and the workers' CPU and threads), let the window run, then ``close``
it: words a second counted over the heartbeats' own times, worker CPU a word, context switches
and core waits a second, the count's arrival p50 / p99 (spout emit -> count).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks._common import beat_rate
from benchmarks._workload import WORDS_PER_SENTENCE

__all__ = ["CountWindow", "thread_waits"]


def thread_waits(pids: Any) -> dict[int, tuple[int, int]]:
    """``(context switches, ns waited for a core)`` so far of every thread of each process, by pid.

    The first counts voluntary and involuntary switches: a thread's wake-up and the GIL's
    hand-offs cost a switch each.

    The second is the scheduler's run delay (``/proc/<pid>/task/<tid>/schedstat``): how long the
    threads were ready to run and not running, what a woken thread waits before it can even ask
    for the GIL. Threads that ended meanwhile are left out; ``(0, 0)`` where ``/proc`` has none.
    """
    out = {}
    for pid in pids:
        switches = waited = 0
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                for line in (task / "status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
                waited += int((task / "schedstat").read_text().split()[1])
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
        out[int(pid)] = (switches, waited)
    return out


class CountWindow:
    """A window over topology ``name``'s ``count`` component, opened at construction."""

    def __init__(self, client: Any, name: str) -> None:
        from benchmarks import _peers_nstorm as ns

        self.name = name
        self.first: dict[str, Any] = client.status(name)
        self._hist0 = client.arrival_histogram(name, "count")
        self._beats0 = client.heartbeats(name)
        self._cpu0 = ns._worker_cpu(self.first)
        self._waits0 = thread_waits(self._cpu0)
        self.t0 = time.monotonic()
        self.at = time.time()

    def close(self, client: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The window's measurements, and the status at its end."""
        from benchmarks import _peers_nstorm as ns
        from nstorm import latency

        elapsed = time.monotonic() - self.t0
        last = client.status(self.name)
        hist = latency.subtract(client.arrival_histogram(self.name, "count"), self._hist0)
        cpu = ns._worker_cpu(last)
        words_per_sec = beat_rate(self._beats0, client.heartbeats(self.name), "count", "executed")
        waits = thread_waits(cpu)
        cpu_secs = sum(cpu.get(pid, 0.0) - self._cpu0.get(pid, 0.0) for pid in cpu)
        switches = sum(v[0] - self._waits0.get(p, (0, 0))[0] for p, v in waits.items())
        waited = sum(v[1] - self._waits0.get(p, (0, 0))[1] for p, v in waits.items())
        words = words_per_sec * elapsed  # counted over the heartbeats' own times (benchmarks._common.beat_rate)

        def ms(q: float) -> float | None:
            secs = latency.percentile(hist, q)
            return None if secs is None else round(1000 * secs, 3)

        return {
            "elapsed_secs": round(elapsed, 2), "words": words,
            "words_per_sec": words_per_sec, "sentences_per_sec": words_per_sec / WORDS_PER_SENTENCE,
            "failed": last["spouts"]["failed"] - self.first["spouts"]["failed"],
            "worker_cpu_secs": cpu_secs, "worker_cores": cpu_secs / elapsed, "worker_pids": sorted(cpu),
            "cpu_us_per_word": 1e6 * cpu_secs / words if words else None,
            "context_switches_per_sec": switches / elapsed,
            # Time the workers' threads were ready and waited for a core, per second and per switch.
            "core_wait_ms_per_sec": waited / 1e6 / elapsed,
            "core_wait_us_per_switch": waited / 1e3 / switches if switches else None,
            "arrival_ms": {"p50": ms(0.5), "p99": ms(0.99), "samples": sum(hist.values())},
        }, last
