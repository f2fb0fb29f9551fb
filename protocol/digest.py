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
    "DIGEST_PATTERN",
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
#: A digest on the wire: 32 lowercase hex digits.
DIGEST_PATTERN: Final = r"^[0-9a-f]{32}$"

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

    ``rfc8785`` writes them. The common case takes a short cut that writes
    the same bytes about 30 times faster: msgspec's JSON with sorted keys
    escapes strings exactly as JCS does, so for a change holding no float,
    no integer beyond ``2**53`` and no object key with a character in
    U+E000..U+FFFF (the only keys whose code-point order differs from
    UTF-16's) the two agree (``tests/protocol/test_digest.py`` holds them to
    it for any change hypothesis makes)."""
    if type(change) in _STRUCTS and _plain_change(change):
        return _encode_sorted(change)
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


def _plain_change(change: Change) -> bool:
    if isinstance(change, MessagesAppended):
        if change.start > _SAFE:
            return False
        for message in change.messages:
            if message.metadata is not None and not _plain_value(message.metadata):
                return False
            calls = message.tool_calls
            if calls is not None and not all(_plain_value(call) for call in calls):
                return False
        return True
    if isinstance(change, SegmentStarted):
        return change.end <= _SAFE
    end = change.end
    return change.start <= _SAFE and (end is None or end <= _SAFE)


def _plain_value(value: Any) -> bool:
    """Whether msgspec's sorted JSON of ``value`` is its JCS form."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE <= value <= _SAFE)
    if isinstance(value, dict):
        for key, item in value.items():
            if _WIDE.search(key) is not None or not _plain_value(item):
                return False
        return True
    if isinstance(value, list | tuple):
        return all(_plain_value(item) for item in value)
    return False  # a float, or anything the reference should judge


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
