"""Storm's topology event inspector, in a worker: a sample of the tuples its executors emit,
written beside its log to ``worker-<node>-<port>.events`` (:func:`nstorm.logtail.events_file`), a
JSON object a line: ``{"time", "component", "executor", "stream", "values"}``.

A topology's ``events`` setting (:mod:`nstorm.loglevels`: ``nstorm debug``, the UI's "Debug")
reaches the worker with its log levels; the worker publishes it as a new :class:`EventSampling`
and each executor, at its next loop pass, wraps its outbox's compiled emits in sampling ones
(:func:`sample_emits`) or takes the wrappers away. Off, nothing of it is on the tuple path; on,
an emit costs a random number more, and a sampled one a JSON line (Storm: "a slight
performance degradation"). Values that are not JSON are written as their ``repr``.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nstorm.loglevels import sampling_of

__all__ = ["EventFile", "EventSampling", "sample_emits"]

MAX_LINE = 4000  # characters of an event's values kept (a tuple logged whole can be long)
FILE_BYTES = 20 * 2**20  # rotated at 20 MB, one old file kept
DIRECT_EMITS = ("emit_direct", "emit_direct_tracked")


class EventFile:
    """The worker's events file, opened at its first event; safe to write from every thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._logger: logging.Logger | None = None
        self._lock = threading.Lock()
        self.dropped = 0  # events not written (see write)

    def write(self, component: str, executor: str, stream: str, values: Sequence[Any]) -> None:
        """One event; never raises (sampling must not change what the topology does): what cannot
        be written is counted in ``dropped``."""
        try:
            self._get().info('{"time": %.6f, "component": %s, "executor": %s, "stream": %s, "values": %s}',
                             time.time(), json.dumps(component), json.dumps(executor), json.dumps(stream),
                             _values_json(values))
        except Exception:  # noqa: BLE001 - a disk full, a value whose repr raises
            self.dropped += 1

    def _get(self) -> logging.Logger:
        logger = self._logger
        if logger is None:
            with self._lock:
                if self._logger is None:
                    # A logger of its own, outside logging's tree: the topology's log levels
                    # (ROOT=OFF included) never silence the events a user asked for.
                    logger = logging.Logger("nstorm.events", logging.INFO)
                    handler = logging.handlers.RotatingFileHandler(self.path, maxBytes=FILE_BYTES, backupCount=1,
                                                                   encoding="utf-8")
                    handler.setFormatter(logging.Formatter("%(message)s"))
                    logger.addHandler(handler)
                    self._logger = logger
                logger = self._logger
        return logger

    def close(self) -> None:
        with self._lock:
            for handler in self._logger.handlers if self._logger is not None else ():
                handler.close()
            self._logger = None


def _values_json(values: Sequence[Any]) -> str:
    """A tuple's values as JSON (strict: no NaN, which JSON readers refuse), those that are not
    JSON as their ``repr``; anything else (keys that are not strings, cycles, depth) as one
    string, the values' ``repr``; cut at :data:`MAX_LINE` characters (then a string)."""
    try:
        text = json.dumps(list(values), default=repr, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(repr(values)[:MAX_LINE], ensure_ascii=False)
    if len(text) > MAX_LINE:
        text = json.dumps(text[:MAX_LINE] + "...", ensure_ascii=False)
    return text


@dataclass(frozen=True)
class EventSampling:
    """The topology's event sampling as this worker read it last: a new object at every change
    (executors compare it by identity once a loop pass)."""

    events: Mapping[str, float] = field(default_factory=dict)  # component or "*" -> percent
    file: EventFile | None = None

    def percent(self, component: str) -> float:
        return sampling_of(self.events, component)


def sample_emits(outbox: Any, percent: float, file: EventFile, executor: str) -> None:
    """Wrap ``outbox``'s emits (compiled for its routing table just now) in ones that write
    ``percent`` % of the tuples to ``file``, then emit as before."""
    rate = percent / 100.0
    component = outbox.component
    rnd = random.random
    write = file.write

    # Each writes after its emit returns: an emit refused (an undeclared stream) logs nothing.
    def sampled(emit: Any) -> Any:
        def emit_sampled(values: Sequence[Any], stream: str = "default", *args: Any, **kwargs: Any) -> Any:
            result = emit(values, stream, *args, **kwargs)
            if rnd() < rate:
                write(component, executor, stream, values)
            return result
        return emit_sampled

    def sampled_many(emit_many: Any) -> Any:
        def emit_many_sampled(values_list: Iterable[Sequence[Any]], stream: str = "default", *args: Any,
                              **kwargs: Any) -> Any:
            values_list = list(values_list)  # (a generator: read once, for the emit and the log)
            result = emit_many(values_list, stream, *args, **kwargs)
            for values in values_list:
                if rnd() < rate:
                    write(component, executor, stream, values)
            return result
        return emit_many_sampled

    def sampled_direct(emit_direct: Any) -> Any:
        def emit_direct_sampled(task: int, values: Sequence[Any], stream: str = "default", *args: Any,
                                **kwargs: Any) -> Any:
            result = emit_direct(task, values, stream, *args, **kwargs)
            if rnd() < rate:
                write(component, executor, stream, values)
            return result
        return emit_direct_sampled

    outbox.emit = sampled(outbox.emit)
    outbox.emit_anchored = sampled(outbox.emit_anchored)
    outbox.emit_tracked = sampled(outbox.emit_tracked)
    outbox.emit_many = sampled_many(outbox.emit_many)
    for name in DIRECT_EMITS:  # methods: the wrappers shadow them until the next compile
        setattr(outbox, name, sampled_direct(getattr(type(outbox), name).__get__(outbox)))
