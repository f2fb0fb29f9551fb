"""``protocol.digest``: the shared vectors (``tests/cases/digest``, which
``tests/js/digest.test.mjs`` runs against the JavaScript port too), the short
cut against ``rfc8785`` for any change, and what the digest covers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.consumer import Consumer
from protocol.digest import (
    canonical_change,
    canonical_reference,
    genesis_digest,
    history_digest,
    is_digest,
    jcs_number,
    next_digest,
)
from protocol.state import DigestMismatch, TranscriptState
from protocol.types import (
    Change,
    Message,
    MessagesAppended,
    Origin,
    SegmentStarted,
    TranscriptEvent,
    ViewChanged,
    ViewLeft,
)
from tests.strategies import changes, json_values, messages, transcript_ids

CASES = Path(__file__).resolve().parents[1] / "cases" / "digest"
FILES = sorted(CASES.glob("*.json"))
_change = msgspec.json.Decoder(Change).decode


def _load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    assert case["name"] == path.stem
    return case


def test_the_vectors_are_there() -> None:
    assert {p.stem for p in FILES} >= {"empty", "every-kind", "verbatim-values", "numbers"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_vectors(path: Path) -> None:
    case = _load(path)
    changes_ = case["changes"]
    assert len(case["digests"]) == len(changes_) + 1
    assert len(case["canonical"]) == len(changes_)
    assert genesis_digest(case["transcriptId"]) == case["digests"][0]
    digest = case["digests"][0]
    for plain, canonical, expected in zip(
        changes_, case["canonical"], case["digests"][1:], strict=True
    ):
        # The plain JSON form (as a JavaScript consumer holds it) and the
        # struct the server decodes from the same text give the same bytes.
        struct = _change(json.dumps(plain))
        assert canonical_reference(plain) == canonical.encode()
        assert canonical_change(struct) == canonical.encode()
        digest = next_digest(digest, struct)
        assert digest == expected
    assert history_digest(case["transcriptId"], map(_change, map(json.dumps, changes_))) == digest


def _views() -> st.SearchStrategy[Change]:
    ends = st.none() | st.integers(0, 2**60)
    name = st.from_regex(r"[A-Za-z0-9._:-]{1,8}", fullmatch=True)
    return st.builds(ViewChanged, name=name, start=st.integers(0, 2**60), end=ends) | st.builds(
        ViewLeft, name=name, start=st.integers(0, 2**60), end=ends
    )


def _odd_appends() -> st.SearchStrategy[Change]:
    # Metadata with what the short cut must hand over: floats, integers past
    # 2**53, keys with characters whose UTF-16 order differs.
    keys = st.text(alphabet=st.sampled_from("a\u00e9\ud7ff\ue000\uffff\U0001f600"), max_size=3)
    value = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=8,
    )
    message = st.builds(
        Message,
        role=st.just("user"),
        content=st.text(max_size=8),
        metadata=st.dictionaries(keys, value, max_size=4),
    )
    return st.builds(
        MessagesAppended,
        start=st.integers(0, 2**60),
        messages=st.lists(message, min_size=1, max_size=2).map(tuple),
    )


@settings(max_examples=300, deadline=None)
@given(st.one_of(changes(), _views(), _odd_appends()))
def test_the_short_cut_writes_what_rfc8785_writes(change: Change) -> None:
    assert canonical_change(change) == canonical_reference(change)


@settings(max_examples=100, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=3), json_values())
def test_any_message_and_value(batch: list[Message], value: Any) -> None:
    change = MessagesAppended(0, (*batch, Message(role="user", content="v", metadata={"v": value})))
    assert canonical_change(change) == canonical_reference(change)
    canonical = json.loads(canonical_change(change))
    assert canonical["kind"] == "messages-appended"


@settings(max_examples=100, deadline=None)
@given(transcript_ids(), changes(), st.integers(0, 2**40), st.integers(0, 2**40))
def test_the_digest_leaves_out_time_origin_and_epoch(
    transcript_id: str, change: Change, when: int, other: int
) -> None:
    def after(epoch: str, occurred_at: int, origin: Origin | None) -> str | None:
        state = TranscriptState(transcript_id, epoch)
        if isinstance(change, MessagesAppended):
            start = msgspec.structs.replace(change, start=0)
            event = TranscriptEvent(transcript_id, epoch, 1, occurred_at, start, origin)
        else:
            state.apply(
                TranscriptEvent(
                    transcript_id,
                    epoch,
                    1,
                    0,
                    MessagesAppended(0, (Message(role="user", content="x"),) * 3),
                )
            )
            seg = SegmentStarted(0, 1, 3)
            event = TranscriptEvent(transcript_id, epoch, 2, occurred_at, seg, origin)
        state.apply(event)
        return state.digest

    assert after("e1", when, None) == after("e2", other, Origin("c1"))


@settings(max_examples=100, deadline=None)
@given(transcript_ids(), st.lists(messages(), min_size=1, max_size=4))
def test_any_different_message_changes_the_digest(transcript_id: str, batch: list[Message]) -> None:
    change = MessagesAppended(0, tuple(batch))
    other = MessagesAppended(0, (*batch[:-1], Message(role="user", content=batch[-1].text() + "!")))
    start = genesis_digest(transcript_id)
    assert next_digest(start, change) != next_digest(start, other)
    assert genesis_digest(transcript_id) != genesis_digest(transcript_id + "x")
    assert is_digest(next_digest(start, change))


def test_a_state_refuses_an_event_with_another_digest_and_changes_nothing() -> None:
    state = TranscriptState("t1", "e1")
    change = MessagesAppended(0, (Message(role="user", content="hi"),))
    right = next_digest(state.digest or "", change)
    wrong = "0" * 32
    with pytest.raises(DigestMismatch) as caught:
        state.apply(TranscriptEvent("t1", "e1", 1, 0, change, digest=wrong))
    assert (caught.value.carried, caught.value.computed) == (wrong, right)
    assert (state.revision, state.length, state.digest) == (0, 0, genesis_digest("t1"))
    state.apply(TranscriptEvent("t1", "e1", 1, 0, change, digest=right))
    assert (state.revision, state.digest) == (1, right)
    assert state.snapshot().digest == right


def test_a_state_that_does_not_know_its_digest_takes_the_next_one() -> None:
    state = TranscriptState("t1", "e1")
    state.digest = None  # a baseline of an older peer left it out
    change = MessagesAppended(0, (Message(role="user", content="hi"),))
    carried = "ab" * 16
    state.apply(TranscriptEvent("t1", "e1", 1, 0, change, digest=carried))
    assert state.digest == carried
    second = MessagesAppended(1, (Message(role="user", content="again"),))
    with pytest.raises(DigestMismatch):
        state.apply(TranscriptEvent("t1", "e1", 2, 0, second, digest="cd" * 16))
    state.apply(TranscriptEvent("t1", "e1", 2, 0, second))  # no digest: computed
    assert state.digest == next_digest(carried, second)


def test_not_a_digest() -> None:
    change = SegmentStarted(0, 1, 1)
    for bad in ("", "xyz", "00" * 15, "00" * 17):
        with pytest.raises(ValueError, match="not a digest"):
            next_digest(bad, change)
    assert not is_digest("A" * 32)
    assert not is_digest("a" * 32 + "\n")


def test_a_copy_that_does_not_check_takes_each_digest_as_it_comes() -> None:
    """``check_digests=False`` (a load generator samples the check): no
    digest is computed, the copy holds the event's."""
    consumer = Consumer(keep_messages=False, check_digests=False)
    subscription = consumer.subscribe("t1")
    state = TranscriptState("t1", "e1")
    subscription.on_baseline(state.snapshot())
    copy = subscription.copy
    assert copy is not None and not copy.check_digests
    change = MessagesAppended(0, (Message(role="user", content="hi"),))
    carried = "cd" * 16
    applied = subscription.on_event(TranscriptEvent("t1", "e1", 1, 0, change, digest=carried))
    assert applied is not None and applied.kind == "applied"
    assert copy.digest == carried
    assert not copy.following().check_digests


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70).map(float))
@settings(max_examples=2000)
def test_jcs_number_writes_what_rfc8785_writes(value: float) -> None:
    assert jcs_number(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value", [1e21, 1e-7, 1.5e-5, 123.0, 100.0, 1e16, 0.5, -0.0, 5e-324, 1.7976931348623157e308]
)
def test_jcs_number_at_the_edges_of_each_form(value: float) -> None:
    assert jcs_number(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_jcs_number_refuses_what_json_cannot_carry(value: float) -> None:
    with pytest.raises(rfc8785.FloatDomainError):
        jcs_number(value)
