"""The rolling digest of a transcript's history: one per revision.

A revision number says "nothing is missing"; a digest says "nothing is
different". Every revision ``R`` of a transcript has a digest::

    digest(0) = H(JCS(transcriptId))
    digest(R) = H(digest(R-1) || JCS(change R))

- ``JCS`` is the JSON Canonicalization Scheme of RFC 8785 (sorted keys by
  UTF-16 code units, no whitespace, ECMAScript number forms, UTF-8), applied
  to the change exactly as the wire carries it inside an event's ``change``
  (``kind`` and positions, the messages verbatim): never ``occurredAt``,
  ``origin`` or ``epoch``, so the same history hashes the same on every
  store and replica and in every language. ``JCS(transcriptId)`` is the id
  as a JSON string (``"t1"`` with its quotes).
- ``H(x)`` is SHA-256 of ``x`` cut to its first 16 bytes (128 bits); a
  digest is written as 32 lowercase hex digits. ``digest(R-1) || ...`` puts
  those 16 bytes (not their hex) in front of the canonical bytes.
- Numbers are what JCS says they are, IEEE doubles: an integer beyond
  ``2**53`` (MessagePack and Python can carry it) is hashed as the double
  nearest to it, which is also what a JavaScript consumer sees after
  ``JSON.parse``. So every consumer in every language computes the same
  digest of the same history.

Every change that advances the revision counts: appends, segment starts and
View changes. Pure: no I/O (``hashlib`` and ``rfc8785`` only).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec
import rfc8785

from protocol.types import (
    Change,
    Message,
    MessagesAppended,
    SegmentStarted,
    ViewChanged,
    ViewLeft,
)

__all__ = [
    "DIGEST_BYTES",
    "canonical_change",
    "canonical_reference",
    "genesis_digest",
    "history_digest",
    "is_digest",
    "messages_digest",
    "next_digest",
]

#: How many bytes of SHA-256 a digest keeps (128 bits: collisions need 2**64
#: tries; a copy that differs by accident is found with certainty).
DIGEST_BYTES: Final = 16
# A digest on the wire: 32 lowercase hex digits (``protocol.types.Digest``).
_DIGEST = re.compile("[0-9a-f]{32}")
_SAFE = 2**53 - 1
#: Characters whose order in UTF-16 (JCS's) differs from their code points' order.
_WIDE = re.compile("[\ue000-\uffff]")
_STRUCTS: Final = frozenset({MessagesAppended, SegmentStarted, ViewChanged, ViewLeft})
_encode_sorted = msgspec.json.Encoder(order="sorted").encode
_sha256 = hashlib.sha256
_to_builtins = msgspec.to_builtins


def genesis_digest(transcript_id: str) -> str:
    """``digest(0)``: from the transcript id alone."""
    return _sha256(rfc8785.dumps(transcript_id)).digest()[:DIGEST_BYTES].hex()


def canonical_change(change: Change | Any) -> bytes:
    """The RFC 8785 bytes of ``change`` as the wire carries it (a ``Change``
    struct, or its plain JSON form: a dict with ``kind``).

    ``rfc8785`` writes them, or, for the changes a server sees, a short cut
    that writes the same bytes many times faster: msgspec's JSON with
    sorted keys escapes strings exactly as JCS does and sorts keys as JCS
    does unless a key holds a character in U+E000..U+FFFF (the only ones
    whose code-point order differs from UTF-16's); only its numbers can
    differ, so a change holding floats or integers beyond ``2**53`` is
    written by msgspec with those numbers as JCS writes them (``Raw``).
    ``tests/protocol/test_digest.py`` holds the short cut to ``rfc8785``
    for any change hypothesis makes."""
    if type(change) in _STRUCTS:
        shape = _shape_of_change(change)
        if shape == _PLAIN:
            return _encode_sorted(change)
        if shape == _NUMBERS:
            return _encode_sorted(_jcs_numbers(_to_builtins(change)))
    return canonical_reference(change)


def canonical_reference(change: Change | Any) -> bytes:
    """The RFC 8785 bytes of ``change`` written by ``rfc8785`` alone."""
    value = _to_builtins(change)
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_as_doubles(value))


def next_digest(previous: str, change: Change | Any) -> str:
    """``digest(R)`` from ``digest(R-1)`` and change ``R``. Raises
    ``ValueError`` for a ``previous`` that is not a digest."""
    try:
        prefix = bytes.fromhex(previous)
    except (TypeError, ValueError):
        raise ValueError(f"not a digest: {previous!r:.60}") from None
    if len(prefix) != DIGEST_BYTES:
        raise ValueError(f"not a digest: {previous!r:.60}")
    return _sha256(prefix + canonical_change(change)).digest()[:DIGEST_BYTES].hex()


def history_digest(transcript_id: str, changes: Iterable[Change | Any]) -> str:
    """The digest after ``changes`` (revisions 1, 2, ... in order) of the
    transcript ``transcript_id``; ``digest(0)`` for none."""
    digest = genesis_digest(transcript_id)
    for change in changes:
        digest = next_digest(digest, change)
    return digest


def messages_digest(messages: Sequence[Message]) -> str:
    """A digest of the messages alone, whatever changes brought them:
    ``H(JCS(change))`` of one append of them all at 0 (no previous digest).
    An LMML export carries it so that an import of the file can be checked
    (``protocol.lmml``); the rolling digest cannot be recomputed from
    messages, since it also covers how they were batched, segments and
    Views."""
    change = MessagesAppended(start=0, messages=tuple(messages))
    return _sha256(canonical_change(change)).digest()[:DIGEST_BYTES].hex()


def is_digest(value: object) -> bool:
    """Whether ``value`` is written as a digest (32 lowercase hex digits)."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


# What msgspec's sorted JSON of a value is to its JCS form: the same bytes
# (_PLAIN); the same but for numbers (_NUMBERS: floats, integers beyond
# 2**53); or something only the reference should write (_OTHER: a key whose
# UTF-16 order differs, a value that is not JSON). Ordered by how bad.
_PLAIN, _NUMBERS, _OTHER = 0, 1, 2


def _shape_of_change(change: Change) -> int:
    if isinstance(change, MessagesAppended):
        shape = _PLAIN if change.start <= _SAFE else _NUMBERS
        for message in change.messages:
            if message.metadata is not None:
                shape = max(shape, _shape_of(message.metadata))
            if message.tool_calls is not None:
                shape = max(shape, _shape_of(message.tool_calls))
            if shape == _OTHER:
                break
        return shape
    if isinstance(change, SegmentStarted):
        return _PLAIN if change.end <= _SAFE else _NUMBERS
    end = change.end
    return _PLAIN if change.start <= _SAFE and (end is None or end <= _SAFE) else _NUMBERS


def _shape_of(value: Any) -> int:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return _PLAIN
    if kind is int:
        return _PLAIN if -_SAFE <= value <= _SAFE else _NUMBERS
    if kind is float:
        return _NUMBERS
    shape = _PLAIN
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str or _WIDE.search(key) is not None:
                return _OTHER
            shape = max(shape, _shape_of(item))
            if shape == _OTHER:
                break
        return shape
    if isinstance(value, list | tuple):
        for item in value:
            shape = max(shape, _shape_of(item))
            if shape == _OTHER:
                break
        return shape
    return _OTHER


def _jcs_numbers(value: Any) -> Any:
    """``value`` (plain data) with every float and every integer beyond
    ``2**53`` as the bytes JCS writes for it (a double, ECMAScript's form)."""
    kind = type(value)
    if kind is float or (kind is int and not -_SAFE <= value <= _SAFE):
        return msgspec.Raw(rfc8785.dumps(float(value)))
    if isinstance(value, dict):
        return {key: _jcs_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jcs_numbers(item) for item in value]
    return value


def _as_doubles(value: Any) -> Any:
    """``value`` with every integer beyond JCS's exact range as the double
    JCS reads it as (``rfc8785`` refuses such integers instead)."""
    if type(value) is int and not -_SAFE <= value <= _SAFE:
        return float(value)
    if isinstance(value, dict):
        return {key: _as_doubles(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_doubles(item) for item in value]
    return value
