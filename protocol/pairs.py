"""``group_adjacent_pairs``: user/assistant exchanges out of indexed entries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

Entry: TypeAlias = tuple[int, Any]
Group: TypeAlias = tuple[Entry, ...]


def group_adjacent_pairs(entries: Iterable[Entry]) -> tuple[Group, ...]:
    """Group ``(index, message)`` entries of one transcript into pairs and singles.

    Indices must be strictly ascending and non-negative (else ``ValueError``).
    A ``user`` message immediately followed by an ``assistant`` at index + 1
    forms a pair ``((i, user), (i + 1, assistant))``; every other entry stands
    alone as a 1-tuple. Nothing is dropped or reordered, no pair spans a gap in
    the indices, the message objects are the very ones passed in and the
    result is immutable (tuples all the way down).
    """
    items = tuple(entries)
    previous = -1
    for index, _ in items:
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"index {index!r} is not an integer")
        if index < 0:
            raise ValueError(f"negative index {index}")
        if index == previous:
            raise ValueError(f"duplicate index {index}")
        if index < previous:
            raise ValueError(f"index {index} comes after {previous}: indices must ascend")
        previous = index
    groups: list[Group] = []
    i = 0
    while i < len(items):
        index, message = items[i]
        if (
            i + 1 < len(items)
            and items[i + 1][0] == index + 1
            and _role(message) == "user"
            and _role(items[i + 1][1]) == "assistant"
        ):
            groups.append((items[i], items[i + 1]))
            i += 2
        else:
            groups.append((items[i],))
            i += 1
    return tuple(groups)


def _role(message: Any) -> Any:
    if isinstance(message, dict):
        return message.get("role")
    return getattr(message, "role", None)
