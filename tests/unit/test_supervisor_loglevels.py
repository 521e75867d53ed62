"""A supervisor mirrors a topology's dynamic log levels (``logconfig/<name>``, nstorm.loglevels)
into its plan store and nudges the workers, once a change: with a watch on the node (on its
creation while there is none), never a wake-up of its own loop."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from nstorm.loglevels import LogConfig, LoggerSetting, store_key
from supervisor.daemon import Supervisor


def _supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]) -> tuple[Supervisor, dict[str, Any]]:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sup = Supervisor("n9", "127.0.0.1", [(7005, 7105)], "127.0.0.1:1")
    seen: dict[str, Any] = {"meta": {}, "nudges": 0, "watches": []}

    class Store:
        def get_meta(self, key: str) -> Any:
            return seen["meta"].get(key)

        def put_meta(self, key: str, value: Any) -> None:
            seen["meta"][key] = value

    sup.store = Store()  # type: ignore[assignment]
    sup.zk = types.SimpleNamespace(  # type: ignore[assignment]
        exists=lambda path, watch=None: seen["watches"].append((path, watch)))
    sup.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        read=lambda path, watch=False: (node.get("data"), object() if "data" in node else None))
    monkeypatch.setattr(sup, "_nudge", lambda name: seen.__setitem__("nudges", seen["nudges"] + 1))
    return sup, seen


def test_log_levels_are_mirrored_once_a_change_and_their_node_is_watched(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    node: dict[str, Any] = {}
    sup, seen = _supervisor(tmp_path, monkeypatch, node)
    sup._mirror_log_levels("wc")
    assert seen["watches"] == [(sup.paths.logconfig("wc"), sup._watch)], "watched for its creation, not woken"
    assert not sup._wake.is_set()
    assert seen["meta"] == {store_key("wc"): LogConfig().to_json()}
    node["data"] = LogConfig("s1", {"ROOT": LoggerSetting("DEBUG", 99.0)}).to_json()
    sup._mirror_log_levels("wc")
    sup._mirror_log_levels("wc")
    assert seen["meta"][store_key("wc")] == node["data"] and seen["nudges"] == 2  # the first write, and this one
    assert len(seen["watches"]) == 1, "a node that exists is watched by its read"
