"""Configuration: every default in one place, and parsing of ``-c key=value`` options.

Keys follow Storm's dotted style. A topology's ``conf`` is, in order of
precedence, the ``-c`` options of ``nstorm submit``/``nstorm local``, the
topology's own ``build(conf=...)`` settings, then :data:`DEFAULTS`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from nstorm.errors import ConfigError

__all__ = ["DEFAULTS", "ENV_CPU_LIMIT", "SECURITY_KEYS", "check_security_conf", "check_directory", "check_topology_conf", "daemon_flag", "flag", "merge_conf", "parse_conf_options", "security_conf"]

DEFAULTS: dict[str, Any] = {
    # ZooKeeper
    "nstorm.zookeeper.servers": None,  # "host:port[,host:port]"; None = embedded of $NSTORM_HOME
    "nstorm.zookeeper.root": "/nstorm",
    "nstorm.zookeeper.session.timeout.secs": 10,
    # security (README "Security"): both off by default; set them on every daemon and client
    "nstorm.zookeeper.auth": None,  # "user:password": digest ACLs on the whole tree; env NSTORM_ZK_AUTH
    "nstorm.transport.curve": False,  # CurveZMQ between workers, keys from `nstorm keys generate`
    "nstorm.transport.curve.keys.dir": None,  # None = $NSTORM_KEYS_DIR, else $NSTORM_HOME/keys
    # topology
    "topology.workers": 1,
    "topology.acker.executors": None,  # None = one per worker; 0 turns acking off
    "topology.message.timeout.secs": 30,
    # Tracked tuples a spout emits in a row share one tuple tree, up to this many (1 = a tree per
    # tuple, as in Storm): acking costs a few messages per group, not per tuple; a failure or a
    # timeout fails (and replays) the whole group.
    "topology.acking.group.size": 64,
    "topology.max.spout.pending": 2000,  # per spout executor; None or 0 = unbounded
    "topology.batch.size": 4096,  # tuples per message at most; 1 = per-tuple sending (no batching)
    "topology.batch.max.latency.ms": 5,  # a buffered tuple leaves within this bound
    "topology.batch.adaptive": True,  # size each destination's batches from its rate (else always batch.size)
    "topology.batch.align": True,  # a bolt with one upstream task sends a batch per input batch (worker.batching)
    "topology.backpressure.high.batches": 16,  # a queue this deep (x batch.size tuples) pauses every spout
    "topology.backpressure.low.batches": 4,  # ... until every such queue is back below this
    "topology.hash.seed": 0,  # PYTHONHASHSEED of workers: fields grouping agrees across processes
    "topology.debug": False,
    "topology.scheduler": "static",
    # durable state (README "Durable state"): Storm's key names where Storm has one
    "topology.state.provider": "memory",  # memory (state lost with its worker) | lmdb | redis
    "topology.state.provider.config": None,  # JSON: {"url": "redis://host:6379/0"} | {"map_size": bytes}
    "topology.state.dir": None,  # LMDB checkpoints; None = $NSTORM_HOME/state (a local filesystem)
    "topology.state.checkpoint.interval.ms": 1000,
    "topology.state.checkpoint.timeout.secs": 30,  # a checkpoint not committed by then is abandoned
    "topology.state.max.rollbacks": 10,  # in a row with no checkpoint committed: then deactivated (0: no bound)
    "topology.state.rollback.backoff.ms": 1000,  # wait before the 2nd rollback in a row, doubled for each further one (0: none)
    "topology.state.rollback.backoff.max.ms": 30000,  # ... up to this
    "topology.max.parallelism": 128,  # key groups of keyed state (and of fields grouping)
    # windows (README "Windows")
    "topology.window.max.tuples": 100000,  # tuples a windowed bolt executor keeps at most; more are failed
    "topology.watermark.idle.secs": 5.0,  # an upstream task silent this long stops holding the watermark back
    # latency constraints (nstorm/constraints.py; ARCHITECTURE.md 3.3)
    "topology.latency.constraints": [],  # [{"path": [...], "p99_ms": 10, "window_secs"?: 5, "moves"?: false}] or JSON
    "topology.latency.sample.ms": 5,  # an executor that starts a constrained path samples a tuple this often
    "topology.latency.control": True,  # false: constraints are measured and reported, never acted on
    "topology.chaining": False,  # true: every pointwise channel chained from the first plan (Flink's chains)
    # daemons
    "supervisor.slots.port.base": 6700,  # 0 = pick free ports
    "supervisor.sync.interval.ms": 1000,  # TS: periodic ZooKeeper -> LMDB sync (a watch acts at once)
    "supervisor.sync.watch": True,  # react to plan changes through a ZooKeeper watch (else only every TS)
    "supervisor.worker.cpu.limit": None,  # cores per worker process (cgroup CFS quota; needs root); None: uncapped
    "supervisor.worker.timeout.secs": 30,  # a worker whose local heartbeat is older is killed and restarted (Storm's)
    "supervisor.worker.start.timeout.secs": 120,  # ... and one that has not beaten this long after its start
    "supervisor.logviewer.port": 0,  # the node's worker logs for the UI (Storm's logviewer.port); 0: a free port, None: none
    "topology.worker.timeout.secs": 0,  # a topology's own heartbeat timeout for its workers (0: the supervisor's)
    "worker.sync.interval.ms": 100,  # TW: worker polls its LMDB plan
    "worker.lazy.kill.ms": 2000,  # DK: a moved executor's old copy drains at most this long
    "worker.state.wait.ms": 10000,  # a moved-in copy waits this long for its state, then starts empty
    "worker.heartbeat.interval.secs": 1.0,
    "worker.gil.switch.interval.ms": 5.0,  # sys.setswitchinterval of workers
    "worker.cpu.pin": False,  # each worker keeps its threads on a core no other worker of the machine holds (worker/cpupin.py)
    "worker.sched.batch": True,  # workers' threads run under SCHED_BATCH: a woken one does not preempt (worker/sched.py)
    "worker.gc.threshold": 20000,  # gen-0 threshold of the cyclic GC in workers (0: Python's 700)
    "worker.metrics.interval.secs": 1.0,  # load collection period (0 turns it off)
    "worker.stats.window.secs": 10,  # heartbeats' per-executor rates, capacity and execute latency cover this
    "nstorm.metrics.dir": None,  # None = $NSTORM_HOME/metrics
    "nimbus.supervisor.timeout.secs": 10,
    "nimbus.monitor.interval.secs": 1.0,
    "nimbus.spread.grace.secs": 10,  # a returned node's slots are refilled (live moves) after this long
    # OTD
    "otd.period.secs": 5,
    "otd.threshold.asc": 0,
    "otd.move.cooldown.secs": 60,  # an executor OTD moved is not moved by OTD again this soon
    "otd.window.secs": 10,  # traffic and load window of each round
    "otd.cpu.high": 0.8,  # a worker using this share of a core (or more) is high-load
    "otd.cpu.low": 0.5,  # ... at most this share, with a backlog not growing: low-load
    "otd.queue.high": 16,  # a backlog (queued batches never worked off in a period) this deep: high-load
    "otd.queue.growth.high": 2.0,  # ... and so does a backlog growing this fast (batches/s)
    "otd.queue.growth.low": 0.25,  # a low-load worker's backlog grows no faster than this
    "otd.cpu.wait.high": 0.25,  # a low-load worker whose threads waited this share of a core for a CPU: no load-balancing target
    "otd.autoscale": False,  # Case 2 scales the overloaded component out, and idle components in (live)
    "otd.autoscale.cooldown.secs": 30,  # idle this long before a scale-in, and from any step to a scale-in
    "otd.spark.eager": False,  # start Nimbus's SparkSession when it leads, not at the first OTD topology
    "otd.spark.master": "local[2]",
    "otd.history.size": 200,  # OTD rounds Nimbus keeps per topology (the UI's timeline, /otd)
    # the UI daemon (nstorm ui; README "Web UI and REST API")
    "nstorm.ui.host": "127.0.0.1",
    "nstorm.ui.port": 8080,  # nstorm local / cluster up take a free port when it is taken
    "nstorm.ui.allowed.hosts": "",  # Host names a UI on 127.0.0.1 answers to besides loopback ones (DNS rebinding)
    "nstorm.ui.auth": None,  # "user:password": HTTP basic auth on every endpoint; env NSTORM_UI_AUTH
}

# The environment variable a supervisor that caps its workers' CPU sets for each worker: the cores
# it may use (the worker's heartbeat reports it, and OTD measures load against it).
ENV_CPU_LIMIT = "NSTORM_WORKER_CPU_LIMIT"

# Cluster settings: each daemon acts on its own (-c options, environment), never on a topology's conf.
SECURITY_KEYS = ("nstorm.zookeeper.auth", "nstorm.transport.curve", "nstorm.transport.curve.keys.dir", "nstorm.ui.auth")


def security_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The security settings in ``conf`` (for the daemons of ``nstorm local``)."""
    return {k: conf[k] for k in SECURITY_KEYS if k in conf}


def check_security_conf(conf: Mapping[str, Any]) -> None:
    """Fail before anything starts on malformed ZooKeeper credentials or unusable curve keys.

    :raises ConfigError: naming the bad value or key file.
    """
    from nstorm.curvekeys import checked_keys_dir  # imports zmq: only when asked
    from nstorm.uiauth import resolve_ui_auth
    from nstorm.zkauth import ZkCredentials

    ZkCredentials.resolve(conf)
    checked_keys_dir(conf)
    resolve_ui_auth(conf)


def _parse_value(text: str) -> Any:
    """A value is JSON where it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_conf_options(options: Iterable[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings (``-c`` options) into a dict.

    :raises ConfigError: for an option without ``=`` or with an empty key.
    """
    conf: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip()
        if not sep or not key:
            msg = f"malformed -c option {option!r}: expected key=value"
            raise ConfigError(msg)
        if any(ch.isspace() for ch in key):
            msg = f"malformed -c option {option!r}: the key has whitespace"
            raise ConfigError(msg)
        conf[key] = _parse_value(value)
    return conf


def flag(conf: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean setting as a user writes it: true, "true", 1 or "1" are on; false, "false", "0",
    "no", "off" or "" are off; unset is ``default``."""
    value = conf.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return bool(value)


def merge_conf(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge config layers, later layers winning, on top of :data:`DEFAULTS`."""
    merged = dict(DEFAULTS)
    for layer in layers:
        if layer:
            merged.update(layer)
    return merged


# Numeric settings of a topology that must be above 0 (the others may be 0: off, unbounded, the default).
# (0 is a setting of its own for some: topology.window.max.tuples no bound, batch.max.latency.ms
# per-tuple sending, others fall back to their default; those are not here.)
_POSITIVE = frozenset((
    "topology.message.timeout.secs", "topology.batch.size", "topology.backpressure.high.batches",
    "worker.sync.interval.ms", "worker.heartbeat.interval.secs", "worker.gil.switch.interval.ms",
    "otd.period.secs",
))
_MAXIMUM = {"topology.hash.seed": 2**32 - 1, "worker.gc.threshold": 2**31 - 1}  # PYTHONHASHSEED; a C int
# ... and those that count something: whole numbers.
_INTEGERS = frozenset((
    "topology.acking.group.size", "topology.max.spout.pending", "topology.batch.size",
    "topology.backpressure.high.batches", "topology.backpressure.low.batches", "topology.hash.seed",
    "topology.max.parallelism", "topology.window.max.tuples", "topology.state.max.rollbacks", "worker.gc.threshold",
    "otd.history.size", "topology.acker.executors",
))
# Settings a reader compares with fixed words (scheduler_otd/runner.py: == "otd"): any other value
# would silently mean the first.
_CHOICES: dict[str, tuple[str, ...]] = {"topology.scheduler": ("static", "otd")}
_NULLABLE = frozenset(("topology.max.spout.pending",))  # None: unbounded
# Settings whose default None stands for something computed (a directory under $NSTORM_HOME, one
# acker per worker): a value given must be of this kind, or a worker's Path()/int() fails on it.
_NONE_DEFAULT_KINDS: dict[str, type] = {
    "topology.state.dir": str, "nstorm.metrics.dir": str, "topology.acker.executors": int,
}
_CHECKED_PREFIXES = ("topology.", "worker.", "otd.")
_FLAG_WORDS = ("true", "false", "1", "0")  # what every reader of a flag takes as such


def is_flag(value: Any) -> bool:
    """True for what every reader of a flag setting takes as one: a bool, 0, 1, "true", "false"."""
    return isinstance(value, bool) or value in (0, 1) or (
        isinstance(value, str) and value.strip().lower() in _FLAG_WORDS)


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s]*@")  # up to the last '@' before the host: a password may hold one


def without_credentials(text: str, mask: str = "***") -> str:
    """``text`` with the user and password of any URL in it hidden: ``redis://***@host:6379/0``
    (errors that reach status, the UI and logs; settings the UI shows)."""
    return _URL_CREDENTIALS.sub(mask + "@", text)


MAX_WORKERS = 1024


def check_workers(workers: Any) -> int:
    """``topology.workers`` given at submit or to ``nstorm local``: a whole number of processes.

    :raises ConfigError: one line naming the setting.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        msg = f"-c topology.workers={workers!r}: expected an integer from 1 to {MAX_WORKERS}"
        raise ConfigError(msg)
    return workers


def positive_number(conf: Mapping[str, Any], key: str, zero_ok: bool = False) -> float:
    """``conf[key]`` as a finite number above 0 (or 0 too, with ``zero_ok``): a daemon's setting,
    checked as it starts, not in ``float()`` after it has connected.

    :raises ConfigError: one line naming the setting.
    """
    value = conf.get(key)
    try:
        number = float(value) if not isinstance(value, bool) else math.nan  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        msg = f"-c {key}={value!r}: expected a number {'>=' if zero_ok else '>'} 0"
        raise ConfigError(msg)
    return number


def daemon_flag(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    """A daemon's on/off setting read as :func:`flag` does (``bool("false")`` is True), checked as
    the daemon starts: anything but true, false, 1 or 0 is refused.

    :raises ConfigError: one line naming the setting.
    """
    value = conf.get(key, default)
    if not is_flag(value):
        msg = f"-c {key}={value!r}: expected true or false"
        raise ConfigError(msg)
    return flag(conf, key, default)


def check_directory(conf: Mapping[str, Any], key: str) -> None:
    """A directory setting whose default is None: unset, or a string (``Path(5)`` fails later).

    :raises ConfigError: one line naming the setting.
    """
    value = conf.get(key)
    if value is not None and not isinstance(value, str):
        msg = f"-c {key}={value!r}: expected a string (a directory)"
        raise ConfigError(msg)


def check_topology_conf(conf: Mapping[str, Any]) -> None:
    """Fail at submit, not in the workers, on a known topology setting of the wrong kind: a
    number that is not one (or not finite, or negative, or 0 where 0 means nothing), a fraction
    where a count is meant, a flag that is not true or false, a directory that is not a string, a
    word that is not one of its choices (``topology.scheduler``).
    Keys it does not know (the topology's own) pass, and so does None for a setting whose default
    is None; numbers may come as strings of digits (what ``int()``/``float()`` in the workers take).

    :raises ConfigError: one line naming the key, the value and what is expected.
    """
    for key, value in conf.items():
        if key not in DEFAULTS or not (key.startswith(_CHECKED_PREFIXES) or key in _NONE_DEFAULT_KINDS):
            continue
        default = DEFAULTS[key]
        if default is None:
            _check_none_default(key, value)
            continue
        if value is None and key in _NULLABLE:
            continue
        if isinstance(default, bool):
            if not is_flag(value):
                msg = f"{key}={value!r}: expected true or false"
                raise ConfigError(msg)
        elif isinstance(default, int | float):
            _check_number(key, value)
        elif isinstance(default, str) and not isinstance(value, str):
            msg = f"{key}={value!r}: expected a string"
            raise ConfigError(msg)
        elif key in _CHOICES and value not in _CHOICES[key]:
            msg = f"{key}={value!r}: expected one of {', '.join(_CHOICES[key])}"
            raise ConfigError(msg)


def _check_none_default(key: str, value: Any) -> None:
    """A setting whose default is None: unset (None) passes, else it must be of its kind."""
    kind = _NONE_DEFAULT_KINDS.get(key)
    if value is None or kind is None:
        return
    if kind is int:
        _check_number(key, value)
    elif not isinstance(value, str):
        msg = f"{key}={value!r}: expected a string (a directory)"
        raise ConfigError(msg)


def _check_number(key: str, value: Any) -> None:
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value) if key not in _INTEGERS else int(value.strip())
        except ValueError:
            number = None
    kind = "a whole number" if key in _INTEGERS else "a number"
    low = "> 0" if key in _POSITIVE else ">= 0"
    try:
        finite = number is not None and math.isfinite(number)
    except OverflowError:  # an int too large for a float
        finite = False
    top = _MAXIMUM.get(key)
    if (not finite or (key in _INTEGERS and isinstance(number, float) and not number.is_integer())
            or number < 0 or (key in _POSITIVE and number == 0)  # type: ignore[operator]
            or (top is not None and number > top)):  # type: ignore[operator]
        msg = f"{key}={value!r}: expected {kind} {low}" + (f" and <= {top}" if top is not None else "")
        raise ConfigError(msg)
