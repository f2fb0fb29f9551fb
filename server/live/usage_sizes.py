"""The encoded size of every message of a transcript, as prefix sums, kept
between usage queries (``Reads.usage``, ``protocol.usage.sized_usage``).

A usage query needs the bytes of the messages its ranges cover. Encoding
them on every query costs the whole transcript each time (100,000 messages:
hundreds of milliseconds, most of them read back from the store); messages
never change within an epoch, so their sizes are measured once and a query
costs its ranges' bounds. A transcript of ``n`` messages costs ``8 n``
bytes here (an ``array('q')``); the sizes of at most ``USAGE_SIZES_MESSAGES``
messages are kept in all, the least recently used transcripts' forgotten
first (one longer than that is measured for each query and not kept).
"""

from __future__ import annotations

import itertools
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

import msgspec

from protocol.types import Message

__all__ = ["USAGE_SIZES_MESSAGES", "MessageSizes"]

#: Messages whose sizes are kept, over every transcript (8 bytes each: 32 MiB).
USAGE_SIZES_MESSAGES: Final = 4_000_000

_encode: Final = msgspec.json.Encoder().encode


class MessageSizes:
    """Prefix sums of the encoded sizes of each (transcript, epoch)'s
    messages ``[0, n)``, extended as queries reach further."""

    def __init__(self, capacity: int = USAGE_SIZES_MESSAGES) -> None:
        self.capacity = capacity
        self._sums: OrderedDict[tuple[str, str], array[int]] = OrderedDict()
        self._held = 0

    def known(self, transcript_id: str, epoch: str) -> int:
        """How many messages of the transcript have their size kept."""
        sums = self._sums.get((transcript_id, epoch))
        return 0 if sums is None else len(sums) - 1

    def extend(
        self, transcript_id: str, epoch: str, start: int, messages: Sequence[Message]
    ) -> None:
        """Measure ``messages``, the transcript's ``[start, start + len)``:
        kept if they continue what is known (else ignored: another query
        measured them first)."""
        key = (transcript_id, epoch)
        sums = self._sums.get(key)
        if sums is None:
            if start != 0:
                return
            sums = array("q", [0])
            self._sums[key] = sums
        if len(sums) - 1 != start:
            return
        if start + len(messages) > self.capacity:
            self.forget(*key)  # longer than the whole budget: measured per query, not kept
            return
        running = itertools.accumulate(map(len, map(_encode, messages)), initial=sums[-1])
        next(running)  # ``initial`` itself: the last sum, already there
        sums.extend(running)
        self._held += len(messages)
        self._sums.move_to_end(key)
        self._trim(keep=key)

    def sums(self, transcript_id: str, epoch: str) -> array[int] | None:
        """The prefix sums kept (``sums[i]``: bytes of messages ``[0, i)``)."""
        key = (transcript_id, epoch)
        sums = self._sums.get(key)
        if sums is not None:
            self._sums.move_to_end(key)
        return sums

    def forget(self, transcript_id: str, epoch: str) -> None:
        sums = self._sums.pop((transcript_id, epoch), None)
        if sums is not None:
            self._held -= len(sums) - 1

    def _trim(self, keep: tuple[str, str]) -> None:
        # ``keep`` (used last, and within the budget on its own) stays.
        while self._held > self.capacity:
            key = next(iter(self._sums))
            if key == keep:
                return
            self.forget(*key)
