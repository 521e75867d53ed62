"""Word count whose count executors write their counts to files, so a run can be checked.

The topology of ``wordcount.py`` (same spout, split and settings, ``wordcount.plain`` too) with a count bolt
that also writes its ``keyed_state`` (its counts) to ``<wordcount.output.dir>/count-<task>.json`` five
times a second when it changed. Run it with ``-c wordcount.sentences=N`` and compare
the files with a ``Counter`` of the same sentences (``benchmarks.peers`` does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nstorm import Batch, Bolt, Context, Topology, Tuple
from topologies.wordcount import Count, build_wordcount, is_plain


class WritingCount(Count):
    """Counts like :class:`Count` and writes its counts on tick tuples (atomically: temp file, rename)."""

    tick_secs = 0.2

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.path = Path(str(conf["wordcount.output.dir"])) / f"count-{context.task_index}.json"
        self.dirty = True

    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            if self.dirty:
                tmp = self.path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(self.keyed_state))
                tmp.replace(self.path)
                self.dirty = False
            return
        word = tup.values[0]
        state = self.keyed_state
        state[word] = state.get(word, 0) + 1
        self.dirty = True

    def process_batch(self, batch: Batch) -> None:
        super().process_batch(batch)
        self.dirty = True


class PlainWritingCount(WritingCount):
    """:class:`WritingCount` with ``process`` per word (``wordcount.plain``): no ``process_batch``."""

    process_batch = Bolt.process_batch


def make_topology(conf: Mapping[str, Any]) -> Topology:
    """``wordcount.py``'s topology with :class:`WritingCount`; needs ``wordcount.output.dir``."""
    if not conf.get("wordcount.output.dir"):
        msg = "wordcount_checked.py needs -c wordcount.output.dir=DIR"
        raise ValueError(msg)
    return build_wordcount(conf, count=PlainWritingCount if is_plain(conf) else WritingCount)
