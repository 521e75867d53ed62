"""A worker's side of dynamic log levels (``nstorm.loglevels``): the topology's settings, read from
the plan store where the supervisor mirrors them, applied to this process's loggers (and the
record's event sampling handed to ``on_events``: ``worker.eventlog``).

A logger keeps a setting's level until the setting's timeout passes or it is reset; then it gets
back the level it had before the first setting (Storm's ``reset_log_level``). Read from the store
at most once a second, or at once when the supervisor nudges the worker; a timeout is checked on
every pass of the worker's loop (a comparison).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from nstorm.loglevels import LEVELS, LogConfig, LoggerSetting, logger_of, store_key

__all__ = ["LogLevels"]

log = logging.getLogger(__name__)

READ_EVERY_SECS = 1.0


class LogLevels:
    """This process's loggers as the topology's settings say; :meth:`poll` once a loop pass."""

    def __init__(self, topology: str, submission: str | None,
                 on_events: Callable[[Mapping[str, float]], None] | None = None) -> None:
        self.key = store_key(topology)
        self.submission = submission
        self.on_events = on_events  # told the record's event sampling when it changes (worker.eventlog)
        self.events: Mapping[str, float] = {}
        self.original: dict[str, int] = {}  # logger -> its level before the first setting
        self.applied: dict[str, LoggerSetting] = {}
        self.settings: Mapping[str, LoggerSetting] = {}
        self.next_read = 0.0
        self.next_expiry: float | None = None
        self.stale = True  # read the store at the next poll (set when the supervisor nudges)

    def poll(self, read: Callable[[str], Any], now: float, monotonic: float) -> None:
        """Read the settings if due (``read``: the store's get_meta), then apply what is in force
        at wall-clock ``now``. A store that cannot be read keeps the settings in force."""
        if self.stale or monotonic >= self.next_read:
            self.stale = False
            self.next_read = monotonic + READ_EVERY_SECS
            try:
                config = LogConfig.from_json(read(self.key))
            except Exception:  # noqa: BLE001 - a store being rebuilt: the next read
                return
            ours = config.submission == self.submission
            settings = config.settings if ours else {}
            events = config.events if ours else {}
            if events != self.events:
                self.events = events
                if self.on_events is not None:
                    self.on_events(events)
            if settings != self.settings:
                self.settings = settings
                self.apply(now)
                return
        if self.next_expiry is not None and now >= self.next_expiry:
            self.apply(now)

    def apply(self, now: float) -> None:
        """Set the loggers whose settings are in force at ``now``; give the others their level back."""
        wanted = {n: s for n, s in self.settings.items() if s.until is None or s.until > now}
        for name in [n for n in self.applied if n not in wanted]:
            level = self.original.pop(name)
            logger_of(name).setLevel(level)
            del self.applied[name]
            log.info("log level of %s back to %s", name, logging.getLevelName(level))
        for name, setting in wanted.items():
            if self.applied.get(name) == setting:
                continue
            logger = logger_of(name)
            self.original.setdefault(name, logger.level)
            logger.setLevel(LEVELS[setting.level])
            self.applied[name] = setting
            log.info("log level of %s set to %s%s", name, setting.level,
                     f" for {setting.until - now:.0f}s" if setting.until is not None else "")
        untils = [s.until for s in wanted.values() if s.until is not None]
        self.next_expiry = min(untils) if untils else None
