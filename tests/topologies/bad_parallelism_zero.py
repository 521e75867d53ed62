from nstorm import TopologyBuilder

from _parts import B, S

builder = TopologyBuilder("t")
builder.set_spout("s", S)
builder.set_bolt("a", B, parallelism=0).shuffle_grouping("s")
topology = builder.build()
