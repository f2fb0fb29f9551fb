"""Limits both ends agree on.

The server enforces them (and may be configured tighter); clients use them to
refuse a request before sending it. They are plain typed constants so that
``mypy`` and readers see one name per limit.
"""

from __future__ import annotations

from typing import Final, NamedTuple

#: Longest transcript id, in characters (ids match ``[A-Za-z0-9._:-]{1,128}``).
MAX_ID_LENGTH: Final[int] = 128
#: Regular expression an id must match in full.
ID_PATTERN: Final[str] = r"^[A-Za-z0-9._:-]{1,128}$"
#: Regular expression a View name must match in full (a short id).
VIEW_NAME_PATTERN: Final[str] = r"^[A-Za-z0-9._:-]{1,64}$"
#: Longest View name, in characters.
MAX_VIEW_NAME_LENGTH: Final[int] = 64
#: Most messages one range read (``GET .../messages?start=&end=``) returns.
MAX_READ_MESSAGES: Final[int] = 1000
#: Most messages one append batch may carry.
MAX_MESSAGES_PER_BATCH: Final[int] = 1000
#: Largest single message, measured as its compact JSON encoding in bytes.
MAX_MESSAGE_BYTES: Final[int] = 1 << 20  # 1 MiB
#: Deepest nesting of objects and lists in one message (the message object
#: itself is level 1). Far beyond what a chat message needs, far below what
#: makes a JSON decoder or a client's recursion give up.
MAX_JSON_DEPTH: Final[int] = 64
#: Largest inbound WebSocket message (one client op) in bytes.
MAX_FRAME_BYTES: Final[int] = 4 << 20  # 4 MiB
#: Longest idempotency key, in characters.
MAX_IDEMPOTENCY_KEY_LENGTH: Final[int] = 200
#: Longest ``ref`` a client may attach to an op, in characters.
MAX_REF_LENGTH: Final[int] = 200
#: Longest bearer token a client may send (an ``auth`` op, a header), in characters.
MAX_TOKEN_LENGTH: Final[int] = 8192
#: Largest presence state (``presence`` op), as its compact JSON in bytes.
MAX_PRESENCE_STATE_BYTES: Final[int] = 1024
#: Longest presence name (the ``name`` a member gives, or its token's ``sub``).
MAX_PRESENCE_NAME_LENGTH: Final[int] = 128
#: Longest ``origin.contextId`` the server puts into an event (``ws:...``, ``http:...``).
MAX_ORIGIN_LENGTH: Final[int] = 128

#: Roles a message may have. ``context`` holds narrative preamble (LMML import).
ROLES: Final[tuple[str, ...]] = ("user", "assistant", "system", "tool", "context")
#: The chat-completions roles, i.e. every role but ``context``.
CHAT_ROLES: Final[tuple[str, ...]] = ("user", "assistant", "system", "tool")


class MessageLimits(NamedTuple):
    """The limits a batch of messages is checked against: the defaults above,
    or a server's configured ones (``ServerConfig.message_limits``). One
    value, passed from the configuration to every check, so that no layer
    re-checks a limit of its own."""

    max_messages_per_batch: int = MAX_MESSAGES_PER_BATCH
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_depth: int = MAX_JSON_DEPTH


#: The limits above as one value.
DEFAULT_LIMITS: Final = MessageLimits()
