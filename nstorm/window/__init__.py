"""Windows and event time: :class:`WindowedBolt`, :class:`Window` (see the README's "Windows").

- :mod:`nstorm.window.spec`: what a window is, and the arithmetic of time and count windows;
- :mod:`nstorm.window.engine`: the pure engine (assign, fire, close, late tuples, acks);
- :mod:`nstorm.window.watermark`: watermarks from the timestamps of each upstream task;
- :mod:`nstorm.window.bolt`: the user's API; :mod:`nstorm.window.checks`: build and submit checks.

The executor side (feeding the engine, the clock, anchoring and acking) is ``worker.windowed``.
"""

from nstorm.window.bolt import TupleWindow, WindowedBolt
from nstorm.window.spec import Window

__all__ = ["TupleWindow", "Window", "WindowedBolt"]
