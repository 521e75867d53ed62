from nstorm import TopologyBuilder

from _parts import B, S

builder = TopologyBuilder("cycle")
builder.set_spout("s", S)
builder.set_bolt("a", B).shuffle_grouping("s").shuffle_grouping("b")
builder.set_bolt("b", B).shuffle_grouping("a")
topology = builder.build()
