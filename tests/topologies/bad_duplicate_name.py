from nstorm import TopologyBuilder

from _parts import B, S

builder = TopologyBuilder("t")
builder.set_spout("s", S)
builder.set_bolt("s", B).shuffle_grouping("s")
topology = builder.build()
