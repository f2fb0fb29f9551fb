"""``GET /v1/transcripts?order=updated``: the transcripts most recently
changed first, as the chat page and ``tsync list`` show them.

The stores list by id only: ordering by ``updatedAt`` in the store would
need a second index that Redis cannot keep in an append's own script (which
touches one hash slot). So this reads the store's id order page by page
(summaries only, never a message) and keeps the ``limit`` newest after the
cursor in a heap: memory follows ``limit``, time the number of transcripts.
The cursor is the last id of the previous page; a page after an id that is
gone meanwhile is empty.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from server.store.base import TranscriptInfo

__all__ = ["ORDERS", "newest_first"]

#: The ``order`` values of ``GET /v1/transcripts``.
ORDERS: Final = ("id", "updated")
#: Summaries read from the store per call while scanning.
SCAN_PAGE: Final = 1000

ListPage = Callable[..., Awaitable[list[TranscriptInfo]]]


def _key(info: TranscriptInfo) -> tuple[int, str]:
    """Newest first; the same instant by id."""
    return (-info.updated_at, info.transcript_id)


async def _every(page: ListPage) -> AsyncIterator[TranscriptInfo]:
    after: str | None = None
    while True:
        infos = await page(after=after, limit=SCAN_PAGE)
        for info in infos:
            yield info
        if len(infos) < SCAN_PAGE:
            return
        after = infos[-1].transcript_id


async def newest_first(
    page: ListPage, *, after: str | None = None, limit: int = 100
) -> list[TranscriptInfo]:
    """Up to ``limit`` transcripts, most recently updated first, that come
    after the transcript ``after`` in that order. ``page(after=, limit=)``
    lists the store in id order (``Hub.list``)."""
    floor: tuple[int, str] | None = None
    if after is not None:
        async for info in _every(page):
            if info.transcript_id == after:
                floor = _key(info)
                break
        else:
            return []
    best: list[TranscriptInfo] = []
    batch: list[TranscriptInfo] = []
    async for info in _every(page):
        if floor is None or _key(info) > floor:
            batch.append(info)
        if len(batch) >= SCAN_PAGE:
            best, batch = heapq.nsmallest(limit, best + batch, key=_key), []
    return heapq.nsmallest(limit, best + batch, key=_key)
