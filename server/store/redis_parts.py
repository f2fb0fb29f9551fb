"""What a part of the Redis store kept in a module of its own (drafts,
presence) is given by the store: one ``StoreLink``, so that each part is
built the same way and reaches Redis only through the store's client, its
notice channels and its error mapping."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from server.store.base import StoreError

__all__ = ["RedisPart", "StoreLink"]


@dataclass(frozen=True, slots=True)
class StoreLink:
    """The store's handles a part uses: ``prefix`` of every key,
    ``client()`` the store's client, ``channel_of`` its notice channel per
    transcript, ``publish`` the command (``PUBLISH``, or ``SPUBLISH`` on a
    Cluster), ``unavailable`` maps a redis-py error to a ``StoreError``,
    ``script`` makes a runnable script (the store's ``_Script``)."""

    prefix: str
    client: Callable[[], Any]
    channel_of: Callable[[str], str]
    publish: str
    unavailable: Callable[[Any], StoreError]
    script: Callable[[str], Any]


class RedisPart:
    """A part of the Redis store: the link's handles as attributes, and
    ``_encode`` (compact JSON)."""

    def __init__(self, link: StoreLink) -> None:
        self.prefix = link.prefix
        self._client = link.client
        self._channel_of = link.channel_of
        self._publish = link.publish
        self._unavailable = link.unavailable
        self._encode = msgspec.json.Encoder().encode
