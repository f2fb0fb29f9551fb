"""Views and windows: named ranges over a transcript, and the part of it a
subscriber asks for.

A **View** (``protocol.types.View``) is a name and a range ``[start, end)``
over one transcript, ``end`` ``None`` for an open View that follows the
transcript. Views are stored with the transcript and changed only by events
of their own (``view-changed``, ``view-left``); they never change a message
or a segment bound, and leaving one deletes nothing.

A **window** (``Window``) is what a ``subscribe`` asks for instead of the
whole transcript: the last ``tail`` messages, the messages ``from`` an
index on, the active segment, or a View's range. It is resolved once, when
a baseline is built (``window_start``): the baseline then holds
``[start, length)`` and the increments extend it at the end as always.

Errors: ``InvalidView`` (a ``ProtocolError``, hence a ``ValueError``) for a
View name or range the transcript does not allow, or no such View.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec
from msgspec import Struct

from protocol import codes
from protocol.errors import ProtocolError
from protocol.types import NonNegative, View, ViewName

__all__ = ["InvalidView", "Window", "check_view", "window_start"]


class InvalidView(ProtocolError):
    """A View name or range the transcript does not allow, or no such View."""

    code = codes.INVALID_VIEW


class Window(Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Exactly one of ``{"tail": N}``, ``{"from": index}``,
    ``{"segment": "active"}``, ``{"view": name}``."""

    tail: NonNegative | None = None
    from_: NonNegative | None = msgspec.field(default=None, name="from")
    segment: Literal["active"] | None = None
    view: ViewName | None = None

    def __post_init__(self) -> None:
        given = (self.tail, self.from_, self.segment, self.view)
        if sum(value is not None for value in given) != 1:
            raise ValueError("a window has exactly one of tail, from, segment, view")

    def __str__(self) -> str:
        if self.tail is not None:
            return f"tail {self.tail}"
        if self.from_ is not None:
            return f"from {self.from_}"
        if self.segment is not None:
            return "the active segment"
        return f"view {self.view}"


def window_start(
    window: Window | None, *, length: int, active_start: int, views: Mapping[str, View]
) -> int:
    """Where a baseline for ``window`` starts in a transcript of ``length``
    messages: 0 without a window; ``length - tail`` (not below 0); ``from``
    (not past ``length``: a window that starts at the end holds nothing yet
    and fills as messages arrive); ``active_start``; the View's start.
    Raises ``InvalidView`` for a View the transcript does not have."""
    if window is None:
        return 0
    if window.tail is not None:
        return max(0, length - window.tail)
    if window.from_ is not None:
        return min(window.from_, length)
    if window.segment is not None:
        return active_start
    assert window.view is not None
    view = views.get(window.view)
    if view is None:
        raise InvalidView(f"no View named {window.view!r}")
    return min(view.start, length)


def check_view(name: str, start: int, end: int | None, *, length: int) -> View:
    """The View ``name`` over ``[start, end)`` if a transcript of ``length``
    messages allows it: ``0 <= start <= length`` and, for a closed View,
    ``start <= end <= length``. Raises ``InvalidView``."""
    try:
        view = msgspec.convert({"name": name, "start": start, "end": end}, View)
    except msgspec.ValidationError as exc:
        raise InvalidView(f"invalid View: {exc}") from None
    if not 0 <= start <= length:
        raise InvalidView(
            f"View {name!r} cannot start at {start}: it must satisfy 0 <= start <= length "
            f"({length})"
        )
    if end is not None and not start <= end <= length:
        raise InvalidView(
            f"View {name!r} cannot end at {end}: it must satisfy start ({start}) <= end <= "
            f"length ({length})"
        )
    return view
