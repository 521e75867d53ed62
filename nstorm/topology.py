"""Building and validating topologies: :class:`TopologyBuilder` and :class:`Topology`.

``build()`` checks the whole graph before anything reaches a cluster and raises
:class:`~nstorm.errors.TopologyError` naming the problem. The result is a frozen
:class:`Topology` whose :attr:`Topology.definition` is plain JSON data: that is
what Nimbus stores and schedules; the classes stay in the code archive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nstorm.component import Bolt, Component, Spout
from nstorm.constraints import DEFINITION_KEY, constraints_of, parse_constraints
from nstorm.errors import TopologyError
from nstorm.window.checks import declare_late_streams, is_windowed, window_definition

__all__ = [
    "ACKER",
    "ALL",
    "DIRECT",
    "FIELDS",
    "GLOBAL",
    "GROUPINGS",
    "LOCAL_OR_SHUFFLE",
    "NONE",
    "SHUFFLE",
    "BoltDeclarer",
    "Topology",
    "TopologyBuilder",
    "check_topology_name",
    "component_of",
    "is_acker",
    "normalize_outputs",
]

MAX_TASKS = 1 << 16  # task ids must fit the low 16 bits of a root id (worker/wire.py)
ACKER = "__acker"  # the component name of the acker executors (system executors, "__acker:0", ...)


def is_acker(executor_id: str) -> bool:
    """True for an acker executor id."""
    return executor_id.startswith(ACKER + ":")


def component_of(executor_id: str) -> str:
    """The component of an executor id (``count`` of ``count:3``)."""
    return executor_id.rpartition(":")[0]

SHUFFLE = "shuffle"
FIELDS = "fields"
ALL = "all"
GLOBAL = "global"
DIRECT = "direct"
LOCAL_OR_SHUFFLE = "local_or_shuffle"
NONE = "none"
GROUPINGS = (SHUFFLE, FIELDS, ALL, GLOBAL, DIRECT, LOCAL_OR_SHUFFLE, NONE)

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
RESERVED_NAMES = frozenset({"summary"})  # /api/v1/topology/summary is the list, as in Storm's REST API
BAD_TOPOLOGY_NAME = "use letters, digits, '_' and '-' (and not 'summary')"


def valid_topology_name(name: object) -> bool:
    """A topology name: letters, digits, '_' and '-', not a name the REST API's routes take."""
    return isinstance(name, str) and bool(_NAME.match(name)) and name not in RESERVED_NAMES


def check_topology_name(name: object) -> str:
    """``name`` if it is a topology name: any other would make a ZooKeeper path of the
    cluster's tree (``..``) or one kazoo refuses with a traceback.

    :raises TopologyError: one line naming it (exit code 2).
    """
    if not valid_topology_name(name):
        msg = f"topology name {name!r} is invalid: {BAD_TOPOLOGY_NAME}"
        raise TopologyError(msg)
    return name  # type: ignore[return-value]


def normalize_outputs(outputs: Any, owner: str) -> dict[str, list[str]]:
    """``outputs`` as ``{stream: [fields]}``; a bare sequence is the default stream."""
    if isinstance(outputs, Mapping):
        streams = dict(outputs)
    elif isinstance(outputs, str):
        streams = {"default": (outputs,)}
    else:
        streams = {"default": outputs}
    result: dict[str, list[str]] = {}
    for stream, fields in streams.items():
        if isinstance(fields, str):
            fields = (fields,)
        if not isinstance(stream, str) or not stream:
            msg = f"component {owner!r}: stream names must be non-empty strings, got {stream!r}"
            raise TopologyError(msg)
        fields = list(fields)
        for f in fields:
            if not isinstance(f, str) or not f:
                msg = f"component {owner!r}: field names must be non-empty strings, got {f!r}"
                raise TopologyError(msg)
        if len(set(fields)) != len(fields):
            msg = f"component {owner!r}: stream {stream!r} declares a field twice: {fields!r}"
            raise TopologyError(msg)
        result[stream] = fields
    return result


@dataclass(frozen=True)
class _Input:
    component: str
    stream: str
    grouping: str
    fields: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "stream": self.stream,
            "grouping": self.grouping,
            "fields": list(self.fields),
        }


class _Declared:
    def __init__(self, name: str, cls: Any, parallelism: Any, kind: str, conf: Mapping[str, Any] | None) -> None:
        self.name = name
        self.cls = cls
        self.parallelism = parallelism
        self.kind = kind
        self.conf = dict(conf or {})
        self.inputs: list[_Input] = []


class BoltDeclarer:
    """Returned by :meth:`TopologyBuilder.set_bolt`: declare the bolt's inputs, chained."""

    def __init__(self, declared: _Declared) -> None:
        self._declared = declared

    def _add(self, source: str, stream: str, grouping: str, fields: Sequence[str] = ()) -> BoltDeclarer:
        if isinstance(fields, str):
            fields = (fields,)
        self._declared.inputs.append(_Input(source, stream, grouping, tuple(fields)))
        return self

    def shuffle_grouping(self, source: str, stream: str = "default") -> BoltDeclarer:
        """Tuples go to the bolt's executors in turn, evenly."""
        return self._add(source, stream, SHUFFLE)

    def fields_grouping(self, source: str, fields: Sequence[str], stream: str = "default") -> BoltDeclarer:
        """Tuples with equal values of ``fields`` go to the same executor."""
        return self._add(source, stream, FIELDS, fields)

    def all_grouping(self, source: str, stream: str = "default") -> BoltDeclarer:
        """Every executor of the bolt gets a copy of every tuple."""
        return self._add(source, stream, ALL)

    def global_grouping(self, source: str, stream: str = "default") -> BoltDeclarer:
        """Every tuple goes to the executor with the lowest index."""
        return self._add(source, stream, GLOBAL)

    def direct_grouping(self, source: str, stream: str = "default") -> BoltDeclarer:
        """The emitter picks the executor with ``emit_direct(task, values)``."""
        return self._add(source, stream, DIRECT)

    def local_or_shuffle_grouping(self, source: str, stream: str = "default") -> BoltDeclarer:
        """Shuffle among executors in the emitter's own worker if there are any, else all."""
        return self._add(source, stream, LOCAL_OR_SHUFFLE)

    def none_grouping(self, source: str, stream: str = "default") -> BoltDeclarer:
        """No preference (Storm routes it as shuffle)."""
        return self._add(source, stream, NONE)


@dataclass(frozen=True)
class Topology:
    """A validated topology: a JSON definition plus the component classes.

    :ivar name: the topology's name.
    :ivar definition: ``{"name", "workers", "conf", "components": {name: {...}}}``, plus
        ``"latency_constraints"`` (a list of ``LatencyConstraint.to_json()``) when there are any.
    :ivar classes: component name -> Spout or Bolt subclass.
    """

    name: str
    definition: Mapping[str, Any]
    classes: Mapping[str, type[Component]]

    @property
    def workers(self) -> int:
        return int(self.definition["workers"])

    @property
    def conf(self) -> Mapping[str, Any]:
        return self.definition["conf"]

    def executors(self) -> list[str]:
        """Every user executor id, ``component:index``, in definition order."""
        return [
            f"{name}:{i}"
            for name, comp in self.definition["components"].items()
            for i in range(comp["parallelism"])
        ]


class TopologyBuilder:
    """Declare spouts and bolts, then :meth:`build` a validated :class:`Topology`.

    Example::

        builder = TopologyBuilder("wordcount")
        builder.set_spout("sentences", Sentences, parallelism=2)
        builder.set_bolt("split", Split, parallelism=4).shuffle_grouping("sentences")
        builder.set_bolt("count", Count, parallelism=4).fields_grouping("split", ["word"])
        topology = builder.build(workers=2)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._components: list[_Declared] = []
        self._constraints: list[dict[str, Any]] = []  # as given: build() checks them against the DAG

    def set_spout(
        self, name: str, spout: type[Spout], parallelism: int = 1, conf: Mapping[str, Any] | None = None
    ) -> None:
        """Add a spout with ``parallelism`` executors."""
        self._components.append(_Declared(name, spout, parallelism, "spout", conf))

    def set_bolt(
        self, name: str, bolt: type[Bolt], parallelism: int = 1, conf: Mapping[str, Any] | None = None
    ) -> BoltDeclarer:
        """Add a bolt with ``parallelism`` executors; chain groupings on the result."""
        declared = _Declared(name, bolt, parallelism, "bolt", conf)
        self._components.append(declared)
        return BoltDeclarer(declared)

    def latency_constraint(
        self, path: Sequence[str], p99_ms: float, window_secs: float = 5.0, moves: bool = False
    ) -> TopologyBuilder:
        """Ask that the 99th percentile latency along ``path`` stay under ``p99_ms``.

        The latency runs from a tuple's emit at the first component of ``path`` to the
        processing of it (or of a descendant) at the last, over each window of ``window_secs``;
        the latency controller holds the bound at runtime by buffer sizing, chaining and
        placement. ``build()`` checks the path against the DAG, which is only whole then.
        ``-c topology.latency.constraints=[...]`` overrides a constraint on the same path.

        Example::

            builder = TopologyBuilder("wordcount")
            builder.set_spout("sentences", Sentences)
            builder.set_bolt("split", Split).shuffle_grouping("sentences")
            builder.set_bolt("count", Count).fields_grouping("split", ["word"])
            builder.latency_constraint(["sentences", "split", "count"], p99_ms=10)
            topology = builder.build()

        :arg path: component names, each with an input from the one before (any stream or
            grouping); at least two.
        :arg p99_ms: the bound, in milliseconds (positive).
        :arg window_secs: the window each percentile covers, in seconds (positive).
        :arg moves: let the controller move executors even without ``topology.scheduler=otd``.
        :returns: this builder, to chain calls.
        """
        self._constraints.append({"path": path, "p99_ms": p99_ms, "window_secs": window_secs, "moves": moves})
        return self

    # -- validation -------------------------------------------------------------------
    def _check_names(self) -> None:
        if not valid_topology_name(self.name):
            msg = f"topology name {self.name!r} is invalid: {BAD_TOPOLOGY_NAME}"
            raise TopologyError(msg)
        seen: set[str] = set()
        for c in self._components:
            if not isinstance(c.name, str) or not _NAME.match(c.name) or c.name.startswith("__"):
                msg = (
                    f"component name {c.name!r} is invalid: use letters, digits, '_' and '-' "
                    "(no ':', '.', or leading '__')"
                )
                raise TopologyError(msg)
            if c.name in seen:
                msg = f"duplicate component name {c.name!r}"
                raise TopologyError(msg)
            seen.add(c.name)

    def _check_component(self, c: _Declared) -> None:
        base = Spout if c.kind == "spout" else Bolt
        if not isinstance(c.cls, type) or not issubclass(c.cls, base):
            msg = f"component {c.name!r}: {c.cls!r} is not a {base.__name__} subclass"
            raise TopologyError(msg)
        if isinstance(c.parallelism, bool) or not isinstance(c.parallelism, int) or c.parallelism < 1:
            msg = f"component {c.name!r}: parallelism must be an integer >= 1, got {c.parallelism!r}"
            raise TopologyError(msg)
        tick = getattr(c.cls, "tick_secs", None)
        if tick is not None and (not isinstance(tick, int | float) or tick <= 0):
            msg = f"component {c.name!r}: tick_secs must be a positive number, got {tick!r}"
            raise TopologyError(msg)

    def _check_inputs(self, by_name: dict[str, _Declared], outputs: dict[str, dict[str, list[str]]]) -> None:
        for c in self._components:
            if c.kind == "bolt" and not c.inputs:
                msg = f"bolt {c.name!r} has no inputs: add a grouping"
                raise TopologyError(msg)
            seen: set[tuple[str, str]] = set()
            for inp in c.inputs:
                if inp.component not in by_name:
                    msg = f"bolt {c.name!r} subscribes to unknown component {inp.component!r}"
                    raise TopologyError(msg)
                if (inp.component, inp.stream) in seen:  # each tuple would come twice (Storm keeps one)
                    msg = f"bolt {c.name!r} subscribes to stream {inp.stream!r} of {inp.component!r} twice"
                    raise TopologyError(msg)
                seen.add((inp.component, inp.stream))
                streams = outputs[inp.component]
                if inp.stream not in streams:
                    msg = (
                        f"bolt {c.name!r} subscribes to stream {inp.stream!r} of {inp.component!r}, "
                        f"which declares only {sorted(streams)!r}"
                    )
                    raise TopologyError(msg)
                if inp.grouping == FIELDS:
                    if not inp.fields:
                        msg = f"bolt {c.name!r}: fields grouping on {inp.component!r} names no field"
                        raise TopologyError(msg)
                    missing = [f for f in inp.fields if f not in streams[inp.stream]]
                    if missing:
                        msg = (
                            f"bolt {c.name!r}: fields grouping on undeclared field(s) {missing!r} "
                            f"of {inp.component}/{inp.stream} (declared: {streams[inp.stream]!r})"
                        )
                        raise TopologyError(msg)

    def _check_acyclic(self) -> None:
        graph = {c.name: [i.component for i in c.inputs] for c in self._components}
        state: dict[str, int] = {}

        def visit(node: str, path: list[str]) -> None:
            state[node] = 1
            for parent in graph[node]:
                if state.get(parent) == 1:
                    cycle = path[path.index(parent) :] if parent in path else [parent]
                    msg = f"cycle in topology: {' -> '.join([*cycle, parent])}"
                    raise TopologyError(msg)
                if parent not in state:
                    visit(parent, [*path, parent])
            state[node] = 2

        for name in graph:
            if name not in state:
                visit(name, [name])

    def build(self, workers: int = 1, conf: Mapping[str, Any] | None = None) -> Topology:
        """Validate the graph and return a frozen :class:`Topology`.

        :arg workers: worker processes to spread the executors over (``topology.workers``).
        :arg conf: topology configuration, overriding the defaults.
        :raises TopologyError: naming the first problem found (a latency constraint's too).
        """
        self._check_names()
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            msg = f"topology {self.name!r}: workers must be an integer >= 1, got {workers!r}"
            raise TopologyError(msg)
        for c in self._components:
            self._check_component(c)
        if not any(c.kind == "spout" for c in self._components):
            msg = f"topology {self.name!r} has no spout"
            raise TopologyError(msg)
        by_name = {c.name: c for c in self._components}
        outputs = {c.name: normalize_outputs(c.cls.outputs, c.name) for c in self._components}
        declare_late_streams(self._components, outputs)  # a windowed bolt's late stream: its input's fields
        self._check_inputs(by_name, outputs)
        self._check_acyclic()
        windows = {c.name: window_definition(c.name, c.cls, c.inputs, outputs)
                   for c in self._components if c.kind == "bolt" and is_windowed(c.cls)}
        executors = sum(c.parallelism for c in self._components)
        if executors + workers > MAX_TASKS:  # one acker per worker by default
            msg = (f"topology {self.name!r}: {executors} executors and {workers} ackers exceed {MAX_TASKS} tasks "
                   "(a tuple tree's root id holds its spout's task in 16 bits)")
            raise TopologyError(msg)
        components: dict[str, Any] = {}
        for c in self._components:
            components[c.name] = {
                "kind": c.kind,
                "parallelism": c.parallelism,
                "class": f"{c.cls.__module__}.{c.cls.__qualname__}",
                "outputs": outputs[c.name],
                "inputs": [i.as_json() for i in c.inputs],
                "tick_secs": getattr(c.cls, "tick_secs", None),
                "conf": {**dict(getattr(c.cls, "config", {}) or {}), **c.conf},
            }
            if c.name in windows:
                components[c.name]["window"] = windows[c.name]
            if getattr(c.cls, "chainable", True) is False:
                components[c.name]["chainable"] = False  # never run in its upstream's thread (nstorm.chaining)
        definition: dict[str, Any] = {
            "name": self.name,
            "workers": workers,
            "conf": {**dict(conf or {}), "topology.workers": workers},
            "components": components,
        }
        if self._constraints:  # only then: a definition without constraints stays as it was
            checked = parse_constraints(self._constraints, definition, source="latency_constraint")
            definition[DEFINITION_KEY] = [c.to_json() for c in checked]
        constraints_of(definition, definition["conf"])  # build(conf=...) may set them too
        return Topology(self.name, definition, {c.name: c.cls for c in self._components})
