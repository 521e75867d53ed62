"""Workers killed around live moves: the fault kinds of ``python -m benchmarks.chaos --moves N``.

Each round injects every kind once, on the audited word count, moving a ``count`` executor
(its state is word counts) between workers:

- ``dst-during``: SIGKILL of the move's destination worker while the hand-over runs (a
  random 0-30 ms after Nimbus wrote the plan: the hand-over, from the plan to the new copy
  resuming, takes a few tens of ms here, so many kills land in it; each fault records whether
  it did: the new copy resumed after the kill);
- ``dst-after``: SIGKILL of the destination 0-5 s after the move completed;
- ``src-during``: SIGKILL of the source worker (the draining old copy) during the hand-over;
- ``both-during``: SIGKILL of both during the hand-over;
- ``kill-move-kill``: the sequence that once stalled a topology for good: a worker with a
  ``count`` killed (its supervisor restarts it), 5 s later that ``count`` moved live to a
  spout's worker, 3 s later that worker killed.

After each fault the run waits for acks to flow again at every spout (at most ``WAIT``
seconds) and for the previous move to leave the plan, then takes the next.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any

from rich.console import Console

from benchmarks._common import FaultInjector

KINDS = ("dst-during", "dst-after", "src-during", "both-during", "kill-move-kill")
NAME = "audited"
WAIT = 60.0  # seconds a fault may take to recover from before the run goes on anyway


class MoveFaults(FaultInjector):
    """Injects the kinds of :data:`KINDS` into the audited topology of ``client``."""

    def __init__(self, client: Any, rng: random.Random, console: Console) -> None:
        super().__init__(client, rng, console, NAME)

    # -- reading the cluster ---------------------------------------------------------------
    def _pid(self, wid: str) -> int:
        return next(w["pid"] for w in self._workers() if w["id"] == wid)

    def _spout_workers(self) -> set[str]:
        return {w["id"] for w in self._workers() if any(e.startswith("sentences:") for e in w["executors"])}

    def _wait(self, predicate: Any, timeout: float = WAIT) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return True
            except Exception:  # noqa: BLE001 - a status read while a worker restarts
                pass
            time.sleep(0.2)
        return False

    def _kill(self, wid: str, pid: int | None = None) -> int:
        pid = pid or self._pid(wid)
        os.kill(pid, signal.SIGKILL)
        return pid

    def _restarted(self, wid: str, old_pid: int) -> bool:
        return self._wait(lambda: self._pid(wid) not in (None, old_pid))

    def _record(self, record: str) -> dict[str, Any]:
        return next((r.to_json() for r in self.client.migrations(NAME) if r.id == record), {})

    def _settled(self) -> bool:
        """No move open or left in the plan (a fault after this is a fault of its own)."""
        return self._wait(lambda: not self.client.plan(NAME).moved
                          and all(r.completed_at for r in self.client.migrations(NAME)))

    def _pick(self, avoid_spouts: bool) -> tuple[str, str, str]:
        """A count executor, its worker, and another worker; with ``avoid_spouts``, workers
        without a spout where there are such (a spout's restart would add a stall of its own)."""
        workers = self._workers()
        spouts = self._spout_workers() if avoid_spouts else set()
        holders = [w for w in workers if any(e.startswith("count:") for e in w["executors"])]
        source = self.rng.choice([w for w in holders if w["id"] not in spouts] or holders)
        executor = self.rng.choice(sorted(e for e in source["executors"] if e.startswith("count:")))
        others = [w["id"] for w in workers if w["id"] != source["id"]]
        return executor, source["id"], self.rng.choice([w for w in others if w not in spouts] or others)

    def _move(self, executor: str, target: str) -> tuple[str, int]:
        result = self.client.rebalance(NAME, moves=[(executor, target)], timeout=30)
        return result["records"][executor], int(result["version"])

    # -- the kinds -------------------------------------------------------------------------
    def inject(self, kind: str) -> dict[str, Any]:
        self._settled()
        at = time.time()
        detail = getattr(self, "_" + kind.replace("-", "_"))()
        fault = {"kind": kind, "at": at, **detail}
        self.faults.append(fault)
        self.console.print(f"[yellow]{time.strftime('%H:%M:%S')} {kind}[/yellow]: "
                           + ", ".join(f"{k}={v}" for k, v in detail.items() if k != "record"))
        return fault

    def _during(self, who: str) -> dict[str, Any]:
        executor, source, target = self._pick(avoid_spouts=True)
        victims = {"dst": [target], "src": [source], "both": [source, target]}[who]
        known = {wid: self._pid(wid) for wid in victims}  # looked up first: a kill then takes microseconds
        record, _version = self._move(executor, target)
        time.sleep(self.rng.uniform(0.0, 0.03))
        killed_at = time.time()
        pids = {wid: self._kill(wid, known[wid]) for wid in victims}
        for wid, pid in pids.items():
            self._restarted(wid, pid)
        self._wait(lambda: self._record(record).get("completed_at"))
        done = self._record(record)
        during = float(done.get("completed_at") or float("inf")) > killed_at
        return {"executor": executor, "from": source, "to": target, "killed": victims, "during_hand_over": during,
                "state_lost": done.get("state_lost"), "record": record}

    def _dst_during(self) -> dict[str, Any]:
        return self._during("dst")

    def _src_during(self) -> dict[str, Any]:
        return self._during("src")

    def _both_during(self) -> dict[str, Any]:
        return self._during("both")

    def _dst_after(self) -> dict[str, Any]:
        executor, source, target = self._pick(avoid_spouts=True)
        record, _version = self._move(executor, target)
        self._wait(lambda: self._record(record).get("completed_at"))
        time.sleep(self.rng.uniform(0.0, 5.0))
        pid = self._kill(target)
        self._restarted(target, pid)
        return {"executor": executor, "from": source, "to": target, "killed": [target], "during_hand_over": False,
                "state_lost": self._record(record).get("state_lost"), "record": record}

    def _kill_move_kill(self) -> dict[str, Any]:
        executor, source, _ = self._pick(avoid_spouts=True)
        pid = self._kill(source)
        self._restarted(source, pid)
        time.sleep(5.0)
        target = self.rng.choice(sorted(self._spout_workers()))
        record, _version = self._move(executor, target)
        self._wait(lambda: self._record(record).get("completed_at"))
        time.sleep(3.0)
        pid = self._kill(target)
        self._restarted(target, pid)
        return {"executor": executor, "from": source, "to": target, "killed": [source, target],
                "during_hand_over": False, "state_lost": self._record(record).get("state_lost"), "record": record}
