"""group_adjacent_pairs: the contract's rules, and a property over any input."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.pairs import group_adjacent_pairs
from protocol.types import Message, Role


def _m(role: Any, text: str = "") -> Message:
    return Message(role=role, content=text)


def test_a_user_then_an_assistant_at_the_next_index_is_a_pair() -> None:
    u, a, s = _m("user", "q"), _m("assistant", "r"), _m("system")
    groups = group_adjacent_pairs([(0, s), (1, u), (2, a)])
    assert groups == (((0, s),), ((1, u), (2, a)))


def test_the_message_objects_are_the_ones_passed_in() -> None:
    u, a = _m("user"), _m("assistant")
    ((first, second),) = group_adjacent_pairs([(4, u), (5, a)])
    assert first[1] is u
    assert second[1] is a


def test_the_output_is_immutable_all_the_way_down() -> None:
    groups = group_adjacent_pairs([(0, _m("user")), (1, _m("assistant")), (2, _m("user"))])
    assert isinstance(groups, tuple)
    assert all(isinstance(g, tuple) and all(isinstance(e, tuple) for e in g) for g in groups)
    with pytest.raises(TypeError):
        groups[0] = ()  # type: ignore[index]


@pytest.mark.parametrize(
    ("roles", "indices", "expected"),
    [
        # No pairing across a gap in the indices.
        (["user", "assistant"], [0, 2], [[0], [2]]),
        # Only user -> assistant, in that order.
        (["assistant", "user"], [0, 1], [[0], [1]]),
        (["user", "user", "assistant"], [0, 1, 2], [[0], [1, 2]]),
        (["user", "assistant", "assistant"], [0, 1, 2], [[0, 1], [2]]),
        (["user", "tool", "assistant"], [0, 1, 2], [[0], [1], [2]]),
        (
            ["context", "user", "assistant", "user", "assistant"],
            [3, 4, 5, 6, 7],
            [[3], [4, 5], [6, 7]],
        ),
        (["user"], [9], [[9]]),
        ([], [], []),
    ],
)
def test_grouping(roles: list[str], indices: list[int], expected: list[list[int]]) -> None:
    entries = [(i, _m(r)) for i, r in zip(indices, roles, strict=True)]
    groups = group_adjacent_pairs(entries)
    assert [[i for i, _ in g] for g in groups] == expected


def test_plain_dict_messages_work_too() -> None:
    u, a = {"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}
    assert group_adjacent_pairs(iter([(0, u), (1, a)])) == (((0, u), (1, a)),)


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        ([0, 0], "duplicate index 0"),
        ([1, 3, 2], "index 2 comes after 3"),
        ([-1], "negative index -1"),
        ([0, True], "is not an integer"),
        ([0, 1.0], "is not an integer"),
    ],
)
def test_bad_indices_are_value_errors(indices: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        group_adjacent_pairs([(i, _m("user")) for i in indices])


@st.composite
def _entries(draw: st.DrawFn) -> list[tuple[int, Message]]:
    steps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 5]), max_size=12))
    indices, at = [], draw(st.integers(min_value=0, max_value=5))
    for step in steps:
        indices.append(at)
        at += step
    roles: list[Role] = ["user", "assistant", "user", "assistant", "system", "tool"]
    role = st.sampled_from(roles)
    # Plain messages keep this fast; identity, not content, is what is checked.
    return [(i, Message(role=draw(role), content=str(i))) for i in indices]


@settings(max_examples=80, deadline=None)
@given(_entries())
def test_grouping_keeps_everything_in_order_and_pairs_only_adjacent_exchanges(
    entries: list[tuple[int, Message]],
) -> None:
    groups = group_adjacent_pairs(entries)
    flat = [entry for group in groups for entry in group]
    assert flat == entries
    assert all(a[1] is b[1] for a, b in zip(flat, entries, strict=True))
    for group in groups:
        assert len(group) in (1, 2)
        if len(group) == 2:
            (i, first), (j, second) = group
            assert (first.role, second.role, j) == ("user", "assistant", i + 1)
    # Greedy and maximal: no two neighbouring singles could have formed a pair.
    for left, right in itertools.pairwise(groups):
        if len(left) == 1 and len(right) == 1:
            (i, first), (j, second) = left[0], right[0]
            assert not (first.role == "user" and second.role == "assistant" and j == i + 1)


def test_entries_come_out_as_fresh_tuples_whatever_came_in() -> None:
    user, assistant = Message("user", "q"), Message("assistant", "a")
    entries = [[0, user], [1, assistant], [2, user]]
    groups = group_adjacent_pairs(entries)  # type: ignore[arg-type]
    assert groups == (((0, user), (1, assistant)), ((2, user),))
    entries[0][0] = 7  # the caller's lists are not the result's
    assert groups[0][0] == (0, user)
    assert all(type(entry) is tuple for group in groups for entry in group)
    assert groups[0][0][1] is user


@pytest.mark.parametrize("bad", [[(0,)], [(0, 1, 2)], [5], ["ab"]])
def test_an_entry_that_is_not_a_pair_is_a_value_error(bad: list[object]) -> None:
    with pytest.raises(ValueError):
        group_adjacent_pairs(bad)  # type: ignore[arg-type]
