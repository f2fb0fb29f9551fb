"""transcript-sync's Python client.

``async with client_py.connect(url) as client:`` opens one WebSocket
connection that the client keeps up by itself; ``await client.subscribe(id)``
returns a live ``Mirror`` whose continuity the client checks and repairs;
``await client.append(id, messages)`` lands a batch exactly once, even across
reconnects; ``client.draft(id)`` and ``client.stream(id, chunks)`` share an
answer live while it is written, then commit it. ``HttpApi`` is the plain
HTTP API. See ``client_py.errors`` for the errors.
"""

from client_py.client import Client, ClientCounters, connect
from client_py.drafts import DraftView, DraftWriter, chunk_text
from client_py.errors import (
    ClientClosed,
    ClientError,
    Conflict,
    Disconnected,
    EpochChanged,
    InvalidMessage,
    InvalidView,
    NotFound,
    RequestTimeout,
    RevisionConflict,
    ServerError,
    Unauthorized,
    Unreachable,
)
from client_py.http import Ack, Created, HttpApi, Imported, Receipt, endpoints
from client_py.mirror import DraftEvent, EventStream, Mirror, MirrorUpdate
from protocol.drafts import DraftClosed, DraftUpdated
from protocol.views import Window

__all__ = [
    "Ack",
    "Client",
    "ClientClosed",
    "ClientCounters",
    "ClientError",
    "Conflict",
    "Created",
    "Disconnected",
    "DraftClosed",
    "DraftEvent",
    "DraftUpdated",
    "DraftView",
    "DraftWriter",
    "EpochChanged",
    "EventStream",
    "HttpApi",
    "Imported",
    "InvalidMessage",
    "InvalidView",
    "Mirror",
    "MirrorUpdate",
    "NotFound",
    "Receipt",
    "RequestTimeout",
    "RevisionConflict",
    "ServerError",
    "Unauthorized",
    "Unreachable",
    "Window",
    "chunk_text",
    "connect",
    "endpoints",
]
