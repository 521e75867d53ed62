"""Tests for the node-local plan store, on real LMDB files (no mocks).

LMDB refuses to open one environment twice in a process, so wherever a reader
must run while the writer is open, the reader is a separate Python process
(``READER``/``WRITER`` scripts below) that reports back as JSON lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import pytest

import kvstore
from kvstore import (
    KVStoreError,
    LMDBPlanStore,
    PlanStore,
    StoreCorruptError,
    StoreLockedError,
    StoreMissingError,
)

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 20.0  # seconds: generous bound for anything we poll for

# Polls latest() while another process writes. Prints "ready" once the store
# is open, then one JSON summary line when it saw `final` (or the deadline hit).
READER = r"""
import json, sys, time
from kvstore import KVStoreError, LMDBPlanStore, StoreMissingError

path, topology, final, deadline = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
stop = time.monotonic() + deadline
while True:
    try:
        store = LMDBPlanStore(path, readonly=True)
        break
    except StoreMissingError:
        if time.monotonic() > stop:
            raise
        time.sleep(0.005)
print("ready", flush=True)
seen, errors, torn, backwards, polls, last = set(), [], 0, 0, 0, -1
plan = None
while time.monotonic() < stop:
    polls += 1
    try:
        got = store.latest(topology)
    except KVStoreError as exc:  # a pointer without its record would land here
        errors.append(repr(exc))
        continue
    if got is None:
        continue
    version, plan = got
    if plan.get("version") != version:
        torn += 1
    if version < last:
        backwards += 1
    if version not in seen:
        seen.add(version)
        print(json.dumps({"saw": version}), flush=True)
    last = version
    if version == final:
        break
print(json.dumps({"final": last, "plan": plan, "distinct": len(seen), "errors": errors[:5],
                  "n_errors": len(errors), "torn": torn, "backwards": backwards, "polls": polls}),
      flush=True)
store.close()
"""

# Tries to open a writer; prints the outcome.
WRITER = r"""
import sys
from kvstore import LMDBPlanStore, StoreLockedError
try:
    LMDBPlanStore(sys.argv[1]).close()
except StoreLockedError as exc:
    print("locked:", exc)
else:
    print("opened")
"""


def plan_of(version: int, **extra: Any) -> dict[str, Any]:
    """A plan shaped like a supervisor's: int executor ids map to endpoints."""
    return {
        "version": version,
        "workers": {"6700": [1, 2, 3], "6701": [4, 5]},
        "routes": {i: f"tcp://10.0.0.{i % 3}:670{i % 2}" for i in range(1, 6)},
        **extra,
    }


def python(script: str, *args: object) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_line(proc: subprocess.Popen[str]) -> str:
    """The child's next stdout line; fails with its stderr if it died instead."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate(timeout=DEADLINE)
        pytest.fail(f"child exited with {proc.returncode}: {err}")
    return line.strip()


def wait_for(proc: subprocess.Popen[str], predicate: Any) -> dict[str, Any]:
    """Read the child's JSON lines until one satisfies ``predicate``."""
    while True:
        line = read_line(proc)
        msg = json.loads(line)
        if predicate(msg):
            return msg


def finish(proc: subprocess.Popen[str]) -> None:
    try:
        _, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "plans"


@pytest.fixture
def store(path: Path) -> Iterator[LMDBPlanStore]:
    with LMDBPlanStore(path) as s:
        yield s


def test_package_exports() -> None:
    assert set(kvstore.__all__) == {
        "PlanStore",
        "LMDBPlanStore",
        "KVStoreError",
        "StoreCorruptError",
        "StoreLockedError",
        "StoreMissingError",
    }
    for error in (StoreCorruptError, StoreLockedError, StoreMissingError):
        assert issubclass(error, KVStoreError)
    assert issubclass(LMDBPlanStore, PlanStore)


def test_round_trip(store: LMDBPlanStore) -> None:
    plan = plan_of(3, blob=b"\x00\xff", ratio=0.5, none=None, nested=[{"a": [1, 2]}])
    store.put_plan("wc", 3, plan)
    store.put_plan("other", 1, plan_of(1))

    assert store.get("wc", 3) == plan  # int keys and bytes survive (strict_map_key=False, bin)
    assert store.latest("wc") == (3, plan)
    assert store.latest_version("wc") == 3
    assert store.versions("wc") == [3]
    assert store.topologies() == ["other", "wc"]
    assert store.get("wc", 2) is None
    assert store.latest("nope") is None
    assert store.latest_version("nope") is None
    assert store.versions("nope") == []


def test_plans_persist_and_readers_see_them(path: Path) -> None:
    with LMDBPlanStore(path) as writer:
        writer.put_plan("wc", 1, plan_of(1))
        writer.put_plan("wc", 2, plan_of(2))
    with LMDBPlanStore(path, readonly=True) as reader:
        assert reader.latest("wc") == (2, plan_of(2))
        assert reader.versions("wc") == [1, 2]
        with pytest.raises(KVStoreError, match="read-only"):
            reader.put_plan("wc", 3, plan_of(3))
        with pytest.raises(KVStoreError, match="read-only"):
            reader.remove("wc")
    with LMDBPlanStore(path) as writer:  # reopening verifies and keeps everything
        assert writer.latest("wc") == (2, plan_of(2))


def test_pointer_and_record_are_atomic_for_a_concurrent_reader(path: Path) -> None:
    final = 200
    reader = python(READER, path, "wc", final, DEADLINE)
    try:
        # history=2: pruning races the reader as hard as it can.
        with LMDBPlanStore(path, history=2) as writer:
            assert read_line(reader) == "ready"
            for version in range(1, final + 1):
                writer.put_plan("wc", version, plan_of(version))
            summary = wait_for(reader, lambda m: "final" in m)
    finally:
        finish(reader)
    assert summary["final"] == final, summary
    assert summary["plan"] == json.loads(json.dumps(plan_of(final)))
    assert summary["n_errors"] == 0, summary["errors"]
    assert summary["torn"] == 0
    assert summary["backwards"] == 0
    assert summary["distinct"] >= 2, summary  # the reader really overlapped the writes


def test_pruning_keeps_exactly_history_versions(path: Path) -> None:
    with LMDBPlanStore(path, history=3) as store:
        for version in range(1, 11):
            store.put_plan("wc", version, plan_of(version))
            assert store.versions("wc") == list(range(max(1, version - 2), version + 1))
        store.put_plan("other", 1, plan_of(1))
        assert store.versions("wc") == [8, 9, 10]  # other topologies are not pruned
        assert store.get("wc", 7) is None
        assert store.get("wc", 8) == plan_of(8)


def test_versions_sort_numerically(store: LMDBPlanStore) -> None:
    big = [9, 10, 100, 1000, 2**40, 2**64 - 1]  # a string sort would put 10 before 9
    for version in big:
        store.put_plan("wc", version, plan_of(version))
    assert store.versions("wc") == big[-5:]  # history=5
    assert store.latest_version("wc") == 2**64 - 1


def test_version_going_backwards_is_rejected(store: LMDBPlanStore) -> None:
    store.put_plan("wc", 5, plan_of(5))
    with pytest.raises(ValueError, match="older"):
        store.put_plan("wc", 4, plan_of(4))
    store.put_plan("wc", 5, plan_of(5))  # identical rewrite: a re-sync, allowed
    store.put_plan("wc", 5, dict(reversed(plan_of(5).items())))  # equal, other key order
    with pytest.raises(ValueError, match="different plan"):
        store.put_plan("wc", 5, plan_of(5, extra=1))
    assert store.versions("wc") == [5]
    assert store.latest("wc") == (5, plan_of(5))
    store.put_plan("wc", 6, plan_of(6))
    assert store.versions("wc") == [5, 6]


def test_bad_arguments(store: LMDBPlanStore) -> None:
    for name in ("", "a/b"):
        with pytest.raises(ValueError):
            store.put_plan(name, 1, plan_of(1))
    with pytest.raises(ValueError):
        store.put_plan("wc", -1, plan_of(1))
    with pytest.raises(TypeError):
        store.put_plan("wc", True, plan_of(1))
    with pytest.raises(TypeError):
        store.put_plan("wc", 1, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="msgpack"):
        store.put_plan("wc", 1, {"executors": {1, 2}})
    with pytest.raises(ValueError):
        LMDBPlanStore(path=store.path.with_name("h0"), history=0)
    assert store.topologies() == []  # nothing half-written


def test_second_writer_gets_store_locked(path: Path) -> None:
    with LMDBPlanStore(path):
        with pytest.raises(StoreLockedError, match=str(os.getpid())):
            LMDBPlanStore(path)
        other = python(WRITER, path)
        assert read_line(other).startswith("locked:")
        finish(other)
    with pytest.raises(StoreLockedError):  # open_or_rebuild honours the lock too
        with LMDBPlanStore(path):
            LMDBPlanStore.open_or_rebuild(path)
    other = python(WRITER, path)  # released on close
    assert read_line(other) == "opened"
    finish(other)


def test_reader_and_writer_in_one_process_is_refused(path: Path) -> None:
    # LMDB's fcntl locks are per process: a second handle would break them.
    with LMDBPlanStore(path) as writer:
        writer.put_plan("wc", 1, plan_of(1))
        with pytest.raises(KVStoreError, match="already open"):
            LMDBPlanStore(path, readonly=True)


def _fill_and_close(path: Path) -> None:
    with LMDBPlanStore(path) as store:
        for version in (1, 2, 3):
            store.put_plan("wc", version, plan_of(version))
        store.put_meta("sync", {"zk_version": 3})


def test_garbage_files_are_corrupt_and_get_rebuilt(path: Path) -> None:
    _fill_and_close(path)
    data = path / "data.mdb"
    data.write_bytes(b"\xde\xad\xbe\xef garbage " * (data.stat().st_size // 16))

    with pytest.raises(StoreCorruptError):
        LMDBPlanStore(path)
    with pytest.raises(StoreCorruptError):
        LMDBPlanStore(path, readonly=True)

    store, rebuilt = LMDBPlanStore.open_or_rebuild(path)
    with store:
        assert rebuilt is True
        assert store.topologies() == []
        assert store.get_meta("sync") is None
        store.put_plan("wc", 4, plan_of(4))
        assert store.latest("wc") == (4, plan_of(4))
    (aside,) = path.parent.glob("plans.corrupt-*")
    assert (aside / "data.mdb").read_bytes().startswith(b"\xde\xad\xbe\xef")

    store, rebuilt = LMDBPlanStore.open_or_rebuild(path)  # healthy now: kept as is
    with store:
        assert rebuilt is False
        assert store.latest("wc") == (4, plan_of(4))


def test_undecodable_record_is_corrupt(path: Path) -> None:
    _fill_and_close(path)
    env = lmdb.open(str(path), subdir=True, map_size=64 * 2**20)
    with env.begin(write=True) as txn:
        txn.put(b"plan/wc/%020d" % 3, b"\xc1 not msgpack")
    env.close()

    with LMDBPlanStore(path, readonly=True) as reader:  # readers decode lazily
        assert reader.get("wc", 2) == plan_of(2)
        with pytest.raises(StoreCorruptError):
            reader.get("wc", 3)
        with pytest.raises(StoreCorruptError):
            reader.latest("wc")
    with pytest.raises(StoreCorruptError):  # the writer checks every record on open
        LMDBPlanStore(path)
    store, rebuilt = LMDBPlanStore.open_or_rebuild(path)
    with store:
        assert rebuilt is True
        assert store.topologies() == []


def test_pointer_without_record_is_corrupt(path: Path) -> None:
    _fill_and_close(path)
    env = lmdb.open(str(path), subdir=True, map_size=64 * 2**20)
    with env.begin(write=True) as txn:
        txn.put(b"latest/wc", b"%020d" % 99)
    env.close()
    with LMDBPlanStore(path, readonly=True) as reader:
        assert reader.latest_version("wc") == 99
        with pytest.raises(StoreCorruptError, match="no record"):
            reader.latest("wc")
    with pytest.raises(StoreCorruptError):
        LMDBPlanStore(path)


@pytest.mark.parametrize("damage", ["replaced", "overwritten"])
def test_reader_survives_a_rebuild(path: Path, damage: str) -> None:
    _fill_and_close(path)
    reader = python(READER, path, "wc", 10, DEADLINE)
    try:
        assert read_line(reader) == "ready"
        wait_for(reader, lambda m: m.get("saw") == 3)
        data = path / "data.mdb"
        garbage = (b"\xde\xad\xbe\xef garbage " * data.stat().st_size)[: data.stat().st_size]
        if damage == "replaced":
            # A new file (new inode): the reader's mapping of the old one stays
            # intact and it keeps answering v3 until the rebuild.
            (path / "garbage.tmp").write_bytes(garbage)
            os.replace(path / "garbage.tmp", data)
        else:
            # Overwritten in place under the reader's mapping: it reports
            # StoreCorruptError until the rebuilt store appears, or LMDB's own assertion
            # (mdb.c: IS_LEAF) aborts it on a garbage page, which no Python code can catch: a
            # worker that dies so is restarted by its supervisor, and its new reader must see
            # the rebuilt store.
            with open(data, "r+b") as f:
                f.write(garbage)
        store, rebuilt = LMDBPlanStore.open_or_rebuild(path)
        with store:
            assert rebuilt is True
            store.put_plan("wc", 10, plan_of(10, rebuilt=True))
            try:
                summary = wait_for(reader, lambda m: "final" in m)
            except BaseException:
                if damage != "overwritten" or reader.poll() != -signal.SIGABRT:
                    raise
                reader = python(READER, path, "wc", 10, DEADLINE)  # the supervisor's restart
                assert read_line(reader) == "ready"
                summary = wait_for(reader, lambda m: "final" in m)
    finally:
        finish(reader)
    assert summary["final"] == 10, summary
    assert summary["plan"]["rebuilt"] is True
    assert summary["torn"] == 0


def test_reader_of_a_missing_store(path: Path) -> None:
    with pytest.raises(StoreMissingError):
        LMDBPlanStore(path, readonly=True)
    path.mkdir()
    with pytest.raises(StoreMissingError):  # a directory without data.mdb is no store yet
        LMDBPlanStore(path, readonly=True)
    assert not (path / "data.mdb").exists()  # and the reader did not create one
    LMDBPlanStore(path).close()
    with LMDBPlanStore(path, readonly=True) as reader:
        assert reader.topologies() == []


def test_remove(store: LMDBPlanStore) -> None:
    for version in (1, 2, 3):
        store.put_plan("wc", version, plan_of(version))
    store.put_plan("other", 7, plan_of(7))
    store.remove("wc")
    assert store.latest("wc") is None
    assert store.latest_version("wc") is None
    assert store.versions("wc") == []
    assert store.get("wc", 3) is None
    assert store.topologies() == ["other"]
    assert store.versions("other") == [7]
    store.remove("wc")  # unknown: no-op
    store.put_plan("wc", 1, plan_of(1))  # starts afresh: a lower version is fine now
    assert store.latest("wc") == (1, plan_of(1))


def test_meta_round_trip(store: LMDBPlanStore) -> None:
    assert store.get_meta("sync") is None
    store.put_meta("sync", {"zk_version": 12, "at": 1.5, "nodes": {1: "a"}})
    assert store.get_meta("sync") == {"zk_version": 12, "at": 1.5, "nodes": {1: "a"}}
    store.put_meta("sync", {"zk_version": 13})
    assert store.get_meta("sync") == {"zk_version": 13}
    store.put_meta("a/b", {})  # meta keys may nest
    assert store.get_meta("a/b") == {}
    assert store.topologies() == []
    with pytest.raises(TypeError):
        store.put_meta("x", [1])  # type: ignore[arg-type]


def test_closed_store_refuses(path: Path) -> None:
    store = LMDBPlanStore(path)
    store.put_plan("wc", 1, plan_of(1))
    store.close()
    store.close()  # idempotent
    for call in (
        lambda: store.latest_version("wc"),
        lambda: store.latest("wc"),
        lambda: store.put_plan("wc", 2, plan_of(2)),
    ):
        with pytest.raises(KVStoreError, match="closed"):
            call()
    with LMDBPlanStore(path, readonly=True) as reader:
        pass
    with pytest.raises(KVStoreError, match="closed"):
        reader.latest_version("wc")


def test_latest_version_is_cheap(path: Path) -> None:
    _fill_and_close(path)
    with LMDBPlanStore(path, readonly=True) as reader:
        n = 20_000
        start = time.perf_counter()
        for _ in range(n):
            reader.latest_version("wc")
        per_call = (time.perf_counter() - start) / n
    # Typically ~2 us; the bound only catches a regression such as a reopen per call.
    assert per_call < 50e-6, f"{per_call * 1e6:.1f} us per latest_version()"


def test_msgpack_not_pickle(store: LMDBPlanStore) -> None:
    store.put_plan("wc", 1, plan_of(1))
    store.close()
    env = lmdb.open(str(store.path), subdir=True, readonly=True, map_size=0)
    with env.begin() as txn:
        raw = txn.get(b"plan/wc/%020d" % 1)
        pointer = txn.get(b"latest/wc")
    env.close()
    assert msgpack.unpackb(raw, raw=False, strict_map_key=False) == plan_of(1)
    assert pointer == b"%020d" % 1


# Forks `count` readers that each read once and vanish without closing (as a killed worker, or
# one ending with os._exit); prints how many could read. It never opens the store itself.
VANISHING_READERS = r"""
import os, sys
from kvstore import LMDBPlanStore

path, count = sys.argv[1], int(sys.argv[2])
ok = 0
for _ in range(count):
    pid = os.fork()
    if pid == 0:
        try:
            LMDBPlanStore(path, readonly=True).latest("t")
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    ok += status == 0
print(ok)
"""


def test_readers_that_died_are_cleared_by_the_running_writer(path: Path) -> None:
    """LMDB's reader table has 126 slots and a reader that dies without closing keeps its slot
    (with no writer open, the 126th dead reader fills it: review, session 31). With the
    supervisor's writer open, and its ``clear_stale_readers`` on every pass, 200 dead readers
    leave the store readable."""
    with LMDBPlanStore(path) as writer:
        writer.put_plan("t", 1, plan_of(1))
        for _ in range(2):  # 200 dead readers in all: more than the table holds
            proc = python(VANISHING_READERS, path, 100)
            out, err = proc.communicate(timeout=DEADLINE * 3)
            assert out.strip() == "100", err
            writer.clear_stale_readers()
        assert writer.latest_version("t") == 1


def test_a_writer_knows_when_its_files_were_removed(path: Path) -> None:
    import shutil

    with LMDBPlanStore(path) as writer:
        assert not writer.replaced()
        shutil.rmtree(path)
        assert writer.replaced()
