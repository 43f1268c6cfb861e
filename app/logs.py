"""Log lines for operators: plain text, or JSON lines (``log_format=json``, by the
``python-json-logger`` package), each carrying the id of the request it belongs to: the API's
``X-Request-ID`` (``app.request_id.current``), which a worker also sets while it runs the job
that request submitted, so one id finds a submission's lines in the API and in the worker."""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

from app.request_id import current

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (the current request's, or ``-``) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = current.get() or "-"
        return True


def handler(log_format: str) -> logging.Handler:
    """A stderr handler in ``log_format`` (``text`` or ``json``) with the request id."""
    out = logging.StreamHandler(sys.stderr)
    out.addFilter(RequestIdFilter())
    if log_format == "json":
        out.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
                                       rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}))
    else:
        out.setFormatter(logging.Formatter(TEXT_FORMAT))
    return out


def configure(log_format: str, level: int = logging.INFO) -> None:
    """The root logger writes ``log_format`` lines to stderr (and uvicorn's loggers with it)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(log_format))
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
