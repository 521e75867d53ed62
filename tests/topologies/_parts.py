"""A minimal spout and bolt for the bad-topology fixtures (each file has one mistake)."""

from __future__ import annotations

from nstorm import Bolt, Spout


class S(Spout):
    outputs = ("x",)

    def next_tuple(self):
        pass


class B(Bolt):
    outputs = ("x",)

    def process(self, tup):
        pass
