"""``group_adjacent_pairs``: user/assistant exchanges out of indexed entries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

Entry: TypeAlias = tuple[int, Any]
Group: TypeAlias = tuple[Entry, ...]


def group_adjacent_pairs(entries: Iterable[Any]) -> tuple[Group, ...]:
    """Group ``(index, message)`` entries of one transcript into pairs and singles.

    An entry is an ``(index, message)`` pair (a tuple, list, ...) or an
    object with ``index`` and ``message`` attributes such as the
    ``AppendedEntry`` that ``Transcript.append`` returns (entries with a
    ``transcript_id`` must all name the same one). Indices must be strictly
    ascending and non-negative integers (else ``ValueError``).

    A ``user`` message immediately followed by an ``assistant`` at index + 1
    forms a pair ``((i, user), (i + 1, assistant))``; every other entry stands
    alone as a 1-tuple. Nothing is dropped or reordered, no pair spans a gap in
    the indices, the message objects are the very ones passed in and the
    result is immutable: fresh tuples all the way down, whatever the entries
    were.
    """
    pairs: list[Entry] = []
    transcript_ids: set[object] = set()
    for entry in entries:
        if hasattr(entry, "message") and hasattr(entry, "index"):
            transcript_ids.add(getattr(entry, "transcript_id", None))
            pairs.append((entry.index, entry.message))
            continue
        try:
            index, message = entry
        except (TypeError, ValueError):
            raise ValueError(f"entry {entry!r:.60} is not an (index, message) pair") from None
        pairs.append((index, message))
    transcript_ids.discard(None)
    if len(transcript_ids) > 1:
        raise ValueError(
            f"entries of {len(transcript_ids)} transcripts: group the entries of one transcript"
        )
    items = tuple(pairs)
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
