"""A windowed bolt's line in ``status --json`` (``components.<bolt>.window``), from its executors'."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["describe_windows", "merge_window_status"]


def merge_window_status(executors: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The component's windows: the slowest watermark (None before any), the others summed;
    ``error`` is the last executor error (``topology.window.max.tuples`` reached)."""
    out: dict[str, Any] = {"watermark": None, "open_windows": 0, "late_tuples": 0, "fired": 0, "tuples": 0,
                           "malformed": 0, "refused": 0, "error": None}
    marks = []
    for w in executors:
        if w.get("watermark") is not None:
            marks.append(float(w["watermark"]))
        for key in ("open_windows", "late_tuples", "fired", "tuples", "malformed", "refused"):
            out[key] += int(w.get(key) or 0)
        if w.get("error"):
            out["error"] = w["error"]
    out["watermark"] = min(marks) if marks else None
    return out


def describe_windows(w: Mapping[str, Any]) -> str:
    """One line for ``nstorm status`` and ``nstorm local``."""
    mark = w.get("watermark")
    line = (f"watermark={'-' if mark is None else f'{mark:.3f}'} open={w.get('open_windows', 0)} "
            f"fired={w.get('fired', 0)} late={w.get('late_tuples', 0)} holding={w.get('tuples', 0)} tuples")
    if w.get("malformed"):
        line += f" malformed={w['malformed']}"
    if w.get("error"):
        line += f" error: {w['error']}"
    return line
