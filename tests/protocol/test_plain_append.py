"""The fast path of the common append (issue 42): ``wire.decode_plain_append``
then ``validation.accept_decoded`` accept only what ``decode_client_op`` then
``parse_messages`` accept, and give the same messages; everything else falls
through to them (``None``), so their errors stay the only ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import wire
from protocol.errors import InvalidFrame, InvalidMessage
from protocol.limits import MessageLimits
from protocol.validation import ValidatedBatch, accept_decoded, parse_messages
from tests.strategies import loose_values, message_dicts

LIMITS = MessageLimits(max_messages_per_batch=4, max_message_bytes=400)


def _frame(messages: Any, **fields: Any) -> str:
    # json.dumps writes lone surrogates as escapes, which msgspec cannot encode.
    return json.dumps(
        {"op": "append", "transcriptId": "t", "messages": messages, **fields},
        separators=(",", ":"),  # compact, as clients write it
    )


def _fast(frame: str | bytes, limits: MessageLimits = LIMITS) -> ValidatedBatch | None:
    plain = wire.decode_plain_append(frame)
    return None if plain is None else accept_decoded(plain.messages, limits)


def _slow(frame: str | bytes, limits: MessageLimits = LIMITS) -> tuple[Any, ...] | Exception:
    try:
        op = wire.decode_client_op(frame)
        assert isinstance(op, wire.Append)
        return tuple(
            parse_messages(
                op.messages,
                max_messages=limits.max_messages_per_batch,
                max_message_bytes=limits.max_message_bytes,
                max_depth=limits.max_depth,
            )
        )
    except (InvalidFrame, InvalidMessage) as exc:
        return exc


def _flat_metadata() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.text(max_size=4), loose_values(), max_size=3)


def _loose_messages() -> st.SearchStrategy[Any]:
    """Valid messages, and messages whose metadata, content or fields are
    anything at all (valid or not)."""
    return st.one_of(
        message_dicts(),
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "robot"]), "content": st.text()},
            optional={
                "metadata": _flat_metadata() | loose_values(),
                "name": st.none() | st.text(max_size=3) | st.integers(),
                "extra": st.integers(),
            },
        ),
        loose_values(),
    )


@settings(max_examples=400)
@given(st.lists(_loose_messages(), max_size=6), st.booleans())
def test_the_fast_path_accepts_nothing_the_full_path_refuses(messages: Any, as_bytes: bool) -> None:
    try:
        frame: str | bytes = _frame(messages)
    except (TypeError, ValueError):  # not JSON at all (bytes, sets, ...)
        return
    if as_bytes:
        frame = frame.encode("utf-8", "surrogatepass")
    fast = _fast(frame)
    slow = _slow(frame)
    if fast is not None:
        assert not isinstance(slow, Exception), slow
        assert tuple(fast) == slow
        assert fast.within(LIMITS)


def test_a_plain_chat_append_takes_the_fast_path() -> None:
    frame = _frame(
        [{"role": "user", "content": "hi", "metadata": {"t": 1765200000000000123, "w": 3}}],
        ref=7,
        idempotencyKey="k1",
        expectedRevision=2,
    ).encode()
    plain = wire.decode_plain_append(frame)
    assert plain is not None
    assert (plain.transcript_id, plain.ref, plain.idempotency_key, plain.expected_revision) == (
        "t",
        7,
        "k1",
        2,
    )
    batch = accept_decoded(plain.messages, LIMITS)
    assert batch is not None and batch.limits is LIMITS
    assert tuple(batch) == _slow(frame)


@pytest.mark.parametrize(
    "frame",
    [
        # other ops, another field first, MessagePack: the full path reads them
        '{"op":"subscribe","transcriptId":"t"}',
        '{"transcriptId":"t","op":"append","messages":[]}',
        b"\x83\xa2op\xa6append",
        # a format or a system prompt: converted by protocol.sdk_in
        _frame([{"role": "user", "content": "x"}], format="openai"),
        _frame([{"role": "user", "content": "x"}], format="anthropic", system="s"),
        # refused: the full path says why
        _frame([{"role": "robot", "content": "x"}]),
        _frame([{"role": "user", "content": "x"}], transcriptId="a\n"),
        '{"op":"append","transcriptId":"t","messages":[',
    ],
)
def test_what_the_fast_path_leaves_to_the_full_one(frame: str | bytes) -> None:
    assert wire.decode_plain_append(frame) is None


@pytest.mark.parametrize(
    ("messages", "refused"),
    [
        ([{"role": "user", "content": "x"}] * 5, True),  # over the batch limit (4)
        ([{"role": "user", "content": "x" * 500}], True),  # over the size limit (400 B)
        ([{"role": "user", "content": "x", "metadata": {"n": 2**64}}], True),  # out of range
        ([{"role": "user", "content": "a\ud800"}], True),  # a lone surrogate
        ([{"role": "user", "content": "x", "metadata": {"n": {"deep": 1}}}], False),  # walked
        ([{"role": "user", "content": "x", "metadata": {"é": 1}}], False),  # non-ASCII: walked
        ([{"role": "user", "content": [{"type": "text", "text": "x"}]}], False),  # parts
        ([{"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}], False),
    ],
)
def test_batches_the_fast_path_leaves_to_the_full_one(messages: Any, refused: bool) -> None:
    frame = _frame(messages)
    plain = wire.decode_plain_append(frame)
    assert plain is None or accept_decoded(plain.messages, LIMITS) is None
    assert isinstance(_slow(frame), InvalidMessage | InvalidFrame) is refused
