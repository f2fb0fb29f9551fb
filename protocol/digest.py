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

import copy
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeVar

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
    "jcs_number",
    "messages_digest",
    "next_digest",
]

#: How many bytes of SHA-256 a digest keeps (128 bits: collisions need 2**64
#: tries; a copy that differs by accident is found with certainty).
DIGEST_BYTES: Final = 16
# A digest on the wire: 32 lowercase hex digits (``protocol.types.Digest``).
_DIGEST = re.compile("[0-9a-f]{32}")
_SAFE = 2**53 - 1
_INF = float("inf")
#: Characters whose order in UTF-16 (JCS's) differs from their code points' order.
_WIDE = re.compile("[\ue000-\uffff]")
_encode_sorted = msgspec.json.Encoder(order="sorted").encode
_sha256 = hashlib.sha256
_to_builtins = msgspec.to_builtins
_copy = copy.copy
_S = TypeVar("_S", bound=msgspec.Struct)
_force_setattr = msgspec.structs.force_setattr


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
    if type(change) is MessagesAppended:
        written = _messages_as_jcs(change)
        if written is not None:
            return _encode_sorted(written)
    elif isinstance(change, SegmentStarted | ViewChanged | ViewLeft):
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


# What msgspec's sorted JSON of a segment start or a View change is to its
# JCS form: the same bytes (_PLAIN), or the same but for integers beyond
# 2**53 (_NUMBERS).
_PLAIN, _NUMBERS = 0, 1


def _shape_of_change(change: SegmentStarted | ViewChanged | ViewLeft) -> int:
    """The shape of a change other than an append (``_messages_as_jcs``)."""
    if isinstance(change, SegmentStarted):
        return _PLAIN if change.end <= _SAFE else _NUMBERS
    end = change.end
    return _PLAIN if change.start <= _SAFE and (end is None or end <= _SAFE) else _NUMBERS


#: What ``_as_jcs`` says of a value only the reference may write.
_REFUSE: Final = object()


def _as_jcs(value: Any) -> Any:
    """``value`` (plain data) as msgspec's sorted JSON writes its JCS bytes:
    itself when it holds no float and no integer beyond ``2**53``, else a
    copy of the lists and dicts on the way to them with those numbers as
    JCS's bytes (``Raw``); ``_REFUSE`` for a key whose UTF-16 order differs
    or a value that is not JSON. One walk, nothing copied in the usual case."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if -_SAFE <= value <= _SAFE else msgspec.Raw(jcs_number(float(value)))
    if kind is float:
        return msgspec.Raw(jcs_number(value))
    if isinstance(value, dict):
        rebuilt: Any = None
        for key, item in value.items():
            if type(key) is not str or _WIDE.search(key) is not None:
                return _REFUSE
            new = _as_jcs(item)
            if new is not item:
                if new is _REFUSE:
                    return _REFUSE
                if rebuilt is None:
                    rebuilt = dict(value)
                rebuilt[key] = new
        return value if rebuilt is None else rebuilt
    if isinstance(value, list | tuple):
        rebuilt = None
        for i, item in enumerate(value):
            new = _as_jcs(item)
            if new is not item:
                if new is _REFUSE:
                    return _REFUSE
                if rebuilt is None:
                    rebuilt = list(value)
                rebuilt[i] = new
        return value if rebuilt is None else rebuilt
    return _REFUSE


def _messages_as_jcs(change: MessagesAppended) -> MessagesAppended | None:
    """``change`` ready for msgspec's sorted JSON to write its JCS bytes: as
    it is, or with the numbers JCS writes differently (floats, integers
    beyond ``2**53``) in its messages' ``metadata`` and ``tool_calls`` as
    JCS's bytes (``Raw``), only the values holding them rebuilt; ``None``
    when only the reference may write it (a key whose UTF-16 order differs,
    a value that is not JSON, a ``start`` beyond ``2**53``)."""
    if change.start > _SAFE:
        return None
    rebuilt: list[Message] | None = None
    for i, message in enumerate(change.messages):
        fixes: dict[str, Any] | None = None
        for field, value in (("metadata", message.metadata), ("tool_calls", message.tool_calls)):
            if value is None:
                continue
            written = _as_jcs(value)
            if written is not value:
                if written is _REFUSE:
                    return None
                fixes = fixes or {}
                fixes[field] = written
        if fixes:
            if rebuilt is None:
                rebuilt = list(change.messages[:i])
            rebuilt.append(_with_fields(message, fixes))
        elif rebuilt is not None:
            rebuilt.append(message)
    if rebuilt is None:
        return change
    return _with_fields(change, {"messages": tuple(rebuilt)})


def _with_fields(struct: _S, fields: dict[str, Any]) -> _S:
    """A shallow copy of ``struct`` with ``fields`` set, made only to be
    encoded here: unlike ``msgspec.structs.replace`` it skips
    ``__post_init__``, which would freeze the ``Raw`` numbers' dict again
    (a copy of the metadata per message per append)."""
    copied = _copy(struct)
    for name, value in fields.items():
        _force_setattr(copied, name, value)
    return copied


def _jcs_numbers(value: Any) -> Any:
    """``value`` (plain data) with every float and every integer beyond
    ``2**53`` as the bytes JCS writes for it (a double, ECMAScript's form)."""
    kind = type(value)
    if kind is float or (kind is int and not -_SAFE <= value <= _SAFE):
        return msgspec.Raw(jcs_number(float(value)))
    if isinstance(value, dict):
        return {key: _jcs_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jcs_numbers(item) for item in value]
    return value


def jcs_number(value: float) -> bytes:
    """``value`` as JCS writes a number (ECMAScript's ``Number.toString``:
    the shortest digits that read back as the same double, which Python's
    ``repr`` also finds, laid out in ECMAScript's fixed or exponent form).
    The same bytes as ``rfc8785.dumps(value)`` (a property test holds it to
    it) at a fraction of its cost; NaN and infinities are refused by
    ``rfc8785`` as there."""
    if value == 0:
        return b"0"
    if value != value or value in (_INF, -_INF):
        return rfc8785.dumps(value)  # raises FloatDomainError
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    power = int(exponent) if exponent else 0
    if whole == "0":  # 0.000ddd: the digits start after the zeros
        digits = fraction.lstrip("0")
        point = power - (len(fraction) - len(digits))
    else:
        digits = whole + fraction
        point = power + len(whole)
    digits = digits.rstrip("0")
    count = len(digits)
    # ``value`` is 0.<digits> x 10**point.
    if count <= point <= 21:
        out = digits + "0" * (point - count)
    elif 0 < point <= 21:
        out = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        out = "0." + "0" * -point + digits
    else:
        shown = point - 1
        out = digits[0] + ("." + digits[1:] if count > 1 else "") + ("e+" if shown >= 0 else "e-")
        out += str(abs(shown))
    return (sign + out).encode()


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
