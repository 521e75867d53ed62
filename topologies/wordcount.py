"""Word count, the paper's benchmark: sentences -> split -> count (fields grouping on the word).

Run it: ``nstorm local topologies/wordcount.py``. Settings (``-c key=value``):

- ``wordcount.sentences``: sentences per spout executor, then the spout goes
  quiet (default 0: endless);
- ``wordcount.seed``: seed of the sentence source (default 42; spout executor i
  uses ``seed + i``);
- ``wordcount.pool``: sentences drawn once and then cycled (default 50000), so that
  drawing Zipf words (about 0.25 µs each) stays out of the measured path;
- ``wordcount.rate``: sentences per second per spout executor (default 0: as fast as it can);
- ``wordcount.rate.schedule``: a rate that changes over time, JSON ``[[seconds, rate], ...]``
  (rate per spout executor), cycled from the spout's open; overrides ``wordcount.rate``;
- ``wordcount.spouts``, ``wordcount.splits``, ``wordcount.counts``: parallelism;
- ``wordcount.workers``: worker processes (default 2);
- ``wordcount.reliable``: emit with message ids, tracked by the acker (default true);
- ``wordcount.batched``: count whole batches with ``process_batch`` (default true) or
  call ``process`` per word (false), to compare the two APIs (the split still emits a
  sentence's words with one ``emit_many``);
- ``wordcount.local``: the split takes its sentences ``local_or_shuffle`` (default false): the
  even scheduler puts each split in its spout's worker, a pointwise channel that can be chained
  (``-c topology.chaining=true``); with one executor a component that is word count one stage a
  worker, the spout and the split in one thread, the count in the other worker (README, "Deploy
  for it");
- ``wordcount.plain``: word count written the plain way most users write it (default false):
  the split emits one ``emit`` per word and the count calls ``process`` per word, no
  ``emit_many`` and no ``process_batch`` (overrides ``wordcount.batched``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from nstorm import Batch, Bolt, Context, Spout, Topology, TopologyBuilder, Tuple
from topologies.sentences import sentences


def scheduled_sends(schedule: list[tuple[float, float]], elapsed: float) -> float:
    """Sentences a spout following ``schedule`` (``[(seconds, rate), ...]``, cycled) has sent after
    ``elapsed`` seconds: the integral of its rate."""
    period = sum(secs for secs, _ in schedule)
    cycles, rest = divmod(max(0.0, elapsed), period)
    total = cycles * sum(secs * rate for secs, rate in schedule)
    for secs, rate in schedule:
        total += min(rest, secs) * rate
        rest -= secs
        if rest <= 0:
            break
    return total


def rate_schedule(value: Any) -> list[tuple[float, float]]:
    """``wordcount.rate.schedule`` (a JSON string or a list of ``[seconds, rate]``) as pairs; [] if unset."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    steps = [(float(secs), float(rate)) for secs, rate in value or ()]
    if steps and (any(secs <= 0 or rate < 0 for secs, rate in steps)):
        msg = f"wordcount.rate.schedule needs [[seconds > 0, rate >= 0], ...], got {value!r}"
        raise ValueError(msg)
    return steps


class Sentences(Spout):
    """Emits the deterministic sentence stream; replays failed sentences.

    Its position and its sentences in flight live in ``self.state``, so a live
    migration of the spout continues where the old copy stopped.
    """

    outputs = ("sentence",)

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.limit = int(conf.get("wordcount.sentences", 0))
        pool = int(conf.get("wordcount.pool", 50_000))
        size = self.limit if 0 < self.limit <= 10 * pool else pool
        self.pool = sentences(size, seed=int(conf.get("wordcount.seed", 42)) + context.task_index)
        self.rate = float(conf.get("wordcount.rate", 0))
        self.schedule = rate_schedule(conf.get("wordcount.rate.schedule"))
        self.base = 0.0  # sentences the schedule is behind or ahead of (re-anchored like the rate)
        self.reliable = bool(conf.get("wordcount.reliable", True))
        self.started = time.monotonic()
        self.state.setdefault("sent", 0)
        self.state.setdefault("in_flight", {})  # msg id -> index of the sentence
        self.state.setdefault("replay", [])

    def next_tuple(self) -> None:
        state = self.state
        if state["replay"]:
            msg_id = state["replay"].pop()
            self.emit((self.pool[state["in_flight"][msg_id] % len(self.pool)],), msg_id=msg_id)
            return
        sent = state["sent"]
        if self.limit and sent >= self.limit:
            return
        if self.schedule:
            expected = self.base + scheduled_sends(self.schedule, time.monotonic() - self.started)
            if abs(sent - expected) > max(rate for _, rate in self.schedule):
                self.base += sent - expected  # a second off schedule: re-anchor, as for a fixed rate
            elif sent >= expected:
                return
        elif self.rate:
            expected = self.rate * (time.monotonic() - self.started)
            if abs(sent - expected) > self.rate:
                # More than a second off schedule (this copy was just moved here with the
                # state of the old one, or it fell behind): re-anchor, no burst, no pause.
                self.started = time.monotonic() - sent / self.rate
            elif sent >= expected:
                return
        sentence = self.pool[sent % len(self.pool)]
        state["sent"] = sent = sent + 1
        if self.reliable:
            state["in_flight"][sent] = sent - 1
            self.emit((sentence,), msg_id=sent)
        else:
            self.emit((sentence,))

    def ack(self, msg_id: Any) -> None:
        self.state["in_flight"].pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.state["in_flight"]:
            self.state["replay"].append(msg_id)


class Split(Bolt):
    """Splits a sentence into words: one ``emit_many`` of the words as 1-tuples (``zip`` makes
    them), which routes and anchors each word as ``emit`` would, in one call."""

    outputs = ("word",)

    def process(self, tup: Tuple) -> None:
        self.emit_many(zip(tup.values[0].split()))


class PlainSplit(Bolt):
    """Splits a sentence into words the plain way: one ``emit`` per word."""

    outputs = ("word",)

    def process(self, tup: Tuple) -> None:
        for word in tup.values[0].split():
            self.emit((word,))


class TupleCount(Bolt):
    """Counts words in ``self.keyed_state``, a tuple at a time: the words are the key the input is
    fields-grouped on, so the counts move with the executor on migration, are split and merged
    by key group when the count bolt is rescaled live, and are checkpointed per key group (only
    the words counted since the last checkpoint are written) with a durable state provider."""

    outputs = ("word", "count")

    def process(self, tup: Tuple) -> None:
        word = tup.values[0]
        state = self.keyed_state
        state[word] = state.get(word, 0) + 1


class Count(TupleCount):
    """Counts words like :class:`TupleCount`, a whole input batch per call: no tuple object and no
    call per word (every word of the batch is acked when it returns)."""

    def process_batch(self, batch: Batch) -> None:
        state = self.keyed_state
        get = state.get
        for (word,) in batch.values:
            state[word] = get(word, 0) + 1


def is_plain(conf: Mapping[str, Any], prefix: str = "wordcount") -> bool:
    """``<prefix>.plain``: the split emits per word and the count processes per word."""
    return conf.get(f"{prefix}.plain", False) in (True, "true", "True", 1, "1")


def build_wordcount(conf: Mapping[str, Any], spout: type[Spout] | None = None, count: type[Bolt] | None = None,
                    name: str = "wordcount", prefix: str = "wordcount", workers: int = 2) -> Topology:
    """sentences -> split -> count, sized by ``<prefix>.spouts|splits|counts|workers`` in ``conf``.

    The variants (``wordcount_checked.py``, ``audited.py``) swap in their own spout or count bolt.
    With ``<prefix>.plain`` the split is :class:`PlainSplit` and the count :class:`TupleCount`.
    """
    plain = is_plain(conf, prefix)
    builder = TopologyBuilder(name)
    builder.set_spout("sentences", spout or Sentences, parallelism=int(conf.get(f"{prefix}.spouts", 2)))
    split = builder.set_bolt("split", PlainSplit if plain else Split, parallelism=int(conf.get(f"{prefix}.splits", 4)))
    if conf.get(f"{prefix}.local", False) in (True, "true", "True", 1, "1"):
        split.local_or_shuffle_grouping("sentences")  # chainable: each split takes its worker's spout
    else:
        split.shuffle_grouping("sentences")
    if count is None:
        batched = conf.get(f"{prefix}.batched", True) not in (False, "false", 0)
        count = Count if batched and not plain else TupleCount
    builder.set_bolt("count", count, parallelism=int(conf.get(f"{prefix}.counts", 4))).fields_grouping(
        "split", ["word"]
    )
    return builder.build(workers=int(conf.get(f"{prefix}.workers", workers)))


def make_topology(conf: Mapping[str, Any]) -> Topology:
    """The word count topology, sized by ``conf`` (see the module docstring)."""
    return build_wordcount(conf)
