"""Latency constraints (issue #17, ARCHITECTURE.md 3.3): the declared records and their checks.

A constraint names a path of the topology's DAG and a bound: from a tuple's emit at the first
component to its processing at the last, along that path, the 99th percentile over each window
of ``window_secs`` stays under ``p99_ms``. The measurement and the controller that hold it at
runtime read constraints only through :func:`constraints_of`, so this module is the one place
that decides what a valid constraint is.

Constraints come from two places: ``TopologyBuilder.latency_constraint`` (stored as JSON in the
definition's ``"latency_constraints"`` by ``build()``) and the conf key
``topology.latency.constraints`` (``-c 'topology.latency.constraints=[{"path": [...],
"p99_ms": 10}]'``), the latter winning for the same path. Every mistake is a
:class:`~nstorm.errors.TopologyError` with one line naming the constraint and the problem,
which the CLI turns into exit code 2 before anything reaches a cluster.

Example::

    >>> definition = {"components": {
    ...     "sentences": {"inputs": []},
    ...     "split": {"inputs": [{"component": "sentences", "stream": "default", "grouping": "shuffle"}]},
    ... }}
    >>> [c.name for c in parse_constraints('[{"path": ["sentences", "split"], "p99_ms": 10}]', definition)]
    ['sentences>split']
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nstorm.config import is_flag
from nstorm.errors import ConfigError, TopologyError

__all__ = [
    "CONF_KEY",
    "CONTROL_KEY",
    "DEFINITION_KEY",
    "MIN_WINDOW_SECS",
    "SAMPLE_KEY",
    "LatencyConstraint",
    "check_submit",
    "constraints_of",
    "parse_constraints",
]

CONF_KEY = "topology.latency.constraints"
"""The conf key: a list of constraint objects, or that list as a JSON string."""

DEFINITION_KEY = "latency_constraints"
"""The key of a topology definition that holds the builder's constraints (``to_json`` each)."""

SAMPLE_KEY = "topology.latency.sample.ms"
"""How often (ms) an executor that starts a constrained path samples a tuple."""

_KEYS = ("path", "p99_ms", "window_secs", "moves")
CONTROL_KEY = "topology.latency.control"
"""The conf key: false measures and reports constraints, never acts on them."""
MIN_WINDOW_SECS = 1.0
"""The shortest window: the workers report their samples with their heartbeats, once a second."""
_SEPARATOR = ">"  # never in a component name (letters, digits, '_', '-'; see nstorm/topology.py)


def path_name(path: Sequence[Any]) -> str:
    """A path as one string, ``"sentences>split>count"``: a constraint's key in status and logs."""
    return _SEPARATOR.join(str(p) for p in path)


@dataclass(frozen=True)
class LatencyConstraint:
    """A latency bound on a path of the DAG, held at runtime by the latency controller.

    Frozen so that a built topology's constraints cannot change under the controller; build
    them with :func:`parse_constraints` (or the builder), which checks them against the DAG.

    :ivar path: component names, each one with an input from the one before (any stream or
        grouping); at least two.
    :ivar p99_ms: the bound on the 99th percentile of emit-at-first to processing-at-last, in ms.
    :ivar window_secs: the window each percentile covers, in seconds.
    :ivar moves: the controller may move executors even when the topology does not run
        ``topology.scheduler=otd`` (with OTD it may always ask OTD to co-locate the path).
    """

    path: tuple[str, ...]
    p99_ms: float
    window_secs: float = 5.0
    moves: bool = False

    @property
    def name(self) -> str:
        """The path as one string, ``"sentences>split>count"``: a key for status and logs."""
        return path_name(self.path)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data, as stored in a definition and read back by :func:`parse_constraints`."""
        return {"path": list(self.path), "p99_ms": self.p99_ms, "window_secs": self.window_secs,
                "moves": self.moves}


def _positive(value: Any) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:  # an int too large for a float (JSON has no limit): not a usable bound
        return False


def input_components(definition: Mapping[str, Any]) -> dict[str, set[str]]:
    """Component -> the components it has an input from (a topology definition's channels)."""
    components = definition.get("components") or {}
    return {name: {str(i.get("component")) for i in comp.get("inputs") or ()}
            for name, comp in components.items()}


def _parse_path(raw: Any, where: str, edges: Mapping[str, set[str]],
                windowed: frozenset[str] = frozenset()) -> tuple[str, ...]:
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        msg = f"{where}: path must be a list of component names, got {raw!r}"
        raise TopologyError(msg)
    path = tuple(raw)
    for name in path:
        if not isinstance(name, str):
            msg = f"{where}: path must be a list of component names, got {name!r} in {list(path)!r}"
            raise TopologyError(msg)
    if len(path) < 2:
        msg = f"{where}: path {list(path)!r} needs at least 2 components (from an emit to a processing)"
        raise TopologyError(msg)
    for name in path:
        if name not in edges:
            msg = f"{where}: unknown component {name!r} (the topology has {sorted(edges)!r})"
            raise TopologyError(msg)
    for a, b in zip(path, path[1:], strict=False):
        if a not in edges[b]:
            msg = f"{where}: {path_name(path)!r} is not a path of the topology: {b!r} has no input from {a!r}"
            raise TopologyError(msg)
    for name in path[:-1]:
        if name in windowed:
            # What a windowed bolt emits is a window's result, not the tuple it took: no single
            # tuple's latency goes through it (it may end a path: its processing is measured).
            msg = (f"{where}: {path_name(path)!r} goes through windowed bolt {name!r}; a windowed bolt "
                   "can only end a path")
            raise TopologyError(msg)
    return path


def _parse_one(entry: Any, where: str, edges: Mapping[str, set[str]],
               windowed: frozenset[str] = frozenset()) -> LatencyConstraint:
    if not isinstance(entry, Mapping):
        msg = f"{where}: expected an object like {{\"path\": [...], \"p99_ms\": 10}}, got {entry!r}"
        raise TopologyError(msg)
    unknown = sorted(str(k) for k in entry if k not in _KEYS)
    if unknown:
        msg = f"{where}: unknown key(s) {unknown!r} (allowed: {list(_KEYS)!r})"
        raise TopologyError(msg)
    for key in ("path", "p99_ms"):
        if key not in entry:
            msg = f"{where}: {key!r} is missing"
            raise TopologyError(msg)
    path = _parse_path(entry["path"], where, edges, windowed)
    where = f"{where} {path_name(path)!r}"
    p99_ms = entry["p99_ms"]
    if not _positive(p99_ms):
        msg = f"{where}: p99_ms must be a positive, finite number of milliseconds, got {p99_ms!r}"
        raise TopologyError(msg)
    window_secs = entry.get("window_secs", 5.0)
    if not _positive(window_secs) or window_secs < MIN_WINDOW_SECS:
        msg = (f"{where}: window_secs must be a finite number of seconds, at least {MIN_WINDOW_SECS:g} (the "
               f"workers report their samples once a second), got {window_secs!r}")
        raise TopologyError(msg)
    moves = entry.get("moves", False)
    if not isinstance(moves, bool):
        msg = f"{where}: moves must be true or false, got {moves!r}"
        raise TopologyError(msg)
    return LatencyConstraint(path, float(p99_ms), float(window_secs), moves)


def parse_constraints(
    raw: Any, definition: Mapping[str, Any], *, source: str = CONF_KEY
) -> list[LatencyConstraint]:
    """Check constraints given as plain data against a topology's DAG.

    :arg raw: a list of objects ``{"path", "p99_ms", "window_secs"?, "moves"?}``, or that list as
        a JSON string (a ``-c`` value that did not parse as JSON stays a string); ``None`` or an
        empty string is no constraint.
    :arg definition: the JSON definition of a topology (``Topology.definition``); a path's
        consecutive components must be wired, ``b`` with an input from ``a``, any stream or grouping.
    :arg source: where ``raw`` came from, for the messages.
    :returns: the constraints, in order.
    :raises TopologyError: one line naming the constraint and the first problem: malformed JSON,
        a wrong type, an unknown key, a non-positive or non-finite bound, a window under
        :data:`MIN_WINDOW_SECS`, an unknown component, fewer than two components, a path the DAG
        does not have or that goes through a windowed bolt, the same path twice.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        if not raw.strip():
            return []
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            msg = f"{source}: not valid JSON ({exc}): {raw!r}"
            raise TopologyError(msg) from None
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        msg = f"{source}: expected a list of constraints like [{{\"path\": [...], \"p99_ms\": 10}}], got {raw!r}"
        raise TopologyError(msg)
    edges = input_components(definition)
    windowed = frozenset(n for n, c in (definition.get("components") or {}).items() if c.get("window"))
    result: list[LatencyConstraint] = []
    seen: set[tuple[str, ...]] = set()
    for i, entry in enumerate(raw):
        constraint = _parse_one(entry, f"{source}[{i}]", edges, windowed)
        if constraint.path in seen:  # two bounds on one path: which one holds is anyone's guess
            msg = f"{source}[{i}]: path {constraint.name!r} is constrained twice"
            raise TopologyError(msg)
        seen.add(constraint.path)
        result.append(constraint)
    return result


def constraints_of(definition: Mapping[str, Any], conf: Mapping[str, Any]) -> list[LatencyConstraint]:
    """Every constraint of a topology: the builder's, then the conf's; the conf wins for a path.

    :arg definition: ``Topology.definition`` (its ``"latency_constraints"``, if any).
    :arg conf: the topology's merged conf (its ``topology.latency.constraints``, if any).
    :raises TopologyError: as :func:`parse_constraints`.
    """
    merged: dict[tuple[str, ...], LatencyConstraint] = {}
    for source, raw in (("latency_constraint", definition.get(DEFINITION_KEY)), (CONF_KEY, conf.get(CONF_KEY))):
        for constraint in parse_constraints(raw, definition, source=source):
            merged[constraint.path] = constraint  # a path keeps its place; the later bound wins
    return list(merged.values())


def check_submit(definition: Mapping[str, Any], conf: Mapping[str, Any]) -> list[LatencyConstraint]:
    """The submit-time check (``nstorm submit``/``local``, ``ClusterClient.submit``): every
    constraint and the sampling period, before anything touches a cluster.

    :raises TopologyError: as :func:`parse_constraints`.
    :raises ConfigError: for a bad ``topology.latency.sample.ms``.
    """
    constraints = constraints_of(definition, conf)
    sample = conf.get(SAMPLE_KEY, 5)
    if not _positive(sample):
        msg = f"{SAMPLE_KEY} must be a positive, finite number of milliseconds, got {sample!r}"
        raise ConfigError(msg)
    control = conf.get(CONTROL_KEY, True)
    if not is_flag(control):
        msg = f"{CONTROL_KEY} must be true or false, got {control!r}"
        raise ConfigError(msg)
    return constraints
