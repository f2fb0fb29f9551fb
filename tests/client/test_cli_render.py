"""``client_py.cli.render`` alone: how the client commands print a message,
a table and sizes, with no server (``test_cli.py`` runs the commands)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_py.cli.render import byte_count, message_line, table
from protocol.types import AttachmentPart, ImageUrl, ImageUrlPart, Message, TextPart


def test_a_message_of_several_lines_goes_on_under_its_role() -> None:
    line = message_line("t", 12, Message("user", "one\r\ntwo\rthree"), as_json=False)
    assert line == "[12] user: one\n     two\n     three"


def test_control_characters_are_escaped_but_tabs_kept() -> None:
    line = message_line("t", 0, Message("assistant", "a\x1b[31mred\x07\tb"), as_json=False)
    assert line == "[0] assistant: a\\x1b[31mred\\x07\tb"


@given(st.text())
def test_no_text_moves_the_cursor_but_by_a_line_break(text: str) -> None:
    line = message_line("t", 0, Message("user", text), as_json=False)
    assert not any((ord(c) < 0x20 and c not in "\n\t") or c == "\x7f" for c in line)


def test_parts_show_in_brackets_where_they_stand() -> None:
    message = Message(
        "user",
        [
            TextPart("see"),
            ImageUrlPart(ImageUrl("data:image/png;base64,AAAA")),
            TextPart("and"),
            AttachmentPart("notes.txt", "text/plain", "hello"),
        ],
    )
    assert message_line("t", 3, message, as_json=False) == (
        "[3] user: see [image: image/png, 3 bytes] and [attachment: notes.txt, text/plain, 5 bytes]"
    )


def test_json_lines_are_one_object_each() -> None:
    line = message_line("t", 1, Message("user", "a\nb"), as_json=True)
    assert "\n" not in line
    assert json.loads(line) == {
        "transcriptId": "t",
        "index": 1,
        "message": {"role": "user", "content": "a\nb"},
    }


def test_sizes_say_byte_or_bytes() -> None:
    assert [byte_count(n) for n in (0, 1, 1234567)] == ["0 bytes", "1 byte", "1,234,567 bytes"]


def test_tables_align_numbers_right_and_the_rest_left(capsys: pytest.CaptureFixture[str]) -> None:
    table(("ID", "N"), [("a", "5"), ("longer", "123")])
    assert capsys.readouterr().out.splitlines() == ["ID        N", "a         5", "longer  123"]
