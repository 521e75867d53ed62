"""exact_wordcount with a chainable channel: split takes its sentences ``local_or_shuffle``, so
with one spout and one split per worker each split's only input is its worker's spout."""

from __future__ import annotations

from exact_wordcount import DumpingCount, FixedSentences

from nstorm import TopologyBuilder
from topologies.wordcount import Split

builder = TopologyBuilder("chainedwc")
builder.set_spout("sentences", FixedSentences, parallelism=2)
builder.set_bolt("split", Split, parallelism=2).local_or_shuffle_grouping("sentences")
builder.set_bolt("count", DumpingCount, parallelism=4).fields_grouping("split", ["word"])
topology = builder.build(workers=2)
