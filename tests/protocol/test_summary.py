"""``protocol.summary``: the list's title and preview are plain text, as a
reader sees the message (no Markdown marks, no imported file's fence)."""

from __future__ import annotations

import time

import pytest

from protocol.summary import PREVIEW_CHARS, plain_text, preview_of, title_of
from protocol.types import AttachmentPart, Message, TextPart


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("```python\nxs = [1, 2]\n```", "xs = [1, 2]"),
        ("# Hello **world**", "Hello world"),
        ("- [x] do *this* and `that`", "do this and that"),
        ("1. first\n2. second", "first second"),
        ("see [the docs](http://x) and ![a cat](c.png)", "see the docs and a cat"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "a b 1 2"),
        ("> quoted _em_ text\n\n---\nafter", "quoted em text after"),
        ("snake_case_name and 3 * 4 * 5 stay", "snake_case_name and 3 * 4 * 5 stay"),
        ("a <b>bold</b> <https://x.example/y> \\*not em\\*", "a bold https://x.example/y *not em*"),
    ],
)
def test_the_preview_is_the_text_a_reader_sees(markdown: str, shown: str) -> None:
    assert preview_of([Message(role="assistant", content=markdown)]) == shown
    assert title_of([Message(role="user", content=markdown)]) == shown


def test_an_imported_file_shows_as_the_file_not_its_fence() -> None:
    imported = Message(
        role="user",
        content=(
            TextPart(text="here are my notes\n@@@notes.txt\nbuy milk\n@@@\nthanks\n"),
            AttachmentPart(name="notes.txt", mime="text/plain", content="buy milk\n"),
        ),
    )
    assert title_of([imported]) == "here are my notes thanks"
    assert preview_of([imported]) == "here are my notes thanks"
    # A fence someone typed into a plain message is their text.
    typed = Message(role="user", content="@@@notes.txt\nbuy milk\n@@@")
    assert title_of([typed]) == "@@@notes.txt buy milk @@@"


def test_a_large_message_is_summarised_in_a_bounded_time() -> None:
    worst = "** [ ![ `" * 200_000 + "\n" + "@@@a\n" * 50_000
    began = time.monotonic()
    assert len(preview_of([Message(role="user", content=worst)]) or "") <= PREVIEW_CHARS
    assert len(plain_text(worst, 80)) < 2000
    assert time.monotonic() - began < 5  # linear: well under a second when idle
