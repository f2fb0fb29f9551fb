"""The client's errors.

::

    ClientError
    ├── Unreachable         no connection to the server could be made (in time)
    ├── ClientClosed        the client was closed while a call or a mirror was waiting
    ├── Disconnected        a call that cannot be retried safely lost its connection
    ├── RequestTimeout      a call got no answer in time (also a ``TimeoutError``)
    └── ServerError         the server said no; ``code`` is the wire error code
        ├── NotFound            ``not-found``
        ├── RevisionConflict    ``revision-conflict``; ``current`` is the revision now
        ├── InvalidMessage      ``invalid-message``; ``path`` says where when known
        ├── Conflict            ``conflict`` (e.g. creating an id that exists)
        ├── EpochChanged        ``epoch-changed``: the transcript was created again
        ├── InvalidView         ``invalid-view``
        └── Unauthorized        ``unauthorized`` / ``forbidden``

Errors of the server come from WebSocket ``error`` frames and from HTTP
``application/problem+json`` documents alike; ``error_for`` maps both. What a
code means and whether to try again is looked up in ``protocol.codes`` (the
one table the server uses too): ``ServerError.retry``.
"""

from __future__ import annotations

from typing import Any

from protocol import codes, wire


class ClientError(Exception):
    """Base class of every error the client raises on its own account."""


class Unreachable(ClientError):
    """The server could not be reached (refused, timed out, bad URL)."""


class ClientClosed(ClientError):
    """The client was closed while something still waited on it."""


class Disconnected(ClientError):
    """The connection dropped while a call that is not safe to repeat was in flight.

    Appends are always retried (they carry an idempotency key); a segment start
    is not, because repeating it could move the segment twice.
    """


class RequestTimeout(ClientError, TimeoutError):
    """No answer arrived within the call's timeout."""


class ServerError(ClientError):
    """The server refused a call or a subscription.

    ``code`` is the wire error code (``not-found``, ``internal``, ...),
    ``status`` the HTTP status when the answer came over HTTP.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        transcript_id: str | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.transcript_id = transcript_id
        self.status = status
        self.details = details or {}

    @property
    def retry(self) -> codes.Retry:
        """What to do about it, from the error table: ``no`` (the same call
        fails again), ``later``, ``resubscribe`` or ``new-token``."""
        return codes.error(self.code).retry


class NotFound(ServerError):
    """The transcript does not exist (or no longer exists)."""


class RevisionConflict(ServerError):
    """``expected_revision`` did not match; ``current`` is the transcript's revision."""

    @property
    def current(self) -> int | None:
        value = self.details.get("revision")
        return value if isinstance(value, int) else None


class InvalidMessage(ServerError):
    """A message of the batch broke the model's rules; ``path`` says which part."""

    @property
    def path(self) -> str | None:
        value = self.details.get("path")
        return value if isinstance(value, str) else None


class Conflict(ServerError):
    """The thing already exists (a transcript id taken by ``create``)."""


class EpochChanged(ServerError):
    """The transcript was deleted and created again since the copy asking was
    made: what it asked for belongs to a history that no longer exists."""


class InvalidView(ServerError):
    """A View outside the transcript, a bad View name, or no such View."""


class Unauthorized(ServerError):
    """A missing or wrong token (``unauthorized``) or no right to it (``forbidden``)."""


_BY_CODE: dict[str, type[ServerError]] = {
    codes.NOT_FOUND: NotFound,
    codes.REVISION_CONFLICT: RevisionConflict,
    codes.INVALID_MESSAGE: InvalidMessage,
    codes.CONFLICT: Conflict,
    codes.EPOCH_CHANGED: EpochChanged,
    codes.INVALID_VIEW: InvalidView,
    codes.UNAUTHORIZED: Unauthorized,
    codes.FORBIDDEN: Unauthorized,
}


def error_for(
    code: str,
    message: str,
    *,
    transcript_id: str | None = None,
    status: int | None = None,
    details: dict[str, Any] | None = None,
) -> ServerError:
    """The typed error for a wire error code (unknown codes give ``ServerError``)."""
    cls = _BY_CODE.get(code, ServerError)
    return cls(code, message, transcript_id=transcript_id, status=status, details=details)


def error_from_frame(frame: wire.ErrorFrame) -> ServerError:
    """The typed error for a WebSocket ``error`` frame."""
    details: dict[str, Any] = {}
    if frame.revision is not None:
        details["revision"] = frame.revision
    return error_for(frame.code, frame.message, transcript_id=frame.transcript_id, details=details)
