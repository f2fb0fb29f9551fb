"""``protocol.presence``: the changes between two lists of members, applied
to a copy of the first, give the second (property tests), and a frame of
counts alone drops the list."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.presence import PresenceCopy, changes, count
from protocol.wire import Member, PresenceFrame

members = st.builds(
    Member,
    id=st.sampled_from([f"c{i}" for i in range(8)]),
    who=st.sampled_from(["Ana", "Bo", "Cy"]),
    kind=st.sampled_from(["viewer", "writer", "agent"]),
    state=st.dictionaries(st.sampled_from(["typing", "x"]), st.booleans(), max_size=2),
)
lists = st.lists(members, max_size=8).map(lambda ms: {m.id: m for m in ms})


@given(lists, lists)
def test_changes_bring_a_copy_from_one_list_to_the_other(
    before: dict[str, Member], after: dict[str, Member]
) -> None:
    copy = PresenceCopy()
    copy.take(
        PresenceFrame(
            seq=1, transcript_id="t", counts=count(before.values()), members=list(before.values())
        )
    )
    joined, updated, left = changes(before, after)
    assert not (set(m.id for m in joined) & set(left))
    if not (joined or updated or left):
        assert before == after  # the server sends no frame then
        return
    copy.take(
        PresenceFrame(
            seq=2,
            transcript_id="t",
            counts=count(after.values()),
            joined=joined or None,
            updated=updated or None,
            left=left or None,
        )
    )
    assert copy.members == after
    assert copy.counts == count(after.values())
    # Only the ids that changed need looking at.
    dirty = {i for i in set(before) | set(after) if before.get(i) != after.get(i)}
    assert changes(before, after, dirty) == (joined, updated, left)


def test_counts_alone_drop_the_list() -> None:
    copy = PresenceCopy()
    one = Member(id="c1", who="Ana")
    copy.take(PresenceFrame(seq=1, transcript_id="t", counts=count([one]), members=[one]))
    assert copy.listed() == [one]
    frame = PresenceFrame(seq=2, transcript_id="t", counts=count([one] * 3))
    assert frame.crowd
    copy.take(frame)
    assert copy.members is None and copy.listed() == [] and copy.counts.viewers == 3
