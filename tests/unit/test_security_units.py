"""Security units: ZooKeeper credentials, CurveZMQ key files and ``nstorm keys``, no pickle anywhere.

The features on real clusters: ``test_security_acl.py`` and ``test_security_curve.py``.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from kazoo.security import make_digest_acl
from typer.testing import CliRunner

from nstorm.cli.main import app
from nstorm.curvekeys import generate_keys, load_keys
from nstorm.errors import ConfigError
from nstorm.zkauth import ZkCredentials

ROOT = Path(__file__).parents[2]


# -- units -----------------------------------------------------------------------------------

def test_credentials_parse_resolve_and_hide_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    creds = ZkCredentials.parse("nstorm:pa:ss")
    assert (creds.user, creds.password) == ("nstorm", "pa:ss")
    assert "pa:ss" not in repr(creds)
    assert creds.acl == [make_digest_acl("nstorm", "pa:ss", all=True)]
    for bad in ("nocolon", ":pw", "user:"):
        with pytest.raises(ConfigError, match="user:password"):
            ZkCredentials.parse(bad)
    monkeypatch.delenv("NSTORM_ZK_AUTH", raising=False)
    assert ZkCredentials.resolve({}) is None
    monkeypatch.setenv("NSTORM_ZK_AUTH", "env:secret")
    assert ZkCredentials.resolve({}).user == "env"
    assert ZkCredentials.resolve({"nstorm.zookeeper.auth": "conf:secret"}).user == "conf"


def test_keys_generate_writes_private_files_and_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    keys = tmp_path / "keys"
    result = runner.invoke(app, ["keys", "generate", "--dir", str(keys)])
    assert result.exit_code == 0, result.output
    written = [Path(line) for line in result.stdout.splitlines()]
    assert {p.relative_to(keys).as_posix() for p in written} == {
        "server.key", "server.key_secret", "client.key_secret", "authorized_clients/client.key"}
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert stat.S_IMODE((keys / "authorized_clients").stat().st_mode) == 0o700
    first = load_keys(keys)
    assert first.client_public in first.authorized and first.server_public != first.client_public

    again = runner.invoke(app, ["keys", "generate", "--dir", str(keys)])
    assert again.exit_code == 2
    assert "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert load_keys(keys) == first, "refused, so nothing changed"

    forced = runner.invoke(app, ["keys", "generate", "--dir", str(keys), "--force"])
    assert forced.exit_code == 0, forced.output
    second = load_keys(keys)
    assert second.server_secret != first.server_secret and second.client_secret != first.client_secret
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in written)


def test_keys_generate_default_dir_is_in_nstorm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NSTORM_KEYS_DIR", raising=False)
    result = CliRunner().invoke(app, ["keys", "generate"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "keys" / "server.key_secret").exists()


def test_bad_key_files_are_named_in_one_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate_keys(keys)
    (keys / "server.key_secret").unlink()
    with pytest.raises(ConfigError, match=r"server\.key_secret: missing"):
        load_keys(keys)
    generate_keys(keys, force=True)
    (keys / "client.key_secret").write_text("garbage\n")
    with pytest.raises(ConfigError, match=r"client\.key_secret"):
        load_keys(keys)
    generate_keys(keys, force=True)
    (keys / "authorized_clients" / "client.key").unlink()
    with pytest.raises(ConfigError, match="not in"):
        load_keys(keys)


def test_no_pickle_marshal_or_eval_on_received_data() -> None:
    """Nothing from the network or ZooKeeper may be unpickled; the source must not even import pickle."""
    pattern = re.compile(r"\b(?:import pickle|from pickle|pickle\.loads?\(|marshal\.loads?\(|cPickle|"
                         r"dill\.|shelve\.|yaml\.load\(|eval\()")
    offenders = []
    for package in ("nstorm", "nimbus", "supervisor", "worker", "kvstore", "scheduler_otd", "topologies", "benchmarks"):
        for path in (ROOT / package).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line.split("#", 1)[0]):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, offenders
