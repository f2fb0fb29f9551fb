"""Turns to messages, embeds to content parts, messages to chat-completions dicts.

An embed becomes one content part. Image extensions become an ``image_url``
part holding a ``data:<mime>;base64,...`` URI; every other embed becomes an
``attachment`` part whose ``content`` is the file's text when its bytes are
valid UTF-8, else the standard base64 of the bytes (RFC 4648, padded, no line
breaks). ``embed_bytes`` inverts both, so a part always goes back to bytes
that render to the very same part.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, cast

import msgspec

from protocol.chat import attachment_bytes, openai_messages
from protocol.lmml.errors import LmmlError
from protocol.lmml.narrative import Embed
from protocol.lmml.turns import Turn
from protocol.types import (
    AttachmentPart,
    ContentPart,
    ImageUrl,
    ImageUrlPart,
    Message,
    Role,
    TextPart,
)

__all__ = [
    "IMAGE_MIME_TYPES",
    "chat_messages",
    "embed_bytes",
    "embed_part",
    "is_image",
    "mime_type",
    "render_turn",
    "render_turns",
    "resolver",
]

#: Image extensions (lowercase) and the mime type of their data URI.
IMAGE_MIME_TYPES: Final[Mapping[str, str]] = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
    "svg": "image/svg+xml",
    "avif": "image/avif",
    "tif": "image/tiff",
    "tiff": "image/tiff",
    "ico": "image/vnd.microsoft.icon",
}
# A fixed table, not the ``mimetypes`` module: that one reads system files,
# so the same narrative would render differently on different machines.
_OTHER_MIME_TYPES: Final[Mapping[str, str]] = {
    "txt": "text/plain",
    "log": "text/plain",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "lmml": "text/markdown",
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "html": "text/html",
    "htm": "text/html",
    "css": "text/css",
    "js": "text/javascript",
    "mjs": "text/javascript",
    "py": "text/x-python",
    "c": "text/x-c",
    "h": "text/x-c",
    "java": "text/x-java",
    "rs": "text/x-rust",
    "go": "text/x-go",
    "sh": "application/x-sh",
    "json": "application/json",
    "xml": "application/xml",
    "yaml": "application/yaml",
    "yml": "application/yaml",
    "toml": "application/toml",
    "sql": "application/sql",
    "diff": "text/x-diff",
    "patch": "text/x-diff",
    "pdf": "application/pdf",
    "zip": "application/zip",
    "gz": "application/gzip",
    "tar": "application/x-tar",
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "mp4": "video/mp4",
}
_DEFAULT_MIME: Final = "application/octet-stream"
_DATA_URI_RE: Final = re.compile(r"data:([^;,]*);base64,([A-Za-z0-9+/]*={0,2})")


class _Attributes(msgspec.Struct, forbid_unknown_fields=True):
    """What a ``<!-- role {...} -->`` delimiter may say about its message."""

    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    metadata: dict[str, Any] | None = None
    content: str | tuple[ContentPart, ...] | None = None
    string: bool = False
    chomp: bool = False


def _extension(name: str) -> str:
    base = name.rpartition("/")[2]  # a folder's dots are not the file's extension
    return base.rpartition(".")[2].lower() if "." in base else ""


def is_image(name: str) -> bool:
    """Whether an embed of this name renders as an ``image_url`` part."""
    return _extension(name) in IMAGE_MIME_TYPES


def mime_type(name: str) -> str:
    """The mime type of an embed, by extension; ``application/octet-stream`` if unknown."""
    extension = _extension(name)
    return IMAGE_MIME_TYPES.get(extension) or _OTHER_MIME_TYPES.get(extension, _DEFAULT_MIME)


def embed_part(name: str, data: bytes) -> ContentPart:
    """The content part an embed of this name and these bytes renders to."""
    mime = mime_type(name)
    if is_image(name):
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        return ImageUrlPart(image_url=ImageUrl(url=url))
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        content = base64.b64encode(data).decode("ascii")
    return AttachmentPart(name=name, mime=mime, content=content)


def embed_bytes(part: ContentPart) -> bytes | None:
    """Bytes that render (under the part's name) back to ``part``, or ``None``.

    An attachment's content is base64 of binary data exactly when it is
    canonical base64 whose bytes are not UTF-8; any other content is text.
    An image needs a base64 data URI. Whether the name and mime agree is for
    the caller to check (compare ``embed_part(name, bytes)`` with the part).
    """
    if isinstance(part, AttachmentPart):
        data = attachment_bytes(part)
        return part.content.encode() if data is None else data
    if isinstance(part, ImageUrlPart):
        match = _DATA_URI_RE.fullmatch(part.image_url.url)
        if match is None:
            return None
        try:
            return base64.b64decode(match.group(2), validate=True)
        except binascii.Error:
            return None
    return None


def render_turn(
    turn: Turn,
    resolve: Callable[[Embed], bytes | None],
    *,
    max_embed_bytes: int | None = None,
    omitted: list[str] | None = None,
) -> Message:
    """One turn as a message; ``resolve`` gives an embed's bytes (``None``: missing).

    Raises ``LmmlError`` for an embed nothing supplies or for delimiter
    attributes that do not describe a valid message. Names of embeds left out
    for ``max_embed_bytes`` are appended to ``omitted``.
    """
    try:
        attributes = msgspec.convert(turn.attributes, _Attributes)
    except msgspec.ValidationError as exc:
        raise LmmlError(f"{turn.role} turn: bad delimiter attributes: {exc}") from None
    if attributes.content is not None:
        if turn.text.strip() or turn.embeds:
            raise LmmlError(
                f"{turn.role} turn: its delimiter gives the content, so the turn must be empty"
            )
        return _message(turn.role, attributes.content, attributes)
    text = turn.text
    if attributes.chomp and text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    parts: list[ContentPart] = [TextPart(text=text)]
    for embed in turn.embeds:
        data = resolve(embed)
        if data is None:
            raise LmmlError(f"@{embed.name} is referenced but no inline fence or entry supplies it")
        if max_embed_bytes is not None and len(data) > max_embed_bytes:
            if omitted is not None:
                omitted.append(embed.name)
            continue
        parts.append(embed_part(embed.name, data))
    if attributes.string:
        if len(parts) > 1:
            raise LmmlError(f"{turn.role} turn: a string content cannot hold embeds")
        return _message(turn.role, text, attributes)
    return _message(turn.role, tuple(parts), attributes)


def _message(role: str, content: str | tuple[ContentPart, ...], attributes: _Attributes) -> Message:
    return Message(
        role=cast(Role, role),
        content=content,
        name=attributes.name,
        tool_call_id=attributes.tool_call_id,
        tool_calls=attributes.tool_calls,
        metadata=attributes.metadata,
    )


def render_turns(
    turns: Iterable[Turn],
    assets: Mapping[str, bytes] | None = None,
    *,
    max_embed_bytes: int | None = None,
) -> list[Message]:
    """Each turn as one message ``{role, content}``.

    The content is the turn's text verbatim as a first ``text`` part, then one
    part per embed of the turn, in first-occurrence order (see the module
    docstring). An inline fence supplies an embed's bytes, else ``assets``
    (name -> bytes); an embed larger than ``max_embed_bytes`` is left out (one
    of exactly that size is kept). Raises ``LmmlError`` naming an embed that
    nothing supplies.
    """
    resolve = resolver(assets or {})
    return [render_turn(turn, resolve, max_embed_bytes=max_embed_bytes) for turn in turns]


def resolver(assets: Mapping[str, bytes]) -> Callable[[Embed], bytes | None]:
    """An embed's bytes: its first inline fence's content, else ``assets[name]``."""

    def resolve(embed: Embed) -> bytes | None:
        return embed.content if embed.content is not None else assets.get(embed.name)

    return resolve


def chat_messages(
    messages: Sequence[Message], *, context: Literal["omit", "system"] = "omit"
) -> list[dict[str, Any]]:
    """Chat-completions ``messages`` that the ``openai`` package's types accept
    (``protocol.chat.openai_messages``: what the API cannot carry is converted
    as docs/protocol.md says, never dropped without a placeholder).

    ``context`` messages (an imported narrative's preamble) are left out, or
    become ``system`` messages with ``context="system"``.
    """
    return openai_messages(messages, context=context)
