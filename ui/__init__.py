"""The UI daemon (``nstorm ui``): Storm's REST API shape, the web pages and ``/metrics``.

Stateless like the other daemons: everything it shows it reads from ZooKeeper and the metrics
store when asked (:mod:`ui.source`); several may run. :mod:`ui.app` is the ASGI application,
:mod:`ui.documents` the REST documents, :mod:`ui.prometheus` the metrics, :mod:`ui.guard` the
basic auth and cross-site checks, ``static/`` the pages (plain JavaScript and SVG, no CDN).
"""
