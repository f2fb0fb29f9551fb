"""Errors of the pure layer.

::

    ProtocolError
    ├── InvalidFrame        a frame (server -> client or client -> server) is malformed
    ├── InvalidMessage      a chat message breaks the model's rules; ``path`` says where
    └── InvalidId           a transcript id is not ``[A-Za-z0-9._:-]{1,128}``

All of them are also ``ValueError`` so that callers who only care about
"bad input" can catch that.
"""

from __future__ import annotations


class ProtocolError(ValueError):
    """Base class of every error raised by ``protocol``."""


class InvalidFrame(ProtocolError):
    """One frame could not be accepted; ``str(err)`` says why."""


class InvalidMessage(ProtocolError):
    """A message is invalid. ``path`` is like ``messages[2].content[0].type``."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class InvalidId(ProtocolError):
    """A transcript id is empty, too long or uses a character outside the set."""
