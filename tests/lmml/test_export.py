"""Export: messages to ``.lmml``/``.lmmlz`` and back, exactly."""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.digest import messages_digest
from protocol.lmml import (
    ExportSource,
    LmmlError,
    export_lmml,
    export_lmmlz,
    import_messages,
    parse,
    render_turns,
    segment,
)
from protocol.lmml.export import _reimport, _write
from protocol.lmml.render import embed_part
from protocol.types import AttachmentPart, ImageUrl, ImageUrlPart, Message, TextPart
from tests.lmml.strategies import ASSETS, narratives, transcripts
from tests.strategies import messages as any_messages

PNG = b"\x89PNG\r\n\x1a\n\x00\x01"


def _via_lmml(messages: Sequence[Message]) -> tuple[Message, ...]:
    return import_messages(export_lmml(messages).encode(), filename="t.lmml").messages


def _via_lmmlz(messages: Sequence[Message], name: str = "transcript") -> tuple[Message, ...]:
    return import_messages(export_lmmlz(messages, name=name), filename=f"{name}.lmmlz").messages


def test_plain_chat_messages_are_readable_and_exact() -> None:
    transcript = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hello"),
        Message(role="assistant", content="Hi!\n"),
        Message(role="user", content="Bye"),
    ]
    # Strings without a final line break are the document's defaults (its
    # first line): the delimiters say nothing (issue 25).
    assert export_lmml(transcript) == (
        '<!-- lmml {"chomp":true,"string":true} -->\n'
        "<!-- system -->\n"
        "Be brief.\n"
        "<!-- user -->\n"
        "Hello\n"
        "<!-- assistant -->\n"
        "Hi!\n\n"
        "<!-- user -->\n"
        "Bye\n"
    )
    assert _via_lmml(transcript) == tuple(transcript)
    assert _via_lmmlz(transcript) == tuple(transcript)


def test_an_imported_narrative_exports_as_narrative() -> None:
    text = "Notes first.\n\n## user\nLook:\n@@@a.py\nprint(1)\n@@@\n\n## assistant\nIt prints 1.\n"
    imported = import_messages(text.encode()).messages
    exported = export_lmml(imported)
    assert exported == (
        "Notes first.\n\n"
        "<!-- user -->\nLook:\n@@@a.py\nprint(1)\n@@@\n\n"
        "<!-- assistant -->\nIt prints 1.\n"
    )
    assert _via_lmml(imported) == imported


def test_message_fields_travel_in_the_delimiter() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    transcript = [
        Message(role="assistant", content="", tool_calls=({**call},)),
        Message(role="tool", content="42", tool_call_id="call_1", name="f"),
        Message(role="user", content=(TextPart(text="ok\n"),), metadata={"k": [1, 2.5, None]}),
    ]
    exported = export_lmml(transcript)
    assert '<!-- tool {"name":"f","tool_call_id":"call_1"} -->\n42\n' in exported
    assert '<!-- user {"metadata":{"k":[1,2.5,null]},"string":false} -->\nok\n\n' in exported
    assert _via_lmml(transcript) == tuple(transcript)


def test_text_that_would_be_read_differently_goes_into_the_content_attribute() -> None:
    tricky = [
        Message(role="user", content="one\n## assistant\ntwo"),
        Message(role="assistant", content="```\nunclosed"),
        Message(role="user", content="@@@x.txt\nunclosed fence"),
        Message(role="user", content="mail -->@me"),
        Message(role="context", content="a context message in the middle"),
        Message(role="user", content="ends in CR\r"),
        Message(role="user", content=()),
        Message(role="user", content=(TextPart(text="a"), TextPart(text="b"))),
        Message(role="user", content=(ImageUrlPart(image_url=ImageUrl(url="https://x/y.png")),)),
        Message(role="user", content="last"),
    ]
    exported = export_lmml(tricky)
    assert "-->@me" not in exported  # "--" inside JSON is escaped
    assert _via_lmml(tricky) == tuple(tricky)
    assert _via_lmmlz(tricky) == tuple(tricky)


def test_referenced_assets_become_entries_of_an_lmmlz() -> None:
    transcript = (
        Message(
            role="user",
            content=(
                TextPart(text="See @pic.png and @data.bin.\n"),
                ImageUrlPart(
                    image_url=ImageUrl(
                        url="data:image/png;base64," + base64.b64encode(PNG).decode()
                    )
                ),
                AttachmentPart(
                    name="data.bin",
                    mime="application/octet-stream",
                    content=base64.b64encode(b"\xff\x00").decode(),
                ),
            ),
        ),
    )
    data = export_lmmlz(transcript, name="chat")
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.namelist() == ["chat.lmml", "pic.png", "data.bin"]
    assert archive.read("pic.png") == PNG
    assert archive.read("data.bin") == b"\xff\x00"
    assert archive.read("chat.lmml").decode() == "<!-- user -->\nSee @pic.png and @data.bin.\n"
    assert _via_lmmlz(transcript, "chat") == transcript
    assert import_messages(data).messages == transcript  # no filename: the only .lmml entry
    # A single .lmml has nowhere to put them: the message keeps its content as JSON.
    assert '"content":[' in export_lmml(transcript)
    assert _via_lmml(transcript) == transcript


def test_an_attachment_that_looks_like_base64_text_stays_text() -> None:
    for content in ("aGVsbG8=", "/w==", "/w==\n", ""):
        part = AttachmentPart(name="f.b64", mime="application/octet-stream", content=content)
        transcript = (Message(role="user", content=(TextPart(text="@f.b64\n"), part)),)
        assert _via_lmmlz(transcript) == transcript


def test_export_is_deterministic_and_a_fixpoint() -> None:
    transcript = import_messages(b"## user\n@@@a.txt\nx\n@@@\n## assistant\ny").messages
    assert export_lmml(transcript) == export_lmml(transcript)
    assert export_lmmlz(transcript) == export_lmmlz(transcript)
    assert export_lmml(_via_lmml(transcript)) == export_lmml(transcript)


def test_an_empty_transcript_exports_to_an_empty_narrative() -> None:
    assert export_lmml([]) == ""
    assert _via_lmml([]) == ()
    assert _via_lmmlz([]) == ()


def test_export_lmmlz_checks_its_name() -> None:
    try:
        export_lmmlz([], name="../x")
    except LmmlError as exc:
        assert "not a plain file name" in str(exc)
    else:
        raise AssertionError("a name with a path was accepted")


@settings(max_examples=80, deadline=None)
@given(st.lists(any_messages(), max_size=6))
def test_any_transcript_round_trips(transcript: list[Message]) -> None:
    assert _via_lmml(transcript) == tuple(transcript)
    assert _via_lmmlz(transcript) == tuple(transcript)


@settings(max_examples=100, deadline=None)
@given(narratives())
def test_imported_narratives_round_trip(text: str) -> None:
    transcript = tuple(render_turns(segment(parse(text)), ASSETS))
    assert _via_lmmlz(transcript) == transcript
    assert _via_lmml(transcript) == transcript
    # Everything an import produces is narrative again: no "content" objects.
    primary = zipfile.ZipFile(io.BytesIO(export_lmmlz(transcript))).read("transcript.lmml")
    assert b'"content"' not in primary
    # Exporting what an export imports to changes nothing: a fixpoint.
    assert export_lmmlz(_via_lmmlz(transcript)) == export_lmmlz(transcript)


def test_chat_json_of_a_round_trip_is_identical() -> None:
    transcript = [Message(role="user", content="Hello", metadata={"a": 1})]
    assert msgspec.json.encode(_via_lmml(transcript)) == msgspec.json.encode(transcript)


@settings(max_examples=150, deadline=None)
@given(transcripts())
def test_mixed_transcripts_round_trip(transcript: list[Message]) -> None:
    assert _via_lmml(transcript) == tuple(transcript)
    assert _via_lmmlz(transcript) == tuple(transcript)


@settings(max_examples=300, deadline=None)
@given(transcripts() | narratives().map(lambda t: render_turns(segment(parse(t)), ASSETS)))
def test_each_message_checked_alone_comes_back_the_same_in_the_document(
    transcript: list[Message],
) -> None:
    # So the exporter's first round always succeeds: one parse of each
    # message and one of the document, never a round per message.
    for with_assets in (False, True):
        text, assets, _ = _write(tuple(transcript), set(), with_assets=with_assets)
        assert _reimport(text, assets) == transcript


def test_fence_content_without_a_final_newline_still_round_trips() -> None:
    # A fence holds whole lines, so "x" cannot come from "@@@a.txt\nx\n@@@":
    # the message keeps its content in the delimiter, exactly.
    text = "@@@a.txt\nx\n@@@\n"
    part = AttachmentPart(name="a.txt", mime="text/plain", content="x")
    transcript = (Message(role="user", content=(TextPart(text=text), part)),)
    assert '"content":[' in export_lmml(transcript)
    assert _via_lmml(transcript) == transcript
    assert _via_lmmlz(transcript) == transcript
    # Referenced instead of fenced, it is a bundle entry holding exactly "x".
    referenced = (Message(role="user", content=(TextPart(text="see @a.txt\n"), part)),)
    data = export_lmmlz(referenced)
    assert zipfile.ZipFile(io.BytesIO(data)).read("a.txt") == b"x"
    assert b'"content"' not in zipfile.ZipFile(io.BytesIO(data)).read("transcript.lmml")
    assert _via_lmmlz(referenced) == referenced


def test_an_unclosed_fence_line_stays_narrative_unless_a_later_line_would_close_it() -> None:
    imported = import_messages(b"## user\n@@@a.txt\nnot a fence\n## assistant\nok\n").messages
    assert export_lmml(imported) == (
        "<!-- user -->\n@@@a.txt\nnot a fence\n<!-- assistant -->\nok\n"
    )
    assert _via_lmml(imported) == imported
    closing = (*imported, Message(role="user", content="@@@\n"))
    assert _write(closing, set(), with_assets=False)[2] == [1, 2]
    assert export_lmml(closing).startswith('<!-- user {"content":')
    assert _via_lmml(closing) == closing


def test_entries_in_subfolders_round_trip() -> None:
    png = embed_part("img/a.png", PNG)
    transcript = (Message(role="user", content=(TextPart(text="see @img/a.png.\n"), png)),)
    data = export_lmmlz(transcript, name="chat")
    assert zipfile.ZipFile(io.BytesIO(data)).namelist() == ["chat.lmml", "img/a.png"]
    assert _via_lmmlz(transcript, "chat") == transcript


def test_a_byte_order_mark_keeps_the_first_message_out_of_the_preamble() -> None:
    transcript = (Message(role="context", content=(TextPart(text="\ufeffnotes\n"),)),)
    assert export_lmml(transcript) == "<!-- context -->\n\ufeffnotes\n"
    assert _via_lmml(transcript) == transcript


def test_a_later_fence_may_not_override_an_earlier_entry() -> None:
    # The first fence of a name gives its bytes to every reference, so a
    # fence in a later message would change the entry an earlier one wrote.
    entry = AttachmentPart(name="a.txt", mime="text/plain", content="entry")
    transcript = (
        Message(role="user", content=(TextPart(text="@a.txt\n"), entry)),
        Message(role="assistant", content=(TextPart(text="@@@a.txt\nfenced\n@@@\n"),)),
    )
    _, assets, natural = _write(transcript, set(), with_assets=True)
    assert natural == [0] and assets == {"a.txt": b"entry"}
    assert _via_lmmlz(transcript) == transcript


def test_a_defaults_line_sets_what_the_delimiters_leave_out() -> None:
    """A document of strings starts with one line that makes them the
    default; without it (most messages lists of parts) nothing changes; an
    import of any other document is as before."""
    strings = [Message(role="user", content="a"), Message(role="assistant", content="b")]
    exported = export_lmml(strings)
    assert (
        exported
        == '<!-- lmml {"chomp":true,"string":true} -->\n<!-- user -->\na\n<!-- assistant -->\nb\n'
    )
    assert _via_lmml(strings) == tuple(strings)
    parts = [Message(role="user", content=(TextPart(text="a\n"),))] * 2
    assert export_lmml(parts) == "<!-- user -->\na\n<!-- user -->\na\n"
    # Written by hand: the line is no text, the defaults apply, a delimiter overrides them.
    text = '<!-- lmml {"string": true} -->\n## user\nhi\n<!-- assistant {"string":false} -->\nyo\n'
    assert import_messages(text.encode()).messages == (
        Message(role="user", content="hi\n"),
        Message(role="assistant", content=(TextPart(text="yo\n"),)),
    )
    for bad in ('{"content": "x"}', '{"string": 1}', "{nope}"):
        with pytest.raises(LmmlError, match="defaults line"):
            import_messages(f"<!-- lmml {bad} -->\n## user\nhi\n".encode())


# --- the source line (issue 29) ---------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(transcripts() | st.lists(any_messages(), max_size=4))
def test_an_export_names_its_source_and_still_round_trips(transcript: list[Message]) -> None:
    source = ExportSource("t:1", 7, "ab" * 16, messages_digest(transcript))
    text = export_lmml(transcript, source=source)
    assert text.startswith('<!-- lmml {"')
    for data, name in (
        (text.encode(), "t.lmml"),
        (export_lmmlz(transcript, source=source), "t.lmmlz"),
    ):
        result = import_messages(data, filename=name)
        assert result.messages == tuple(transcript)
        assert result.source == source
        assert messages_digest(result.messages) == source.messages_digest


@pytest.mark.parametrize(
    "line",
    [
        '<!-- lmml {"digest":"' + "ab" * 16 + '"} -->',  # not all four
        '<!-- lmml {"digest":"x","messagesDigest":"x","revision":1,"transcriptId":"t"} -->',
        '<!-- lmml {"digest":"'
        + "ab" * 16
        + '","messagesDigest":"'
        + "ab" * 16
        + '","revision":-1,"transcriptId":"t"} -->',
        '<!-- lmml {"digest":"'
        + "ab" * 16
        + '","messagesDigest":"'
        + "ab" * 16
        + '","revision":1,"transcriptId":"a b"} -->',
        '<!-- lmml {"other":1} -->',
    ],
)
def test_a_source_line_that_says_it_wrong_is_refused(line: str) -> None:
    with pytest.raises(LmmlError, match="defaults line"):
        import_messages(f"{line}\n<!-- user -->\nhi\n".encode(), filename="t.lmml")
