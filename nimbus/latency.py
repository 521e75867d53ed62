"""The latency constraints' controller the leading Nimbus runs (Nephele's QoS manager).

Every half second it looks at each topology that has latency constraints
(:func:`nstorm.constraints.constraints_of`); once a constraint's window (``window_secs``) has
passed, it sums the ``qos`` histograms of every executor's last heartbeat (worker.qos),
subtracts the sums it kept at the window's start, and hands the window to
:func:`nstorm.qospolicy.decide`, with the path's channels that could be chained now and the
chained ones whose host thread saturates a core in a worker without a GIL (the executors' CPU
and the interpreter in the heartbeats). A step
becomes an ordinary request with ``by: latency`` (new output-buffer sizes, ``tuning``; new
``chains``, :mod:`nstorm.chaining`; or a thread-mode move), so that Nimbus
stays the only writer of plans. The record of every constraint (windows, windows met, the
last p99, its parts, every action and warning) is kept in ``latency/<topology>`` for
``nstorm status``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient

from nstorm import latency
from nstorm.chaining import pointwise_pairs
from nstorm.clusterstate import ClusterState
from nstorm.config import flag, merge_conf
from nstorm.constraints import CONTROL_KEY, LatencyConstraint, constraints_of, path_name
from nstorm.moves import recently_moved
from nstorm.plan import Plan
from nstorm.qospolicy import (
    BUSY_CORES,
    ConstraintState,
    Decision,
    PathWindow,
    count_window,
    decide,
    path_window,
    status_entry,
)
from nstorm.topology import component_of, is_acker
from nstorm.zkschema import ZkPaths, encode

__all__ = ["LatencyController", "colocating_move"]

log = logging.getLogger(__name__)
MAX_ACTIONS = 50  # actions kept per constraint in the record
CHAIN_CPU = 0.6  # a channel is chained only while each host thread uses less of a core than this
SATURATED_CPU = 0.9  # a chain whose host thread uses this much of a core is undone
STALE_SECS = 3.0  # a path with no sample this long (and two windows) has no verdict


@dataclass
class _Tracked:
    """One constraint of one topology: its state, the sums at its window's start, its actions."""

    constraint: LatencyConstraint
    state: ConstraintState = field(default_factory=ConstraintState)
    since: float = 0.0
    start: dict[str, dict[int, int]] = field(default_factory=dict)
    last: PathWindow | None = None
    primed: bool = False  # its window's start sums are taken
    actions: list[dict[str, Any]] = field(default_factory=list)
    pending: list[_Request] = field(default_factory=list)  # requests Nimbus has not answered yet
    sampled_at: float = 0.0  # when a window last had samples
    starved: bool = False  # its last window broke the bound but was count-only (another's step)


@dataclass(frozen=True)
class _Request:
    """A step asked of Nimbus: its request node, its action, and the topology's last step before
    it (restored if Nimbus refuses: no window waits for a step that was not taken)."""

    path: str
    action: dict[str, Any]
    at: float
    before: float | None


def _resume(t: _Tracked, entry: Mapping[str, Any] | None) -> None:
    """Take the counts and actions of a constraint's record that an earlier leader wrote, if it is
    the same constraint (its bound and window): counting goes on across a Nimbus fail-over. The
    controller's judgement (a step to undo, holds, backoff) starts afresh."""
    if not entry or entry.get("p99_ms") != t.constraint.p99_ms or entry.get("window_secs") != t.constraint.window_secs:
        return
    windows, met = entry.get("windows"), entry.get("windows_met")
    if type(windows) is int and type(met) is int and 0 <= met <= windows:
        t.state.windows, t.state.windows_met = windows, met
    actions = entry.get("actions")
    if isinstance(actions, list):
        t.actions = [dict(a) for a in actions[-MAX_ACTIONS:] if isinstance(a, dict)]


def colocating_move(plan: Plan, channel: str, held: set[str] | frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """A move that keeps more of ``channel`` ("a>b") inside one worker: an executor of ``b`` on a
    worker without an executor of ``a`` goes to the worker with the most executors of ``a``
    (none of ``held``: OTD moved them within the cool-down)."""
    a, _, b = channel.partition(">")
    ups: dict[str, int] = {}
    for e, w in plan.executors.items():
        if component_of(e) == a:
            ups[w] = ups.get(w, 0) + 1
    if not ups:
        return None
    target = max(sorted(ups), key=lambda w: ups[w])
    for e, w in sorted(plan.executors.items()):
        if component_of(e) == b and w not in ups and not is_acker(e) and e not in held:
            return e, target
    return None


def _sums(beats: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    """The ``qos`` histograms of every executor of the heartbeats, summed per key."""
    out: dict[str, dict[int, int]] = {}
    for beat in beats.values():
        for counters in beat.executors.values():
            qos = counters.get("qos") if isinstance(counters, Mapping) else None
            if not isinstance(qos, Mapping):
                continue
            for key, hist in qos.items():
                try:
                    out[key] = latency.merge(out.get(key, {}), hist)
                except (AttributeError, TypeError, ValueError):
                    continue  # a damaged heartbeat: that executor's counts are left out, nothing else
    return out


def _executor_cpu(beats: Mapping[str, Any]) -> dict[str, float]:
    """Executor id -> the cores its thread used over the last metrics interval."""
    return {eid: float(c["cpu"]) for beat in beats.values() for eid, c in beat.executors.items()
            if isinstance(c, Mapping) and isinstance(c.get("cpu"), (int, float))}


def _busy(plan: Plan | None, path: Sequence[str], beats: Mapping[str, Any]) -> bool:
    """False only if ``path`` runs in one worker that uses under :data:`BUSY_CORES` of a core (its
    process, over the last metrics interval): its queue waits are then thread wake-ups, not a
    receiver short of CPU. Across workers a queue wait holds the wire and the receiving
    process's threads, and there the rules that spare CPU measured better (docs/benchmarks.md,
    session 17)."""
    if plan is None:
        return True
    workers = {w for e, w in plan.executors.items() if component_of(e) in path}
    return len(workers) != 1 or any(float(beats[w].cpu) >= BUSY_CORES for w in workers if w in beats)


def _thread_of(chains: Mapping[str, str], executor: str) -> str:
    """The executor whose own thread runs ``executor``: its host's host..., itself if not chained
    (a chained executor's own thread idles, so its CPU is its first host's)."""
    seen = {executor}
    while executor in chains and chains[executor] not in seen:
        executor = chains[executor]
        seen.add(executor)
    return executor


def _parallel(beats: Mapping[str, Any]) -> set[str]:
    """Executors whose worker says its interpreter has no GIL (threads run Python in parallel)."""
    return {eid for beat in beats.values() if beat.gil is False for eid in beat.executors}


def _chain_options(definition: Mapping[str, Any], plan: Plan, path: Sequence[str], cpu: Mapping[str, float],
                   parallel: frozenset[str] | set[str] = frozenset()) -> tuple[list[str], list[str], list[str]]:
    """``(chainable, hot, chained)`` channels of ``path``: those that could be chained now
    (pointwise in this plan, not chained yet, every host's thread under :data:`CHAIN_CPU`),
    chained ones whose host's thread is above :data:`SATURATED_CPU` in a worker whose threads run
    Python in parallel (``parallel``: no GIL), and those chained all through. A host that is
    itself chained runs in its own host's thread: that thread's CPU counts. Under the GIL a
    worker's threads share one core's Python, chained or not: unchaining a saturated thread there
    adds a hand-off and no core (a bursty load's step to 70% of the peak, docs/benchmarks.md
    session 21: 10 windows of 40 over the bound after such an unchain, against 1 without it)."""
    chainable, hot, whole = [], [], []
    for a, b in zip(path, path[1:], strict=False):
        pairs = pointwise_pairs(definition, plan, a, b)
        if not pairs:
            continue
        ch = f"{a}>{b}"
        chained = {d: u for d, u in plan.chains.items() if d in pairs}
        if len(chained) == len(pairs):
            whole.append(ch)
        load = {u: cpu.get(_thread_of(plan.chains, u), 0.0) for u in {*pairs.values(), *chained.values()}}
        if any(load[u] >= SATURATED_CPU and u in parallel for u in chained.values()):
            hot.append(ch)
        elif len(chained) < len(pairs) and all(c < CHAIN_CPU for c in load.values()):
            chainable.append(ch)
    return chainable, hot, whole


class LatencyController:
    """A thread beside Nimbus's loop. See the module docstring."""

    def __init__(self, zk: KazooClient, paths: ZkPaths, conf: Mapping[str, Any]) -> None:
        self.zk = zk
        self.paths = paths
        self.cluster = ClusterState(zk, paths)
        self.conf = conf
        self.tracked: dict[str, dict[str, _Tracked]] = {}  # topology -> constraint name -> its state
        self.submissions: dict[str, Any] = {}
        # topology -> when its last step was asked for: a window that began before it mixes both
        # settings, so it is counted but no constraint of that topology acts on it.
        self.stepped_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                names = self.cluster.names()
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: try again
                log.warning("latency controller: cannot list topologies", exc_info=True)
                continue
            for name in set(self.tracked) - set(names):
                del self.tracked[name]
                self.stepped_at.pop(name, None)
            for name in names:
                try:
                    self.tick(name, time.monotonic())
                except Exception:  # noqa: BLE001 - one bad window must not stop the loop
                    log.exception("latency controller: window of %s failed", name)

    def tick(self, name: str, now: float) -> None:
        """Judge the constraints of ``name`` whose window has passed."""
        topo = self.cluster.topology(name)
        if not topo:
            return
        conf = merge_conf(topo["definition"].get("conf"), topo.get("conf"))
        try:
            constraints = constraints_of(topo["definition"], conf)
        except Exception:  # noqa: BLE001 - checked at submit; a damaged record is not ours to fix
            return
        if not constraints:
            self.tracked.pop(name, None)
            return
        if self.submissions.get(name) != topo.get("submission"):
            self.submissions[name] = topo.get("submission")
            self.tracked[name] = {}
            self.stepped_at.pop(name, None)
            kept = self._kept_record(name, topo.get("submission"))
        else:
            kept = {}
        tracked = self.tracked.setdefault(name, {})
        due = []
        for c in constraints:
            t = tracked.get(c.name)
            if t is None or t.constraint != c:
                t = tracked[c.name] = _Tracked(c, since=now, sampled_at=now)
                _resume(t, kept.get(c.name))
            if not t.primed or now - t.since >= c.window_secs:
                due.append(t)
        answered = self._collect_answers(name, tracked.values())
        if not due:
            if answered:
                self._write(name, constraints)
            return
        beats = self.cluster.heartbeats(name)
        sums = _sums(beats)
        plan, _ = self.cluster.plan(name)
        moves_ok = conf.get("topology.scheduler") == "otd"
        control = flag(conf, CONTROL_KEY, True)
        base = float(conf.get("topology.batch.max.latency.ms") or 5)
        tuning = dict(plan.tuning) if plan is not None else {}
        cpu = _executor_cpu(beats)
        for t in due:
            window = {k: latency.subtract(v, t.start.get(k, {})) for k, v in sums.items()}
            began = t.since
            t.start, t.since = sums, now
            if not t.primed:
                t.primed = True  # the window starts now
                continue
            c = t.constraint
            win = path_window(c.path, c.name, window)
            if win.p99_ms is not None:
                t.last, t.sampled_at = win, now
            elif now - t.sampled_at >= max(2 * c.window_secs, STALE_SECS):
                # Silent for two windows (and a few heartbeats): no verdict rather than an old one.
                # One empty window is a heartbeat that came just after it (they come once a second).
                t.last = win
            if began < self.stepped_at.get(name, float("-inf")):
                # Another constraint's step came during this window (one step per topology at a
                # time: the next window shows its effect): counted, not acted on.
                count_window(t.state, win, c.p99_ms)
                t.starved = t.starved or (win.p99_ms is not None and win.p99_ms > c.p99_ms)
                continue
            if not t.starved and any(u.starved for u in tracked.values() if u is not t):
                # A constraint whose broken windows others' steps kept count-only (a long window
                # beside a short one that keeps stepping) gets its clean window first.
                count_window(t.state, win, c.p99_ms)
                continue
            t.starved = False
            chainable, hot, chained = (_chain_options(topo["definition"], plan, c.path, cpu, _parallel(beats))
                                       if plan else ([], [], []))
            step = decide(c.path, c.p99_ms, win, t.state, tuning, base, c.moves or moves_ok, chainable, hot,
                          busy=_busy(plan, c.path, beats), chained=chained)
            if step is not None and not control:
                continue  # measured and reported, never acted on (topology.latency.control=false)
            if step is None or plan is None:
                continue
            if self._act(name, plan, step, t, topo["definition"], now):
                if step.tuning is not None:
                    tuning = step.tuning
        self._write(name, constraints)

    def _act(self, name: str, plan: Plan, step: Decision, t: _Tracked, definition: Mapping[str, Any],
             now: float) -> bool:
        """Turn a step into a request to Nimbus and note it (the topology's last step is then
        ``now``); False if there was nothing to ask."""
        request: dict[str, Any] = {"mode": "thread", "moves": [], "random": 0, "by": "latency",
                                   "requested_at": time.time()}
        kind, detail = step.kind, step.detail
        if kind == "buffer":
            request["tuning"] = step.tuning
        elif kind in ("chain", "unchain"):
            a, _, b = (step.channel or "").partition(">")
            pairs = pointwise_pairs(definition, plan, a, b)
            chains = dict(plan.chains)
            if kind == "chain":
                chains.update(pairs)
            else:
                chains = {d: u for d, u in chains.items() if d not in pairs}
            request["chains"] = chains
            detail = f"{detail}: {', '.join(f'{d} in {u}' for d, u in sorted(pairs.items()))}"
        elif kind == "move":
            move = colocating_move(plan, step.channel or "",
                                   recently_moved(self.cluster.migrations(name), "otd", time.time()))
            if move is None:
                kind, detail = "warn", f"{detail}; no executor to move"
                t.state.warning = detail
            else:
                request["moves"] = [list(move)]
                detail = f"{detail}: {move[0]} -> {move[1]}"
        action = {"at": time.time(), "kind": kind, "detail": detail}
        t.actions.append(action)
        del t.actions[:-MAX_ACTIONS]
        log.info("latency %s [%s]: %s %s", name, t.constraint.name, kind, detail)
        if kind == "warn":
            return False
        path = self.zk.create(f"{self.paths.requests(name)}/req-", encode(request), sequence=True, makepath=True)
        # Nimbus answers in the node: a refusal is noted on the action.
        t.pending.append(_Request(path, action, now, self.stepped_at.get(name)))
        self.stepped_at[name] = now
        return True

    def _collect_answers(self, name: str, tracked: Iterable[_Tracked]) -> bool:
        """Read Nimbus's answers to this controller's requests; a refused one is noted on its action
        (``refused``: why) and its step forgotten (no window judges a step that was not taken).
        True if an action changed. Answered nodes are deleted (Nimbus deletes the uncollected)."""
        changed = False
        for t in tracked:
            waiting = []
            for asked in t.pending:
                path, action = asked.path, asked.action
                try:
                    request, _stat = self.cluster.read(path)
                except Exception:  # noqa: BLE001 - ZooKeeper trouble: ask again next tick
                    waiting.append(asked)
                    continue
                if request is None:
                    continue  # gone (deleted after 300 s, or by hand)
                result = request.get("result") if isinstance(request, dict) else None
                if not isinstance(result, dict):
                    waiting.append(asked)
                    continue
                if not result.get("ok", True):
                    action["refused"] = str(result.get("error") or "refused")
                    t.state.undo, t.state.skip = None, 0
                    if self.stepped_at.get(name) == asked.at:  # no later step: windows judge from the one before
                        if asked.before is None:
                            self.stepped_at.pop(name, None)
                        else:
                            self.stepped_at[name] = asked.before
                    changed = True
                    log.warning("latency %s [%s]: Nimbus refused the %s step: %s", name, t.constraint.name,
                                action["kind"], action["refused"])
                try:
                    self.zk.delete(path)
                except Exception:  # noqa: BLE001 - gone already, or ZooKeeper trouble: Nimbus cleans up
                    pass
            t.pending = waiting
        return changed

    def _kept_record(self, name: str, submission: Any) -> dict[str, Mapping[str, Any]]:
        """The constraints' entries of ``latency/<name>`` as an earlier leader wrote them for this
        submission (constraint name -> entry): a new leader goes on counting from them."""
        try:
            record, _stat = self.cluster.read(self.paths.latency(name))
        except Exception:  # noqa: BLE001 - no record, or not readable: start from nothing
            return {}
        if not isinstance(record, dict) or record.get("submission") != submission or submission is None:
            return {}
        kept: dict[str, Mapping[str, Any]] = {}
        entries = record.get("constraints")
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("path"), list):
                kept[path_name(entry["path"])] = entry
        return kept

    def _write(self, name: str, constraints: Sequence[LatencyConstraint]) -> None:
        tracked = self.tracked.get(name, {})
        record = {"at": time.time(), "submission": self.submissions.get(name),
                  "constraints": [status_entry(c, tracked[c.name].state, tracked[c.name].last, tracked[c.name].actions)
                                  for c in constraints if c.name in tracked]}
        path = self.paths.latency(name)
        data = json.dumps(record).encode()
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)
