"""Unit tests of parsing, rendering and chat rendering."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.lmml import (
    LmmlError,
    Turn,
    chat_messages,
    import_messages,
    mime_type,
    parse,
    render_turns,
    segment,
)
from protocol.lmml.narrative import UnclosedFence, heading_role
from protocol.lmml.render import embed_bytes, embed_part
from protocol.types import AttachmentPart, ImageUrlPart, Message, TextPart


@pytest.mark.parametrize(
    ("heading", "role"),
    [
        ("Turn 1 -- user", "user"),
        ("assistant", "assistant"),
        ("SYSTEM prompt", "system"),
        ("user's question", "user"),
        ("tool_output", "tool"),
        ("userland", None),
        ("Users", None),
        ("context", None),
        ("2user", "user"),
        ("", None),
    ],
)
def test_heading_role_is_the_first_whole_word_role_token(heading: str, role: str | None) -> None:
    assert heading_role(heading) == role


def test_offsets_are_utf8_byte_offsets() -> None:
    text = "é ✓\n## user\nsee @a.txt\n@@@b.txt\nü\n@@@\n"
    narrative = parse(text)
    data = text.encode()
    (delimiter,) = narrative.delimiters
    assert data[delimiter.start : delimiter.end] == b"## user\n"
    (reference,) = narrative.references
    assert data[reference.offset : reference.offset + 6] == b"@a.txt"
    (fence,) = narrative.fences
    assert data[fence.offset : fence.end] == "@@@b.txt\nü\n@@@\n".encode()
    assert fence.content == "ü\n".encode()
    preamble, user = segment(narrative)
    assert (preamble.start, preamble.end) == (0, len("é ✓\n".encode()))
    assert user.end == len(data)
    assert [e.name for e in user.embeds] == ["a.txt", "b.txt"]


def test_a_role_token_in_a_heading_inside_a_fence_is_not_a_delimiter() -> None:
    turns = segment(parse("## user\n@@@x.md\n## assistant\n@@@\n"))
    assert [t.role for t in turns] == ["user"]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("@@@a.txt\nx\n@@@\n", b"x\n"),
        ("@@@a.txt\nx\n@@@", b"x\n"),
        ("@@@a.txt\n@@@\n", b""),
        ("@@@a.txt\n\n@@@\n", b"\n"),
        ("@@@a.txt\nx\ny\n\n@@@\n", b"x\ny\n\n"),
        ("@@@a.txt\r\nx\r\n@@@\r\n", b"x\r\n"),
        ("@@@a.txt \t\nx\n@@@\t\n", b"x\n"),
    ],
)
def test_fence_content_is_every_line_between_with_its_line_ending(
    text: str, content: bytes
) -> None:
    (fence,) = parse(text).fences
    assert (fence.name, fence.content) == ("a.txt", content)


def test_an_unclosed_embed_fence_is_plain_text_with_a_warning() -> None:
    text = "## user\nhi\n@@@x.txt\n## assistant\nok\n"
    narrative = parse(text)
    assert [d.role for d in narrative.delimiters] == ["user", "assistant"]
    assert narrative.fences == () and narrative.embeds == ()
    assert narrative.unclosed_fences == (UnclosedFence("x.txt", 3, len("## user\nhi\n")),)
    assert narrative.warnings == (
        "line 3: @@@x.txt is never closed by a line @@@, so it is plain text",
    )
    result = import_messages(text.encode())
    assert [m.content for m in result.messages] == [
        (TextPart(text="hi\n@@@x.txt\n"),),
        (TextPart(text="ok\n"),),
    ]
    assert result.warnings == narrative.warnings


def test_a_closing_line_before_an_opening_line_does_not_close_it() -> None:
    narrative = parse("@@@\n@@@a.txt\nx\n")
    assert narrative.fences == ()
    assert [u.name for u in narrative.unclosed_fences] == ["a.txt"]


def test_an_unclosed_fence_line_stays_in_its_paragraph() -> None:
    # Plain text: a code span runs across it, and it names nothing itself.
    narrative = parse("`x\n@@@a.txt\n@b.txt` @c.txt\n")
    assert [r.name for r in narrative.references] == ["c.txt"]
    # Only the first of several opening lines after the last "@@@" line is
    # unclosed; the one before that line is a fence holding the others.
    narrative = parse("@@@a.txt\n@@@b.txt\n@@@\n@@@c.txt\n@@@d.txt\n")
    assert [(f.name, f.content) for f in narrative.fences] == [("a.txt", b"@@@b.txt\n")]
    assert [(u.name, u.line) for u in narrative.unclosed_fences] == [("c.txt", 4), ("d.txt", 5)]


def test_a_fence_name_never_keeps_a_carriage_return() -> None:
    narrative = parse("@@@a.txt\r\nx\r\n@@@\r\n@b.txt\r\n")
    assert [e.name for e in narrative.embeds] == ["a.txt", "b.txt"]
    assert narrative.fences[0].content == b"x\r\n"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("@img/a.png", ["img/a.png"]),
        ("@a/b/c.txt, and", ["a/b/c.txt"]),
        ("@img/a.png.", ["img/a.png"]),
        ("@a/.hidden/x", ["a/.hidden/x"]),
        ("@a/../b.txt", ["a"]),
        ("@a/./b.txt", ["a"]),
        ("@a/.../b.txt", ["a"]),
        ("@a//b.txt", ["a"]),
        ("@a/b/", ["a/b"]),
        ("@/etc/passwd", []),
        ("@a\\b.txt", ["a"]),
        ("x@a/b.txt", []),
    ],
)
def test_a_reference_may_name_an_entry_in_a_subfolder(text: str, names: list[str]) -> None:
    assert [r.name for r in parse(text).references] == names


def test_a_fence_may_name_an_entry_in_a_subfolder() -> None:
    assert [f.name for f in parse("@@@src/a.py\nx\n@@@\n").fences] == ["src/a.py"]
    assert parse("@@@src/../a.py\nx\n@@@\n").fences == ()


def test_a_narrative_without_delimiters_is_one_context_turn_even_when_empty() -> None:
    assert segment(parse("")) == (Turn(role="context", text="", start=0, end=0),)
    (turn,) = segment(parse("just prose\n"))
    assert (turn.role, turn.text, turn.delimiter) == ("context", "just prose\n", "")
    # An empty preamble before a delimiter is no turn, and an empty file no message.
    assert [t.role for t in segment(parse("## user\nhi\n"))] == ["user"]
    assert import_messages(b"").messages == ()


@pytest.mark.parametrize(
    "line",
    [
        "<!-- user -->",
        "<!--user-->",
        "   <!--\tUser\t-->\t ",
        '<!-- tool {"name": "n"} -->',
        '<!-- tool{"a": "-->"}-->',
    ],
)
def test_comment_delimiters(line: str) -> None:
    assert len(parse(line + "\n").delimiters) == 1


@pytest.mark.parametrize(
    "line",
    [
        "<!-- user --> -->",
        "<!-- user x -->",
        "<!-- user2 -->",
        "<!-->",
        "<!---->",
        "<!-- {} -->",
        "<!-- user { -->",
        "<!-- user [1] -->",
        '<!-- user {"a": 1} x -->',
        "    <!-- user -->",
        "<!-- users -->",
        "<!-- user -->x",
    ],
)
def test_lines_that_are_not_comment_delimiters(line: str) -> None:
    assert parse(line + "\n").delimiters == ()


def test_mime_types_by_extension() -> None:
    assert mime_type("a.PNG") == "image/png"
    assert mime_type("a.jpeg") == "image/jpeg"
    assert mime_type("notes.md") == "text/markdown"
    assert mime_type("x.unknownext") == "application/octet-stream"
    assert mime_type("Makefile") == "application/octet-stream"
    assert mime_type("fix.diff") == mime_type("fix.PATCH") == "text/x-diff"
    assert mime_type("img/a.png") == "image/png"
    assert mime_type("v1.2/README") == "application/octet-stream"


def test_render_keeps_an_embed_of_exactly_the_limit() -> None:
    turns = segment(parse("## user\n@@@a.txt\n12\n@@@\n@b.png\n"))
    messages = render_turns(turns, {"b.png": b"1234"}, max_embed_bytes=3)
    assert [type(p) for p in messages[0].content] == [TextPart, AttachmentPart]
    messages = render_turns(turns, {"b.png": b"1234"}, max_embed_bytes=4)
    assert [type(p) for p in messages[0].content] == [TextPart, AttachmentPart, ImageUrlPart]


def test_render_names_a_missing_embed() -> None:
    with pytest.raises(LmmlError, match=r"@gone\.txt is referenced"):
        render_turns(segment(parse("## user\n@gone.txt\n")))


def test_string_content_cannot_hold_embeds() -> None:
    turns = segment(parse('<!-- user {"string": true} -->\n@@@a.txt\nx\n@@@\n'))
    with pytest.raises(LmmlError, match="string content cannot hold embeds"):
        render_turns(turns)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["f.txt", "f.bin", "f.png", "noext"]), st.binary(max_size=40))
def test_embed_bytes_inverts_embed_part(name: str, data: bytes) -> None:
    part = embed_part(name, data)
    back = embed_bytes(part)
    assert back is not None
    assert embed_part(name, back) == part


def test_attachment_content_is_text_for_utf8_and_base64_otherwise() -> None:
    assert embed_part("a.txt", "é".encode()) == AttachmentPart(
        name="a.txt", mime="text/plain", content="é"
    )
    assert embed_part("a.bin", b"\xff") == AttachmentPart(
        name="a.bin", mime="application/octet-stream", content=base64.b64encode(b"\xff").decode()
    )


def test_chat_messages_leave_context_out_or_make_it_system() -> None:
    messages = [
        Message(role="context", content="notes"),
        Message(role="user", content=(TextPart(text="hi"),), name="bob"),
    ]
    user = {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "bob"}
    assert chat_messages(messages) == [user]
    assert chat_messages(messages, context="system") == [
        {"role": "system", "content": "notes"},
        user,
    ]
    with pytest.raises(ValueError, match="context must be"):
        chat_messages(messages, context="keep")  # type: ignore[arg-type]
