"""``python -m supervisor``: the supervisor daemon in the foreground."""

from __future__ import annotations

import argparse
import logging
import socket

from nstorm.config import parse_conf_options
from nstorm.logs import setup_daemon_logging


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m supervisor", description="nstorm supervisor daemon")
    parser.add_argument("--node-id", default=socket.gethostname())
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--port-base", type=int, default=6700)
    parser.add_argument("--zk", required=True)
    parser.add_argument("--root", default="/nstorm")
    parser.add_argument("-c", "--conf", action="append", default=[])
    args = parser.parse_args()
    setup_daemon_logging(f"supervisor-{args.node_id}", f"supervisor {args.node_id}")
    from nstorm.errors import NStormError
    from supervisor.daemon import Supervisor, pick_slots

    try:
        sup = Supervisor(
            args.node_id, args.host, pick_slots(args.slots, args.port_base, args.host, args.node_id), args.zk, args.root,
            parse_conf_options(args.conf),
        )
        sup.install_signal_handlers()
        raise SystemExit(sup.run())
    except NStormError as exc:  # bad conf, bad keys, refused credentials: one line, no traceback
        logging.getLogger("supervisor").error("supervisor %s cannot run: %s", args.node_id, exc)
        raise SystemExit(exc.exit_code) from None
    except Exception:
        logging.getLogger("supervisor").exception("supervisor %s failed", args.node_id)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
