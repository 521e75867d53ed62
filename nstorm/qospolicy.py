"""What a latency constraint's controller decides from one window (Nephele's QoS manager).

Pure functions over plain data, so that every rule is unit tested without a cluster; the
thread that feeds them heartbeats and writes their actions is :mod:`nimbus.latency`.

One window of a constraint gives its end-to-end p99 and, per channel of its path, the mean
time a sampled tuple waited in the sender's output buffer and in the receiver's queue (with
the wire), and per component the time it took to process a batch. The rules, one step a
window at most:

- **a chain whose host thread saturates a core** is undone first, met or not (its guest goes back
  to a thread of its own: throughput), where that can help: :mod:`nimbus.latency` names such a
  chain only in a worker whose threads run Python in parallel (no GIL).
- **violated** (p99 over the bound): chain a channel of the path that may be chained (a
  pointwise channel inside one worker, :mod:`nstorm.chaining`), the one that waits longest;
  else, when tuples wait :data:`BUFFERS_DOMINATE` times longer in output buffers than in
  queues (or at all, while the path runs in one worker that uses under :data:`BUSY_CORES` of a
  core: a queue wait is then a wake-up, not a receiver short of CPU), shrink the output buffers
  of the channel whose buffer wait is the largest, halving its latency bound (down to
  :data:`FLOOR_MS`); a smaller bound means smaller batches that leave sooner. A chained
  channel goes first while its buffer wait is at least :data:`CHEAP_SHARE` of the largest: its
  batches cost a call in the host's thread, not a message and a wake-up (word count at half of
  its peak, one stage a worker, fixed bounds: the chained spout -> split bound halved twice met
  5 ms at 1.01-1.03x the CPU a word, both channels' halved once at 1.07-1.12x). When they wait
  longer in queues, the receivers are short of CPU and smaller batches (a message and a
  wake-up each) would make that worse: a buffer this controller shrank grows back. If
  neither helps, ask to *move* one executor so that the path's channel that waits longest
  stays inside one worker, if the constraint may move executors; else warn, naming the channel
  that dominates, and back off (1, 2, 4, 8 windows between tries; back to 1 after
  :data:`BACKOFF_RESET_WINDOWS` met windows in a row).
- **slack** (p99 under :data:`SLACK_SHARE` of the bound for :data:`SLACK_WINDOWS` windows in a
  row): grow the tightest buffer back by half again (throughput), until it is the
  configured one and its entry is dropped.
- **a buffer step that made it worse** (the next judged window broken, its p99 over
  :data:`WORSE` times the one that asked for the step) is undone, and its channel left alone for
  :data:`HELD_WINDOWS` windows; so is **a shrink that did not help** (the next judged window
  broken and its p99 not under :data:`HELPED` times that one): smaller batches cost CPU (a
  message and a wake-up each), and a step that buys no latency is not worth it (at half of word
  count's peak, 5 -> 2.5 ms cost 6-12% more CPU a word for one bucket of p99 at most). That CPU
  is spared only where it may be short: while the path runs in one worker that uses under
  :data:`BUSY_CORES` of a core, a shrink that made p99 no worse stays, so that the next window can
  shrink the next channel (where two channels hold about the same wait, halving one alone moves
  p99 by less than a bucket), and a step is undone only when two judged windows in a row say so
  (one 2-s window's p99 jumps 2-3x now and then, whatever the buffers are).
- otherwise nothing. A window right after an action is not judged (it mixes both sizes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nstorm import latency

__all__ = ["BACKOFF_RESET_WINDOWS", "BUSY_CORES", "CHEAP_SHARE", "FLOOR_MS", "SLACK_SHARE", "SLACK_WINDOWS", "Decision",
           "PathWindow", "ConstraintState", "count_window", "decide", "mean_secs", "path_window", "status_entry"]

FLOOR_MS = 0.5  # the smallest output-buffer bound the controller sets
WORSE = 1.1  # a buffer step after which p99 grew by more than this factor is undone
HELPED = 0.96  # a shrink after which p99 did not fall under this factor is undone (one bucket: 4.7%)
BUSY_CORES = 0.7  # ... unless the path runs in one worker using less of a core than this (its process)
HELD_WINDOWS = 8  # windows an undone step's channel is left alone
# Buffers shrink only while tuples wait this many times longer in them than in queues: smaller
# batches cost the receivers CPU (a message and a wake-up each), and where queues wait about as
# long, that CPU is short already (benchmarks.latency at half of the peak: p99 doubled).
BUFFERS_DOMINATE = 2.0
# A chained channel's buffers shrink first while they hold at least this share of the largest
# buffer wait: its smaller batches cost calls, not messages.
CHEAP_SHARE = 0.25
SLACK_SHARE = 0.5  # a window whose p99 is under this share of the bound has slack
SLACK_WINDOWS = 2  # windows of slack in a row before a buffer grows back
MAX_BACKOFF = 8  # windows between two tries at most, once nothing helps
# Met windows in a row before the backoff starts again at one window: a p99 hovering at the bound
# (met, broken, met...) must not bring a try every other window for good.
BACKOFF_RESET_WINDOWS = 3


def mean_secs(hist: Mapping[int, int]) -> float:
    """The mean of a bucket histogram, each count at its bucket's upper bound (0 if empty)."""
    total = sum(hist.values())
    if not total:
        return 0.0
    return sum(latency.upper_bound(i) * n for i, n in hist.items()) / total


@dataclass
class PathWindow:
    """One window of one constraint: its p99 and its parts, in milliseconds."""

    p99_ms: float | None
    samples: int
    buffer_ms: dict[str, float] = field(default_factory=dict)  # channel -> mean buffer wait
    queue_ms: dict[str, float] = field(default_factory=dict)  # channel -> mean queue + wire
    exec_ms: dict[str, float] = field(default_factory=dict)  # component -> mean batch processing

    def dominant(self) -> tuple[str, str, float] | None:
        """``(channel or component, part, ms)`` of the largest part, None with no parts."""
        parts = [(c, "buffer wait", v) for c, v in self.buffer_ms.items()]
        parts += [(c, "queue wait", v) for c, v in self.queue_ms.items()]
        parts += [(c, "processing", v) for c, v in self.exec_ms.items()]
        return max(parts, key=lambda p: p[2]) if parts else None


def path_window(path: Sequence[str], name: str, window: Mapping[str, Mapping[int, int]]) -> PathWindow:
    """A :class:`PathWindow` from one window's histograms (``qos`` keys of :mod:`worker.qos`)."""
    e2e = window.get("e2e/" + name) or {}
    p99 = latency.percentile(e2e, 0.99)
    out = PathWindow(round(p99 * 1000, 3) if p99 is not None else None, sum(e2e.values()))
    for a, b in zip(path, path[1:], strict=False):
        ch = f"{a}>{b}"
        out.buffer_ms[ch] = round(mean_secs(window.get("buffer/" + ch) or {}) * 1000, 3)
        out.queue_ms[ch] = round(mean_secs(window.get("queue/" + ch) or {}) * 1000, 3)
    for comp in path[1:]:
        out.exec_ms[comp] = round(mean_secs(window.get("exec/" + comp) or {}) * 1000, 3)
    return out


@dataclass
class ConstraintState:
    """What the controller remembers of one constraint between windows."""

    windows: int = 0
    windows_met: int = 0
    slack: int = 0  # windows of slack in a row
    skip: int = 0  # windows not to act in (after an action, or backing off)
    backoff: int = 1
    met_run: int = 0  # judged windows met in a row
    warning: str | None = None
    # The last buffer step, until the next judged window says whether it helped: the tuning before
    # it, its channel and the p99 that asked for it; a step after which p99 got worse is undone.
    undo: dict[str, dict[str, float]] | None = None
    undo_channel: str = ""
    undo_p99: float = 0.0
    held: dict[str, int] = field(default_factory=dict)  # channel -> windows it is left alone (undone)
    direction: dict[str, int] = field(default_factory=dict)  # channel -> its last step while broken: -1 shrink, +1 grow
    holds: dict[str, int] = field(default_factory=dict)  # channel -> times it was held (each hold lasts longer)
    doubted: bool = False  # the last step's first judged window said undo; a second one must agree


@dataclass
class Decision:
    """One step: ``kind`` ``buffer`` (with the new ``tuning``), ``chain`` / ``unchain`` (the
    ``channel``), ``move`` (the ``channel`` to keep in one worker) or ``warn``; ``detail`` says why."""

    kind: str
    detail: str
    tuning: dict[str, dict[str, float]] | None = None
    channel: str | None = None


def _remember(state: ConstraintState, tuning: Mapping[str, Mapping[str, float]], channel: str, p99_ms: float,
              direction: int) -> None:
    """Note a buffer step, so that the next judged window can undo it if p99 got worse; a step
    that reverses the last one on its channel while the bound is broken (shrink, grow, shrink...)
    leaves the channel alone for a while, longer each time (never an endless loop of actions)."""
    state.undo = {k: dict(v) for k, v in tuning.items()}
    state.undo_channel = channel
    state.undo_p99 = p99_ms
    if direction and state.direction.get(channel) == -direction:
        _hold(state, channel)
    state.direction[channel] = direction


def _hold(state: ConstraintState, channel: str) -> int:
    """Leave ``channel`` alone for :data:`HELD_WINDOWS` windows, twice as long each time it is held
    again (kept across met windows: a steady load never cycles for good); returns the windows."""
    times = state.holds.get(channel, 0)
    state.holds[channel] = times + 1
    windows = HELD_WINDOWS * 2 ** min(times, 3)
    state.held[channel] = windows
    return windows


def _grown(tuning: Mapping[str, Mapping[str, float]], channel: str, bound_ms: float, factor: float,
           base_latency_ms: float) -> tuple[dict[str, dict[str, float]], float]:
    """The tuning with ``channel``'s buffer bound grown by ``factor`` (its entry dropped once it is
    back at the configured bound), and the new bound."""
    grown = round(min(base_latency_ms, bound_ms * factor), 3)
    new = {k: dict(v) for k, v in tuning.items()}
    if grown >= base_latency_ms:
        new.pop(channel, None)
    else:
        new[channel] = {**new.get(channel, {}), "latency_ms": grown}
    return new, grown


def count_window(state: ConstraintState, win: PathWindow, bound_ms: float) -> bool | None:
    """Count one window in ``state`` (judged, met, met in a row); whether it met the bound, None
    (not counted) if no sample came through it. :func:`decide` counts its windows with it; a
    window the controller judges but may not act on (another constraint of the topology took a
    step during it) is counted with it alone."""
    if win.p99_ms is None:
        return None
    met = win.p99_ms <= bound_ms
    state.windows += 1
    state.windows_met += met
    state.met_run = state.met_run + 1 if met else 0
    return met


def decide(path: Sequence[str], bound_ms: float, win: PathWindow, state: ConstraintState,
           tuning: Mapping[str, Mapping[str, float]], base_latency_ms: float, moves: bool,
           chainable: Sequence[str] = (), hot: Sequence[str] = (), busy: bool = True,
           chained: Sequence[str] = ()) -> Decision | None:
    """Judge one window (updating ``state``) and return the step to take, if any.

    ``chainable``: channels of the path that could be chained now (pointwise, co-located, their
    hosts not busy); ``hot``: chained channels whose host thread saturates a core; ``busy``: CPU
    may be short (False only for a path in one worker that uses under :data:`BUSY_CORES`);
    ``chained``: channels every executor of whose receiver runs chained to its sender.
    """
    if hot and win.p99_ms is None:  # no sample came through, but a saturated chain is undone anyway
        state.skip = 1
        windows = _hold(state, hot[0])
        return Decision("unchain", f"{hot[0]}: its host thread saturates a core; not chained again for {windows} "
                                   "windows", channel=hot[0])
    met = count_window(state, win, bound_ms)
    if met is None:
        return None  # no sample came through: nothing to judge
    if state.skip > 0:
        state.skip -= 1
        return None
    for ch in list(state.held):
        state.held[ch] -= 1
        if state.held[ch] <= 0:
            del state.held[ch]
    undo, state.undo = state.undo, None
    worse = win.p99_ms > WORSE * state.undo_p99
    shrank = state.direction.get(state.undo_channel, 0) < 0  # the step bought latency with CPU
    useless = shrank and busy and win.p99_ms > HELPED * state.undo_p99
    if undo is not None and not met and (worse or useless):
        if not busy and not hot and not state.doubted:
            # CPU to spare: one 2-s window's p99 jumps 2-3x now and then whatever the buffers are,
            # so the step is judged again on the next window before it is undone.
            state.doubted = True
            state.undo = undo
            return None
        state.doubted = False
        ch = state.undo_channel
        windows = _hold(state, ch)
        state.skip = 1
        new = {k: dict(v) for k, v in tuning.items()}  # only that channel's entry goes back
        if ch in undo:
            new[ch] = dict(undo[ch])
        else:
            new.pop(ch, None)
        why = "worse" if worse else "no better: smaller batches cost CPU for nothing"
        return Decision("buffer", f"{ch}: the last step undone (p99 {state.undo_p99:g} -> {win.p99_ms:g} ms, "
                                  f"{why}); left alone for {windows} windows", new, ch)
    state.doubted = False
    if hot:  # a chain that saturates its thread costs throughput: undone whatever the bound says
        state.skip = 1
        windows = _hold(state, hot[0])
        return Decision("unchain", f"{hot[0]}: its host thread saturates a core (p99 {win.p99_ms:g} ms); not "
                                   f"chained again for {windows} windows", channel=hot[0])
    channels = [f"{a}>{b}" for a, b in zip(path, path[1:], strict=False)]
    chainable = [ch for ch in chainable if ch not in state.held]
    if not met and chainable:
        ch = max(chainable, key=lambda c: win.buffer_ms.get(c, 0.0) + win.queue_ms.get(c, 0.0))
        state.skip = 1
        return Decision("chain", f"{ch}: chained (p99 {win.p99_ms:g} ms over {bound_ms:g} ms; buffer and queue wait "
                                 f"{win.buffer_ms.get(ch, 0) + win.queue_ms.get(ch, 0):g} ms)", channel=ch)
    current = {ch: float((tuning.get(ch) or {}).get("latency_ms", base_latency_ms)) for ch in channels}
    if met:
        state.warning = None
        if state.met_run >= BACKOFF_RESET_WINDOWS:
            state.backoff = 1
        state.slack = state.slack + 1 if win.p99_ms < SLACK_SHARE * bound_ms else 0
        tuned = [ch for ch in channels if current[ch] < base_latency_ms]
        if state.slack < SLACK_WINDOWS or not tuned:
            return None
        state.slack = 0
        ch = min(tuned, key=lambda c: current[c])
        new, grown = _grown(tuning, ch, current[ch], 1.5, base_latency_ms)
        state.skip = 1
        _remember(state, tuning, ch, win.p99_ms, 0)
        return Decision("buffer", f"{ch}: buffer bound {current[ch]:g} -> {grown:g} ms "
                                  f"(p99 {win.p99_ms:g} ms, under half of {bound_ms:g} ms)", new, ch)
    state.slack = 0
    dominant = win.dominant()
    where = f"{dominant[0]} ({dominant[1]} {dominant[2]:g} ms)" if dominant else "no part measured"
    buffered, queued = sum(win.buffer_ms.values()), sum(win.queue_ms.values())
    shrinkable = sorted((ch for ch in channels if current[ch] > FLOOR_MS and ch not in state.held),
                        key=lambda c: -win.buffer_ms.get(c, 0.0))
    if shrinkable and buffered > 0 and (buffered >= BUFFERS_DOMINATE * queued or not busy):
        largest = win.buffer_ms.get(shrinkable[0], 0.0)
        cheap = [c for c in shrinkable if c in chained and win.buffer_ms.get(c, 0.0) >= CHEAP_SHARE * largest]
        ch = (cheap or shrinkable)[0]
        smaller = round(max(FLOOR_MS, current[ch] / 2), 3)
        new = {k: dict(v) for k, v in tuning.items()}
        new[ch] = {**new.get(ch, {}), "latency_ms": smaller}
        state.skip = 1
        _remember(state, tuning, ch, win.p99_ms, -1)
        return Decision("buffer", f"{ch}: buffer bound {current[ch]:g} -> {smaller:g} ms (p99 {win.p99_ms:g} ms "
                                  f"over {bound_ms:g} ms; buffer wait {win.buffer_ms.get(ch, 0):g} ms)", new, ch)
    tuned = [ch for ch in channels if current[ch] < base_latency_ms and ch not in state.held]
    if queued > buffered and tuned and busy:
        # Tuples wait in queues, for a receiver short of CPU: smaller batches would cost it more
        # (a message and a wake-up each), so a buffer this controller shrank grows back.
        ch = min(tuned, key=lambda c: current[c])
        new, grown = _grown(tuning, ch, current[ch], 2.0, base_latency_ms)
        state.skip = 1
        _remember(state, tuning, ch, win.p99_ms, 1)
        return Decision("buffer", f"{ch}: buffer bound {current[ch]:g} -> {grown:g} ms (p99 {win.p99_ms:g} ms over "
                                  f"{bound_ms:g} ms; queues wait {queued:g} ms, buffers {buffered:g} ms: the "
                                  "receivers are short of CPU, smaller batches cost more of it)", new, ch)
    if moves and win.queue_ms:
        ch = max(win.queue_ms, key=lambda c: win.queue_ms[c])
        state.skip = state.backoff
        state.backoff = min(MAX_BACKOFF, state.backoff * 2)
        return Decision("move", f"p99 {win.p99_ms:g} ms over {bound_ms:g} ms with no buffer step left to take: "
                                f"keep {ch} in one worker (queue wait {win.queue_ms[ch]:g} ms)", channel=ch)
    state.warning = f"p99 {win.p99_ms:g} ms over {bound_ms:g} ms: {where} dominates"
    state.skip = state.backoff
    state.backoff = min(MAX_BACKOFF, state.backoff * 2)
    return Decision("warn", state.warning)


def status_entry(constraint: Any, state: ConstraintState, win: PathWindow | None,
                 actions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A constraint's entry in ``status --json`` ``constraints``."""
    measured = win.p99_ms if win is not None else None
    entry: dict[str, Any] = {
        "path": list(constraint.path), "p99_ms": constraint.p99_ms, "window_secs": constraint.window_secs,
        "measured_p99_ms": measured, "met": None if measured is None else measured <= constraint.p99_ms,
        "windows_met": state.windows_met, "windows": state.windows, "actions": list(actions),
    }
    if win is not None:
        entry["samples"] = win.samples
        entry["parts_ms"] = {"buffer": win.buffer_ms, "queue": win.queue_ms, "processing": win.exec_ms}
    if state.warning:
        entry["warning"] = state.warning
    return entry
