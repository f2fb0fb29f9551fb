"""Rights patterns (``protocol.rights.GlobSet``): the same answers as a
glob (``*`` any run, ``?`` one character, nothing else special), in time
linear in the id, whatever the patterns."""

from __future__ import annotations

import fnmatch
import time

from hypothesis import given
from hypothesis import strategies as st

from protocol.rights import GlobSet, Grant, pattern_regex

# A small alphabet so that stars and characters collide often.
texts = st.text(alphabet="ab.:", max_size=12)
patterns = st.text(alphabet="ab.:*?", max_size=8)


@given(st.lists(patterns, max_size=4), texts)
def test_globset_agrees_with_fnmatch(found: list[str], text: str) -> None:
    # fnmatchcase treats only `[` specially besides `*` and `?`; the alphabet has none.
    expected = any(fnmatch.fnmatchcase(text, p) for p in found)
    assert GlobSet(found).fullmatch(text) is expected


@given(st.lists(st.text(alphabet="a-*?[](){}.^$\\|+", max_size=6), max_size=3), texts)
def test_globset_agrees_with_the_regex_on_any_characters(found: list[str], text: str) -> None:
    regex = pattern_regex(found)
    expected = regex is not None and regex.fullmatch(text) is not None
    assert GlobSet(found).fullmatch(text) is expected


def test_edge_cases() -> None:
    assert not GlobSet([])
    assert not GlobSet([]).fullmatch("")
    assert GlobSet([""]).fullmatch("")
    assert not GlobSet([""]).fullmatch("a")
    assert GlobSet(["*"]).fullmatch("")
    assert GlobSet(["**"]).fullmatch("anything")
    assert GlobSet(["chat-*"]).fullmatch("chat-1")
    assert not GlobSet(["chat-*"]).fullmatch("chats")
    assert GlobSet(["team:?:notes"]).fullmatch("team:a:notes")
    assert not GlobSet(["team:?:notes"]).fullmatch("team:ab:notes")
    # The end of one pattern never continues into the next.
    assert not GlobSet(["a", "b"]).fullmatch("ab")
    assert GlobSet(["a", "b"]).fullmatch("b")


def test_a_backtracking_pattern_is_linear() -> None:
    """Issue 24 item 5: ``*a*a*a*a*ab`` against 128 ``a`` froze the server
    3.7 s per check with a regular expression (8 stars: hours)."""
    grant = Grant(read=["*a" * 8 + "b", "*a*a*a*a*ab"], write=["?" * 64 + "*a" * 30 + "b"])
    text = "a" * 128
    began = time.perf_counter()
    for _ in range(100):
        assert not grant.allows("read", text)
        assert not grant.allows("write", text)
    took = time.perf_counter() - began
    assert took < 1.0, f"200 checks took {took:.2f} s"
    assert grant.allows("read", text + "b")
