"""ZooKeeper digest authentication and ACLs: who may read and change the nstorm tree.

Off by default. With ``nstorm.zookeeper.auth = "user:password"`` (or the environment
variable ``NSTORM_ZK_AUTH``) every nstorm client authenticates with that digest identity,
and every node it creates carries an ACL giving all permissions to that identity only, so
a client without the credentials can neither read nor change plans, code or statuses
(ZooKeeper answers ``NoAuth``). ZooKeeper ACLs are per node, not inherited: a tree that was
created open (before ACLs were turned on) is locked down node by node by
:func:`lock_down`, which :meth:`nstorm.zkschema.ZkPaths.ensure` calls when the root's ACL
is not the expected one.

The credentials travel to child processes in the environment (``NSTORM_ZK_AUTH``), never on
a command line (``ps`` shows command lines to every user), and are never stored in a
topology's conf (:data:`SECRET_KEYS`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, make_digest_acl

from nstorm.errors import ConfigError

__all__ = ["AUTH_ENV", "AUTH_KEY", "SECRET_KEYS", "ZkCredentials", "credentials_env", "lock_down", "without_secrets"]

log = logging.getLogger(__name__)

AUTH_KEY = "nstorm.zookeeper.auth"
AUTH_ENV = "NSTORM_ZK_AUTH"
SECRET_KEYS = frozenset({AUTH_KEY, "nstorm.ui.auth"})  # config keys never written to ZooKeeper, LMDB or a command line


@dataclass(frozen=True)
class ZkCredentials:
    """A digest identity ``user:password``; the password never shows in a repr or a log.

    Example::

        creds = ZkCredentials.resolve({"nstorm.zookeeper.auth": "nstorm:s3cret"})
        KazooClient(hosts, auth_data=creds.auth_data, default_acl=creds.acl)
    """

    user: str
    password: str = field(repr=False)

    @classmethod
    def parse(cls, text: str, source: str = AUTH_KEY) -> ZkCredentials:
        """Parse ``user:password`` (the password may hold ':').

        :raises ConfigError: for a value without ':' or with an empty user or password.
        """
        user, sep, password = str(text).partition(":")
        if not sep or not user or not password:
            msg = f"{source}: expected user:password, got a value of {len(str(text))} characters without both parts"
            raise ConfigError(msg)
        return cls(user, password)

    @classmethod
    def resolve(cls, conf_or_value: Mapping[str, Any] | str | None = None) -> ZkCredentials | None:
        """The credentials in force: an explicit value or conf's ``nstorm.zookeeper.auth``, else ``$NSTORM_ZK_AUTH``.

        None when neither is set: ACLs are off.
        """
        value = conf_or_value.get(AUTH_KEY) if isinstance(conf_or_value, Mapping) else conf_or_value
        if value:
            return cls.parse(value)
        env = os.environ.get(AUTH_ENV)
        return cls.parse(env, AUTH_ENV) if env else None

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: sent on every (re)connection."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[ACL]:
        """The ACL of every node: all permissions for this identity, nothing for anyone else."""
        return [make_digest_acl(self.user, self.password, all=True)]


def credentials_env(conf: Mapping[str, Any]) -> dict[str, str]:
    """``{NSTORM_ZK_AUTH: ...}`` if ``conf`` sets credentials: how a parent hands them to a child process."""
    value = conf.get(AUTH_KEY)
    return {AUTH_ENV: str(value)} if value else {}


def without_secrets(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` minus :data:`SECRET_KEYS`: what may be stored or shown."""
    return {k: v for k, v in conf.items() if k not in SECRET_KEYS}


def lock_down(zk: KazooClient, root: str, acl: list[ACL]) -> int:
    """Give ``root`` and every node under it ``acl``; returns how many nodes changed.

    Children first and the root last, so an interrupted run is picked up again by the
    next client (:meth:`~nstorm.zkschema.ZkPaths.ensure` only walks when the root is not
    locked yet). Needs ADMIN on each node, which open nodes grant to anyone.
    """
    changed = 0
    try:
        children = zk.get_children(root)
    except NoNodeError:
        return 0
    for child in children:
        changed += lock_down(zk, f"{root.rstrip('/')}/{child}", acl)
    try:
        current, _ = zk.get_acls(root)
        if list(current) != list(acl):
            zk.set_acls(root, acl)
            changed += 1
    except NoNodeError:
        pass
    return changed
