"""HTTP answers: a JSON body, and any error as an ``application/problem+json``
document whose code and status are its row of ``protocol.codes`` (the HTTP
API's endpoints and the middlewares in front of them answer alike)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from starlette.responses import Response

from server.errors import INTERNAL_FAILURE, failure_for

log = logging.getLogger("tsync.http")
_json = msgspec.json.Encoder()
#: The ``Retry-After`` of a 429 or 503 answer, in seconds.
RETRY_AFTER_S = 1


def problem_response(exc: BaseException) -> Response:
    """``exc`` as a problem+json answer: its code, and the HTTP status the
    error table gives that code. An error without a code is a bug: logged,
    answered ``internal``."""
    failure = failure_for(exc)
    if failure is None:
        log.error("unhandled error", exc_info=exc)
        failure = INTERNAL_FAILURE
    spec = failure.spec
    response = Response(
        _json.encode(failure.problem()), spec.http_status, media_type="application/problem+json"
    )
    retry_after = failure.fields.get("retryAfter")
    if retry_after is None and spec.retry == "later" and spec.http_status in (429, 503):
        # Try again, but not at once (a full or unreachable store, a rate).
        retry_after = RETRY_AFTER_S
    if retry_after is not None:
        response.headers["retry-after"] = str(retry_after)
    return response


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(_json.encode(obj), status, media_type="application/json")
