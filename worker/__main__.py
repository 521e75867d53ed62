"""``python -m worker``: a worker process, started by its supervisor."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

# The supervisor nudges its workers with SIGUSR1 when it has written a new plan (the worker
# reads it at once, not at its next poll): ignored until the worker's own handler is set, so
# that a nudge in the first milliseconds of a worker's life cannot end it.
signal.signal(signal.SIGUSR1, signal.SIG_IGN)

from nstorm.logs import setup_daemon_logging  # noqa: E402 - after the signal disposition


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m worker", description="nstorm worker process")
    parser.add_argument("--node", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--zk", default=None)
    parser.add_argument("--root", default="/nstorm")
    parser.add_argument("--curve-keys", type=Path, default=None, help="keys directory: CurveZMQ on")
    args = parser.parse_args()
    setup_daemon_logging(f"worker-{args.node}-{args.port}", f"worker {args.node}:{args.port}")
    from nstorm.errors import NStormError
    from worker.process import Worker

    worker = Worker(args.node, args.port, args.topology, args.store, args.zk, args.root, args.curve_keys)
    worker.install_signal_handlers()
    try:
        code = worker.run()
    except NStormError as exc:  # a bad key file, a bad conf: one line, no traceback
        logging.getLogger("worker").error("worker %s:%s cannot run: %s", args.node, args.port, exc)
        code = 1
    except Exception:
        logging.getLogger("worker").exception("worker %s:%s failed", args.node, args.port)
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)  # executor threads may still be blocked in sends: do not wait for them


if __name__ == "__main__":
    main()
