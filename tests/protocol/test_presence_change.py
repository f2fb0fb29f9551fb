"""``protocol.presence.presence_change``: the rules of the ``presence`` op,
alone (the server's connection calls it; ``tests/server/live/test_presence.py``
holds them over a real socket)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codes
from protocol.errors import InvalidFrame
from protocol.limits import MAX_PRESENCE_NAME_LENGTH, MAX_PRESENCE_STATE_BYTES
from protocol.presence import (
    ANONYMOUS,
    PresenceForbidden,
    PresenceTooLarge,
    presence_change,
)
from protocol.wire import Member, Presence


def change(op: Presence, old: Member | None = None, **facts: Any) -> Member | None:
    given_facts: dict[str, Any] = {"follows": True, "sub": None, "may_write": True}
    given_facts.update(facts)
    return presence_change(op, old, member_id="c1", **given_facts)


def test_a_first_op_joins_as_an_anonymous_viewer_with_no_state() -> None:
    assert change(Presence(transcript_id="t")) == Member(
        id="c1", who=ANONYMOUS, kind="viewer", state={}
    )


def test_later_ops_change_only_what_they_carry() -> None:
    old = Member(id="c1", who="Ana", kind="writer", state={"typing": True})
    assert change(Presence(transcript_id="t", kind="agent"), old) == Member(
        id="c1", who="Ana", kind="agent", state={"typing": True}
    )
    cleared = change(Presence(transcript_id="t", state=None), old)
    assert cleared is not None and cleared.state == {} and cleared.kind == "writer"


def test_a_leave_is_none_even_unsubscribed_and_carries_nothing_else() -> None:
    assert change(Presence(transcript_id="t", leave=True), follows=False) is None
    with pytest.raises(InvalidFrame, match="leaves carries no kind or state"):
        change(Presence(transcript_id="t", leave=True, kind="viewer"))


def test_presence_is_stated_on_a_subscribed_transcript() -> None:
    with pytest.raises(InvalidFrame, match="subscribe first"):
        change(Presence(transcript_id="t"), follows=False)


def test_a_token_names_the_member_and_a_different_name_is_forbidden() -> None:
    member = change(Presence(transcript_id="t"), sub="x" * (MAX_PRESENCE_NAME_LENGTH + 5))
    assert member is not None and member.who == "x" * MAX_PRESENCE_NAME_LENGTH
    assert change(Presence(transcript_id="t", name="bo"), sub="bo") is not None
    with pytest.raises(PresenceForbidden, match="leave out name") as refused:
        change(Presence(transcript_id="t", name="ana"), sub="bo")
    assert refused.value.code == codes.FORBIDDEN


@pytest.mark.parametrize("kind", ["writer", "agent"])
def test_writers_and_agents_need_the_right_to_write(kind: str) -> None:
    op = Presence(transcript_id="t", kind=kind)  # type: ignore[arg-type]
    with pytest.raises(
        PresenceForbidden, match="the token of 'bo' may not write to transcript 't'"
    ):
        change(op, sub="bo", may_write=False)
    assert change(Presence(transcript_id="t", kind="viewer"), may_write=False) is not None


def test_a_state_is_checked_for_its_values_and_its_size() -> None:
    with pytest.raises(InvalidFrame, match="invalid 'presence' op: state"):
        change(Presence(transcript_id="t", state={"n": float("nan")}))
    big = {"s": "x" * MAX_PRESENCE_STATE_BYTES}
    with pytest.raises(PresenceTooLarge) as refused:
        change(Presence(transcript_id="t", state=big))
    assert refused.value.code == codes.TOO_LARGE


kinds = st.sampled_from([None, "viewer", "writer", "agent"])
states = st.one_of(
    st.just(msgspec.UNSET),
    st.none(),
    st.dictionaries(st.text(max_size=3), st.booleans(), max_size=2),
)


@given(kinds, states, kinds, states)
def test_what_an_op_does_not_carry_is_kept_and_what_it_carries_is_taken(
    kind1: Any, state1: Any, kind2: Any, state2: Any
) -> None:
    first = change(Presence(transcript_id="t", kind=kind1, state=state1))
    assert first is not None
    second = change(Presence(transcript_id="t", kind=kind2, state=state2), first)
    assert second is not None
    assert second.kind == (kind2 or first.kind)
    assert second.state == (first.state if state2 is msgspec.UNSET else (state2 or {}))
    assert second.who == first.who == ANONYMOUS
