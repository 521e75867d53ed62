"""Logging for daemons: one file per process under ``$NSTORM_HOME/logs``.

Every line names the process (``[worker n1:6701 count:3]``: the thread name is the
executor id), so logs of many workers can be merged and still be read.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys

from nstorm.home import logs_dir

__all__ = ["setup_daemon_logging"]


class _StreamToLog:
    """Send stray ``print`` output of user code to the log (after pystorm's LogStream)."""

    def __init__(self, logger: logging.Logger, level: int) -> None:
        self.logger = logger
        self.level = level

    def write(self, text: str) -> int:
        for line in text.rstrip().splitlines():
            self.logger.log(self.level, line)
        return len(text)

    def flush(self) -> None:
        pass


def setup_daemon_logging(file_stem: str, process_tag: str, level: int = logging.INFO) -> logging.Logger:
    """Log to ``logs/<file_stem>.log`` (rotating), tagging each line with ``process_tag``."""
    path = logs_dir() / f"{file_stem}.log"
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=20 * 2**20, backupCount=3)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s [{process_tag} %(threadName)s] %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    sys.stdout = _StreamToLog(logging.getLogger("stdout"), logging.INFO)  # type: ignore[assignment]
    return root
