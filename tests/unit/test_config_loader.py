"""Unit tests of config parsing and topology loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from nstorm.config import DEFAULTS, merge_conf, parse_conf_options
from nstorm.errors import ConfigError, TopologyError, TopologyLoadError
from nstorm.loader import load_topology, make_archive, unpack_archive

TOPOLOGIES = Path(__file__).parents[1] / "topologies"
ROOT = Path(__file__).parents[2]


def test_conf_values_parse_as_json_else_string() -> None:
    conf = parse_conf_options(["a=1", "b=true", "c=hello", "d=[1,2]", "e=", "f=x=y"])
    assert conf == {"a": 1, "b": True, "c": "hello", "d": [1, 2], "e": "", "f": "x=y"}


@pytest.mark.parametrize("bad", ["novalue", "=3", " =3", "a b=1"])
def test_malformed_conf_option(bad: str) -> None:
    with pytest.raises(ConfigError, match="malformed -c option"):
        parse_conf_options([bad])


def test_merge_conf_layers() -> None:
    merged = merge_conf({"topology.workers": 3}, {"topology.workers": 5, "x": 1})
    assert merged["topology.workers"] == 5 and merged["x"] == 1
    assert merged["topology.message.timeout.secs"] == DEFAULTS["topology.message.timeout.secs"]


def test_load_make_topology_with_conf() -> None:
    topo = load_topology(ROOT / "topologies" / "wordcount.py", {"wordcount.counts": 7})
    assert topo.definition["components"]["count"]["parallelism"] == 7


@pytest.mark.parametrize(
    ("name", "error", "needle"),
    [
        ("bad_syntax.py", TopologyLoadError, "syntax error in bad_syntax.py line"),
        ("bad_cycle.py", TopologyError, "cycle"),
        ("nope.py", TopologyLoadError, "does not exist"),
    ],
)
def test_load_errors(name: str, error: type, needle: str) -> None:
    with pytest.raises(error) as info:
        load_topology(TOPOLOGIES / name)
    assert needle in str(info.value)


def test_load_file_without_topology_or_raising(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(TopologyLoadError, match="defines neither"):
        load_topology(tmp_path / "empty.py")
    (tmp_path / "boom.py").write_text("raise ValueError('boom')\n")
    with pytest.raises(TopologyLoadError, match="raised ValueError: boom"):
        load_topology(tmp_path / "boom.py")
    (tmp_path / "notbuilt.py").write_text("topology = 3\n")
    with pytest.raises(TopologyError, match="not a built Topology"):
        load_topology(tmp_path / "notbuilt.py")


def test_archive_round_trip_and_checksum(tmp_path: Path) -> None:
    data, sha = make_archive(ROOT / "topologies" / "wordcount.py")
    assert make_archive(ROOT / "topologies" / "wordcount.py")[1] == sha  # deterministic
    out = unpack_archive(data, sha, tmp_path / "code")
    assert (out / "wordcount.py").read_bytes() == (ROOT / "topologies" / "wordcount.py").read_bytes()
    with pytest.raises(TopologyLoadError, match="checksum mismatch"):
        unpack_archive(data, "0" * 64, tmp_path / "other")
