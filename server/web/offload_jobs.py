"""The work the worker processes do (``server.web.offload``): pure functions,
bytes in and bytes out.

A worker process imports this module, so it imports only ``protocol`` and
msgspec: a worker starts in a fraction of a second and holds no server
state. Results go back as MessagePack bytes (one copy through the pipe, one
C-speed decode on the loop), never as pickled structs.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from protocol import lmml
from protocol.digest import messages_digest
from protocol.limits import MessageLimits
from protocol.types import Message
from protocol.validation import parse_messages

_encode = msgspec.msgpack.Encoder().encode
_decode_messages = msgspec.msgpack.Decoder(tuple[Message, ...]).decode


def import_lmml(
    data: bytes, filename: str | None, max_embed_bytes: int | None, limits: MessageLimits
) -> tuple[bytes, tuple[str, ...], dict[str, object] | None]:
    """Read a ``.lmml``/``.lmmlz`` (``lmml.import_messages``) and validate its
    messages as any batch is validated (``limits``); the messages as
    MessagePack, the warnings, and the source an export names in its first
    line (``ExportSource.as_json``), whose messages digest the messages were
    checked against (``None`` also when embeds were left out: then a warning
    says they were not checked). Raises
    ``LmmlError`` (also for messages that are not the ones exported),
    ``InvalidMessage``."""
    result = lmml.import_messages(data, filename=filename, max_embed_bytes=max_embed_bytes)
    messages = parse_messages(
        msgspec.to_builtins(result.messages),
        max_messages=limits.max_messages_per_batch,
        max_message_bytes=limits.max_message_bytes,
        max_depth=limits.max_depth,
    )
    warnings = result.warnings
    source = result.source
    if source is not None and result.omitted:
        warnings += (
            f"embeds were left out, so the messages were not checked against the digest "
            f"of those exported from {source.transcript_id!r} at revision {source.revision}",
        )
        source = None
    elif source is not None:
        found = messages_digest(messages)
        if found != source.messages_digest:
            raise lmml.LmmlError(
                f"the messages are not those exported from {source.transcript_id!r} at "
                f"revision {source.revision}: their digest is {found}, the file says "
                f"{source.messages_digest}"
            )
    return _encode(messages), warnings, None if source is None else source.as_json()


def decode_messages(chunks: Sequence[bytes]) -> tuple[Message, ...]:
    """Messages encoded in chunks (``server.web.offload.encode_messages``)."""
    messages: list[Message] = []
    for chunk in chunks:
        messages.extend(_decode_messages(chunk))
    return tuple(messages)


def export_lmml(chunks: Sequence[bytes], origin: ExportOrigin | None = None) -> bytes:
    """``lmml.export_lmml`` of the encoded messages, as UTF-8; the first line
    names ``origin`` with the messages' digest (``lmml.ExportSource``)."""
    messages = decode_messages(chunks)
    return lmml.export_lmml(messages, source=_source(origin, messages)).encode()


def export_lmmlz(chunks: Sequence[bytes], name: str, origin: ExportOrigin | None = None) -> bytes:
    """``lmml.export_lmmlz`` of the encoded messages (``origin`` as above)."""
    messages = decode_messages(chunks)
    return lmml.export_lmmlz(messages, name=name, source=_source(origin, messages))


#: The transcript an export is of: its id, revision and digest at that revision.
ExportOrigin = tuple[str, int, str]


def _source(origin: ExportOrigin | None, messages: tuple[Message, ...]) -> lmml.ExportSource | None:
    if origin is None:
        return None
    transcript_id, revision, digest = origin
    return lmml.ExportSource(transcript_id, revision, digest, messages_digest(messages))
