"""Example topologies: word count (the paper's benchmark) and the linear template."""
