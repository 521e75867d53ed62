"""Dynamic log levels: a running topology's loggers set and reset without a restart (Storm's
``set_log_level`` and its UI's "Change Log Level").

A client (``nstorm set-log-level``, the REST API) writes the topology's settings to ZooKeeper
(``logconfig/<name>``); each supervisor mirrors them into its plan store and nudges its workers,
which apply them (``worker.loglevels``): a logger set to a level keeps it until its timeout
passes or it is reset, and then gets the level it had before. ``ROOT`` is the root logger; a
level set on a parent applies to its children that have none of their own (Python's logging,
as log4j does in Storm). Pure: parsing, the record's JSON form and merging a change into it.

The same record carries the topology's event sampling (Storm's topology event inspector, its
"Debug" button): ``events`` maps a component, or ``*`` for every one, to the percentage of its
emitted tuples its executors write to their worker's events file (``worker/eventlog.py``); a
component's own entry, 0 included, wins over ``*``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALL_COMPONENTS", "LEVELS", "ROOT", "LogConfig", "LoggerSetting", "check_logger", "check_percent",
           "check_timeout", "logger_of", "parse_setting", "sampling_of", "store_key"]

ROOT = "ROOT"
ALL_COMPONENTS = "*"  # the events entry of every component without one of its own

# Storm's (log4j's) names and Python's: TRACE and ALL are finer than DEBUG, OFF silences.
LEVELS: dict[str, int] = {"ALL": 1, "TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                          "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
                          "FATAL": logging.CRITICAL, "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 1}

_MAX_LOGGERS = 100  # settings a topology may hold (a record stays small: every worker reads it)


def store_key(topology: str) -> str:
    """The plan store's meta key of ``topology``'s settings (the supervisor writes, workers read)."""
    return f"logconfig/{topology}"


def logger_of(name: str) -> logging.Logger:
    """The logger a setting names (``ROOT``: the root logger)."""
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


@dataclass(frozen=True)
class LoggerSetting:
    """One logger's level, until ``until`` (wall-clock seconds; None: until it is reset)."""

    level: str
    until: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "until": self.until}


def check_logger(name: object) -> str:
    if not isinstance(name, str) or not name or name != name.strip() or "=" in name or len(name) > 200:
        msg = f"logger name {name!r}: expected a non-empty name without '=' or spaces at its ends"
        raise ValueError(msg)
    return name


def _check_level(level: object) -> str:
    if not isinstance(level, str) or level.upper() not in LEVELS:
        msg = f"log level {level!r}: expected one of {', '.join(LEVELS)}"
        raise ValueError(msg)
    return level.upper()


def check_timeout(timeout: object) -> float:
    """A timeout in seconds: finite and >= 0 (0: none)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0:
        msg = f"timeout {timeout!r}: expected a finite number of seconds >= 0 (0: until reset)"
        raise ValueError(msg)
    return float(timeout)


def sampling_of(events: Mapping[str, float], component: str) -> float:
    """The percentage of ``component``'s emitted tuples logged under ``events`` (component or
    ``*`` -> percent): its own entry, 0 included, else ``*``'s, else 0."""
    return float(events.get(component, events.get(ALL_COMPONENTS, 0.0)))


def check_percent(percent: object) -> float:
    """An event sampling percentage: a finite number, more than 0 and at most 100."""
    if (isinstance(percent, bool) or not isinstance(percent, (int, float)) or not math.isfinite(percent)
            or not 0 < percent <= 100):
        msg = f"sampling percentage {percent!r}: expected a number more than 0 and at most 100"
        raise ValueError(msg)
    return float(percent)


def parse_setting(item: str) -> tuple[str, str, float]:
    """``LOGGER=LEVEL[:TIMEOUT]`` (Storm's ``-l``, e.g. ``ROOT=DEBUG:30``) as ``(logger, level,
    timeout seconds)``; a bad one raises ``ValueError`` saying what is wrong."""
    name, sep, rest = item.partition("=")
    if not sep:
        msg = f"-l {item!r}: expected LOGGER=LEVEL[:TIMEOUT], e.g. ROOT=DEBUG:30"
        raise ValueError(msg)
    level, colon, secs = rest.partition(":")
    timeout = 0.0
    if colon:
        try:
            timeout = float(secs)
        except ValueError:
            msg = f"-l {item!r}: the timeout {secs!r} is not a number of seconds"
            raise ValueError(msg) from None
    return check_logger(name), _check_level(level), check_timeout(timeout)


@dataclass(frozen=True)
class LogConfig:
    """A topology's settings, as stored at ``logconfig/<name>``: for one submission (a later one
    of the same name does not inherit them)."""

    submission: str | None = None
    settings: Mapping[str, LoggerSetting] = field(default_factory=dict)  # logger -> its setting
    events: Mapping[str, float] = field(default_factory=dict)  # component or "*" -> percent sampled (0: none)

    def sampling(self, component: str) -> float:
        """The percentage of ``component``'s emitted tuples its executors log (0: none)."""
        return sampling_of(self.events, component)

    def sampled(self, component: str | None, percent: float | None) -> LogConfig:
        """This config with ``component``'s event sampling (None: every component's) set to
        ``percent``, or turned off (None). Off for the topology clears every entry; off for one
        component while ``*`` is on keeps a 0 for it."""
        events = dict(self.events)
        if component is None:
            events = {} if percent is None else {ALL_COMPONENTS: check_percent(percent)}
        elif percent is not None:
            events[component] = check_percent(percent)
        elif ALL_COMPONENTS in events:
            events[component] = 0.0
        else:
            events.pop(component, None)
        return LogConfig(self.submission, self.settings, events)

    def changed(self, set_: Mapping[str, tuple[str, float]], reset: Iterable[str], now: float) -> LogConfig:
        """This config with loggers set (``{logger: (level, timeout)}``, timeout 0 for none) and
        others reset (removed: their workers give them back the level they had)."""
        loggers = {n: s for n, s in self.settings.items() if s.until is None or s.until > now}
        for name in reset:
            loggers.pop(check_logger(name), None)
        for name, (level, timeout) in set_.items():
            timeout = check_timeout(timeout)
            loggers[check_logger(name)] = LoggerSetting(_check_level(level), now + timeout if timeout else None)
        if len(loggers) > _MAX_LOGGERS:
            msg = f"{len(loggers)} loggers set: at most {_MAX_LOGGERS}"
            raise ValueError(msg)
        return LogConfig(self.submission, loggers, self.events)

    def to_json(self) -> dict[str, Any]:
        return {"submission": self.submission, "loggers": {n: s.to_json() for n, s in sorted(self.settings.items())},
                "events": dict(sorted(self.events.items()))}

    @classmethod
    def from_json(cls, data: Any) -> LogConfig:
        """The config a node or store holds; an entry of the wrong shape is left out (a worker
        applies what it can read), anything else unreadable is no config."""
        if not isinstance(data, Mapping) or not isinstance(data.get("loggers"), Mapping):
            return cls()
        submission = data.get("submission")
        loggers = {}
        for name, entry in data["loggers"].items():
            try:
                until = entry.get("until") if isinstance(entry, Mapping) else None
                if until is not None and (isinstance(until, bool) or not isinstance(until, (int, float))):
                    continue
                loggers[check_logger(name)] = LoggerSetting(_check_level(entry.get("level")),
                                                             None if until is None else float(until))
            except (ValueError, AttributeError):
                continue
        events = {}
        raw = data.get("events")
        for name, percent in (raw.items() if isinstance(raw, Mapping) else ()):
            if isinstance(name, str) and name and ((type(percent) in (int, float) and percent == 0) or _is_percent(percent)):
                events[name] = float(percent)
        return cls(submission if isinstance(submission, str) else None, loggers, events)


def _is_percent(value: object) -> bool:
    try:
        check_percent(value)
    except ValueError:
        return False
    return True
