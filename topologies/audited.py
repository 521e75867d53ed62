"""Word count whose spouts keep an audit of every sentence on disk: what at-least-once promises, checked.

Used by ``python -m benchmarks.chaos``. Each spout executor writes
``<audit.dir>/spout-<i>.json`` a few times a second: the sentences it emitted,
those acked (and how often), failures, replays, and acks per 100 ms bucket
(to find stalls). Like a consumer committing offsets to Kafka, a spout that
restarts (its worker was killed) reads its audit back and re-emits every
sentence not yet acked, so nothing is lost; a tuple lost anywhere shows up as
an emitted id that is never acked.

Creating the file ``<audit.dir>/stop`` ends the input: spouts then only replay.
Settings (``-c key=value``): ``audit.dir`` (required), ``audit.sentences`` per
spout executor (default 10000), ``audit.rate`` per spout executor and second
(default 200), ``audit.spouts``/``audit.splits``/``audit.counts`` parallelism,
``audit.workers`` (default 4).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nstorm import Context, Spout, Topology
from topologies.sentences import sentences
from topologies.wordcount import build_wordcount

__all__ = ["AuditedSentences", "make_topology", "read_audit"]


class AuditedSentences(Spout):
    """Emits ``audit.sentences`` sentences at ``audit.rate``; the audit survives a restart.

    Its progress lives in ``self.state`` so that a live migration carries it (and, with durable
    state, a checkpoint: a restored copy continues from it); a copy started after its worker
    died without durable state reads it back from the audit file.
    """

    outputs = ("sentence",)

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.path = Path(conf["audit.dir"]) / f"spout-{context.task_index}.json"
        self.stop_file = Path(conf["audit.dir"]) / "stop"  # once it exists: replays only, no new sentences
        self.stopped = False
        self.todo = sentences(int(conf.get("audit.sentences", 10_000)), seed=1000 + context.task_index)
        self.rate = float(conf.get("audit.rate", 200))
        self.started = time.monotonic()
        self.dumped = 0.0
        state = self.state
        if "emitted" in state:
            return  # restored from a checkpoint (durable state): it continues from there, not from the audit
        audit = _load(self.path)
        state["emitted"] = int(audit.get("emitted", 0))
        state["acks"] = audit.get("acks", {})
        state["buckets"] = audit.get("buckets", {})
        state["replays_of"] = audit.get("replays_of", {})  # sentence -> times sent again
        state["failed"] = int(audit.get("failed", 0))
        state["restarts"] = int(audit.get("restarts", -1)) + 1
        # After a restart every emitted, unacked sentence is sent again (at-least-once).
        state["replay"] = [i for i in range(state["emitted"]) if str(i) not in state["acks"]]
        state["replayed"] = int(audit.get("replayed", 0)) + len(state["replay"])

    def next_tuple(self) -> None:
        state = self.state
        now = time.monotonic()
        self.last_call = time.time()
        if now - self.dumped > 0.2:
            self.stopped = self.stopped or self.stop_file.exists()
            self._dump()
            self.dumped = now
        if state["replay"]:
            i = state["replay"].pop()
            self.emit((self.todo[i],), msg_id=i)
            state["replays_of"][str(i)] = state["replays_of"].get(str(i), 0) + 1
            return
        emitted = state["emitted"]
        if emitted >= len(self.todo) or self.stopped:
            return
        if self.rate:
            expected = self.rate * (now - self.started)
            if abs(emitted - expected) > self.rate:
                self.started = now - emitted / self.rate  # moved or restarted: keep the pace, no burst
            elif emitted >= expected:
                return
        self.emit((self.todo[emitted],), msg_id=emitted)
        state["emitted"] = emitted + 1

    def ack(self, msg_id: Any) -> None:
        acks, buckets = self.state["acks"], self.state["buckets"]
        key = str(msg_id)
        acks[key] = acks.get(key, 0) + 1
        bucket = str(int(time.time() * 10))
        buckets[bucket] = buckets.get(bucket, 0) + 1
        now = time.monotonic()
        if now - self.dumped > 0.2:  # also while next_tuple is not called (the spout is paused)
            self._dump()
            self.dumped = now

    def fail(self, msg_id: Any) -> None:
        self.state["failed"] += 1
        self.state["replayed"] += 1
        self.state["replay"].append(int(msg_id))

    def _dump(self) -> None:
        data = {k: v for k, v in self.state.items() if k != "replay"}
        data["total"] = len(self.todo)
        data["last_next_tuple"] = getattr(self, "last_call", 0.0)
        data["pid"] = os.getpid()
        data["stopped"] = self.stopped
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def read_audit(directory: Path) -> dict[str, dict[str, Any]]:
    """Every spout's audit in ``directory``, by file stem."""
    return {p.stem: _load(p) for p in sorted(Path(directory).glob("spout-*.json"))}


def make_topology(conf: Mapping[str, Any]) -> Topology:
    return build_wordcount(conf, spout=AuditedSentences, name="audited", prefix="audit", workers=4)
