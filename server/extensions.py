"""The ASGI scope extensions ``tsync serve``'s own protocols offer the app.

Named here, on the shared ground, because the protocol that offers one
(``server.web``) and the face that uses it (``server.streams``) stand side by
side and import nothing of each other. (``RAW_FRAMES``, the WebSocket one, is
``server.live.outbound``'s: the outbound queues use it.)
"""

from __future__ import annotations

from typing import Final

__all__ = ["HTTP_CONNECTION", "RAW_BODY"]

#: A response's raw body write (``server.web.http_guard.RawBody``): chunks the
#: app framed itself, written to the transport as they are.
RAW_BODY: Final = "tsync.raw_body"

#: The HTTP connection a request came on (``server.web.http_guard``): the
#: app calls its ``authenticated(parks)`` once a request's credentials are
#: valid, so that the connection leaves the unauthenticated share of the
#: HTTP cap; ``parks`` (a live read) takes a place in the parked share, or
#: gets False when there is none (the app answers 503).
HTTP_CONNECTION: Final = "tsync.http_connection"
