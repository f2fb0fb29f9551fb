"""The auth suite's shared parts: how its tokens are made, and the check that
no secret reached a log line.

Every secret and token the suite makes goes through ``SECRETS``; every log
record written while the suite runs (the servers run in this process, at
``debug`` level where it matters) is kept, rendered both ways the server
writes them (text and JSON, tracebacks included), and searched for each of
them when the last test of the package is done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

from server.logs import JsonFormatter, TextFormatter

#: The suite's HS256 secret, static token and audience.
SECRET = "auth-suite-secret-0123456789abcdef-ABCDEF"
OTHER_SECRET = "not-the-servers-secret-0123456789abcdef"
STATIC = "static-admin-token-XYZ123"
AUDIENCE = "tsync-tests"

#: Everything that must never be logged (the test tokens are added as made).
SECRETS: set[str] = {SECRET, OTHER_SECRET, STATIC}


def keep(token: str) -> str:
    """Register ``token`` as a secret the log check looks for; return it."""
    SECRETS.add(token)
    # A JWT's signature alone is secret enough to look for (and no part of it
    # is shared with another token's).
    signature = token.rsplit(".", 1)[1] if token.count(".") == 2 else ""
    if len(signature) > 8:
        SECRETS.add(signature)
    return token


def mint(
    sub: str = "alice",
    *,
    ttl: float = 600,
    secret: str = SECRET,
    audience: str | None = AUDIENCE,
    **claims: Any,
) -> str:
    """An HS256 token (``read``/``write``/``admin`` claims as given)."""
    body: dict[str, Any] = {"sub": sub, "exp": int(time.time() + ttl), **claims}
    if audience is not None:
        body["aud"] = audience
    return keep(jwt.encode(body, secret, algorithm="HS256"))


#: The loggers of the server (uvicorn's and the websockets library's under it)
#: and of the Python client.
OUR_LOGGERS = ("tsync", "uvicorn", "websockets.server", "starlette")


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="package", autouse=True)
def no_secret_is_logged() -> Iterator[None]:
    kept = _Kept()
    root = logging.getLogger()
    root.addHandler(kept)
    logging.getLogger("tsync.selfcheck").warning("the log check collects")
    try:
        yield
    finally:
        root.removeHandler(kept)
    # The server's lines and the Python client's; not the test's own tools
    # (httpx and the websockets client log the URLs they are given).
    ours = [r for r in kept.records if r.name.startswith(OUR_LOGGERS)]
    lines = [
        (record.name, formatter.format(record) + " " + repr(record.__dict__))
        for formatter in (TextFormatter(), JsonFormatter())
        for record in ours
    ]
    leaks = sorted({(name, s) for s in SECRETS for name, line in lines if s in line})
    # Not the leaks themselves (the test output is a log too): who logged them.
    assert not leaks, f"{len(leaks)} secrets or tokens were logged by {[n for n, _ in leaks]}"
    assert not [line for _, line in lines if "token=" in line], "a query string was logged"
    assert any(r.name == "tsync.selfcheck" for r in ours), "the log check saw nothing"
