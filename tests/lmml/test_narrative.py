"""Unit tests of parsing, rendering and chat rendering."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.lmml import LmmlError, chat_messages, mime_type, parse, render_turns, segment
from protocol.lmml.narrative import heading_role
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
    assert fence.content == "ü".encode()
    preamble, user = segment(narrative)
    assert (preamble.start, preamble.end) == (0, len("é ✓\n".encode()))
    assert user.end == len(data)
    assert [e.name for e in user.embeds] == ["a.txt", "b.txt"]


def test_a_role_token_in_a_heading_inside_a_fence_is_not_a_delimiter() -> None:
    turns = segment(parse("## user\n@@@x.md\n## assistant\n@@@\n"))
    assert [t.role for t in turns] == ["user"]


def test_an_unclosed_embed_fence_names_its_line() -> None:
    with pytest.raises(LmmlError, match=r"line 3: embed fence @@@x\.txt is never closed"):
        parse("## user\nhi\n@@@x.txt\n## assistant\n")


def test_a_fence_name_never_keeps_a_carriage_return() -> None:
    narrative = parse("@@@a.txt\r\nx\r\n@@@\r\n@b.txt\r\n")
    assert [e.name for e in narrative.embeds] == ["a.txt", "b.txt"]
    assert narrative.fences[0].content == b"x"


def test_an_empty_narrative_has_no_turns() -> None:
    assert segment(parse("")) == ()


def test_mime_types_by_extension() -> None:
    assert mime_type("a.PNG") == "image/png"
    assert mime_type("a.jpeg") == "image/jpeg"
    assert mime_type("notes.md") == "text/markdown"
    assert mime_type("x.unknownext") == "application/octet-stream"
    assert mime_type("Makefile") == "application/octet-stream"


def test_render_keeps_an_embed_of_exactly_the_limit() -> None:
    turns = segment(parse("## user\n@@@a.txt\n123\n@@@\n@b.png\n"))
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
    user = {"role": "user", "content": ({"type": "text", "text": "hi"},), "name": "bob"}
    assert chat_messages(messages) == [user]
    assert chat_messages(messages, context="system") == [
        {"role": "system", "content": "notes"},
        user,
    ]
    with pytest.raises(ValueError, match="context must be"):
        chat_messages(messages, context="keep")  # type: ignore[arg-type]
