"""Fixed ranges of a transcript: ``fixed_range(transcript, start, end)``.

A ``TranscriptRangeReader`` is fixed at the transcript's revision and length
when it is made. Because messages are never changed or removed, it can read
the live transcript and still always see exactly the same messages; later
appends never widen it, and ``slice`` can only narrow it.

Part of the entity's API that ``../shared/CONTRACT.md`` fixes, kept for programs
that use the entity in-process (``Transcript.append_from`` takes one); the
server itself does not use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.types import Message, TranscriptRangeLocator

if TYPE_CHECKING:
    from server.model.transcript import Transcript

__all__ = ["TranscriptRangeReader", "fixed_range"]


def fixed_range(
    transcript: Transcript, start: int = 0, end: int | None = None
) -> TranscriptRangeReader:
    """A reader of messages ``[start, end)`` of ``transcript`` as it is now.

    ``end`` defaults to the current length. Raises ``ValueError`` unless
    ``0 <= start <= end <= length``.
    """
    length = transcript.length
    stop = length if end is None else end
    if not 0 <= start <= stop <= length:
        raise ValueError(
            f"range [{start}, {stop}) is not within transcript {transcript.id!r} of length {length}"
        )
    return TranscriptRangeReader(transcript, start, stop, transcript.revision)


class TranscriptRangeReader:
    """Messages ``[start, end)`` of one transcript, fixed at ``revision``.

    Make one with ``fixed_range``. Indices are the transcript's own (absolute).
    """

    __slots__ = ("_end", "_revision", "_start", "_transcript")

    def __init__(self, transcript: Transcript, start: int, end: int, revision: int) -> None:
        # Trusted: fixed_range and slice have checked the bounds.
        self._transcript = transcript
        self._start = start
        self._end = end
        self._revision = revision

    @property
    def transcript_id(self) -> str:
        return self._transcript.id

    @property
    def start(self) -> int:
        return self._start

    @property
    def end(self) -> int:
        """One past the last index in the range."""
        return self._end

    @property
    def revision(self) -> int:
        """The transcript's revision when the range was fixed."""
        return self._revision

    def __len__(self) -> int:
        return self._end - self._start

    def locate(self) -> TranscriptRangeLocator:
        """Where this range lives: transcript id, ``[start, end)`` and revision."""
        return TranscriptRangeLocator(
            transcript_id=self._transcript.id,
            start=self._start,
            end=self._end,
            revision=self._revision,
        )

    def read(self, index: int) -> Message:
        """The message at transcript index ``index``.

        Raises ``IndexError`` unless ``start <= index < end``.
        """
        if not (
            isinstance(index, int)
            and not isinstance(index, bool)
            and self._start <= index < self._end
        ):
            raise IndexError(
                f"index {index!r:.40} is outside the range [{self._start}, {self._end}) "
                f"of transcript {self._transcript.id!r}"
            )
        return self._transcript.get(index)

    def messages(self) -> tuple[Message, ...]:
        """The range's messages in order (the transcript's own objects)."""
        return self._transcript.messages(self._start, self._end)

    def entries(self) -> tuple[tuple[int, Message], ...]:
        """``(index, message)`` pairs in ascending index order."""
        return tuple(enumerate(self.messages(), self._start))

    def slice(self, start: int, end: int) -> TranscriptRangeReader:
        """A reader of ``[start, end)`` within this range, at the same revision.

        Raises ``ValueError`` unless ``self.start <= start <= end <= self.end``:
        a slice can only narrow.
        """
        if not self._start <= start <= end <= self._end:
            raise ValueError(
                f"slice [{start}, {end}) is not within the range [{self._start}, {self._end}) "
                f"of transcript {self._transcript.id!r}; a slice can only narrow"
            )
        return TranscriptRangeReader(self._transcript, start, end, self._revision)

    def __repr__(self) -> str:
        return (
            f"<TranscriptRangeReader {self._transcript.id!r} [{self._start}, {self._end}) "
            f"revision={self._revision}>"
        )
