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


def test_an_archive_that_unpacks_to_too_much_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import hashlib
    import io
    import zipfile

    from nstorm.errors import TopologyLoadError
    from nstorm.loader import MAX_UNPACKED_BYTES, is_member_name

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.py", b"\0" * (MAX_UNPACKED_BYTES + 1))  # compresses to ~65 KB
    data = buf.getvalue()
    with pytest.raises(TopologyLoadError, match="unpacks to more than"):
        unpack_archive(data, hashlib.sha256(data).hexdigest(), tmp_path / "code")
    assert not (tmp_path / "code" / "bomb.py").exists()
    assert is_member_name("wordcount.py")
    for bad in ("/tmp/x.py", "../x.py", "a/b.py", ".hidden.py", "", "a\\b.py"):
        assert not is_member_name(bad), bad


def test_error_messages_hide_a_redis_urls_password() -> None:
    from nstorm.state.config import StateConfig
    from nstorm.state.redis_store import RedisStateStore, without_credentials
    from nstorm.state.store import StateError

    store = RedisStateStore(StateConfig(provider="redis", options={"url": "redis://:S3c@ret@127.0.0.1:1/0"}), "t-1")
    with pytest.raises(StateError) as caught:
        store.written(1)
    assert "S3c" not in str(caught.value) and "ret@" not in str(caught.value) and "redis://***@127.0.0.1:1/0" in str(caught.value)
    assert without_credentials("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_nstorm_home_is_made_for_its_user_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nstorm.home import home_dir, logs_dir, supervisor_dir

    monkeypatch.setenv("NSTORM_HOME", str(tmp_path / "home"))
    for path in (home_dir(), logs_dir(), supervisor_dir("n1")):
        assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
