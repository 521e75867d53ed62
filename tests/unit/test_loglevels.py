"""Dynamic log levels (Storm's ``set_log_level``): the settings' parsing and record (nstorm.loglevels)
and a worker applying them to its loggers (worker.loglevels): set, timed out, reset, and the
level a logger had before given back."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from nstorm.loglevels import LogConfig, LoggerSetting, parse_setting, store_key
from worker.loglevels import LogLevels


@pytest.mark.parametrize(("item", "parsed"), [
    ("ROOT=DEBUG:30", ("ROOT", "DEBUG", 30.0)), ("my.app=warn", ("my.app", "WARN", 0.0)),
    ("a=ERROR:0", ("a", "ERROR", 0.0)), ("a.b=trace:1.5", ("a.b", "TRACE", 1.5)),
])
def test_settings_parse_as_storm_writes_them(item: str, parsed: tuple[str, str, float]) -> None:
    assert parse_setting(item) == parsed


@pytest.mark.parametrize(("item", "words"), [
    ("ROOT", "expected LOGGER=LEVEL"), ("ROOT=LOUD", "log level 'LOUD'"), ("=DEBUG", "logger name ''"),
    ("ROOT=DEBUG:soon", "not a number"), ("ROOT=DEBUG:-1", "timeout -1.0"), ("ROOT=DEBUG:inf", "timeout inf"),
])
def test_bad_settings_say_what_is_wrong(item: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_setting(item)


def test_a_change_sets_resets_and_drops_timed_out_settings() -> None:
    config = LogConfig("s1", {"old": LoggerSetting("INFO", until=5.0), "kept": LoggerSetting("ERROR")})
    changed = config.changed({"ROOT": ("debug", 30), "x": ("WARN", 0)}, ["kept"], now=10.0)
    assert changed.submission == "s1"
    assert changed.settings == {"ROOT": LoggerSetting("DEBUG", 40.0), "x": LoggerSetting("WARN", None)}
    assert LogConfig.from_json(changed.to_json()) == changed
    with pytest.raises(ValueError, match="log level"):
        config.changed({"a": ("LOUD", 0)}, [], 0.0)
    with pytest.raises(ValueError, match="at most"):
        config.changed({f"l{i}": ("INFO", 0) for i in range(101)}, [], 0.0)


@pytest.mark.parametrize("data", [None, 7, {"loggers": 3}, {"loggers": {"a": "DEBUG"}},
                                  {"loggers": {"a": {"level": "LOUD"}}}, {"loggers": {"a": {"level": "INFO", "until": "x"}}}])
def test_a_record_of_the_wrong_shape_sets_nothing(data: Any) -> None:
    assert LogConfig.from_json(data).settings == {}


def _store(config: LogConfig | None, reads: list[str]) -> Any:
    def read(key: str) -> Any:
        reads.append(key)
        return None if config is None else config.to_json()

    return read


def test_a_worker_sets_its_loggers_and_gives_their_levels_back() -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    logger = logging.getLogger(name)
    logger.setLevel(logging.WARNING)
    levels = LogLevels("wc", "s1")
    reads: list[str] = []
    levels.poll(_store(LogConfig("s1", {name: LoggerSetting("DEBUG", until=100.0)}), reads), now=50.0, monotonic=0.0)
    assert reads == [store_key("wc")] and logger.level == logging.DEBUG and logger.isEnabledFor(logging.DEBUG)
    levels.poll(_store(None, reads), now=60.0, monotonic=0.5)  # read at most once a second
    assert len(reads) == 1 and logger.level == logging.DEBUG
    levels.poll(_store(LogConfig("s1", {name: LoggerSetting("DEBUG", until=100.0)}), reads), now=100.0, monotonic=0.9)
    assert logger.level == logging.WARNING, "timed out: the level it had"
    levels.stale = True  # the supervisor's nudge: read now
    levels.poll(_store(LogConfig("s1", {name: LoggerSetting("ERROR")}), reads), now=101.0, monotonic=1.0)
    assert logger.level == logging.ERROR
    levels.poll(_store(LogConfig("s1", {name: LoggerSetting("INFO")}), reads), now=102.0, monotonic=2.0)
    assert logger.level == logging.INFO
    levels.poll(_store(LogConfig("s1", {}), reads), now=103.0, monotonic=3.0)
    assert logger.level == logging.WARNING, "reset: the level it had before the first setting"


def test_another_submission_s_settings_and_a_store_that_fails_change_nothing() -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    logger = logging.getLogger(name)
    levels = LogLevels("wc", "s2")
    levels.poll(_store(LogConfig("s1", {name: LoggerSetting("DEBUG")}), []), now=0.0, monotonic=0.0)
    assert logger.level == logging.NOTSET
    levels.poll(_store(LogConfig("s2", {name: LoggerSetting("DEBUG")}), []), now=0.0, monotonic=1.0)
    assert logger.level == logging.DEBUG

    def broken(key: str) -> Any:
        raise OSError("store being rebuilt")

    levels.poll(broken, now=0.0, monotonic=2.0)
    assert logger.level == logging.DEBUG, "kept while the store cannot be read"
    levels.poll(_store(LogConfig("s2", {}), []), now=0.0, monotonic=3.0)
    assert logger.level == logging.NOTSET
