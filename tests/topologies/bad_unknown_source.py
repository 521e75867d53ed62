from nstorm import TopologyBuilder

from _parts import B, S

builder = TopologyBuilder("t")
builder.set_spout("s", S)
builder.set_bolt("a", B).shuffle_grouping("nope")
topology = builder.build()
