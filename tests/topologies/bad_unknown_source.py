from nstorm import Bolt, Spout, TopologyBuilder


class S(Spout):
    outputs = ("x",)

    def next_tuple(self):
        pass


class B(Bolt):
    outputs = ("x",)

    def process(self, tup):
        pass


builder = TopologyBuilder("t")
builder.set_spout("s", S)
builder.set_bolt("a", B).shuffle_grouping("nope")
topology = builder.build()
