"""Event sampling (Storm's topology event inspector) on real executors in one process: the
sampled emits write the tuples to the worker's events file and emit them as before; off, the
compiled emits are back, untouched; the topology's record says which components and how many."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_acking_runs import SENTENCES, Count, ManySplit, Split, _executors, _Ledger, _topology

from nstorm.loglevels import LogConfig
from worker.eventlog import EventFile, EventSampling
from worker.loglevels import LogLevels
from worker.outbox import Outbox
from worker.runs import SpoutGroup

from fakes import FakeHost


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _run(split: type, events: EventSampling | None, sentences: list[str]) -> tuple[FakeHost, Outbox, dict, _Ledger]:
    definition, plan = _topology(split, Count)
    worker = FakeHost(plan, wire_format=True, **{"topology.batch.adaptive": False, "topology.batch.size": 16})
    worker.events = events
    spout = Outbox(worker, 0, "sentences", definition)  # type: ignore[arg-type]
    spout.rebuild(worker.routing)  # type: ignore[arg-type]
    if events is not None and events.file is not None:
        spout.sample((events.percent("sentences"), events.file, "sentences:0") if events.percent("sentences") else None)
    executors = _executors(worker, definition, plan, {"split": split, "count": Count})
    ledger = _Ledger()
    for i, sentence in enumerate(sentences):
        group = SpoutGroup(1000 + i)
        assert spout.emit_tracked((sentence,), "default", group) == 1
        assert spout.close_group(group)
    spout.flush()
    ledger.take(worker)
    for _ in range(10):
        for task, ex in executors.items():
            q = worker.data(task)
            while not q.empty():
                ex._process_batch(*q.get())
            ex.outbox.flush()
            ledger.take(worker)
    return worker, spout, executors, ledger


def _counted(executors: dict) -> dict[str, int]:
    counted: dict[str, int] = {}
    for ex in executors.values():
        for w, n in getattr(ex.instance, "counts", {}).items():
            counted[w] = counted.get(w, 0) + n
    return counted


@pytest.mark.parametrize("split", [Split, ManySplit])
def test_a_sampled_component_writes_every_tuple_it_emits_and_emits_them_as_before(tmp_path: Path, split: type) -> None:
    file = EventFile(tmp_path / "worker-n1-1.events")
    worker, _spout, executors, ledger = _run(split, EventSampling({"split": 100.0, "sentences": 100.0}, file), SENTENCES)
    file.close()
    events = _events(file.path)
    words = [e["values"][0] for e in events if e["component"] == "split"]
    assert sorted(words) == sorted(w for s in SENTENCES for w in s.split())
    assert {e["executor"] for e in events if e["component"] == "split"} == {"split:0"}
    assert [e["values"] for e in events if e["component"] == "sentences"] == [[s] for s in SENTENCES]
    assert all(e["stream"] == "default" and isinstance(e["time"], float) for e in events)
    # the flow is what it is without sampling: every word counted once, every tree complete
    assert _counted(executors) == {w: sum(s.split().count(w) for s in SENTENCES) for s in SENTENCES for w in s.split()}
    assert ledger.complete() == {1000 + i for i in range(len(SENTENCES))} and not ledger.failed


def test_off_the_compiled_emits_are_back_and_nothing_is_written(tmp_path: Path) -> None:
    file = EventFile(tmp_path / "w.events")
    worker, _spout, executors, _ledger = _run(Split, EventSampling({"*": 100.0}, file), SENTENCES[:2])
    split = next(ex for ex in executors.values() if ex.component == "split")
    assert split.outbox.emit_anchored.__name__ == "emit_sampled"
    assert split.instance.emit.__name__ == "emit_sampled" and split.instance.emit_direct.__name__ == "emit_direct_sampled"
    worker.events = None
    split.refresh_routing()
    assert split.outbox.emit_anchored.__name__ == "emit_fields"  # compiled for the fields grouping, as before
    assert split.instance.emit is split.outbox.emit_anchored
    assert split.instance.emit_direct == split.outbox.emit_direct and "emit_direct" not in split.outbox.__dict__
    before = len(_events(file.path))
    split.outbox.current = None
    split.instance.emit(("unsampled",))
    assert len(_events(file.path)) == before
    # a component's own 0 wins over "*"
    worker.events = EventSampling({"*": 100.0, "split": 0.0}, file)
    split.refresh_routing()
    assert split.outbox.emit_anchored.__name__ == "emit_fields"


def test_a_percentage_samples_about_that_share(tmp_path: Path) -> None:
    random.seed(7)
    file = EventFile(tmp_path / "w.events")
    sentences = SENTENCES * 10
    _run(Split, EventSampling({"split": 20.0}, file), sentences)
    file.close()
    share = len(_events(file.path)) / (10 * len(sentences))
    assert 0.15 < share < 0.25, share


def test_values_that_are_not_json_are_written_as_their_repr_and_long_ones_cut(tmp_path: Path) -> None:
    file = EventFile(tmp_path / "w.events")
    file.write("c", "c:0", "default", (b"\x00bytes", {1, 2}))
    file.write("c", "c:0", "other", ("x" * 10_000,))
    file.close()
    first, second = _events(file.path)
    assert first["values"] == ["b'\\x00bytes'", "{1, 2}"] and second["stream"] == "other"
    assert isinstance(second["values"], str) and len(second["values"]) < 4100


def test_the_record_says_which_components_and_the_worker_is_told_of_changes() -> None:
    config = LogConfig("s1").sampled(None, 10).sampled("split", 50)
    assert config.events == {"*": 10.0, "split": 50.0}
    assert (config.sampling("split"), config.sampling("count")) == (50.0, 10.0)
    assert config.sampled("count", None).events == {"*": 10.0, "split": 50.0, "count": 0.0}
    assert config.sampled(None, None).events == {}
    assert LogConfig("s1").sampled("split", 5).sampled("split", None).events == {}
    assert LogConfig.from_json(config.to_json()) == config
    assert LogConfig.from_json({"loggers": {}, "events": {"a": 101, "b": "5", "c": True, "d": 0, "": 5}}).events == {"d": 0.0}
    for bad in (0, -1, 101, float("nan"), True, "10"):
        with pytest.raises(ValueError, match="sampling percentage"):
            LogConfig().sampled("split", bad)  # type: ignore[arg-type]
    told: list[dict[str, float]] = []
    levels = LogLevels("wc", "s1", lambda events: told.append(dict(events)))
    stored = {"logconfig/wc": config.to_json()}
    levels.poll(stored.get, now=0.0, monotonic=0.0)
    levels.poll(stored.get, now=0.0, monotonic=5.0)  # the same: not told again
    stored["logconfig/wc"] = LogConfig("s0").sampled(None, 10).to_json()  # another submission's
    levels.poll(stored.get, now=0.0, monotonic=10.0)
    assert told == [{"*": 10.0, "split": 50.0}, {}]


class Streams(Split):
    """Emits each sentence's words with ``emit_many`` on a stream of its own (the general path)."""

    outputs = {"default": ("word",), "other": ("word",)}

    def process(self, tup: Any) -> None:
        self.emit_many(zip(tup[0].split()), stream="other")
        self.emit((tup[0].split()[0],), stream="other")


def test_a_tuple_emitted_through_the_general_path_is_logged_once(tmp_path: Path) -> None:
    """``emit_many`` on another stream goes through the outbox's general emit_many, which emits each
    tuple: the sampled emit_many logs it, the emit under it does not again."""
    file = EventFile(tmp_path / "w.events")
    _run(Streams, EventSampling({"split": 100.0}, file), SENTENCES[:3])
    file.close()
    words = [e["values"][0] for e in _events(file.path) if e["component"] == "split"]
    expected = [w for s in SENTENCES[:3] for w in [*s.split(), s.split()[0]]]
    assert sorted(words) == sorted(expected)
    assert {e["stream"] for e in _events(file.path) if e["component"] == "split"} == {"other"}


def test_values_json_cannot_write_are_written_as_one_repr_and_an_unwritable_event_is_counted(tmp_path: Path) -> None:
    file = EventFile(tmp_path / "w.events")
    cyclic: list[Any] = []
    cyclic.append(cyclic)

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    file.write("c", "c:0", "default", ({(1, 2): 3}, float("nan")))
    file.write("c", "c:0", "default", (cyclic,))
    file.write("c", "c:0", "default", (Unprintable(),))
    file.close()
    first, second = _events(file.path)  # strict JSON: a reader that refuses NaN reads them
    assert first["values"] == "({(1, 2): 3}, nan)" and second["values"] == "([[...]],)"
    assert file.dropped == 1
