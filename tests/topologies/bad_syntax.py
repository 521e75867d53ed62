from nstorm import TopologyBuilder

builder = TopologyBuilder("bad"
