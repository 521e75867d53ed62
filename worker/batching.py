"""Adaptive batching: how many tuples an output buffer collects before it is sent.

After Aeolus (batch size from the producer's output rate, capped) and Nephele's
adaptive output-buffer sizing (buffers sized so that their fill time meets a latency
bound). Every destination executor of an emitting executor has its own buffer, and
each buffer its own *limit*:

    limit = clamp(ceil(rate * fill_secs), 1, topology.batch.size)

where ``rate`` is the destination's observed rate (tuples/s, an exponentially
decaying average over about :data:`RATE_TAU_SECS`, updated once per sent batch, never
per tuple) and ``fill_secs`` is half of ``topology.batch.max.latency.ms``. So a
destination that receives 100,000 tuples/s gets batches of 250 (one message per
2.5 ms), one that receives 1,000/s gets batches of 2 to 3, and one that receives a
tuple now and then sends each tuple at once. As in Nephele, a buffer leaves when it
is full, not when its executor happens to run out of input: sending small batches
whenever a queue runs empty multiplies the messages (and the thread wake-ups, which
cost more than the tuples in Python) exactly at the moderate rates where latency is
already low. What bounds the wait:

- the deadline (:class:`FlushDeadline`): whatever an executor has buffered is sent at
  the latest ``topology.batch.max.latency.ms`` after the loop iteration that buffered
  it began (a slow destination's limit is 1, so its tuples do not wait at all). It is
  checked between iterations, so a tuple can wait longer by the rest of the iteration
  it was emitted in: one input batch of a bolt, at most 256 ``next_tuple`` calls of a
  spout;
- acker entries (a spout's inits, a bolt's acks) have their own deadline,
  :data:`CONTROL_SHARE` of the bound: the acker cannot complete a tuple before they
  arrive, and coalescing them for that long bounds their messages to a few hundred
  per second per executor;
- a spout that may not emit (``topology.max.spout.pending`` reached, backpressure, the
  topology deactivated) sends everything at once: holding tuples back would stall it.

A bolt's output is *bursty*: each input batch it takes emits a burst, about one limit's worth
where one upstream feeds it (the upstream's batches leave every fill time too). A limit reached
in the middle of a burst would send the burst's head and keep its tail for the next burst, a
whole fill time later. So a bolt *aligns* its batches with its units of work
(:class:`AlignedFlush`, ``topology.batch.align``, on by default): its limits are
:data:`ALIGNED_BURST` times the rate's (a burst is not cut), and after each unit (the input it
took in a row, or a chained host's hand-over) its data buffers leave if waiting for the next
unit, about as far away as the units were apart, would keep what they hold past the fill time.
One upstream task, batches every fill time: a message per input batch (fewer than without), and
the tuples wait the batch's processing, not a fill time. Only a bolt with one upstream task
aligns (``worker.bolt``): with several, the bursts are smaller and come unevenly, and at word
count's peak (two spouts a split) aligned batches sent about 4% fewer words a second. Spouts
have no units (their emits are steady) and keep the plain limits.

``topology.batch.size = 1`` is per-tuple sending: every emit is one message and the
executor sends its acker entries after every tuple too (the baseline the batching
benchmark compares against). ``topology.batch.adaptive = false`` keeps every limit at
``topology.batch.size`` (fixed-size batches, still bounded by the deadlines).

Everything here runs in the emitting executor's thread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["ALIGNED_BURST", "CONTROL_SHARE", "RATE_TAU_SECS", "AlignedFlush", "BatchPolicy", "FlushDeadline", "RateState"]

RATE_TAU_SECS = 0.2  # time constant of the rate estimate: reacts within a few tenths of a second
CONTROL_SHARE = 0.25  # acker entries wait at most this share of the latency bound
ALIGNED_BURST = 2.0  # an aligning bolt's limits, in fill times of its rate: room for a burst
GAP_SMOOTHING = 0.25  # weight of the newest interval in the average gap between units of work
GAP_CAP_SECS = 0.02  # an idle spell counts as this long a gap (the average recovers in a few units)


class RateState(Protocol):
    """What the policy keeps per destination (slots of the outbox's buffers)."""

    limit: int  # buffer length (tuples x unit) that makes it leave
    rate: float  # tuples/s, decaying average
    last: float  # clock of the previous send (or of the buffer's creation)


class BatchPolicy:
    """Per-destination batch limits of one executor. See the module docstring.

    :arg cap: the largest batch, in tuples (``topology.batch.size``).
    :arg max_latency: the bound on the time a tuple waits in a buffer, in seconds
        (``topology.batch.max.latency.ms`` / 1000); 0 when ``cap`` is 1.
    :arg adaptive: size each buffer from its rate (else every limit is ``cap``).
    :arg fill: the fill time a limit aims at, in seconds (default: half of ``max_latency``).
    :arg unit: list slots a buffered tuple takes (2 when anchors are interleaved with values);
        limits are in slots, so that an emit compares one length with one limit.

    Example::

        >>> p = BatchPolicy(cap=256, max_latency=0.005)
        >>> class Dst: limit, rate, last = 1, 0.0, 0.0
        >>> d = Dst()
        >>> for i in range(1, 1001):     # 40 tuples every millisecond: 40,000 tuples/s
        ...     p.observe(d, 40, i / 1000)
        >>> d.limit                      # 40,000/s * 2.5 ms
        100
    """

    def __init__(
        self, cap: int, max_latency: float, adaptive: bool = True, fill: float | None = None, unit: int = 1
    ) -> None:
        self.cap = max(1, int(cap))
        self.unit = unit
        self.per_tuple = self.cap == 1
        self.max_latency = 0.0 if self.per_tuple else max(0.0, float(max_latency))
        self.adaptive = bool(adaptive) and not self.per_tuple
        self.fill = self.max_latency / 2 if fill is None else float(fill)
        self.control_latency = self.max_latency * CONTROL_SHARE
        self.configured = (self.max_latency, self.cap)  # what tune(None, None) goes back to
        self.burst = 1.0  # limits in fill times of the rate (ALIGNED_BURST where batches are aligned)

    def tune(self, max_latency: float | None, cap: int | None) -> None:
        """Sizes a latency constraint's controller set for this executor's output buffers (None:
        back to the configured ones): the latency bound (and with it the fill time and the acker
        entries' bound) and the largest batch."""
        if self.per_tuple:
            return
        base = self.configured
        self.max_latency = base[0] if max_latency is None else max(0.0, float(max_latency))
        self.cap = base[1] if cap is None else max(1, int(cap))
        self.fill = self.max_latency / 2
        self.control_latency = self.max_latency * CONTROL_SHARE

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], unit: int = 1) -> BatchPolicy:
        adaptive = conf.get("topology.batch.adaptive", True)
        if isinstance(adaptive, str):
            adaptive = adaptive.strip().lower() not in ("0", "false", "no", "off")
        return cls(int(conf["topology.batch.size"]), float(conf["topology.batch.max.latency.ms"]) / 1000.0,
                   bool(adaptive), unit=unit)

    def initial_limit(self) -> int:
        """A new destination starts small (its first tuples leave at once) and grows with its rate."""
        return self.unit if self.adaptive else self.cap * self.unit

    def observe(self, dst: RateState, n: int, now: float) -> None:
        """``n`` tuples for ``dst`` were just sent at clock ``now``: update its rate and limit."""
        if not self.adaptive:
            return
        dt = now - dst.last
        dst.last = now
        if dt < 0.0:
            dt = 0.0
        if dt >= RATE_TAU_SECS:
            rate = n / dt if dt > 0 else 0.0
        else:  # exponential decay over RATE_TAU_SECS: rate*(1 - dt/tau) + n/tau
            rate = dst.rate * (1.0 - dt / RATE_TAU_SECS) + n / RATE_TAU_SECS
        dst.rate = rate
        limit = math.ceil(rate * self.fill * self.burst)
        dst.limit = self.unit * (1 if limit < 1 else self.cap if limit > self.cap else limit)


class FlushDeadline:
    """The executor-wide bound: buffered tuples leave ``max_latency`` after they were buffered.

    An executor calls :meth:`worked` after each loop iteration that may have buffered
    something, with the clock reading from *before* that iteration (so the bound is
    counted from the earliest moment a tuple of it can have been buffered), and
    flushes everything when :meth:`due` says so, or when it runs out of work.

    Example::

        >>> d = FlushDeadline(0.005)
        >>> d.worked(1.000)
        >>> d.worked(1.003)              # the first unflushed iteration sets the deadline
        >>> d.due(1.004), d.due(1.005)
        (False, True)
    """

    __slots__ = ("max_latency", "at")

    def __init__(self, max_latency: float) -> None:
        self.max_latency = max_latency
        self.at: float | None = None

    def worked(self, began: float) -> None:
        """An iteration that began at ``began`` may have buffered tuples."""
        if self.at is None:
            self.at = began + self.max_latency

    def due(self, now: float) -> bool:
        at = self.at
        return at is not None and now >= at

    def wait(self, now: float, longest: float) -> float:
        """How long the executor may block for input: at most ``longest``, never past the deadline."""
        at = self.at
        if at is None:
            return longest
        left = at - now
        return 0.0 if left <= 0.0 else left if left < longest else longest

    def flushed(self) -> None:
        """Everything buffered has been sent."""
        self.at = None


class AlignedFlush:
    """When a bolt's data buffers leave at the end of a unit of work (see the module docstring).

    The executor calls :meth:`began` as each unit begins and :meth:`due` as it ends: the buffers
    leave now if the next unit, expected an average gap away, would end past the fill time of
    what they hold (counted, as the deadline is, from the unit that first buffered it).

    Example::

        >>> d, a = FlushDeadline(0.005), AlignedFlush()
        >>> for t in (1.000, 1.0025, 1.005):            # one upstream: a unit every 2.5 ms
        ...     a.began(t)
        >>> d.worked(1.005)
        >>> a.due(d, 0.0025, 1.0057)                    # its burst leaves as the unit ends
        True
        >>> d, a = FlushDeadline(0.005), AlignedFlush()
        >>> for t in (1.000, 1.0006, 1.0012, 1.0018):   # several: a unit every 0.6 ms
        ...     a.began(t)
        >>> d.worked(1.000)
        >>> a.due(d, 0.0025, 1.0014), a.due(d, 0.0025, 1.0020)   # the last unit before 2.5 ms
        (False, True)
    """

    __slots__ = ("gap", "last")

    def __init__(self) -> None:
        self.gap = 0.0  # average seconds between the starts of two units (0: none seen yet)
        self.last: float | None = None

    def began(self, now: float) -> None:
        """A unit of work begins at ``now``."""
        last = self.last
        self.last = now
        if last is not None:
            gap = now - last
            if gap > GAP_CAP_SECS:
                gap = GAP_CAP_SECS
            self.gap = gap if self.gap == 0.0 else self.gap + (gap - self.gap) * GAP_SMOOTHING

    def due(self, deadline: FlushDeadline, fill: float, now: float) -> bool:
        """True if what is buffered should leave at the end of the unit ending at ``now``."""
        at = deadline.at
        return at is not None and now + self.gap >= at - deadline.max_latency + fill
