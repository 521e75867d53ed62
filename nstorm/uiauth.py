"""The UI's HTTP basic-auth credentials: ``nstorm.ui.auth = user:password`` or ``$NSTORM_UI_AUTH``.

Like ZooKeeper's credentials (:mod:`nstorm.zkauth`) they travel to the UI process in its
environment, never on a command line, and are never stored with a topology or shown by it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nstorm.errors import ConfigError

__all__ = ["UI_AUTH_ENV", "UI_AUTH_KEY", "resolve_ui_auth", "ui_auth_env"]

UI_AUTH_KEY = "nstorm.ui.auth"
UI_AUTH_ENV = "NSTORM_UI_AUTH"


def resolve_ui_auth(conf: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
    """``(user, password)`` from ``conf``'s ``nstorm.ui.auth``, else ``$NSTORM_UI_AUTH``; None: no auth.

    :raises ConfigError: for a value without both parts (the message never shows the value).
    """
    value = (conf or {}).get(UI_AUTH_KEY)
    source = UI_AUTH_KEY
    if not value:
        value, source = os.environ.get(UI_AUTH_ENV), UI_AUTH_ENV
    if not value:
        return None
    user, sep, password = str(value).partition(":")
    if not sep or not user or not password:
        msg = f"{source}: expected user:password, got a value of {len(str(value))} characters without both parts"
        raise ConfigError(msg)
    return user, password


def ui_auth_env(conf: Mapping[str, Any]) -> dict[str, str]:
    """``{NSTORM_UI_AUTH: ...}`` if ``conf`` sets UI credentials: how a parent hands them to the UI."""
    value = conf.get(UI_AUTH_KEY)
    return {UI_AUTH_ENV: str(value)} if value else {}
