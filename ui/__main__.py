"""``python -m ui``: the UI daemon, as ``nstorm local`` and ``nstorm cluster up`` start it."""

from __future__ import annotations

import argparse
import logging
import sys

from nstorm.logs import setup_daemon_logging


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m ui", description="nstorm UI: REST API, pages, /metrics")
    parser.add_argument("--zk", required=True)
    parser.add_argument("--root", default="/nstorm")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("-c", "--conf", action="append", default=[])
    args = parser.parse_args()
    setup_daemon_logging("ui", "ui")
    from nstorm.config import merge_conf, parse_conf_options
    from nstorm.errors import NStormError
    from ui.server import serve

    try:
        code = serve(args.zk, args.root, args.host, args.port, merge_conf(parse_conf_options(args.conf)))
    except NStormError as exc:
        logging.getLogger("ui").error("the UI cannot run: %s", exc)
        sys.stderr.write(f"error: {exc}\n")
        code = exc.exit_code
    sys.exit(code)


if __name__ == "__main__":
    main()
