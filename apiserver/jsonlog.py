"""Structured logs: one JSON object per line with time, level, msg and the record's extra fields.

Pass fields with ``logger.info("msg", extra={"user": name})``. Never pass tokens, keys or
certificates: every field is written as given.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys

# Attributes every LogRecord has; anything else on a record came from `extra=` and is a field
# (except uvicorn's terminal-coloured copy of its message).
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {
    "message", "asctime", "taskName", "color_message"}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            "logger": record.name,
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str) -> None:
    """Send every logger (uvicorn's included) to stderr as JSON lines at `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    # httpx logs every request to kube-apiserver at info: show those only at debug.
    logging.getLogger("httpx").setLevel(
        logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING)
