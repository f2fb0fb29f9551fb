"""The server's refusals, and how any error becomes a wire error.

Every error a client may see is one row of ``protocol.codes``; the error
objects carry their row's code, and ``failure_for`` turns one into the
``Failure`` both transports answer with (an ``error`` frame on the WebSocket,
a problem+json document over HTTP). Neither transport decides a code or a
status on its own.

::

    Refused                   a request the server will not carry out; ``code``
    ├── RevisionConflict      ``expectedRevision`` did not match
    ├── EpochChanged          the epoch given is not the transcript's (re-created)
    └── TooManySubscriptions  the connection follows the most transcripts it may

Errors from elsewhere that carry a code: ``protocol.errors.ProtocolError``
(``invalid-frame``, ``invalid-message``, ``invalid-segment``, ``invalid-view``)
and the store's
``TranscriptNotFound``, ``TranscriptExists`` and ``StoreUnavailable``.
Anything else is a bug: ``internal``.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, NamedTuple

from protocol import codes
from protocol.errors import InvalidMessage, ProtocolError
from server.store.base import StoreUnavailable, TranscriptExists, TranscriptNotFound


class Refused(Exception):
    """A request the server refuses with ``code`` (a ``protocol.codes`` code);
    ``fields`` are extra members of the answer (``revision``, ``path``...)."""

    def __init__(self, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields


class RevisionConflict(Refused):
    """``expectedRevision`` did not match; ``current`` is the actual revision."""

    def __init__(self, transcript_id: str, expected: int, current: int) -> None:
        super().__init__(
            codes.REVISION_CONFLICT,
            f"transcript {transcript_id!r} is at revision {current}, not {expected}",
            revision=current,
        )
        self.transcript_id = transcript_id
        self.expected = expected
        self.current = current


class EpochChanged(Refused):
    """The caller holds a copy of another epoch: the transcript was deleted
    and created again since."""

    def __init__(self, transcript_id: str, given: str, current: str) -> None:
        super().__init__(
            codes.EPOCH_CHANGED,
            f"transcript {transcript_id!r} is of epoch {current!r}, not {given!r}: it was "
            "deleted and created again; take a new baseline",
            epoch=current,
        )


class TooManySubscriptions(Refused):
    """The connection already follows ``limit`` transcripts."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            codes.TOO_MANY_SUBSCRIPTIONS, f"at most {limit} subscriptions per connection"
        )


class Failure(NamedTuple):
    """One error as a client sees it: its code, a message and extra fields."""

    code: str
    message: str
    fields: dict[str, Any]

    @property
    def spec(self) -> codes.ErrorCode:
        """The code's row: HTTP status, retry advice, close code."""
        return codes.error(self.code)

    def problem(self) -> dict[str, Any]:
        """The failure as an ``application/problem+json`` document (RFC 9457)."""
        status = self.spec.http_status
        return {
            "type": f"https://transcript-sync.dev/problems/{self.code}",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "code": self.code,
            "detail": self.message,
            **self.fields,
        }


#: What ``failure_for`` answers for an error it does not know (a bug).
INTERNAL_FAILURE = Failure(codes.INTERNAL, "internal error (logged)", {})


def failure_for(exc: BaseException) -> Failure | None:
    """The wire error for ``exc``, or ``None`` when it is not an error the
    server answers: a bug, which the caller logs and answers with
    ``INTERNAL_FAILURE``."""
    match exc:
        case Refused():
            return Failure(exc.code, exc.message, exc.fields)
        case InvalidMessage():
            return Failure(exc.code, str(exc), {"path": exc.path})
        case ProtocolError():
            return Failure(exc.code, str(exc), {})
        case TranscriptNotFound():
            return Failure(codes.NOT_FOUND, str(exc), {})
        case TranscriptExists():
            return Failure(codes.CONFLICT, str(exc), {})
        case StoreUnavailable():
            return Failure(codes.UNAVAILABLE, f"store unavailable: {exc}", {})
    return None
