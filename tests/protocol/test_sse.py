"""protocol.sse: event-stream data read a piece at a time, however the
pieces fall."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from protocol.sse import SSEDecoder

STREAM = (
    "\ufeff: a comment\r\n"
    'data: {"type":"start"}\r\n\r\n'
    "event: ignored\n"
    'data:{"a":\n'
    "data: 1}\n\n"
    "id: 7\r"
    "data: é 日本\r\r"
    "data\n\n"
    "retry: 10\n\n"  # no data: not an event
    "data: [DONE]\n\n"
    "data: never ended"
)
EVENTS = ['{"type":"start"}', '{"a":\n1}', "é 日本", "", "[DONE]"]


def test_every_line_ending_and_field_as_the_standard_reads_them() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(STREAM.encode()) + decoder.close() == EVENTS


@given(st.lists(st.integers(0, len(STREAM.encode())), max_size=12))
def test_the_same_events_however_the_bytes_are_cut(cuts: list[int]) -> None:
    raw = STREAM.encode()
    bounds = [0, *sorted(cuts), len(raw)]
    decoder = SSEDecoder()
    events: list[str] = []
    for a, b in itertools.pairwise(bounds):
        events += decoder.feed(raw[a:b])
    assert events + decoder.close() == EVENTS
