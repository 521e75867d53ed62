"""A windowed bolt's checks: at ``build()`` (its declaration) and at submit (against the conf).

``build()`` turns every mistake in a :class:`~nstorm.window.bolt.WindowedBolt`'s class
attributes into a ``TopologyError`` naming the bolt, declares its late stream (with its
input's fields) and puts the window into the topology's JSON definition (``"window"`` of the
component), which is what the submit check and the worker read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from nstorm.errors import ConfigError, TopologyError
from nstorm.window.bolt import WindowedBolt
from nstorm.window.spec import COUNT, TIME, Window

__all__ = ["check_submit", "declare_late_streams", "is_windowed", "window_definition"]


def is_windowed(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, WindowedBolt)


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _input_fields(inputs: Iterable[Any], outputs: Mapping[str, Mapping[str, Sequence[str]]]) -> list[tuple[str, list[str]]]:
    """``(component/stream, fields)`` of each input that exists (``build`` reports the others)."""
    found = []
    for inp in inputs:
        streams = outputs.get(inp.component)
        if streams is not None and inp.stream in streams:
            found.append((f"{inp.component}/{inp.stream}", list(streams[inp.stream])))
    return found


def declare_late_streams(components: Sequence[Any], outputs: MutableMapping[str, dict[str, list[str]]]) -> None:
    """Add each windowed bolt's late stream to its outputs, with its input's fields (upstream
    windowed bolts first, so that a late stream may feed another windowed bolt)."""
    by_name = {c.name: c for c in components}
    done: set[str] = set()

    def declare(c: Any, visiting: set[str]) -> None:
        if c.name in done or c.name in visiting:
            return
        visiting.add(c.name)
        for inp in c.inputs:
            up = by_name.get(inp.component)
            if up is not None and is_windowed(up.cls):
                declare(up, visiting)
        done.add(c.name)
        late = getattr(c.cls, "late_stream", None)
        if not is_windowed(c.cls) or late is None:
            return
        if not isinstance(late, str) or not late:
            msg = f"bolt {c.name!r}: late_stream must be a stream name, got {late!r}"
            raise TopologyError(msg)
        fields = _input_fields(c.inputs, outputs)
        if not fields:
            return  # no known input: build() names that problem
        first = fields[0][1]
        for where, other in fields[1:]:
            if other != first:
                msg = (f"bolt {c.name!r}: late_stream {late!r} takes the input's fields, but {fields[0][0]} "
                       f"declares {first!r} and {where} {other!r}")
                raise TopologyError(msg)
        declared = outputs[c.name].get(late)
        if declared is not None and list(declared) != first:
            msg = (f"bolt {c.name!r}: outputs declare late_stream {late!r} with {list(declared)!r}, but late "
                   f"tuples have the input's fields {first!r} (leave it out: the engine declares it)")
            raise TopologyError(msg)
        outputs[c.name][late] = list(first)

    for c in components:
        declare(c, set())


def window_definition(name: str, cls: type[WindowedBolt], inputs: Sequence[Any],
                      outputs: Mapping[str, Mapping[str, Sequence[str]]]) -> dict[str, Any]:
    """The window of bolt ``name`` as JSON, after checking every attribute (TopologyError)."""
    window = getattr(cls, "window", None)
    if not isinstance(window, Window):
        msg = (f"bolt {name!r}: window must be Window.sliding(...), Window.tumbling(...) or Window.session(...), "
               f"got {window!r}")
        raise TopologyError(msg)
    problem = window.problem()
    if problem:
        msg = f"bolt {name!r}: {window.kind} window: {problem}"
        raise TopologyError(msg)
    if getattr(cls, "tick_secs", None) is not None:
        msg = f"bolt {name!r}: a WindowedBolt takes no tick_secs (its windows fire on their own)"
        raise TopologyError(msg)
    ts_field = cls.timestamp_field
    if ts_field is not None and (not isinstance(ts_field, str) or not ts_field):
        msg = f"bolt {name!r}: timestamp_field must be a field name or None, got {ts_field!r}"
        raise TopologyError(msg)
    for attr in ("lag_secs", "allowed_lateness_secs"):
        value = getattr(cls, attr)
        if not _seconds(value):
            msg = f"bolt {name!r}: {attr} must be a number of seconds >= 0, got {value!r}"
            raise TopologyError(msg)
    event_time = ts_field is not None
    if not event_time:
        for attr in ("lag_secs", "allowed_lateness_secs", "late_stream"):
            if getattr(cls, attr):
                msg = (f"bolt {name!r}: {attr} needs event time: set timestamp_field "
                       "(in processing time no tuple is late)")
                raise TopologyError(msg)
    if window.kind == COUNT and cls.allowed_lateness_secs:
        msg = f"bolt {name!r}: allowed_lateness_secs applies to time and session windows, not count windows"
        raise TopologyError(msg)
    key_fields = cls.key_fields
    if isinstance(key_fields, str):
        key_fields = (key_fields,)
    if not isinstance(key_fields, Sequence) or not all(isinstance(f, str) and f for f in key_fields):
        msg = f"bolt {name!r}: key_fields must be a sequence of field names, got {cls.key_fields!r}"
        raise TopologyError(msg)
    wanted = ([ts_field] if event_time else []) + list(key_fields)
    for where, fields in _input_fields(inputs, outputs):
        missing = [f for f in wanted if f not in fields]
        if missing:
            what = "timestamp field" if ts_field in missing else "key field"
            msg = (f"bolt {name!r}: {what}(s) {missing!r} not declared by its input {where} "
                   f"(declared: {fields!r})")
            raise TopologyError(msg)
    incremental = cls.incremental()
    if not incremental and cls.process_window is WindowedBolt.process_window:
        msg = f"bolt {name!r}: define process_window(window), or init_window/add_to_window/fire_window"
        raise TopologyError(msg)
    if incremental and cls.process_window is not WindowedBolt.process_window:
        msg = f"bolt {name!r}: define either process_window or fire_window, not both"
        raise TopologyError(msg)
    if incremental and window.is_session and cls.merge_windows is WindowedBolt.merge_windows:
        msg = f"bolt {name!r}: incremental session windows merge: define merge_windows(acc, other)"
        raise TopologyError(msg)
    return {**window.as_json(), "timestamp_field": ts_field, "lag_secs": cls.lag_secs,
            "allowed_lateness_secs": cls.allowed_lateness_secs, "late_stream": cls.late_stream,
            "key_fields": list(key_fields), "incremental": incremental}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_submit(definition: Mapping[str, Any], conf: Mapping[str, Any]) -> None:
    """With the ``memory`` state provider and acking on, a windowed bolt acks a tuple when it
    leaves its last window: the message timeout must outlast that (time windows; count and
    session windows have no bound in time and are exempt). ConfigError naming the bolt."""
    if str(conf.get("topology.state.provider") or "memory") != "memory":
        return
    ackers = conf.get("topology.acker.executors")
    if ackers is not None and not isinstance(ackers, bool) and ackers == 0:
        return
    timeout = conf.get("topology.message.timeout.secs")
    if not _seconds(timeout):
        return  # reported elsewhere
    components = definition.get("components", {})
    pending = conf.get("topology.max.spout.pending")
    spouts = sum(int(c.get("parallelism") or 1) for c in components.values() if c.get("kind") == "spout")
    for name, comp in components.items():
        spec = comp.get("window")
        if spec and spec.get("kind") == COUNT and _whole(pending) and spouts and int(spec["length"]) > int(pending) * spouts:
            # Its tuples stay un-acked until the window fires: the spouts would stop at their
            # cap first, and the window wait for them for good (Storm refuses it as well).
            msg = (f"bolt {name!r}: a count window of {spec['length']} tuples cannot fill while the spouts "
                   f"keep at most topology.max.spout.pending={pending} x {spouts} tuples open: raise "
                   "topology.max.spout.pending, or use a durable topology.state.provider")
            raise ConfigError(msg)
        if not spec or spec.get("kind") != TIME:
            continue
        parts = [float(spec["length"]), float(spec["slide"]), float(spec.get("lag_secs") or 0),
                 float(spec.get("allowed_lateness_secs") or 0)]
        need = sum(parts)
        if float(timeout) <= need:
            msg = (f"bolt {name!r}: topology.message.timeout.secs={timeout} must exceed the window's length, "
                   f"slide, lag and allowed lateness ({' + '.join(f'{p:g}' for p in parts)} = {need:g} s): with "
                   "the memory state provider a tuple is acked when it leaves its last window "
                   f"(-c topology.message.timeout.secs={math.ceil(need * 2)}, or a durable topology.state.provider)")
            raise ConfigError(msg)
