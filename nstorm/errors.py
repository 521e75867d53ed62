"""The exception tree of nstorm: one root, one subclass per kind of failure.

The CLI turns every :class:`NStormError` into a one-line message; a
:class:`UsageError` (bad input) exits with 2, any other with 1.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "ClusterError",
    "ConfigError",
    "NStormError",
    "NotFoundError",
    "TopologyError",
    "TopologyLoadError",
    "UsageError",
    "ZooKeeperError",
]


class NStormError(Exception):
    """Root of every error nstorm raises on purpose."""

    exit_code = 1


class UsageError(NStormError):
    """Bad input from the user: exit code 2, nothing running is touched."""

    exit_code = 2


class TopologyError(UsageError):
    """A topology definition is invalid (raised by ``TopologyBuilder.build``)."""


class TopologyLoadError(UsageError):
    """A topology file could not be loaded (syntax error, import error, no ``topology``)."""


class ConfigError(UsageError):
    """A configuration option is malformed or has a bad value."""


class AuthError(UsageError):
    """ZooKeeper refused access: credentials missing or wrong (exit code 2: the fix is the caller's)."""


class NotFoundError(UsageError):
    """A named topology, executor or worker does not exist."""


class ClusterError(NStormError):
    """The cluster could not do what was asked (no nimbus, no supervisor, timeout)."""


class ZooKeeperError(ClusterError):
    """ZooKeeper could not be started, reached or used."""
