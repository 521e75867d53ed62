"""The windowed bolt executor: feeds a :class:`~nstorm.window.engine.WindowEngine`, keeps its clock, acks.

A :class:`~nstorm.window.bolt.WindowedBolt` runs in a :class:`WindowedBoltExecutor`, a bolt
executor whose per-batch step (:meth:`WindowedBoltExecutor._process_batch`) hands each tuple to
the engine instead of ``process``: the plain bolt's hot path (``worker.bolt``) is untouched.
After each batch, and on a timer of its own (the loop's tick: the next processing-time window
end, or the moment an upstream task turns idle), it recomputes the watermark
(:class:`~nstorm.window.watermark.Watermarks`: per upstream task, the minimum over the tasks
that are not idle) and advances the engine, which calls back :meth:`_fire` per firing.

Acking. With acking on and the ``memory`` state provider the engine *holds* each tuple's ack
until the tuple leaves its last window (Storm's rule): a run of input tuples is acked at once
as usual, but with, as its child, an edge of the bucket its tuples leave with, which the engine
acks when the bucket is released (see :mod:`nstorm.window.engine`); a firing's emits anchor to
the roots of the window's tuples. With a durable provider the tuples are acked on arrival (the
open windows are in the checkpoint) and a firing's emits are unanchored: a failure rolls the
topology back anyway.

State. The engine's windows and the watermark bookkeeping are msgpack data: they go with the
state on a live migration (:meth:`snapshot_extra`) and into each checkpoint
(:meth:`checkpoint_extra`), so that no window is lost or fired twice in either.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from nstorm import latency
from nstorm.component import Tuple
from nstorm.window.bolt import TupleWindow, WindowedBolt
from nstorm.window.engine import ADDED, FULL, LATE, Firing, WindowEngine
from nstorm.window.watermark import Watermarks
from worker import wire
from worker.bolt import BoltExecutor
from worker.chaining import SIGNALS
from worker.host import Host
from worker.qos import Traced
from worker.runs import InputRun

__all__ = ["WindowedBoltExecutor"]

log = logging.getLogger(__name__)
STAMPED = latency.STAMPED
LOG_EVERY_SECS = 60.0  # malformed and refused tuples are logged at most this often
MAX_TIMER_SECS = 1.0  # the loop looks at the clock at least this often


class WindowedBoltExecutor(BoltExecutor):
    """Runs a :class:`WindowedBolt` (see the module docstring)."""

    extra_what = "a window's accumulator or tuple"  # what a checkpoint names when it is not msgpack data

    def __init__(self, host: Host, executor_id: str, task: int, cls: type, definition: Mapping[str, Any]) -> None:
        super().__init__(host, executor_id, task, cls, definition)
        spec = self.spec["window"]
        bolt: WindowedBolt = self.instance
        self.ts_field: str | None = spec.get("timestamp_field")
        self.event_time = self.ts_field is not None
        self.key_fields: list[str] = list(spec.get("key_fields") or ())
        self.late_stream: str | None = spec.get("late_stream")
        self.incremental = bool(spec.get("incremental"))
        self.durable = host.checkpoints is not None
        self.hold = bool(self.outbox.acking) and not self.durable
        conf = self.conf
        self.engine = WindowEngine(
            type(bolt).window, self._fire, event_time=self.event_time,  # type: ignore[arg-type]
            lateness=float(spec.get("allowed_lateness_secs") or 0.0), keep_tuples=not self.incremental,
            hold_acks=self.hold, max_tuples=int(conf.get("topology.window.max.tuples") or 0),
            init=self._init_acc, add=None, merge=self._merge_acc)
        self.marks = Watermarks(float(spec.get("lag_secs") or 0.0), float(conf.get("topology.watermark.idle.secs") or 5.0))
        outputs = self.definition["components"][self.component]["outputs"]
        self.out_ts = {s: f.index(self.ts_field) for s, f in outputs.items()
                       if self.ts_field and self.ts_field in f and s != self.late_stream}
        self.extract: dict[tuple[int, str], tuple[type[Tuple], int, list[int]] | None] = {}
        self.malformed = 0
        self.refused = 0
        self.refused_largest = -math.inf  # the newest timestamp refused in this batch (it moves the watermark)
        self._lost_run: Any = None  # the input run a failure of user code failed last (once per run)
        self.window_error: str | None = None
        self.warned_at = -math.inf
        self.tick_secs = MAX_TIMER_SECS  # the loop's tick is this executor's timer (see _schedule)
        self.next_tick = time.monotonic() + MAX_TIMER_SECS
        # Incremental windows that never keep a tuple hand add_to_window the Tuple itself.
        self.tuple_items = self.incremental and not (type(bolt).window.is_count and self.event_time)  # type: ignore[union-attr]
        self.engine.add_to = self._add_tuple if self.tuple_items else self._add_acc
        self._acc_item: Any = None
        self._acc_tuple: Tuple | None = None

    # -- routing ---------------------------------------------------------------------------
    def refresh_routing(self) -> None:
        upstream = self.upstream
        super().refresh_routing()
        if self.upstream is not upstream:
            self.marks.expect(self.upstream, time.time())

    def _extractor(self, src: int, stream: str) -> tuple[type[Tuple], int, list[int]] | None:
        """The tuple class, timestamp index and key indexes of one upstream (task, stream)."""
        ext = self.extract.get((src, stream), False)
        if ext is False:
            ext = None
            cls = self._classes(src).get(stream)
            if cls is not None:
                fields = cls.meta.fields
                try:
                    ts_idx = fields[self.ts_field] if self.ts_field else -1
                    ext = (cls, ts_idx, [fields[f] for f in self.key_fields])
                except KeyError:
                    ext = None
            self.extract[(src, stream)] = ext
        return ext  # type: ignore[return-value]

    # -- input -----------------------------------------------------------------------------
    def _process_batch(self, src: int, batch: Any) -> None:
        """Every tuple of the batch into its windows (or the late stream); then the watermark."""
        if batch is None or type(batch) in SIGNALS:  # a marker, a barrier, a rescale's or a chain's
            super()._process_batch(src, batch)
            return
        if type(batch) is Traced:  # a latency constraint's sampled batch (worker.qos)
            self.take_traced(src, batch)
            return
        decoded = self.decode(batch) if type(batch) is bytes else batch
        if decoded is None:
            return
        if src >= len(self.routing.task_component):  # type: ignore[union-attr]  # a task a rescale added
            self.unplaced.append((src, decoded))
            return
        values, runs, streams = decoded
        inbox = self.inbox
        inbox.batch_avg += (len(values) - inbox.batch_avg) * 0.125
        outbox = self.outbox
        acking = outbox.acking
        now = time.time()
        if runs is None or not acking:
            runs = (len(values), None)
        stamp = self.arrival.add_stamp
        largest = -math.inf
        take = self._take
        default = self._extractor(src, "default") if streams is None else None
        i = 0
        for k in range(0, len(runs), 2):
            n, a = runs[k], runs[k + 1]
            own = InputRun(a) if a else None
            outbox.current = own
            roots = a[0::2] if self.hold and a else None
            if a and a[0] >= STAMPED:
                stamp(a[0])
            ok = True
            for j in range(i, i + n):
                if streams is None:
                    ts = take(default, src, "default", values[j], now, roots, a)
                else:
                    stream = streams.get(j, "default")
                    ts = take(self._extractor(src, stream), src, stream, values[j], now, roots, a)
                if ts is None:
                    ok = False
                elif ts > largest:
                    largest = ts
            i += n
            if a and ok:
                x = own._ackval  # type: ignore[union-attr]
                acks = outbox.acks  # (a firing's emits may have flushed the last one)
                for q in range(0, len(a), 2):
                    r = a[q]
                    acks[r] = acks.get(r, 0) ^ a[q + 1] ^ x
        outbox.current = None
        self.executed += len(values)
        self._drain_acks()
        if self.refused_largest > largest:
            # A refused tuple was still sent: its timestamp moves the watermark as any other's, or
            # a full engine would refuse for good (no window could fire to make room).
            largest = self.refused_largest
        self.refused_largest = -math.inf
        self.marks.observe(src, largest if largest > -math.inf else None, now)
        self._advance(now)

    def _take(self, ext: tuple[type[Tuple], int, list[int]] | None, src: int, stream: str, v: Any, now: float,
              roots: Any, anchors: Any) -> float | None:
        """One tuple into the engine: its timestamp; None if it was failed (malformed, refused), or
        -inf if it was dropped (a durable provider) or has none."""
        try:
            if ext is None:
                raise KeyError(stream)
            _cls, ts_idx, key_idx = ext
            if ts_idx >= 0:
                ts = v[ts_idx]
                t = type(ts)
                if t is not float and t is not int and (t is bool or not isinstance(ts, int | float)):
                    raise TypeError(ts)
                if not math.isfinite(ts):
                    raise ValueError(ts)
            else:
                ts = now
            if not key_idx:
                key = None
            elif len(key_idx) == 1:
                key = v[key_idx[0]]
                hash(key)
            else:
                key = tuple([v[q] for q in key_idx])
                hash(key)
        except (IndexError, KeyError, TypeError, ValueError, OverflowError):
            self._malformed(src, stream, v, anchors)
            return None if not self.durable else -math.inf
        if self.tuple_items:  # an accumulator's tuple, never kept: the Tuple itself
            item: Any = ext[0]()
            item.values = v
            if self.outbox.acking:  # (without acking, the class holds them)
                item.anchors = None
                item._ackval = 0
        else:
            item = [v, src, stream if stream != "default" else None]
        result = self.engine.add(key, ts, item, roots)
        if result == ADDED:
            self.acked += 1
        elif result == LATE:
            self.acked += 1
            if self.late_stream:
                try:
                    self.instance.emit(v, stream=self.late_stream)
                except Exception as exc:
                    self.record_error("late stream", exc)
        elif result == FULL:
            if ts > self.refused_largest:
                self.refused_largest = float(ts)
            return self._refuse(anchors)
        else:
            self.acked += 1  # in no window (a gap between windows): acked with its run
        return float(ts)

    def _malformed(self, src: int, stream: str, values: Any, anchors: Any) -> None:
        """A tuple without a usable timestamp or key: counted, failed (dropped with a durable
        provider, where a failure would roll back and replay it forever), logged once a minute."""
        self.malformed += 1
        self.failed += 1
        if anchors and not self.durable:
            self.outbox.fail_anchors(anchors)
        now = time.monotonic()
        if now - self.warned_at >= LOG_EVERY_SECS:
            self.warned_at = now
            what = f"timestamp field {self.ts_field!r}" if self.ts_field else "key fields"
            log.warning("executor %s: %d malformed tuples so far (%s missing or not a number), e.g. %r from task %d/%s",
                        self.executor_id, self.malformed, what, list(values)[:8], src, stream)

    def _refuse(self, anchors: Any) -> float | None:
        """``topology.window.max.tuples`` reached: the tuple is failed (memory: the spout may replay
        it once windows fired) or, with a durable provider, dropped; status shows the error."""
        self.refused += 1
        self.failed += 1
        limit = self.engine.max_tuples
        self.window_error = (f"{self.executor_id} holds {limit} tuples in its windows (topology.window.max.tuples): "
                             f"{self.refused} refused")
        if anchors and not self.durable:
            self.outbox.fail_anchors(anchors)
        mono = time.monotonic()
        if mono - self.warned_at >= LOG_EVERY_SECS:
            self.warned_at = mono
            log.warning("executor %s: %s", self.executor_id, self.window_error)
            self.last_error = self.window_error
        return None if not self.durable else -math.inf

    def _drain_acks(self) -> None:
        to_ack = self.engine.to_ack
        if to_ack:
            acks = self.outbox.acks
            for r, x in to_ack.items():
                acks[r] = acks.get(r, 0) ^ x
            to_ack.clear()

    # -- time ------------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        """The watermark at wall-clock ``now`` into the engine (which fires what it passed)."""
        watermark = self.marks.current(now) if self.event_time else now
        self.engine.advance(watermark)
        self._drain_acks()
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        """When the loop looks at the clock next: the next processing-time window end, or the
        moment the next upstream task turns idle (event time), at most a second away."""
        if self.event_time:
            at = self.marks.next_idle(now)
        else:
            at = self.engine.next_due()
        wait = MAX_TIMER_SECS if at is None else min(MAX_TIMER_SECS, max(0.0, at - now))
        self.next_tick = time.monotonic() + wait

    def _tick(self) -> None:
        try:
            self._advance(time.time())
        except Exception as exc:
            self.record_error("window timer", exc)

    # -- firing ----------------------------------------------------------------------------
    def _fire(self, f: Firing) -> None:
        bolt: WindowedBolt = self.instance
        outbox = self.outbox
        anchor = None
        if f.roots:
            flat: list[int] = []
            for r in f.roots:
                flat.append(r)
                flat.append(0)
            anchor = InputRun(flat)
        prev = outbox.current
        outbox.current = anchor
        view = TupleWindow(f.key, f.start, f.end, f.late, f, self._tuples)
        stamp = bool(self.out_ts) and self.event_time
        wrapped = stamp or anchor is not None
        if wrapped:
            emit, emit_many = bolt.emit, bolt.emit_many
            bolt.emit = self._firing_emit(emit, f.end if stamp else None)  # type: ignore[method-assign]
            bolt.emit_many = self._firing_emit_many(emit, f.end if stamp else None)  # type: ignore[method-assign]
        try:
            if self.incremental:
                bolt.fire_window(f.acc, view)
            else:
                bolt.process_window(view)
        except Exception as exc:
            self.record_error("fire_window" if self.incremental else "process_window", exc)
            self._lost(anchor.anchors if anchor is not None else None, "a window's firing raised")
        finally:
            outbox.current = prev
            if wrapped:
                bolt.emit, bolt.emit_many = emit, emit_many  # type: ignore[method-assign]
        if anchor is not None:
            f.ackval = anchor._ackval

    def _firing_emit(self, emit: Callable[..., None], end: float | None) -> Callable[..., None]:
        """``emit`` during a firing: anchored to the window's tuples whatever the caller names
        (Storm's ``collector.emit(window.get(), values)`` names them, and they carry no anchors
        of their own here), and, ``end`` given, the timestamp field (where the stream declares
        it) set to the window's end."""
        out_ts = self.out_ts

        def fired(values: Any, stream: str = "default", anchors: Any = None, **kwargs: Any) -> None:
            if end is not None:
                idx = out_ts.get(stream)
                if idx is not None and idx < len(values):
                    values = list(values)
                    values[idx] = end
                    values = tuple(values)
            emit(values, stream)

        return fired

    def _firing_emit_many(self, emit: Callable[..., None], end: float | None) -> Callable[..., None]:
        one = self._firing_emit(emit, end)

        def stamped_many(values_list: Any, stream: str = "default", anchors: Any = None) -> None:
            for values in values_list:
                one(values, stream, anchors)

        return stamped_many

    def _tuples(self, items: list[Any]) -> list[Tuple]:
        """The Tuples of stored items ``[values, source task, stream]`` (not anchored: the window is)."""
        return [self._tuple(item) for item in items]

    def _tuple(self, item: Any) -> Tuple:
        values, src, stream = item
        cls = None
        try:
            cls = self._classes(int(src)).get(stream or "default")
        except (KeyError, TypeError, ValueError, IndexError):
            cls = None
        if cls is None:
            return Tuple(values, "", int(src), stream or "default")
        tup = cls()
        tup.values = values
        if self.outbox.acking:  # (without acking, the class holds them)
            tup.anchors = None
            tup._ackval = 0
        return tup

    def _lost(self, anchors: Any, reason: str) -> None:
        """User window code raised, so a result or a tuple's part in a window is lost: with a
        durable provider the topology rolls back (as for a plain bolt's failed tuple), else
        the trees of ``anchors`` fail and their spouts replay them (what reaches a window
        that already fired is late)."""
        if self.durable:
            self.taint(reason)
        elif anchors:
            self.failed += len(anchors) // 2
            self.outbox.fail_anchors(anchors)

    def _lost_input(self, reason: str) -> None:
        """As :meth:`_lost`, for the input run being taken (once per run)."""
        cur = self.outbox.current
        if cur is not self._lost_run:
            self._lost_run = cur
            self._lost(cur.anchors if cur is not None else None, reason)

    # -- accumulators (incremental) ------------------------------------------------------------
    def _init_acc(self) -> Any:
        try:
            return self.instance.init_window()
        except Exception as exc:
            self.record_error("init_window", exc)
            self._lost_input("init_window raised")
            return None

    def _add_acc(self, acc: Any, item: Any) -> Any:
        if type(item) is list:  # kept as msgpack data (count windows in event time wait for the watermark)
            if item is not self._acc_item:  # a tuple in several windows is built once
                self._acc_item = item
                self._acc_tuple = self._tuple(item)
            item = self._acc_tuple
        try:
            return self.instance.add_to_window(acc, item)
        except Exception as exc:
            self.record_error("add_to_window", exc)
            self._lost_input("add_to_window raised")
            return acc

    def _add_tuple(self, acc: Any, tup: Tuple) -> Any:
        try:
            return self.instance.add_to_window(acc, tup)
        except Exception as exc:
            self.record_error("add_to_window", exc)
            self._lost_input("add_to_window raised")
            return acc

    def _merge_acc(self, acc: Any, other: Any) -> Any:
        try:
            return self.instance.merge_windows(acc, other)
        except Exception as exc:
            self.record_error("merge_windows", exc)
            self._lost_input("merge_windows raised")
            return acc

    # -- state: hand-over and checkpoints --------------------------------------------------------
    def _export(self) -> dict[str, Any]:
        return {"engine": self.engine.export(), "marks": self.marks.export(),
                "malformed": self.malformed, "refused": self.refused}

    def _load(self, data: Mapping[str, Any]) -> None:
        self.engine.load(data["engine"])
        self.marks.load(data.get("marks") or {})
        self.marks.restart(time.time())
        self.malformed = int(data.get("malformed") or 0)
        self.refused = int(data.get("refused") or 0)
        if self.routing is not None:
            self.marks.expect(self.upstream, time.time())
        self._schedule(time.time())

    def snapshot_extra(self) -> dict[str, Any]:
        try:
            return {"windows": wire.pack(self._export())}
        except (TypeError, ValueError, OverflowError) as exc:
            self.record_error("hand_over", ValueError(f"windows of {self.executor_id} are not msgpack data "
                                                      f"(an accumulator?): {exc}"))
            return {}

    def restore_extra(self, entry: Mapping[str, Any]) -> None:
        data = entry.get("windows")
        if not data:
            return
        try:
            self._load(wire.unpack_state(data))
        except Exception as exc:  # noqa: BLE001 - a broken hand-over starts with empty windows, loudly
            self.record_error("windows", exc)

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"windows": self._export()}

    def restore_checkpoint_extra(self, data: Mapping[str, Any]) -> None:
        windows = data.get("windows")
        if windows:
            self._load(windows)

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        engine = self.engine
        wm = engine.watermark
        data["window"] = {"watermark": wm if math.isfinite(wm) else None, "open_windows": engine.open_count(),
                          "late_tuples": engine.late, "fired": engine.fired, "tuples": engine.tuples,
                          "malformed": self.malformed, "refused": self.refused, "error": self.window_error,
                          "holds_acks": self.hold}  # its open windows hold their tuples' trees (stall check)
        return data
