"""The README's configuration table and :data:`nstorm.config.DEFAULTS` name the same keys: a key
added to one and not the other (four were missing from the table) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from nstorm.config import DEFAULTS

README = Path(__file__).parents[2] / "README.md"


def _table_keys() -> set[str]:
    """Every key in the first column of the table under "## Configuration defaults"
    (a row may name two: ``otd.cpu.high`` / ``otd.cpu.low``)."""
    text = README.read_text()
    section = text[text.index("## Configuration defaults"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    keys: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return keys


def test_the_readme_lists_every_default_and_nothing_else() -> None:
    keys = _table_keys()
    assert sorted(set(DEFAULTS) - keys) == [], "keys in DEFAULTS the README's table lacks"
    assert sorted(keys - set(DEFAULTS)) == [], "keys in the README's table DEFAULTS lacks"
