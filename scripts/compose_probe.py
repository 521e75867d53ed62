"""What scripts/compose-check asks inside the compose cluster, run in the nimbus container:
``docker compose exec -T nimbus python - COMMAND ... < scripts/compose_probe.py``.

Commands (each prints one JSON document):

- ``supervisors ZK``: the supervisors registered in ZooKeeper (node -> host, slots).
- ``counts ZK TOPOLOGY SENTENCES``: word count's last committed checkpoint, read back from its
  store (Redis in the compose cluster), against the input: each spout's position and what it
  has in flight, and the words counted by every count executor against the words of the
  sentences the spouts emit (``topologies/wordcount.py``: ``wordcount.sentences`` per spout,
  seeds 42, 43, ...). After every sentence is emitted and acked, counted == expected means
  nothing was lost and nothing counted twice, whatever was killed or moved on the way.
- ``keys ZK TOPOLOGY``: how many keys the topology's checkpoints hold in Redis (0 after a kill).
- ``ui ZK URL TOPOLOGY``: the ui service's REST API (Storm's ``/api/v1`` shape, issue 16): the
  supervisors of the topology's live workers and the executors of its migrations.
"""

from __future__ import annotations

import collections
import json
import sys
from typing import Any

from nstorm.client import ClusterClient
from nstorm.config import merge_conf
from nstorm.state import open_store, state_config
from nstorm.state.keyed import read_keyed
from nstorm.state.store import unpack_snapshot
from topologies.sentences import sentences


def supervisors(client: ClusterClient) -> dict[str, Any]:
    return {node: {"host": info.get("host"), "slots": len(info.get("slots") or [])}
            for node, info in client.cluster.supervisors().items()}


def counts(client: ClusterClient, name: str, per_spout: int) -> dict[str, Any]:
    topo = client.cluster.topology(name)
    if topo is None:
        return {"error": f"no topology {name}"}
    last = client.checkpoints(name).get("last_committed")
    if not last:
        return {"checkpoint": None}
    cid = int(last["id"])
    definition = topo["definition"]
    conf = merge_conf(definition.get("conf"), topo.get("conf"))
    config = state_config(conf)
    seed = int(conf.get("wordcount.seed", 42))
    spouts: dict[str, Any] = {}
    counted: collections.Counter[str] = collections.Counter()
    expected: collections.Counter[str] = collections.Counter()
    with open_store(config, name, topo.get("submission")) as store:
        for component, spec in definition["components"].items():
            for i in range(int(spec["parallelism"])):
                executor = f"{component}:{i}"
                blob = store.executor(cid, executor)
                state = unpack_snapshot(blob)["state"] if blob is not None else {}
                if spec["kind"] == "spout":
                    spouts[executor] = {"sent": state.get("sent", 0), "in_flight": len(state.get("in_flight", {})),
                                        "replay": len(state.get("replay", []))}
                    for sentence in sentences(per_spout, seed=seed + i):
                        expected.update(sentence.split())
        # The count bolt keeps its counts in keyed_state, stored per key group.
        counted.update({word: int(n) for word, n in read_keyed(store, "count", cid, config.max_parallelism).items()})
    wrong = sorted(w for w in set(counted) | set(expected) if counted[w] != expected[w])
    return {"checkpoint": cid, "spouts": spouts, "words_counted": sum(counted.values()),
            "words_expected": sum(expected.values()), "wrong_words": len(wrong), "example": wrong[:5]}


def keys(client: ClusterClient, name: str) -> dict[str, Any]:
    import redis

    topo = client.cluster.topology(name) or {}
    conf = merge_conf((topo.get("definition") or {}).get("conf"), topo.get("conf"))
    url = str((conf.get("topology.state.provider.config") or {}).get("url", "redis://redis:6379/0"))
    r = redis.Redis.from_url(url)
    try:
        found = sorted(k.decode(errors="replace") for k in r.scan_iter(match=f"nstorm:{name}-*", count=1000))
        return {"keys": len(found), "names": found[:10]}
    finally:
        r.close()


def ui(url: str, name: str) -> dict[str, Any]:
    import urllib.request

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{url}{path}", timeout=10) as response:
            return json.loads(response.read())

    def log_lines(worker: str) -> int:  # from the worker's supervisor container (its logviewer)
        try:
            return len(get(f"/api/v1/topology/{name}/worker/{worker}/log?lines=20")["lines"])
        except OSError:
            return 0

    def dumped_threads(worker: str) -> int:  # the worker's supervisor asks it for a thread dump
        request = urllib.request.Request(f"{url}/api/v1/topology/{name}/worker/{worker}/dump", data=b"{}",
                                         method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                lines = json.loads(response.read())["lines"]
        except OSError:
            return 0
        return sum(1 for line in lines if line.startswith('"'))

    def daemon_log_lines(node: str) -> int:  # the supervisor's own log, from its container (Storm's daemonlog)
        try:
            return len(get(f"/api/v1/supervisor/{node}/log?lines=20")["lines"])
        except OSError:
            return 0

    topology = get(f"/api/v1/topology/{name}")
    migrations = get(f"/api/v1/topology/{name}/migrations")
    alive = [w for w in topology["workers"] if w.get("alive")]
    return {"supervisors": sorted({w["supervisorId"] for w in alive}),
            "migrations": [m["executor"] for m in migrations["migrations"]],
            "logs": {w["id"]: log_lines(w["id"]) for w in alive},
            "threads": {w["id"]: dumped_threads(w["id"]) for w in alive},
            "daemonlogs": {node: daemon_log_lines(node) for node in sorted({w["supervisorId"] for w in alive})}}


def main(argv: list[str]) -> int:
    command, zk, *rest = argv
    with ClusterClient(zk, "/nstorm") as client:
        if command == "supervisors":
            result = supervisors(client)
        elif command == "counts":
            result = counts(client, rest[0], int(rest[1]))
        elif command == "keys":
            result = keys(client, rest[0])
        elif command == "ui":
            result = ui(rest[0], rest[1])
        else:
            print(f"unknown command {command!r}", file=sys.stderr)
            return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
