"""exact_wordcount with one executor at each end of two channels in one worker: one spout
*shuffles* to one split, which *fields-groups* its words to one ``lower``; each channel routes
every tuple to its one executor, so both may be chained (sentences -> split -> lower in one
thread) whatever their groupings say. ``count`` (ticks, four executors) is never chained."""

from __future__ import annotations

from chained_wordcount import Lower
from exact_wordcount import DumpingCount, FixedSentences

from nstorm import TopologyBuilder
from topologies.wordcount import Split

builder = TopologyBuilder("onetoonewc")
builder.set_spout("sentences", FixedSentences, parallelism=1)
builder.set_bolt("split", Split, parallelism=1).shuffle_grouping("sentences")
builder.set_bolt("lower", Lower, parallelism=1).fields_grouping("split", ["word"])
builder.set_bolt("count", DumpingCount, parallelism=4).fields_grouping("lower", ["word"])
topology = builder.build(workers=1)
