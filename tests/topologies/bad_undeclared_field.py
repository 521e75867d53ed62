from nstorm import TopologyBuilder

from _parts import B, S

builder = TopologyBuilder("t")
builder.set_spout("s", S)
builder.set_bolt("a", B).fields_grouping("s", ["word"])
topology = builder.build()
