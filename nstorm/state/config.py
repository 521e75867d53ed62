"""The state settings of a topology, checked in one place (at submit, and by every reader)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nstorm.errors import ConfigError

__all__ = ["PROVIDERS", "StateConfig", "state_config"]

PROVIDERS = ("memory", "lmdb", "redis")


@dataclass(frozen=True)
class StateConfig:
    """``topology.state.*`` of one topology.

    :ivar provider: ``memory`` (no checkpoints), ``lmdb`` or ``redis``.
    :ivar options: ``topology.state.provider.config`` (a JSON object): ``url`` for Redis,
        ``map_size`` for LMDB.
    :ivar directory: the LMDB environments' directory (``topology.state.dir``).
    :ivar max_rollbacks: ``topology.state.max.rollbacks``: rollbacks in a row with no checkpoint
        committed in between after which the topology is deactivated (0: no bound).
    :ivar backoff_ms: ``topology.state.rollback.backoff.ms``: how long the second rollback in a row
        waits; each further one waits twice the one before, up to ``backoff_max_ms``
        (``topology.state.rollback.backoff.max.ms``). 0: none waits.
    """

    provider: str = "memory"
    interval_ms: int = 1000
    timeout_secs: float = 30.0
    max_parallelism: int = 128
    max_rollbacks: int = 10
    backoff_ms: float = 1000.0
    backoff_max_ms: float = 30000.0
    directory: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def durable(self) -> bool:
        return self.provider != "memory"

    def backoff_secs(self, in_a_row: int) -> float:
        """How long a rollback waits when ``in_a_row`` rollbacks came before it with no progress
        between: none for the first, ``backoff_ms`` for the second, doubled for each further one
        up to ``backoff_max_ms`` (Flink's exponential-delay restart strategy, its first restart
        at once).

        Example::

            >>> [StateConfig().backoff_secs(n) for n in range(8)]
            [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        """
        if in_a_row <= 0 or self.backoff_ms <= 0:
            return 0.0
        return min(self.backoff_ms * 2.0 ** min(in_a_row - 1, 40), self.backoff_max_ms) / 1000.0


def state_config(conf: Mapping[str, Any]) -> StateConfig:
    """The state settings in ``conf``; :class:`ConfigError` (one line, exit 2) for a bad one."""
    provider = conf.get("topology.state.provider") or "memory"
    if provider not in PROVIDERS:
        msg = f"topology.state.provider={provider!r}: expected one of {', '.join(PROVIDERS)}"
        raise ConfigError(msg)
    options = conf.get("topology.state.provider.config") or {}
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError:
            msg = f"topology.state.provider.config={options!r}: expected a JSON object"
            raise ConfigError(msg) from None
    if not isinstance(options, Mapping):
        msg = f"topology.state.provider.config={options!r}: expected a JSON object"
        raise ConfigError(msg)
    if provider == "redis" and not isinstance(options.get("url", "redis://127.0.0.1:6379/0"), str):
        msg = "topology.state.provider.config: url must be a string such as redis://host:6379/0"
        raise ConfigError(msg)

    def number(key: str, low: float) -> float:
        value = conf.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
            msg = f"{key}={value!r}: expected a number >= {low:g}"
            raise ConfigError(msg)
        return float(value)

    interval = number("topology.state.checkpoint.interval.ms", 10)
    timeout = number("topology.state.checkpoint.timeout.secs", 0.1)
    groups = number("topology.max.parallelism", 1)
    rollbacks = number("topology.state.max.rollbacks", 0)
    if rollbacks != int(rollbacks):
        msg = f"topology.state.max.rollbacks={rollbacks!r}: expected a whole number >= 0"
        raise ConfigError(msg)
    backoff = number("topology.state.rollback.backoff.ms", 0)
    backoff_max = number("topology.state.rollback.backoff.max.ms", 0)
    if backoff_max < backoff:
        msg = (f"topology.state.rollback.backoff.max.ms={backoff_max:g} is below topology.state.rollback.backoff.ms="
               f"{backoff:g}: the longest wait between rollbacks cannot be shorter than the first")
        raise ConfigError(msg)
    directory = conf.get("topology.state.dir")
    if directory is not None and not isinstance(directory, str):  # Path(123): a TypeError in every worker
        msg = f"topology.state.dir={directory!r}: expected a string (a directory)"
        raise ConfigError(msg)
    return StateConfig(provider=str(provider), interval_ms=int(interval), timeout_secs=timeout,
                       max_parallelism=int(groups), max_rollbacks=int(rollbacks), backoff_ms=backoff,
                       backoff_max_ms=backoff_max, directory=Path(directory) if directory else None,
                       options=dict(options))
