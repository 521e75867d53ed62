"""exact_wordcount with chainable channels: split takes its sentences and ``lower`` its words
``local_or_shuffle``, so with one executor of each per worker, each one's only input is its
worker's executor upstream (sentences -> split -> lower can run in one thread per worker)."""

from __future__ import annotations

from exact_wordcount import DumpingCount, FixedSentences

from nstorm import Bolt, TopologyBuilder
from topologies.wordcount import Split


class Lower(Bolt):
    """Passes each word on, lower-cased (the words are lower-case already: counts do not change)."""

    outputs = ("word",)

    def process(self, tup):
        self.emit((tup["word"].lower(),))


builder = TopologyBuilder("chainedwc")
builder.set_spout("sentences", FixedSentences, parallelism=2)
builder.set_bolt("split", Split, parallelism=2).local_or_shuffle_grouping("sentences")
builder.set_bolt("lower", Lower, parallelism=2).local_or_shuffle_grouping("split")
builder.set_bolt("count", DumpingCount, parallelism=4).fields_grouping("lower", ["word"])
topology = builder.build(workers=2)
