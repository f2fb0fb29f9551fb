"""Presence: who is on a transcript now, as a consumer's copy and as the
changes between two lists of members.

A member is one connection that stated its presence (``presence`` op) on a
transcript it subscribes to: who it is, a kind (``viewer``, ``writer``,
``agent``) and a small state (``{"typing": true}``). Presence is not part of
the model: it never changes a revision and nothing of it is stored as
history.

``changes(before, after)`` is what the server sends as one ``presence``
frame (joined, updated, left); ``PresenceCopy.take(frame)`` applies any
``presence`` frame to a consumer's copy, so that applying the changes
between two lists to the first gives the second (a property test checks
it). Nothing here does I/O.

``presence_change(op, old, ...)`` holds the rules of the ``presence`` op
(``docs/protocol.md``, Presence): what a connection may state, and the
member it then is. The server's connection (``server.web.ws``) calls it and
hands the member to its registry (``server.live.presence``).

::

    ProtocolError
    ├── InvalidFrame        (``protocol.errors``) a leave that sets something, a
    │                       transcript not subscribed, a state both formats do
    │                       not carry exactly
    ├── PresenceForbidden   a ``name`` beside a token's ``sub``; ``writer`` or
    │                       ``agent`` without the right to write
    └── PresenceTooLarge    a state over ``MAX_PRESENCE_STATE_BYTES``
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from protocol import codes
from protocol.errors import InvalidFrame, InvalidMessage, ProtocolError
from protocol.limits import MAX_PRESENCE_NAME_LENGTH, MAX_PRESENCE_STATE_BYTES
from protocol.validation import check_value
from protocol.wire import (
    Member,
    Presence,
    PresenceCounts,
    PresenceFrame,
    check_presence_op,
    presence_state_bytes,
)

__all__ = [
    "ANONYMOUS",
    "PresenceCopy",
    "PresenceForbidden",
    "PresenceTooLarge",
    "changes",
    "check_state",
    "count",
    "presence_change",
]

#: Who a member is that gave no name on a server that asks for no credentials.
ANONYMOUS: Final = "anonymous"

#: How deep a presence state may nest (1 KiB holds little more anyway).
MAX_PRESENCE_STATE_DEPTH: Final = 16


class PresenceForbidden(ProtocolError):
    """A ``presence`` op that states what its credentials do not allow."""

    code = codes.FORBIDDEN


class PresenceTooLarge(ProtocolError):
    """A presence state over ``MAX_PRESENCE_STATE_BYTES`` of JSON."""

    code = codes.TOO_LARGE


def presence_change(
    op: Presence,
    old: Member | None,
    *,
    member_id: str,
    follows: bool,
    sub: str | None,
    may_write: bool,
) -> Member | None:
    """The member that ``op`` makes of connection ``member_id`` (``old``:
    the member it is now, if any), or ``None`` for a leave.

    ``follows``: the connection subscribes to the op's transcript (presence
    is stated on one it does); ``sub``: its token's ``sub``, which names the
    member (``None`` on a server that asks for no credentials: the op's
    ``name`` does, else ``anonymous``); ``may_write``: its credentials let it
    write to the transcript (``writer`` and ``agent`` need it). A first op
    joins as a ``viewer`` with the state ``{}``; later ones change what they
    carry (``state`` ``{}`` or ``null`` clears it). Raises ``InvalidFrame``,
    ``PresenceForbidden`` or ``PresenceTooLarge`` (module docstring)."""
    check_presence_op(op)
    if op.leave:
        return None
    if not follows:
        raise InvalidFrame(
            "presence is stated on a transcript this connection subscribes to: subscribe first"
        )
    if sub is not None and op.name is not None and op.name != sub:
        raise PresenceForbidden(
            f"members of this server are named by their token's sub ({sub!r}): leave out name"
        )
    if op.kind in ("writer", "agent") and not may_write:
        who = f"the token of {sub!r}" if sub else "this token"
        raise PresenceForbidden(f"{who} may not write to transcript {op.transcript_id!r}")
    state = op.state
    if isinstance(state, dict):
        check_state(state)
    name = sub[:MAX_PRESENCE_NAME_LENGTH] if sub else op.name
    return Member(
        id=member_id,
        who=name or (old.who if old is not None else ANONYMOUS),
        kind=op.kind or (old.kind if old is not None else "viewer"),
        state=((old.state if old is not None else {}) if state is msgspec.UNSET else (state or {})),
    )


def check_state(state: dict[str, Any]) -> None:
    """Raise unless ``state`` may be a member's state: values both formats
    carry exactly (``InvalidFrame``, with the path), at most
    ``MAX_PRESENCE_STATE_BYTES`` of compact JSON (``PresenceTooLarge``)."""
    try:
        check_value(state, "state", limit=MAX_PRESENCE_STATE_DEPTH)
    except InvalidMessage as exc:
        raise InvalidFrame(f"invalid 'presence' op: {exc}") from None
    size = presence_state_bytes(state)
    if size > MAX_PRESENCE_STATE_BYTES:
        raise PresenceTooLarge(
            f"a presence state is at most {MAX_PRESENCE_STATE_BYTES} bytes of JSON "
            f"(this one is {size})"
        )


def count(members: Iterable[Member]) -> PresenceCounts:
    """How many members of each kind ``members`` holds."""
    viewers = writers = agents = 0
    for member in members:
        if member.kind == "viewer":
            viewers += 1
        elif member.kind == "writer":
            writers += 1
        else:
            agents += 1
    return PresenceCounts(viewers=viewers, writers=writers, agents=agents)


def changes(
    before: Mapping[str, Member], after: Mapping[str, Member], ids: Iterable[str] | None = None
) -> tuple[list[Member], list[Member], list[str]]:
    """``(joined, updated, left)`` from ``before`` to ``after`` (by member
    id). ``ids``: the only ids that may differ (those changed since
    ``before``), so that the cost is theirs, not the lists'."""
    joined: list[Member] = []
    updated: list[Member] = []
    left: list[str] = []
    for member_id in sorted(set(before) | set(after) if ids is None else set(ids)):
        old = before.get(member_id)
        new = after.get(member_id)
        if new is None:
            if old is not None:
                left.append(member_id)
        elif old is None:
            joined.append(new)
        elif old != new:
            updated.append(new)
    return joined, updated, left


class PresenceCopy:
    """A consumer's copy of one transcript's presence.

    ``members`` (by id) is ``None`` while the server sends counts only (over
    its ``presence_max_members``), or before the first frame; ``counts``
    always holds the server's latest."""

    __slots__ = ("counts", "members")

    def __init__(self) -> None:
        self.members: dict[str, Member] | None = None
        self.counts = PresenceCounts()

    def take(self, frame: PresenceFrame) -> None:
        """Apply one ``presence`` frame: a whole list replaces the copy,
        changes apply to it, counts alone drop the list."""
        self.counts = frame.counts
        if frame.members is not None:
            self.members = {member.id: member for member in frame.members}
            return
        if frame.crowd:
            self.members = None
            return
        members = self.members
        if members is None:
            members = self.members = {}
        for member in frame.joined or ():
            members[member.id] = member
        for member in frame.updated or ():
            members[member.id] = member
        for member_id in frame.left or ():
            members.pop(member_id, None)

    def clear(self) -> None:
        """Forget everything (the subscription ended)."""
        self.members = None
        self.counts = PresenceCounts()

    def listed(self) -> list[Member]:
        """The members, ordered by who and id (``[]`` when only counted)."""
        if self.members is None:
            return []
        return sorted(self.members.values(), key=lambda m: (m.who, m.id))
