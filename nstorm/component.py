"""The component API: :class:`Spout`, :class:`Bolt`, :class:`Tuple` and :class:`Context`.

Users subclass :class:`Spout` or :class:`Bolt`. The framework owns the run loop:
each executor is a thread of a worker process that calls the hooks below, always
from that one thread, so a component never needs locks of its own.

Call order for a spout: ``open`` once, then ``activate``; then ``next_tuple``
in a loop while the topology is active (interleaved with ``ack`` / ``fail``
for tracked tuples); ``deactivate`` when the topology is deactivated;
``close`` when the executor stops (it may not be called if the worker is
killed). For a bolt: ``prepare`` once, then ``process`` for every input tuple
(``process_tick`` for tick tuples), or ``process_batch`` once per input batch if
the bolt defines it, ``cleanup`` when the executor stops.
No hook may block for long: a spout's ``next_tuple`` that has nothing to emit
should return at once (the executor backs off by itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nstorm.usermetrics import Counter, UserMetrics

__all__ = ["Batch", "Bolt", "Component", "Context", "Spout", "TICK_STREAM", "Tuple", "TupleMeta"]

TICK_STREAM = "__tick"


class TupleMeta:
    """What the tuples of one (source executor, stream) share; one object per pair, not per tuple."""

    __slots__ = ("source", "source_task", "stream", "fields")

    def __init__(self, source: str, source_task: int, stream: str, fields: Mapping[str, int]) -> None:
        self.source = source
        self.source_task = source_task
        self.stream = stream
        self.fields = fields


class Tuple:
    """One data tuple as a bolt sees it: ``tup.values``, ``tup[0]``, ``tup["word"]``.

    :ivar values: the tuple's values, a tuple.
    :ivar source: the component that emitted it (``"__system"`` for ticks).
    :ivar source_task: index of the emitting executor within its component.
    :ivar stream: the stream it was emitted on (``"default"`` unless named).

    Instances are created by the framework as instances of a subclass per (source
    executor, stream) that holds the shared metadata as class attributes, so that the
    executor fills one slot per tuple (two with acking) instead of calling ``__init__``;
    ``isinstance(tup, Tuple)`` holds. A tuple that ``process`` did not keep a reference
    to is filled again for the next one (nothing can tell: nothing refers to it); one it
    kept is never touched again. Treat them as immutable.
    """

    __slots__ = ("values", "meta", "anchors", "_ackval")

    def __init__(
        self,
        values: Sequence[Any],
        source: str = "",
        source_task: int = -1,
        stream: str = "default",
        anchors: Any = None,
        fields: Mapping[str, int] | None = None,
    ) -> None:
        self.values = values
        self.meta = TupleMeta(source, source_task, stream, fields or {})
        self.anchors = anchors  # flat [root, edge, root, edge, ...] or None: acker bookkeeping
        self._ackval = 0  # XOR of the edge ids of tuples anchored to this one

    @property
    def source(self) -> str:
        return self.meta.source

    @property
    def source_task(self) -> int:
        return self.meta.source_task

    @property
    def stream(self) -> str:
        return self.meta.stream

    def __getitem__(self, key: int | str) -> Any:
        if type(key) is str:
            try:
                return self.values[self.meta.fields[key]]
            except KeyError:
                msg = f"stream {self.meta.source}/{self.meta.stream} has no field {key!r}"
                raise KeyError(msg) from None
            except IndexError:
                msg = (f"field {key!r} of stream {self.meta.source}/{self.meta.stream} is missing: "
                       f"{self.meta.source} emitted {len(self.values)} values for {len(self.meta.fields)} fields")
                raise IndexError(msg) from None
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def is_tick(self) -> bool:
        """True for a tick tuple (``tick_secs`` on the component)."""
        return self.meta.stream == TICK_STREAM

    @property
    def fields(self) -> tuple[str, ...]:
        """Names of the values, in order."""
        fields = self.meta.fields
        return tuple(sorted(fields, key=fields.__getitem__))

    def __repr__(self) -> str:
        return f"Tuple({self.source}:{self.source_task}/{self.stream} {list(self.values)!r})"


def delivered_tuple_class(meta: TupleMeta, anchored: bool) -> type[Tuple]:
    """A :class:`Tuple` subclass for the tuples of one (source executor, stream): the executor
    then fills one slot per tuple (``values``; with acking also ``anchors``, and ``_ackval`` where
    the bolt acks by hand: :meth:`worker.outbox.Outbox.anchor_owner`).

    ``meta`` (and, without acking, ``anchors = None``) become class attributes that shadow
    the slots of the same name; they are only ever read. Its ``__init__`` is ``object``'s, so
    that ``cls()`` makes an empty tuple in C (half the time of ``Tuple.__new__(cls)``, which
    goes through a generic wrapper). Internal to the worker.
    """
    attrs: dict[str, Any] = {"__slots__": (), "meta": meta, "__init__": object.__init__}
    if not anchored:
        attrs["anchors"] = None
        attrs["_ackval"] = 0
    return type("Tuple", (Tuple,), attrs)


class Batch:
    """The tuples of one input batch, as :meth:`Bolt.process_batch` sees them.

    A batch holds tuples from one upstream executor on one stream, in the order they
    were emitted. ``batch.values`` is the list of their values (no :class:`Tuple` is
    built for them); iterating yields one :class:`Tuple` at a time, and while a tuple
    is the one the loop is at, the bolt's emits are anchored to it, as in ``process``.
    Emits made while no tuple of the batch is current (before or after the loop, or
    over ``values``) are anchored to every tuple of the batch.

    :ivar values: the tuples' values, a sequence of tuples.
    :ivar source: the component that emitted them.
    :ivar source_task: index of the emitting executor within its component.
    :ivar stream: the stream they were emitted on.

    Example::

        class Count(Bolt):
            def process_batch(self, batch):
                state = self.state
                for (word,) in batch.values:
                    state[word] = state.get(word, 0) + 1
    """

    __slots__ = ("values", "meta", "acking", "_cls")

    def __init__(self, values: Sequence[Sequence[Any]], meta: TupleMeta | None = None,
                 tuple_cls: type[Tuple] | None = None, acking: Any = None) -> None:
        """Built by the executor. ``acking`` is the framework's bookkeeping of the batch for the
        acker (a :class:`worker.runs.BatchLedger`; None with acking off): user code leaves it alone."""
        self.values = values
        self.meta = meta or TupleMeta("", -1, "default", {})
        self.acking = acking
        self._cls = tuple_cls

    @property
    def anchors(self) -> list[Any] | None:
        """Every distinct root of the batch as an anchor entry ``[root, 0, root, 0, ...]`` (None
        if nothing is anchored): what an emit anchored to the whole batch is anchored to."""
        return self.acking.anchors if self.acking is not None else None

    @property
    def source(self) -> str:
        return self.meta.source

    @property
    def source_task(self) -> int:
        return self.meta.source_task

    @property
    def stream(self) -> str:
        return self.meta.stream

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Any:
        acking = self.acking
        cls = self._cls or delivered_tuple_class(self.meta, acking is not None)  # (None: a batch built by hand)
        if acking is None:
            for v in self.values:
                tup = cls()
                tup.values = v
                yield tup
            return
        per = acking.per_tuple(len(self.values))
        made = acking.made
        outbox = acking.outbox
        prev = outbox.current  # the batch being processed, usually
        try:
            for i, v in enumerate(self.values):
                tup = cls()
                tup.values = v
                tup.anchors = per[i] if per is not None else None
                tup._ackval = 0
                if per is not None:
                    made.append(tup)
                outbox.current = tup
                yield tup
        finally:
            outbox.current = prev  # emits after the loop anchor to what they did before it

    def column(self, field: int | str) -> list[Any]:
        """One field of every tuple, by position or name: ``batch.column("word")``."""
        i = field if type(field) is int else self.meta.fields.get(field)  # type: ignore[arg-type]
        if i is None:
            msg = f"stream {self.meta.source}/{self.meta.stream} has no field {field!r}"
            raise KeyError(msg)
        return [v[i] for v in self.values]

    def __repr__(self) -> str:
        return f"Batch({self.meta.source}:{self.meta.source_task}/{self.meta.stream}, {len(self.values)} tuples)"


@dataclass(frozen=True)
class Context:
    """Where an executor runs and what the topology looks like, given to ``open``/``prepare``.

    :ivar component: the component's name.
    :ivar task_index: this executor's index within the component (0-based).
    :ivar executor_id: ``"component:index"``.
    :ivar topology: the topology's name.
    :ivar worker_id: ``"node:port"`` of the hosting worker.
    :ivar parallelism: executors per component name, now (a live rescale updates it).
    :ivar metrics: this executor's user metrics (see :meth:`register_counter`, :meth:`register_gauge`).
    """

    component: str
    task_index: int
    executor_id: str
    topology: str
    worker_id: str = ""
    parallelism: Mapping[str, int] = field(default_factory=dict)
    owner: Callable[[Any], bool] | None = field(default=None, repr=False, compare=False)

    def owns(self, key: Any) -> bool:
        """True if this executor holds ``key``'s key group now: fields grouping sends it the
        tuples of that key, and its ``keyed_state`` keeps them. A partitioned spout emits only for
        the partitions it owns (during a live rescale, a group on its way here is not owned yet)."""
        return self.owner(key) if self.owner is not None else True
    metrics: UserMetrics = field(default_factory=UserMetrics, repr=False, compare=False)

    def register_counter(self, name: str) -> Counter:
        """A counter reported with this executor (Storm's ``registerCounter``): ``.inc(n=1)``.

        Its value reaches ``nstorm status --json`` and the UI's ``/metrics``; it moves with the
        executor in a live migration.
        """
        return self.metrics.register_counter(name)

    def register_gauge(self, name: str, fn: Callable[[], Any]) -> None:
        """A gauge (Storm's ``registerGauge``): ``fn()`` is read at each report, from the worker's
        heartbeat thread, so it should only read (``lambda: len(self.cache)``)."""
        self.metrics.register_gauge(name, fn)


class Component:
    """What spouts and bolts share: outputs, per-component config and emitting.

    :ivar outputs: field names of the default stream, as a tuple, or a dict
        ``{stream: fields}`` for named streams.
    :ivar tick_secs: deliver a tick tuple every this many seconds (None: no ticks).
    :ivar config: component-level configuration merged over the topology's.
    :ivar context: the executor's :class:`Context` (the one ``open``/``prepare`` gets): where it
        runs, ``parallelism`` now, ``owns(key)``.
    :ivar state: a dict that belongs to this executor: it moves with it when it migrates to
        another worker, and with ``topology.state.provider`` ``lmdb`` or ``redis`` it is
        checkpointed and restored after a failure (exactly once). Keep it to plain data
        (msgpack types). A spout that is to be replayed keeps its position here.
    :ivar keyed_state: a dict from the key a bolt's input is fields-grouped on (one field's
        value, or a tuple of the values of several) to a value, stored per key group
        (``topology.max.parallelism``), so that it follows its keys; checkpoints write only
        the keys set or deleted since the last one, found by comparing it with a copy kept from
        the last checkpoint. Assign a changed value again (``self.keyed_state[k] = v``): a
        change in place is not seen (or, with a durable provider, call ``touch(k)``).
    """

    outputs: ClassVar[Sequence[str] | Mapping[str, Sequence[str]]] = ()
    tick_secs: ClassVar[float | None] = None
    config: ClassVar[Mapping[str, Any]] = {}

    # Set by the executor; bound straight onto the instance so that a user's
    # ``self.emit(...)`` is one call into the collector, with no extra frame.
    def emit(self, values: Sequence[Any], stream: str = "default", **kwargs: Any) -> None:
        """Emit a tuple on ``stream`` (see :class:`Spout` / :class:`Bolt` for the options)."""
        msg = f"{type(self).__name__}.emit called outside a running executor"
        raise RuntimeError(msg)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", **kwargs: Any) -> None:
        """Emit to executor ``task`` of each component that subscribes with ``direct_grouping``."""
        msg = f"{type(self).__name__}.emit_direct called outside a running executor"
        raise RuntimeError(msg)

    def on_checkpoint(self, checkpoint_id: int) -> None:
        """Called in the executor thread just before its snapshot for ``checkpoint_id`` is taken
        (a provider other than ``memory``): flush what must be in it (Storm's ``preCommit``)."""

    def on_key_groups(self, assigned: list[int], released: list[int]) -> None:
        """Called in the executor thread when a live rescale changed the key groups this executor
        owns (``topology.max.parallelism`` groups; ``context.owns(key)`` tells a key's): the
        ``keyed_state`` of ``assigned`` groups has arrived, that of ``released`` ones has left.
        ``self.state`` (executor-wide) is never split: it stays with its executor, and is dropped
        with an executor a rescale removes."""

    def on_commit(self, checkpoint_id: int) -> None:
        """Called in the executor thread once ``checkpoint_id`` is committed (every executor wrote
        it; Flink's ``notifyCheckpointComplete``): commit a sink's transaction here. As in Flink, a
        call may be skipped (the executor moved live or was restored meanwhile): a later one
        stands for it, so commit everything buffered up to ``checkpoint_id``, not only its own.
        A rollback may undo effects seen after it; emits to the outside world stay at least
        once, so a sink that writes here should write idempotently (keyed by the id)."""

    def log(self, message: str, *args: Any) -> None:
        """Write a line to the worker's log, tagged with the executor id."""
        import logging

        logging.getLogger(f"nstorm.component.{type(self).__name__}").info(message, *args)


class Spout(Component):
    """A source of tuples. Subclass it and write :meth:`next_tuple`.

    ``self.emit(values, stream="default", msg_id=None)``: with a ``msg_id`` the
    tuple tree is tracked by the acker and :meth:`ack` or :meth:`fail` is called
    with that id once it is fully processed, failed or timed out
    (``topology.message.timeout.secs``). Replaying a failed tuple is the spout's
    decision, as in Storm.

    Example::

        class Numbers(Spout):
            outputs = ("n",)
            def open(self, conf, context):
                self.n = 0
            def next_tuple(self):
                self.n += 1
                self.emit((self.n,), msg_id=self.n)
    """

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        """Called once in the executor thread before anything else."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples; must return quickly. Called in a loop while active."""
        msg = f"{type(self).__name__} must implement next_tuple()"
        raise NotImplementedError(msg)

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out; replay it if you want."""

    def activate(self) -> None:
        """The topology became active: ``next_tuple`` calls start (again)."""

    def deactivate(self) -> None:
        """The topology was deactivated: ``next_tuple`` is not called until reactivated."""

    def close(self) -> None:
        """The executor is stopping. May not be called if the worker is killed."""


class Bolt(Component):
    """An operator on tuples. Subclass it and write :meth:`process`.

    Emits inside :meth:`process` are anchored to the input tuple and the input is
    acked when :meth:`process` returns (failed if it raises), like streamparse.
    Set ``auto_ack = False`` to call :meth:`ack` / :meth:`fail` yourself and
    ``auto_anchor = False`` to emit unanchored tuples;
    ``self.emit(values, anchors=[t1, t2])`` anchors explicitly.

    :ivar auto_ack: ack each input after ``process`` returns (default True).
    :ivar auto_anchor: anchor emits to the tuple being processed (default True).
    :ivar auto_fail: fail the input if ``process`` raises (default True).
    :ivar chainable: a latency constraint's controller may run this bolt in its upstream
        executor's thread when that executor is its only input (default True; False is Flink's
        ``disableChaining``).
    :ivar state: see :class:`Component` (``keyed_state`` too).

    Example::

        class Count(Bolt):
            outputs = ("word", "count")
            def process(self, tup):
                word = tup["word"]
                self.state[word] = n = self.state.get(word, 0) + 1
                self.emit((word, n))
    """

    auto_ack: ClassVar[bool] = True
    auto_anchor: ClassVar[bool] = True
    auto_fail: ClassVar[bool] = True
    chainable: ClassVar[bool] = True
    state: dict[Any, Any]

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        """Called once in the executor thread before the first tuple."""

    def process(self, tup: Tuple) -> None:
        """Handle one input tuple."""
        msg = f"{type(self).__name__} must implement process(tup)"
        raise NotImplementedError(msg)

    def process_batch(self, batch: Batch) -> None:
        """Handle one input batch at once, instead of :meth:`process` per tuple (optional).

        Define it when per-tuple calls cost more than the work: the executor then calls it
        once per batch (the tuples one upstream executor sent in one message, one stream at a
        time, in emit order). With ``auto_ack`` every tuple of the batch is acked when it
        returns and failed if it raises; ``for tup in batch`` anchors emits to each tuple in
        turn (see :class:`Batch`). Tick tuples still go to :meth:`process_tick`.
        """
        for tup in batch:
            self.process(tup)

    def process_tick(self, tup: Tuple) -> None:
        """Handle a tick tuple (``tick_secs``); by default passes it to :meth:`process`."""
        self.process(tup)

    def emit_many(self, values_list: Iterable[Sequence[Any]], stream: str = "default", anchors: Any = None) -> None:
        """Emit several tuples on ``stream``, exactly as calling :meth:`emit` for each in turn
        would (same routing, order and anchoring), but in one call: what bytewax's ``flat_map``
        is to ``map``. ``self.emit_many([(w,) for w in sentence.split()])`` splits a sentence.
        The executor replaces it with a compiled loop; called elsewhere, it loops over ``emit``.
        """
        for values in values_list:
            self.emit(values, stream, anchors=anchors)

    def ack(self, tup: Tuple) -> None:
        """Ack ``tup`` (only needed with ``auto_ack = False``)."""
        msg = "ack called outside a running executor"
        raise RuntimeError(msg)

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup``: its spout tuple is failed at once (only with ``auto_ack = False``)."""
        msg = "fail called outside a running executor"
        raise RuntimeError(msg)

    def cleanup(self) -> None:
        """The executor is stopping. May not be called if the worker is killed."""
