"""exact_wordcount with one spout and a split per worker: one split's sentences cross a process.

The channel ``sentences > split`` is shuffle grouped (never chained), so a latency constraint on
it that buffers cannot meet leaves the controller one step: move the split that sits on a worker
without the spout to the spout's worker (``by: latency``).
"""

from __future__ import annotations

from exact_wordcount import DumpingCount, FixedSentences

from nstorm import TopologyBuilder
from topologies.wordcount import Split

builder = TopologyBuilder("spreadwc")
builder.set_spout("sentences", FixedSentences, parallelism=1)
builder.set_bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
builder.set_bolt("count", DumpingCount, parallelism=2).fields_grouping("split", ["word"])
topology = builder.build(workers=2)
