"""Hypothesis strategies for the protocol's values, for every test author.

    from tests.strategies import messages, events, snapshots, server_frames

    @given(messages(), events(transcript_id=st.just("t1")))
    def test_something(message, event): ...

Each public name is a function returning a strategy, like ``st.integers()``.
Everything drawn is *valid*: it decodes under the protocol's types and passes
``accept_transcript_update``'s checks, so a round trip must give it back
unchanged. Sizes are small so property tests stay fast.
"""

from __future__ import annotations

import string
from typing import Any

import msgspec
from hypothesis import strategies as st

from protocol.state import TranscriptState
from protocol.types import (
    AttachmentPart,
    Change,
    ContentPart,
    ImageUrl,
    ImageUrlPart,
    Message,
    MessageLocator,
    MessagesAppended,
    Origin,
    SegmentStarted,
    TextPart,
    TranscriptEvent,
    TranscriptRangeLocator,
    TranscriptRecord,
    TranscriptSnapshot,
)
from protocol.wire import (
    Ack,
    Append,
    Baseline,
    ClientOp,
    Draft,
    DraftFrame,
    ErrorFrame,
    Increment,
    Ping,
    Pong,
    ServerFrame,
    StartSegment,
    Subscribe,
    Unsubscribe,
)

__all__ = [
    "acks",
    "baselines",
    "carried_exactly",
    "changes",
    "client_ops",
    "content_parts",
    "draft_frames",
    "epochs",
    "error_frames",
    "events",
    "increments",
    "json_values",
    "loose_values",
    "message_dicts",
    "message_locators",
    "messages",
    "origins",
    "pongs",
    "range_locators",
    "records",
    "refs",
    "roles",
    "same_exactly",
    "seqs",
    "server_frames",
    "snapshots",
    "transcript_ids",
    "transcript_updates",
]

ID_ALPHABET = string.ascii_letters + string.digits + "._:-"
#: Integers both encodings carry exactly (MessagePack stops at 64 bits).
_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_SMALL = st.integers(min_value=0, max_value=10_000)
_POSITIVE = st.integers(min_value=1, max_value=10_000)
_MILLIS = st.integers(min_value=0, max_value=2**53)
#: Short text including newlines, quotes and non-ASCII (JSON must escape them).
_TEXT = st.text(max_size=20)


def transcript_ids() -> st.SearchStrategy[str]:
    """Valid transcript ids: 1..128 characters of ``[A-Za-z0-9._:-]``."""
    return st.text(ID_ALPHABET, min_size=1, max_size=128)


def epochs() -> st.SearchStrategy[str]:
    return st.text(string.hexdigits.lower(), min_size=1, max_size=32)


def roles() -> st.SearchStrategy[str]:
    return st.sampled_from(["user", "assistant", "system", "tool", "context"])


def refs() -> st.SearchStrategy[str | int | None]:
    return st.none() | st.text(max_size=200) | _INT64


def seqs() -> st.SearchStrategy[int]:
    return st.integers(min_value=1, max_value=2**40)


def json_values() -> st.SearchStrategy[Any]:
    """JSON values whose trip through JSON and MessagePack is exact.

    Lists, not tuples; finite floats; 64-bit integers.
    """
    return st.recursive(
        st.none()
        | st.booleans()
        | _INT64
        | st.floats(allow_nan=False, allow_infinity=False)
        | _TEXT,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
        max_leaves=6,
    )


def loose_values() -> st.SearchStrategy[Any]:
    """Values a decoder or a Python caller may hand over as JSON, including
    what no format carries exactly: integers past 64 bits, NaN and the
    infinities, ``-0.0``, non-string keys, lone surrogates, bytes, sets.
    For validation's property tests: each is either refused or carried."""
    text = st.text(
        st.characters(codec="utf-8") | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        max_size=6,
    )
    integers = st.integers(min_value=-(2**65), max_value=2**65) | st.sampled_from(
        [-(2**63) - 1, -(2**63), 2**63 - 1, 2**63, 2**64 - 1, 2**64]
    )
    scalars = (
        st.none()
        | st.booleans()
        | integers
        | st.floats()
        | st.sampled_from([-0.0, 1e308, 5e-324, float("nan"), float("inf")])
        | text
        | st.binary(max_size=3)
    )
    keys = text | st.integers(min_value=-3, max_value=3)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(keys, inner, max_size=3)
            | st.frozensets(st.integers(0, 3), max_size=2)
        ),
        max_leaves=6,
    )


def same_exactly(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (and the sign of zero):
    ``1 == 1.0`` and ``0.0 == -0.0`` in Python, not here."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(
            type(k) is str and same_exactly(v, b[k]) for k, v in a.items()
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same_exactly(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and str(a) == str(b)
    return bool(a == b)


def carried_exactly(value: Any) -> bool:
    """The oracle of ``loose_values``: whether msgspec's JSON and MessagePack
    both give ``value`` back (``same_exactly``)."""
    for module in (msgspec.json, msgspec.msgpack):
        try:
            back = module.decode(module.encode(value))
        except (TypeError, ValueError, OverflowError, msgspec.MsgspecError):
            return False
        if not same_exactly(value, back):
            return False
    return True


def _json_objects() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(_TEXT, json_values(), max_size=3)


def content_parts() -> st.SearchStrategy[ContentPart]:
    return st.one_of(
        st.builds(TextPart, text=_TEXT),
        st.builds(
            ImageUrlPart,
            image_url=st.builds(
                ImageUrl, url=_TEXT, detail=st.none() | st.sampled_from(["low", "high", "auto"])
            ),
        ),
        st.builds(
            AttachmentPart,
            name=_TEXT,
            mime=st.sampled_from(["text/plain", "image/png"]),
            content=_TEXT,
        ),
    )


def messages(role: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Message]:
    """Valid ``Message`` structs, with every optional field sometimes set."""
    return st.builds(
        Message,
        role=roles() if role is None else role,
        content=_TEXT | st.lists(content_parts(), max_size=3).map(tuple),
        name=st.none() | _TEXT,
        tool_call_id=st.none() | _TEXT,
        tool_calls=st.none() | st.lists(_json_objects(), max_size=2).map(tuple),
        metadata=st.none() | _json_objects(),
    )


def message_dicts() -> st.SearchStrategy[dict[str, Any]]:
    """Plain decoded-JSON message objects (lists, not tuples) that ``parse_message`` accepts."""
    return messages().map(lambda m: msgspec.json.decode(msgspec.json.encode(m)))


def origins() -> st.SearchStrategy[Origin]:
    return st.builds(Origin, context_id=_TEXT)


@st.composite
def _segment_started(draw: st.DrawFn) -> SegmentStarted:
    previous = draw(_SMALL)
    start = previous + draw(_POSITIVE)
    return SegmentStarted(previous_start=previous, start=start, end=start + draw(_SMALL))


def changes() -> st.SearchStrategy[Change]:
    """A ``MessagesAppended`` (1..3 messages) or a valid ``SegmentStarted``."""
    return st.one_of(
        st.builds(
            MessagesAppended,
            start=_SMALL,
            messages=st.lists(messages(), min_size=1, max_size=3).map(tuple),
        ),
        _segment_started(),
    )


def events(
    transcript_id: st.SearchStrategy[str] | None = None,
    epoch: st.SearchStrategy[str] | None = None,
    revision: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[TranscriptEvent]:
    """Valid ``TranscriptEvent`` values (pass ``st.just(...)`` to fix a field)."""
    return st.builds(
        TranscriptEvent,
        transcript_id=transcript_ids() if transcript_id is None else transcript_id,
        epoch=epochs() if epoch is None else epoch,
        revision=_POSITIVE if revision is None else revision,
        occurred_at=_MILLIS,
        change=changes(),
        origin=st.none() | origins(),
    )


@st.composite
def _snapshot(
    draw: st.DrawFn, transcript_id: st.SearchStrategy[str], epoch: st.SearchStrategy[str]
) -> TranscriptSnapshot:
    # Played from a history of appends and segment starts, so that it keeps
    # every invariant of protocol.state.check_snapshot; then, sometimes, only
    # a window of the last messages is kept (a baseline may leave out the
    # start, never the end).
    state = TranscriptState(draw(transcript_id), draw(epoch))
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        room = state.length - state.active_start
        if room and draw(st.booleans()):
            start = state.active_start + draw(st.integers(min_value=1, max_value=room))
            change: Change = SegmentStarted(state.active_start, start, state.length)
        else:
            batch = tuple(draw(st.lists(messages(), min_size=1, max_size=3)))
            change = MessagesAppended(state.length, batch)
        state.apply(
            TranscriptEvent(state.transcript_id, state.epoch, state.revision + 1, 0, change)
        )
    start = draw(st.integers(min_value=0, max_value=state.length))
    return state.snapshot(start)


def snapshots(
    transcript_id: st.SearchStrategy[str] | None = None,
    epoch: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[TranscriptSnapshot]:
    """Valid ``TranscriptSnapshot`` values (whole or a window that reaches the length)."""
    return _snapshot(
        transcript_ids() if transcript_id is None else transcript_id,
        epochs() if epoch is None else epoch,
    )


def records() -> st.SearchStrategy[TranscriptRecord]:
    return st.builds(
        TranscriptRecord,
        transcript_id=transcript_ids(),
        revision=_SMALL,
        kind=st.sampled_from(["messages-appended", "segment-started"]),
        start=_SMALL,
        end=_SMALL,
        occurred_at=_MILLIS,
    )


def message_locators() -> st.SearchStrategy[MessageLocator]:
    return st.builds(MessageLocator, transcript_id=transcript_ids(), index=_SMALL)


def range_locators() -> st.SearchStrategy[TranscriptRangeLocator]:
    return st.builds(
        TranscriptRangeLocator,
        transcript_id=transcript_ids(),
        start=_SMALL,
        end=_SMALL,
        revision=_SMALL,
    )


# --- wire frames ---------------------------------------------------------------


def client_ops() -> st.SearchStrategy[ClientOp]:
    """Every client op: subscribe, unsubscribe, append, startSegment, ping."""
    return st.one_of(
        st.builds(
            Subscribe,
            transcript_id=transcript_ids(),
            from_revision=st.none() | _SMALL,
            epoch=st.none() | epochs(),
            ref=refs(),
        ),
        st.builds(Unsubscribe, transcript_id=transcript_ids(), ref=refs()),
        st.builds(
            Append,
            transcript_id=transcript_ids(),
            messages=st.lists(message_dicts(), max_size=3),
            expected_revision=st.none() | _SMALL,
            idempotency_key=st.none() | st.text(min_size=1, max_size=200),
            ref=refs(),
            draft_id=st.none() | transcript_ids(),
        ),
        st.builds(
            StartSegment, transcript_id=transcript_ids(), start=st.none() | _SMALL, ref=refs()
        ),
        st.builds(Ping, ref=refs()),
        _draft_ops(),
    )


@st.composite
def _draft_ops(draw: st.DrawFn) -> Draft:
    what = draw(st.sampled_from(["delta", "text", "cancel", "nothing"]))
    return Draft(
        transcript_id=draw(transcript_ids()),
        draft_id=draw(transcript_ids()),
        role=draw(st.none() | st.sampled_from(["assistant", "user", "tool"])),
        delta=draw(_TEXT) if what == "delta" else None,
        text=draw(_TEXT) if what == "text" else None,
        cancel=what == "cancel",
        ref=draw(refs()),
    )


@st.composite
def draft_frames(draw: st.DrawFn) -> DraftFrame:
    """Every shape of a draft frame: an open one's delta or text, or a close."""
    state = draw(st.sampled_from(["open", "open", "final", "cancelled", "expired"]))
    body = draw(st.sampled_from(["delta", "text"]))
    return DraftFrame(
        seq=draw(seqs()),
        transcript_id=draw(transcript_ids()),
        draft_id=draw(transcript_ids()),
        role=draw(st.sampled_from(["assistant", "user"])),
        n=draw(st.integers(1, 10_000)) if state == "open" else draw(_SMALL),
        delta=draw(_TEXT) if state == "open" and body == "delta" else None,
        text=draw(_TEXT) if state == "open" and body == "text" else None,
        state=state,
        revision=draw(_SMALL) if state == "final" else None,
    )


def baselines() -> st.SearchStrategy[Baseline]:
    return st.builds(Baseline, seq=seqs(), snapshot=snapshots())


def increments() -> st.SearchStrategy[Increment]:
    return st.builds(Increment, seq=seqs(), event=events())


def error_frames() -> st.SearchStrategy[ErrorFrame]:
    return st.builds(
        ErrorFrame,
        seq=seqs(),
        code=st.sampled_from(
            ["invalid-frame", "not-found", "lagged", "revision-conflict", "forbidden", "internal"]
        ),
        message=_TEXT,
        transcript_id=st.none() | transcript_ids(),
        ref=refs(),
        revision=st.none() | _SMALL,
    )


def acks() -> st.SearchStrategy[Ack]:
    return st.builds(
        Ack,
        seq=seqs(),
        transcript_id=transcript_ids(),
        revision=_SMALL,
        ref=refs(),
        start=st.none() | _SMALL,
        count=st.none() | _SMALL,
        duplicate=st.booleans(),
        draft_id=st.none() | transcript_ids(),
        n=st.none() | _SMALL,
    )


def pongs() -> st.SearchStrategy[Pong]:
    return st.builds(Pong, seq=seqs(), ref=refs())


def transcript_updates() -> st.SearchStrategy[Baseline | Increment | ErrorFrame]:
    """The frames a subscription receives: ``Baseline | Increment | ErrorFrame``."""
    return st.one_of(baselines(), increments(), error_frames())


def server_frames() -> st.SearchStrategy[ServerFrame]:
    """Every server frame type."""
    return st.one_of(baselines(), increments(), error_frames(), acks(), pongs(), draft_frames())
