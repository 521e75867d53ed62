"""QoS reporting for latency constraints (Nephele's QoS reporters): sampled traces along a path.

A latency constraint (:mod:`nstorm.constraints`) names a path of components. An executor of
its first component *samples* a tuple every ``topology.latency.sample.ms``: it notes the wall
clock (the trace's origin) and which output buffers of the path's next component hold what,
and once the unit of work that may emit the tuple is done (a spout's iteration, a bolt's
batch) it keeps the trace on one of them: an empty one (the trace waits on every empty buffer
during the unit, so that a batch sent at once, as at low rates, takes it along) that got tuples,
else the first that grew. The trace leaves with that buffer's batch (:class:`Traced` on a local
queue, a seventh header element over the wire) and says when the tuple was buffered, when the
batch left, and per constraint the origin it follows (a bolt can start one path and pass
another on in the same batch). The receiver counts the channel's
parts (buffer wait: sent - buffered; queue and wire: taken - sent), the time it took to
process the batch, and passes the trace on the same way to the path's next component; the
last one counts the end-to-end latency (origin to where its processing reached the traced
tuple). A sample's traces wait on all the buffers of the next component and only the first
batch that leaves takes one, so a sample is counted once however many tasks the unit's tuples
go to; where a trace meets an older one on a buffer, the older origin stays (the batch's oldest
tuples).

A trace also says where in its batch the traced tuple is (``ahead``: the tuples before it, of
``n``). The receiver processes the batch in three parts: what comes before the traced tuple's
run, then that run alone as the unit of work the next trace is armed around (its outputs are
the first the unit emits, so the trace goes with exactly them), then the rest; the last
component counts the end-to-end latency to the end of the traced run, not of the batch. Since
every output of such a unit is the traced tuple's, the trace waits on every buffer of the next
component, behind what each holds, and goes with whichever batch leaves first (one that reached
its limit in the unit, too). Before this, traces followed a whole unit of work and ended at the
batch's end: at half of word count's peak their p99 read over a millisecond above the stamped
tuples', and a controller acted on that.

Everything is per batch, never per tuple: an executor that takes part in no constraint pays a
type check per batch and an attribute read per sent buffer.

The counts are cumulative log-bucket histograms (:mod:`nstorm.latency`) in the heartbeat, under
``qos``: ``e2e/<constraint>``, ``buffer/<src>><dst>``, ``queue/<src>><dst>``, ``exec/<component>``;
the controller in Nimbus subtracts two of them to get a window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from nstorm import latency
from nstorm.constraints import LatencyConstraint

__all__ = ["Traced", "QosTracer", "channel_key", "trace_from_header"]

_time_ns = time.time_ns


Origins = tuple[tuple[int, int], ...]  # (constraint id, origin_us) of each path a trace follows
# What a sampled batch carries: (buffered_us, sent_us, origins, ahead, n): the traced tuple has
# ``ahead`` of the batch's ``n`` tuples before it.
Sent = tuple[int, int, Origins, int, int]


class Trace:
    """What waits on an output buffer and leaves with its next batch: when the first traced
    tuple was buffered, and per constraint the origin of the tuple it follows. Paths that start
    at different executors can share a batch (a bolt that starts one path and passes another
    on): each keeps its own origin. A unit of work's traces wait on all the buffers of the
    next component and share whether one of them left (``sent``): the first batch that leaves
    takes it, the others leave untraced."""

    __slots__ = ("ahead", "buffered", "cell", "origins")

    def __init__(self, buffered: int, origins: dict[int, int], ahead: int = 0, cell: list[bool] | None = None) -> None:
        self.buffered = buffered
        self.origins = origins
        self.cell = [False] if cell is None else cell  # shared by the traces of one arm
        self.ahead = ahead  # tuples of its batch before the traced one (what its buffer held)

    @property
    def sent(self) -> bool:
        return self.cell[0]

    @sent.setter
    def sent(self, value: bool) -> None:
        self.cell[0] = value

    def leaving(self, sent_us: int, n: int) -> Sent:
        """What the batch of ``n`` tuples it leaves with carries (sent now)."""
        return self.buffered, sent_us, tuple(self.origins.items()), min(self.ahead, max(0, n - 1)), max(1, n)


# One next component's buffers as arm() found them: (buffer, its batches sent, its length, the trace
# that waits on it or None), with the origins arm() added and when.
Armed = tuple[dict[int, int], int, list[tuple[Any, int, int, "Trace | None"]]]


def channel_key(src: str, dst: str) -> str:
    """The name of the channel from component ``src`` to ``dst`` (heartbeats, tuning)."""
    return f"{src}>{dst}"


class Traced:
    """A batch on a local queue that carries a trace ``(buffered_us, sent_us, origins, ahead, n)``."""

    __slots__ = ("batch", "trace")

    def __init__(self, batch: Any, trace: Sent) -> None:
        self.batch = batch
        self.trace = trace


def trace_from_header(value: Any) -> Sent | None:
    """A trace from a data header's seventh element ``[buffered_us, sent_us, [[constraint,
    origin_us], ...], ahead, n]``; None for anything that is not one (garbage from the network
    loses its trace, never its tuples)."""
    try:
        buffered, sent, pairs, ahead, n = value
        if any(type(x) is not int for x in (buffered, sent, ahead, n)) or not 0 <= ahead < n:
            return None
        origins = tuple((c, o) for c, o in pairs)
        if not origins or any(type(c) is not int or type(o) is not int for c, o in origins):
            return None
        return buffered, sent, origins, ahead, n
    except (TypeError, ValueError):
        return None


class QosTracer:
    """One executor's part in its topology's latency constraints. See the module docstring.

    :arg component: the executor's component.
    :arg constraints: every constraint of the topology, in the order all workers agree on.
    :arg outbox: the executor's outbox (its ``buffers`` and ``routing``).
    :arg sample_secs: how often an executor that starts a path samples a tuple.
    """

    def __init__(self, component: str, constraints: Sequence[LatencyConstraint], outbox: Any,
                 sample_secs: float) -> None:
        self.component = component
        self.outbox = outbox
        self.sample_secs = max(0.0, sample_secs)
        self.starts: tuple[int, ...] = tuple(i for i, c in enumerate(constraints) if c.path[0] == component)
        self.next_of: dict[int, str] = {}
        self.ends: dict[int, str] = {}
        for i, c in enumerate(constraints):
            if component in c.path[1:]:
                k = c.path.index(component)
                if k == len(c.path) - 1:
                    self.ends[i] = c.name
                else:
                    self.next_of[i] = c.path[k + 1]
        for i in self.starts:
            self.next_of[i] = constraints[i].path[1]
        self.next_at = 0.0  # monotonic clock of the next sample (starting executors)
        self.pending: list[list[Armed]] = []  # per armed unit of work
        self.armed_now: set[Trace] = set()  # the traces armed since the last resolve
        self.hists: dict[str, dict[int, int]] = {}
        self.samples = 0

    @classmethod
    def for_executor(cls, component: str, constraints: Sequence[LatencyConstraint], outbox: Any,
                     conf: Mapping[str, Any]) -> QosTracer | None:
        """A tracer if ``component`` is on a constraint's path, else None (nothing to pay)."""
        if not any(component in c.path for c in constraints):
            return None
        sample_ms = float(conf.get("topology.latency.sample.ms") or 5)
        return cls(component, constraints, outbox, sample_ms / 1000.0)

    # -- counting --------------------------------------------------------------------------
    def _add(self, key: str, secs: float) -> None:
        hist = self.hists.get(key)
        if hist is None:
            hist = self.hists[key] = {}
        latency.add(hist, secs if secs > 0 else 0.0)

    def record_channel(self, src: str, buffered_us: int, sent_us: int, taken_us: int) -> None:
        """A traced batch from component ``src`` was taken here: the channel's two parts."""
        key = channel_key(src, self.component)
        self._add("buffer/" + key, (sent_us - buffered_us) / 1e6)
        self._add("queue/" + key, (taken_us - sent_us) / 1e6)

    def record_done(self, origins: Origins, taken_us: int, done_us: int, reached_us: int | None = None) -> None:
        """The traced batch was processed: this executor's processing time, and the end-to-end
        latency of every constraint whose path ends here (from that path's own origin to
        ``reached_us``, when the traced tuple's run was processed; default: the batch's end)."""
        self._add("exec/" + self.component, (done_us - taken_us) / 1e6)
        ends = self.ends
        if reached_us is None:
            reached_us = done_us
        for c, origin_us in origins:
            name = ends.get(c)
            if name is not None:
                self._add("e2e/" + name, (reached_us - origin_us) / 1e6)
                self.samples += 1

    # -- passing traces on -----------------------------------------------------------------
    def sample_due(self, now: float) -> bool:
        """True (and the next sample scheduled) if an executor that starts a path samples now."""
        if now < self.next_at or not self.starts:
            return False
        self.next_at = now + self.sample_secs
        return True

    def arm(self, origins: Origins) -> None:
        """Note the output buffers of the paths' next components before a unit of work whose
        first emits are the traced tuple's; :meth:`resolve` after it keeps the trace on one of them.

        Every output of the unit is the traced tuple's, so a trace waits on every buffer at once,
        behind what it holds: the first batch sent takes it along
        (a low rate sends each tuple as it comes; a buffer that reaches its limit sends the
        unit's first outputs on), the others drop theirs. A trace that waits there already takes
        these origins too if it was armed in this unit (another path's); an older one stays as
        it is (:meth:`resolve` adds these origins if the buffer gets the unit's outputs).
        """
        routing = self.outbox.routing
        if routing is None:
            return
        buffers = self.outbox.buffers
        by_next: dict[str, dict[int, int]] = {}
        for c, origin_us in origins:
            nxt = self.next_of.get(c)
            if nxt is not None:
                by_next.setdefault(nxt, {})[c] = origin_us
        if not by_next:
            return
        buffered_us = _time_ns() // 1000
        armed: list[Armed] = []
        armed_now = self.armed_now
        for nxt, mine in by_next.items():
            cell = [False]  # whether one of this sample's traces left
            seen: list[tuple[Any, int, int, Trace | None]] = []
            for t in routing.component_tasks.get(nxt, ()):
                buf = buffers.get(t)
                if buf is None:
                    continue
                n = len(buf)
                waiting = buf.trace
                if waiting is not None and not waiting.sent:
                    if waiting in armed_now:  # another path's, armed in this unit
                        for c, origin_us in mine.items():
                            waiting.origins.setdefault(c, origin_us)
                    else:
                        waiting = None  # an older unit's: it stays, and leaves first
                else:
                    waiting = buf.trace = Trace(buffered_us, dict(mine), n, cell)
                    armed_now.add(waiting)
                seen.append((buf, buf.sent, n, waiting))
            armed.append((mine, buffered_us, seen))
        self.pending.append(armed)

    def start(self) -> None:
        """Sample a tuple here (this executor starts a path): its origin is now."""
        now_us = _time_ns() // 1000
        self.arm(tuple((c, now_us) for c in self.starts))

    def resolve(self) -> None:
        """Keep each armed trace on one buffer: the one it left with, else the first it waits on
        that got tuples of the unit; off every other one. Where only buffers with an older trace
        got them, that trace takes these origins too (the older ones stay: a trace follows the
        oldest tuple it can); if such a buffer sent them on, the sample is lost."""
        pending = self.pending
        self.pending = []
        self.armed_now.clear()
        for armed in pending:
            for mine, _, seen in armed:
                keeper = None
                kept = any(waiting is not None and waiting.sent for _, _, _, waiting in seen)
                if not kept:
                    for buf, _, n, waiting in seen:
                        if waiting is not None and buf.trace is waiting and len(buf) > n:
                            keeper, kept = buf, True
                            break
                for buf, _, _, waiting in seen:
                    if waiting is not None and buf.trace is waiting and buf is not keeper:
                        buf.trace = None  # nothing of the unit came, or the trace left or stays elsewhere
                if kept:
                    continue
                for buf, sent, n, waiting in seen:
                    if waiting is None and (buf.sent != sent or len(buf) > n):
                        trace = buf.trace
                        if buf.sent == sent and trace is not None:
                            for c, origin_us in mine.items():
                                trace.origins.setdefault(c, origin_us)
                        break
