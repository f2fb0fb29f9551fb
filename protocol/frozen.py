"""Frozen JSON values: what a message's ``metadata`` and ``tool_calls`` hold.

A message is never changed once appended, so nothing reachable from a stored
``Message`` may be mutable. msgspec decodes JSON objects and arrays into
``dict`` and ``list``; ``freeze`` turns them, all the way down, into
``FrozenDict`` and ``FrozenList``: subclasses of ``dict`` and ``list`` that
refuse every change and hash by value. Being subclasses, they still compare
equal to plain data (``FrozenDict(a=[1]) == {"a": [1]}``) and msgspec encodes
them as JSON objects and arrays with no hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "freeze", "freeze_object"]


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is frozen: a stored message never changes")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses changes and hashes by value (values are frozen too)."""

    __slots__ = ()

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


class FrozenList(list[Any]):
    """A ``list`` that refuses changes and hashes by value (items are frozen too)."""

    __slots__ = ()

    __setitem__ = __delitem__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __iadd__ = __imul__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self),))

    def __repr__(self) -> str:
        return f"FrozenList({list.__repr__(self)})"


#: Types that are immutable already (what JSON scalars decode to).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """``value`` with every ``dict`` and ``list`` (or tuple) in it frozen.

    Already frozen values are returned as they are; scalars (str, int, float,
    bool, None) pass through. An object of scalars, the usual metadata, is
    copied once without recursing.
    """
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, dict):
        return freeze_object(value)
    if isinstance(value, list | tuple):
        return FrozenList([freeze(item) for item in value])
    return value


def freeze_object(value: Mapping[str, Any]) -> FrozenDict:
    """``freeze`` for a ``dict`` (a message's metadata: the hot path)."""
    for item in value.values():
        if type(item) not in _SCALARS:
            return FrozenDict({key: freeze(item) for key, item in value.items()})
    return FrozenDict(value)
