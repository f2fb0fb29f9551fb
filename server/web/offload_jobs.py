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
from protocol.limits import MessageLimits
from protocol.types import Message
from protocol.validation import parse_messages

_encode = msgspec.msgpack.Encoder().encode
_decode_messages = msgspec.msgpack.Decoder(tuple[Message, ...]).decode


def import_lmml(
    data: bytes, filename: str | None, max_embed_bytes: int | None, limits: MessageLimits
) -> tuple[bytes, tuple[str, ...]]:
    """Read a ``.lmml``/``.lmmlz`` (``lmml.import_messages``) and validate its
    messages as any batch is validated (``limits``); the messages as
    MessagePack and the warnings. Raises ``LmmlError``, ``InvalidMessage``."""
    result = lmml.import_messages(data, filename=filename, max_embed_bytes=max_embed_bytes)
    messages = parse_messages(
        msgspec.to_builtins(result.messages),
        max_messages=limits.max_messages_per_batch,
        max_message_bytes=limits.max_message_bytes,
        max_depth=limits.max_depth,
    )
    return _encode(messages), tuple(result.warnings)


def decode_messages(chunks: Sequence[bytes]) -> tuple[Message, ...]:
    """Messages encoded in chunks (``server.web.offload.encode_messages``)."""
    messages: list[Message] = []
    for chunk in chunks:
        messages.extend(_decode_messages(chunk))
    return tuple(messages)


def export_lmml(chunks: Sequence[bytes]) -> bytes:
    """``lmml.export_lmml`` of the encoded messages, as UTF-8."""
    return lmml.export_lmml(decode_messages(chunks)).encode()


def export_lmmlz(chunks: Sequence[bytes], name: str) -> bytes:
    """``lmml.export_lmmlz`` of the encoded messages."""
    return lmml.export_lmmlz(decode_messages(chunks), name=name)
