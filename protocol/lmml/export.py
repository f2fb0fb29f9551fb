"""Transcript messages to ``.lmml`` text or a ``.lmmlz`` bundle, losslessly.

Each message is written as a turn: a delimiter line ``<!-- role -->`` and the
message's text. When the message carries what plain narrative cannot say, the
delimiter holds it as a JSON object, ``<!-- role {...} -->``:

- ``name``, ``tool_call_id``, ``tool_calls``, ``metadata``: the message's fields;
- ``"string": true``: the content is a plain string, not a list of parts;
- ``"chomp": true``: the text has no final line break (one was added so the
  next delimiter starts a line, and import takes it off again);
- ``"content": ...``: the whole content, for a message whose text and parts
  do not survive as narrative (a text holding a line that is a delimiter or
  ``@@@``, parts that are not its text's embeds, a remote image URL, ...);
  the turn's text is then empty.

A first ``context`` message with nothing to add is written as the preamble.

Each message's piece of the document is checked on its own, by importing it:
nothing in one piece reaches into the next (a delimiter line ends every
paragraph; a piece with an open code block is only written as narrative when
it is the last, one with an unclosed ``@@@name`` line when no later text has a
``@@@`` line), so a piece that comes back equal alone comes back equal in the
document. The only thing pieces share is embeds, which belong to the piece
that names them first, and whose bytes come from the first fence of their
name. The document is then imported once more as a whole, as a check, and
any message that would not come back equal falls back to ``"content"``, so
``import(export(t)) == t`` holds for every transcript ``t``. All of it takes
time linear in the size of the transcript: each piece is parsed once alone
and once in the document (the check succeeds the first time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

import msgspec

from protocol.lmml.bundle import (
    ExportSource,
    decode_narrative,
    defaults_line,
    imported_turns,
    write_bundle,
)
from protocol.lmml.errors import LmmlError
from protocol.lmml.narrative import has_closing_line, parse
from protocol.lmml.render import embed_bytes, render_turn, resolver
from protocol.lmml.turns import segment
from protocol.types import ContentPart, Message, TextPart

__all__ = ["export_lmml", "export_lmmlz"]

_encode_json: Final = msgspec.json.Encoder().encode
_BOM: Final = "\ufeff"


def export_lmml(messages: Sequence[Message], *, source: ExportSource | None = None) -> str:
    """The messages as one ``.lmml`` narrative; embeds stay inline fences.

    An embed that a message's text only references (``@name``) has no place
    in a single file, so such a message is written with its ``"content"``.
    ``source`` (the transcript, its revision and digests) goes into the
    first line, where an import finds it (``ExportSource``).
    """
    text, _ = _export(tuple(messages), bundle_name=None, source=source)
    return text


def export_lmmlz(
    messages: Sequence[Message], *, name: str = "transcript", source: ExportSource | None = None
) -> bytes:
    """The messages as a ``.lmmlz``: ``name.lmml`` plus referenced embeds as entries."""
    text, assets = _export(tuple(messages), bundle_name=name, source=source)
    return write_bundle(text, assets, name=name)


def _export(
    messages: tuple[Message, ...], *, bundle_name: str | None, source: ExportSource | None
) -> tuple[str, dict[str, bytes]]:
    forced: set[int] = set()
    # Each round either returns or moves at least one more message to the
    # "content" form, which always comes back exactly: at most n + 1 rounds.
    while True:
        text, assets, natural = _write(
            messages, forced, with_assets=bundle_name is not None, source=source
        )
        got = _reimport(text, assets)
        if got is not None and got == list(messages):
            return text, assets
        if got is None:
            wrong = set(natural)
        else:
            wrong = {i for i, m in enumerate(messages) if i >= len(got) or got[i] != m}
            if len(got) != len(messages):
                # Turns shifted: only the first difference is surely at fault.
                wrong = {min(wrong)} if wrong else {natural[-1]} if natural else set()
            wrong &= set(natural)
        if not wrong:
            raise LmmlError("the transcript cannot be written as LMML")  # a bug, not bad input
        forced |= wrong


def _write(
    messages: tuple[Message, ...],
    forced: set[int],
    *,
    with_assets: bool,
    source: ExportSource | None = None,
) -> tuple[str, dict[str, bytes], list[int]]:
    """The document, its assets and which messages went in as narrative."""
    defaults = _defaults(messages)
    chunks: list[str] = [defaults_line(defaults, source)]
    assets: dict[str, bytes] = {}
    # Embed names an earlier message owns: their bytes while only a bundle
    # entry holds them, ``None`` once a fence of that name is written.
    claimed: dict[str, bytes | None] = {}
    natural: list[int] = []
    last = len(messages) - 1
    # Whether a later message's text has a "@@@" line, which would close an
    # "@@@name" line left open in an earlier one.
    closes_later = [False] * len(messages)
    for i in range(last, 0, -1):
        closes_later[i - 1] = closes_later[i] or has_closing_line(_text(messages[i]))
    for i, message in enumerate(messages):
        chunk = None
        if i not in forced:
            chunk = _narrative(
                message, i == 0, i == last, closes_later[i], claimed, assets, with_assets, defaults
            )
        if chunk is None:
            attributes = _fields(message)
            attributes["content"] = msgspec.to_builtins(message.content)
            chunk = _delimiter(message.role, attributes)
        else:
            natural.append(i)
        chunks.append(chunk)
    return "".join(chunks), assets, natural


def _narrative(
    message: Message,
    first: bool,
    last: bool,
    closes_later: bool,
    claimed: dict[str, bytes | None],
    assets: dict[str, bytes],
    with_assets: bool,
    defaults: dict[str, bool],
) -> str | None:
    """The message as delimiter and narrative text, or ``None`` if it cannot be.

    The result imports back to exactly ``message``, alone and after the
    pieces written before it (whose embeds are in ``claimed``); ``claimed``
    and ``assets`` are updated only when a piece is returned.
    """
    content = message.content
    parts: tuple[ContentPart, ...]
    if isinstance(content, str):
        text, parts, string = content, (), True
    elif (
        content
        and isinstance(content[0], TextPart)
        and not any(isinstance(p, TextPart) for p in content[1:])
    ):
        text, parts, string = content[0].text, content[1:], False
    else:
        return None
    if defaults.get("chomp"):
        # Every text gets a line break that import takes off again.
        chomp, written = bool(text), text + "\n" if text else text
    else:
        chomp = bool(text) and not last and not text.endswith("\n")
        written = text + "\n" if chomp else text
    attributes = _fields(message)
    # Only what differs from the document's defaults (its first line).
    if string != defaults.get("string", False):
        attributes["string"] = string
    if chomp and not defaults.get("chomp"):
        attributes["chomp"] = True
    # A byte order mark would be taken off the start of the file on import;
    # after a defaults line the preamble is the context turn's own.
    if (
        first
        and message.role == "context"
        and not attributes
        and not defaults
        and text
        and text[0] != _BOM
    ):
        chunk = written
    else:
        chunk = _delimiter(message.role, attributes) + written
    try:
        narrative = parse(chunk)
    except LmmlError:
        return None
    if (narrative.open_code_block and not last) or (narrative.unclosed_fences and closes_later):
        return None  # it would run into the next message
    turns = segment(narrative)
    if len(turns) != 1:
        return None  # a line of the text is a delimiter
    turns = (replace(turns[0], attributes={**defaults, **turns[0].attributes}),)
    for embed in turns[0].embeds:
        entry = claimed.get(embed.name)
        if entry is not None and embed.content is not None and embed.content != entry:
            return None  # the first fence would override an earlier message's entry
    own = [e for e in turns[0].embeds if e.name not in claimed]
    if len(own) != len(parts):
        return None
    contents: dict[str, bytes] = {}
    entries: dict[str, bytes] = {}
    for embed, part in zip(own, parts, strict=True):
        data = embed.content
        if data is None:
            # No second .lmml entry: the bundle must import without a filename too.
            if not with_assets or embed.name.lower().endswith(".lmml"):
                return None
            data = embed_bytes(part)
            if data is None:
                return None
            entries[embed.name] = data
        contents[embed.name] = data
    try:
        back = render_turn(replace(turns[0], embeds=tuple(own)), resolver(contents))
    except LmmlError:
        return None
    if back != message:
        return None
    for embed in turns[0].embeds:
        if embed.content is not None and embed.name in claimed:
            claimed[embed.name] = None  # the first fence is written: later ones never count
    claimed.update((e.name, entries.get(e.name)) for e in own)
    assets.update(entries)
    return chunk


def _defaults(messages: tuple[Message, ...]) -> dict[str, bool]:
    """What the document's delimiters default to: a plain string without a
    final line break (what ``tsync append`` writes) when most messages are
    strings, so that their delimiters say nothing; else nothing."""
    strings = sum(isinstance(m.content, str) for m in messages)
    return {"string": True, "chomp": True} if strings * 2 > len(messages) else {}


def _text(message: Message) -> str:
    """The text a message is written with if it is written as narrative."""
    content = message.content
    if isinstance(content, str):
        return content
    return content[0].text if content and isinstance(content[0], TextPart) else ""


def _fields(message: Message) -> dict[str, Any]:
    fields = {
        "name": message.name,
        "tool_call_id": message.tool_call_id,
        "tool_calls": message.tool_calls,
        "metadata": message.metadata,
    }
    return {key: msgspec.to_builtins(value) for key, value in fields.items() if value is not None}


def _delimiter(role: str, attributes: dict[str, Any]) -> str:
    if not attributes:
        return f"<!-- {role} -->\n"
    # "--" only occurs inside JSON strings; escaping it keeps "-->" from
    # ending the comment early for Markdown readers.
    data = _encode_json(attributes).decode().replace("--", "\\u002d\\u002d")
    return f"<!-- {role} {data} -->\n"


def _reimport(text: str, assets: dict[str, bytes]) -> list[Message | None] | None:
    """What importing the document gives, turn by turn (``None``: a turn fails)."""
    try:
        turns = imported_turns(parse(decode_narrative(text.encode())))
    except LmmlError:
        return None
    resolve = resolver(assets)
    result: list[Message | None] = []
    for turn in turns:
        try:
            result.append(render_turn(turn, resolve))
        except LmmlError:
            result.append(None)
    return result
