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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocol.wire import Member, PresenceCounts, PresenceFrame

__all__ = ["PresenceCopy", "changes", "count"]


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
