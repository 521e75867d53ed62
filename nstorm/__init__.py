"""nstorm: a Storm-style stream processing engine with nonstop executor migration.

The public API: subclass :class:`Spout` and :class:`Bolt`, wire them with a
:class:`TopologyBuilder`, and run the file with ``nstorm local`` or ``nstorm submit``.
"""

import logging

from nstorm.component import Batch, Bolt, Context, Spout, Tuple
from nstorm.constraints import LatencyConstraint
from nstorm.errors import NStormError, TopologyError
from nstorm.topology import Topology, TopologyBuilder
from nstorm.window import TupleWindow, Window, WindowedBolt

__all__ = [
    "Batch",
    "Bolt",
    "Context",
    "LatencyConstraint",
    "NStormError",
    "Spout",
    "Topology",
    "TopologyBuilder",
    "TopologyError",
    "Tuple",
    "TupleWindow",
    "Window",
    "WindowedBolt",
]
__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
