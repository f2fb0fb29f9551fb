"""``server.live.presence.TranscriptPresence`` without sockets: whatever members
join, change and leave between frames, a watcher that applies every frame
from its first (``PresenceCopy.take``) holds the members as they are (or
counts only, over the limit), and the counts are always right."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.presence import PresenceCopy, count
from protocol.wire import Member, PresenceFrame
from server.live.presence import TranscriptPresence

IDS = [f"c{i}" for i in range(6)]

change = st.one_of(
    st.tuples(
        st.just("set"),
        st.sampled_from(IDS),
        st.sampled_from(["viewer", "writer", "agent"]),
        st.booleans(),
    ),
    st.tuples(st.just("leave"), st.sampled_from(IDS)),
    st.just(("frame",)),
    st.just(("watch",)),
)


def _frame(item: object) -> PresenceFrame:
    frame = getattr(item, "frame", None)
    assert isinstance(frame, PresenceFrame)
    return frame


@given(st.lists(change, max_size=60), st.integers(min_value=0, max_value=7))
def test_watchers_follow_the_members_through_any_changes(
    changes: list[tuple[object, ...]], max_members: int
) -> None:
    presence = TranscriptPresence("t")
    copies: list[PresenceCopy] = []
    for step in changes:
        match step:
            case ("set", member_id, kind, typing):
                presence.members[str(member_id)] = Member(
                    id=str(member_id),
                    who="w",
                    kind=kind,
                    state={"typing": typing},  # type: ignore[arg-type]
                )
                presence.dirty.add(str(member_id))
            case ("leave", member_id):
                if presence.members.pop(str(member_id), None) is not None:
                    presence.dirty.add(str(member_id))
            case ("frame",):
                frame = presence.take_changes(max_members)
                if frame is not None:
                    for copy in copies:
                        copy.take(frame)
            case ("watch",):
                copy = PresenceCopy()
                copy.take(_frame(presence.snapshot()))
                copies.append(copy)
    frame = presence.take_changes(max_members)
    if frame is not None:
        for copy in copies:
            copy.take(frame)
    for copy in copies:
        assert copy.counts == count(presence.members.values())
        if len(presence.members) > max_members:
            assert copy.members is None
        else:
            assert copy.members == presence.members
