"""Errors of the pure layer.

::

    ProtocolError
    ├── InvalidFrame        a frame (server -> client or client -> server) is malformed
    ├── InvalidMessage      a chat message breaks the model's rules; ``path`` says where
    ├── InvalidId           a transcript id is not ``[A-Za-z0-9._:-]{1,128}``
    ├── InvalidSegment      a segment start outside ``active_start < start <= length``
    └── InvalidView         a View the transcript does not allow (``protocol.views``)

All of them are also ``ValueError`` so that callers who only care about
"bad input" can catch that. Each carries its wire error ``code`` (see
``protocol.codes``), so a transport answers it without deciding anything.
"""

from __future__ import annotations

from typing import ClassVar

from protocol import codes


class ProtocolError(ValueError):
    """Base class of every error raised by ``protocol``."""

    #: The wire error code this error is answered with.
    code: ClassVar[str] = codes.INVALID_FRAME


class InvalidFrame(ProtocolError):
    """One frame could not be accepted; ``str(err)`` says why."""

    code = codes.INVALID_FRAME


class InvalidMessage(ProtocolError):
    """A message is invalid. ``path`` is like ``messages[2].content[0].type``."""

    code = codes.INVALID_MESSAGE

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class InvalidId(ProtocolError):
    """A transcript id is empty, too long or uses a character outside the set."""

    code = codes.INVALID_FRAME


class InvalidSegment(ProtocolError):
    """A segment start that is not ``active_start < start <= length``; nothing changed."""

    code = codes.INVALID_SEGMENT
