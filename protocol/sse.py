"""Server-sent events read incrementally: the ``data`` of each event, as the
WHATWG HTML standard's event-stream parser gives it.

What an AI SDK UI message stream is on the wire (``toUIMessageStreamResponse``:
``data: {chunk JSON}`` events, ``data: [DONE]`` at the end), read as it
arrives, a piece at a time: lines end with CR LF, LF or CR (a CR at the end
of a piece may be the first half of CR LF); a line starting with ``:`` is a
comment; ``data`` lines of one event are joined with LF; a blank line ends
the event (one without data is not dispatched); other fields (``event``,
``id``, ``retry``) are read and ignored. Text is UTF-8 (a leading BOM is
dropped); bytes are decoded incrementally, so a character split between two
pieces is whole.

Pure: no I/O.
"""

from __future__ import annotations

import codecs
from typing import Final

__all__ = ["SSEDecoder", "SSETooLong"]

#: The longest line read (a chunk is one line): past it, ``SSETooLong``.
MAX_LINE: Final = 16 << 20


class SSETooLong(ValueError):
    """A line longer than the decoder takes."""


class SSEDecoder:
    """Feed it pieces of an event stream; it returns each event's data."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._line = ""
        self._data: list[str] = []
        self._has_data = False
        self._after_cr = False
        self._started = False
        self.max_line = max_line

    def feed(self, piece: bytes) -> list[str]:
        """The data of the events that ``piece`` completed."""
        return self._lines(self._text.decode(piece))

    def close(self) -> list[str]:
        """The end of the stream: an event not ended by a blank line is
        dropped, as the standard says."""
        self._lines(self._text.decode(b"", final=True))
        return []

    def _lines(self, text: str) -> list[str]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        events: list[str] = []
        start = 0
        for i, char in enumerate(text):
            if char == "\n" and self._after_cr:
                self._after_cr = False
                start = i + 1
                continue
            self._after_cr = False
            if char in "\r\n":
                self._line += text[start:i]
                self._take(self._line, events)
                self._line = ""
                self._after_cr = char == "\r"
                start = i + 1
        self._line += text[start:]
        if len(self._line) > self.max_line:
            raise SSETooLong(f"an event-stream line longer than {self.max_line} characters")
        return events

    def _take(self, line: str, events: list[str]) -> None:
        if not line:
            if self._has_data:
                events.append("\n".join(self._data))
            self._data = []
            self._has_data = False
            return
        if line.startswith(":"):
            return
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
            self._has_data = True
