"""Logging of the server process: one JSON object per line (``log_format=json``)
or a readable text line, both carrying the record's ``extra`` fields.

``configure`` is called by the app itself (``server.web.application.create_app``), so the
same lines come out under ``tsync serve``, ``uvicorn server.app:app`` or
gunicorn. It takes uvicorn's loggers over:

- ``uvicorn.access`` is switched off: the app writes its own access line per
  HTTP request (``tsync.access``: method, route template, status, duration,
  never the query string, so ``?token=`` cannot reach a log);
- uvicorn's WebSocket lines (``"WebSocket /v1/ws?token=..." [accepted]``) are
  dropped: ``tsync.ws`` writes one line per connection opened and closed; so
  are the websockets library's debug dumps of requests, headers and frames
  (``< GET /v1/ws?token=...``, ``< Authorization: ...``, ``< TEXT '{"op":"auth"...``);
- uvicorn's other lines ("Started server process", "Uvicorn running on ...")
  are kept under the name ``uvicorn`` instead of ``uvicorn.error``;
- hypercorn's go through the same handler (``hypercorn.error``), its access
  logger is silenced too.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import msgspec

# uvicorn adds a `color_message` copy of each message for its own formatter.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}
_encode = msgspec.json.Encoder().encode

#: Set on a record (``extra={"_said": (...)}``) to name the extra fields that
#: its message already says: the text format leaves them out, JSON keeps them.
SAID = "_said"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _extras(record).items():
            entry[key] = (
                value if isinstance(value, str | int | float | bool | None) else repr(value)
            )
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return _encode(entry).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        said = getattr(record, SAID, ())
        extras = {k: v for k, v in _extras(record).items() if k not in said}
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return line


#: Lines uvicorn (and the websockets library it hands its logger to) writes
#: about each WebSocket; the first kind carries the query string. The app logs
#: every connection itself (``tsync.ws``).
_CONNECTION_LINES = (
    '%s - "WebSocket ',
    "connection open",
    "connection closed",
    "connection rejected (",
    "HTTP response sent (",
    # The websockets library's wire dumps at debug level: the request line
    # (its query string), the headers (Authorization) and the frames (an
    # ``auth`` op's token). Nothing an operator needs; secrets a log must not hold.
    "< ",
    "> ",
)


class _UvicornLines(logging.Filter):
    """On ``uvicorn.error``: drops the per-connection WebSocket lines and the
    tracebacks of requests cancelled by a shutdown, and files the rest under
    ``uvicorn``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(_CONNECTION_LINES):
            return False
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            # A request cut at the end of the graceful shutdown: uvicorn has
            # just said so ("Cancel N running task(s)"); its traceback says
            # nothing more.
            return False
        record.name = "uvicorn"
        return True


class RepeatLimit(logging.Filter):
    """Rate-limits repeated lines: each kind of line (logger, level and
    message template) at WARNING or above, or marked ``extra={"_repeat":
    True}``, may be written ``burst`` times at once and then ``per_second``
    a second; the next one written after some were dropped says how many
    (``suppressed=N``).

    A client can make the server warn (a malformed request, a refused
    connection) and, past the file-descriptor limit, the event loop logs
    every failed ``accept()``: without this, an attack writes the disk full
    (134 MB of tracebacks in 45 s were seen). Different lines never share a
    budget, so a rare error is never hidden behind a frequent one.
    """

    MAX_KINDS = 512

    def __init__(self, burst: float = 10, per_second: float = 1.0) -> None:
        super().__init__()
        self.burst = burst
        self.per_second = per_second
        #: kind -> [tokens, last refill (monotonic), dropped since last written]
        self._kinds: dict[tuple[str, int, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and not getattr(record, "_repeat", False):
            return True
        kind = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        state = self._kinds.get(kind)
        if state is None:
            if len(self._kinds) >= self.MAX_KINDS:
                del self._kinds[next(iter(self._kinds))]
            state = self._kinds[kind] = [self.burst, now, 0]
        tokens = min(self.burst, state[0] + (now - state[1]) * self.per_second)
        state[1] = now
        if tokens < 1:
            state[0] = tokens
            state[2] += 1
            return False
        state[0] = tokens - 1
        if state[2]:
            record.suppressed = int(state[2])
            state[2] = 0
        return True


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure`` installs (so that it can replace its own)."""


#: The loggers of the ASGI servers the app may run under: their lines go
#: through the app's handler; their access loggers are silenced (the app
#: writes its own access lines, without the query string).
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "hypercorn.error")
SERVER_ACCESS_LOGGERS = ("uvicorn.access", "hypercorn.access")


def adopt_server_loggers(level: int) -> None:
    """Route the ASGI server's loggers through the app's handler. Called when
    the app is built and again at its startup (hypercorn sets its loggers up
    after importing the app)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
        # uvicorn checks this logger's own level before building trace lines.
        logger.setLevel(level)
    uvicorn_error = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _UvicornLines) for f in uvicorn_error.filters):
        uvicorn_error.addFilter(_UvicornLines())
    for name in SERVER_ACCESS_LOGGERS:
        # No handler and no propagation: uvicorn then skips its access lines
        # altogether (``hasHandlers()`` is false).
        access = logging.getLogger(name)
        access.handlers[:] = []
        access.propagate = False


def configure(level: str = "info", fmt: str = "text") -> None:
    """Send the process's log records to stderr in ``fmt`` at ``level``.

    Replaces the handler an earlier call installed and leaves other handlers
    on the root logger alone. Safe to call again (each app build does).
    """
    handler = _Handler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RepeatLimit())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric)
    adopt_server_loggers(numeric)
