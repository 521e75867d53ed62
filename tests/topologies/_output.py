"""Helpers for test topologies: write a component's observations to a JSON file atomically."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def dump(directory: str, name: str, data: Any) -> None:
    path = Path(directory) / f"{name}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


class Snapshots:
    """``<directory>/<name>.json``, rewritten when something changed (:meth:`changed`) and at most
    every ``every`` seconds, from what ``observe()`` returns then."""

    def __init__(self, directory: str, name: str, observe: Callable[[], Any], every: float = 0.2) -> None:
        self.directory = directory
        self.name = name
        self.observe = observe
        self.every = every
        self.dirty = True
        self.at = float("-inf")

    def changed(self) -> None:
        self.dirty = True

    def maybe(self, now: float | None = None) -> None:
        """Write if something changed since the last write and ``every`` has passed."""
        now = time.monotonic() if now is None else now
        if self.dirty and now - self.at >= self.every:
            dump(self.directory, self.name, self.observe())
            self.dirty, self.at = False, now
