"""The message sizes kept between usage queries (``server.live.usage_sizes``)."""

from __future__ import annotations

import msgspec

from protocol.types import Message
from server.live.usage_sizes import MessageSizes


def _messages(count: int, start: int = 0) -> list[Message]:
    return [Message(role="user", content="x" * (i % 9)) for i in range(start, start + count)]


def test_sizes_extend_as_prefix_sums() -> None:
    sizes = MessageSizes()
    first, more = _messages(5), _messages(3, 5)
    sizes.extend("t", "e", 0, first)
    sizes.extend("t", "e", 5, more)
    sizes.extend("t", "e", 2, more)  # not a continuation: ignored
    sums = sizes.sums("t", "e")
    assert sums is not None and sizes.known("t", "e") == 8
    expected = [0]
    for m in first + more:
        expected.append(expected[-1] + len(msgspec.json.encode(m)))
    assert list(sums) == expected
    assert sizes.known("t", "other epoch") == 0
    sizes.extend("u", "e", 4, first)  # must start at 0
    assert sizes.sums("u", "e") is None


def test_the_least_recently_used_go_first_and_a_giant_is_not_kept() -> None:
    sizes = MessageSizes(capacity=10)
    sizes.extend("a", "e", 0, _messages(4))
    sizes.extend("b", "e", 0, _messages(4))
    assert sizes.sums("a", "e") is not None  # a used last
    sizes.extend("c", "e", 0, _messages(4))
    assert sizes.sums("b", "e") is None
    assert sizes.known("a", "e") == 4 and sizes.known("c", "e") == 4
    sizes.extend("d", "e", 0, _messages(11))
    assert sizes.sums("d", "e") is None
    assert sizes.known("a", "e") == 4 and sizes.known("c", "e") == 4  # not evicted for it
