"""The bounded history of a topology's OTD rounds, ``otd/<topology>/rounds`` in ZooKeeper.

``otd/<topology>`` holds the last round in full (``nstorm status --json`` shows it); this child
keeps the last ``otd.history.size`` rounds in short (when, which case, which engine, the move
decided and its allocation-score change, the warning, the inter-node ratio) and the rounds
counted per case since the topology started, for the UI's timeline, its
``/api/v1/topology/:id/otd`` and ``/metrics``. Only the leading Nimbus writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from nstorm.zkschema import ZkPaths

__all__ = ["record_round", "short_round"]


def short_round(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the history keeps of one round's record (the runner's, see :mod:`scheduler_otd.runner`)."""
    return {k: record.get(k) for k in ("at", "case", "engine", "executor", "target", "asc", "warning",
                                        "inter_node_ratio", "window_tuples", "round_secs")}


def record_round(zk: KazooClient, paths: ZkPaths, name: str, record: Mapping[str, Any], size: int = 200) -> None:
    """Append one round to ``name``'s history, keeping the last ``size``."""
    path = paths.otd_rounds(name)
    try:
        raw, _ = zk.get(path)
        data = json.loads(raw.decode()) if raw else {}
    except NoNodeError:
        data = None
    except ValueError:
        data = {}  # damaged: start again
    history = data if isinstance(data, dict) else {}
    rounds = [r for r in history.get("rounds") or [] if isinstance(r, dict)]
    counts = {str(k): int(v) for k, v in (history.get("cases") or {}).items() if isinstance(v, int)}
    rounds.append(short_round(record))
    case = str(record.get("case"))
    counts[case] = counts.get(case, 0) + 1
    encoded = json.dumps({"rounds": rounds[-max(1, int(size)):], "cases": counts}, default=str).encode()
    if data is None:
        try:
            zk.create(path, encoded, makepath=True)
            return
        except NodeExistsError:
            pass
    zk.set(path, encoded)
