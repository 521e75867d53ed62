"""Helpers for test topologies: write a component's observations to a JSON file atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def dump(directory: str, name: str, data: Any) -> None:
    path = Path(directory) / f"{name}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
