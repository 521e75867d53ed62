"""``python -m nimbus``: the Nimbus daemon in the foreground."""

from __future__ import annotations

import argparse
import logging

from nstorm.config import parse_conf_options
from nstorm.logs import setup_daemon_logging


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m nimbus", description="nstorm nimbus daemon")
    parser.add_argument("--zk", required=True)
    parser.add_argument("--root", default="/nstorm")
    parser.add_argument("-c", "--conf", action="append", default=[])
    parser.add_argument("--id", default="", help="names the log file when several Nimbus processes share a home")
    args = parser.parse_args()
    name = f"nimbus-{args.id}" if args.id else "nimbus"
    setup_daemon_logging(name, name)
    from nimbus.daemon import Nimbus
    from nstorm.errors import NStormError

    try:
        nimbus = Nimbus(args.zk, args.root, parse_conf_options(args.conf))
        nimbus.install_signal_handlers()
        raise SystemExit(nimbus.run())
    except NStormError as exc:  # bad conf, refused credentials: one line, no traceback
        logging.getLogger("nimbus").error("nimbus cannot run: %s", exc)
        raise SystemExit(exc.exit_code) from None
    except Exception:
        logging.getLogger("nimbus").exception("nimbus failed")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
