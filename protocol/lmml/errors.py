"""The one error of the LMML code."""

from __future__ import annotations

from protocol.errors import ProtocolError


class LmmlError(ProtocolError):
    """A narrative or bundle cannot be read or written; ``str(err)`` says why.

    A ``ProtocolError`` and so a ``ValueError``: callers that only care about
    "bad input" can catch that.
    """
