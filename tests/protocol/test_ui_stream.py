"""protocol.ui_stream's batches: ``check`` refuses a batch of chunks exactly
when folding it in would refuse one of them, and changes nothing (the fold
itself is held to the AI SDK in tests/server/web/test_ui_stream_sdk.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.ui_stream import UIMessageState, UIStreamError
from tests.server.web.test_ui_stream_sdk import chunk_streams


@settings(max_examples=400)
@given(chunk_streams(), st.data())
def test_a_checked_batch_folds_in_whole_and_a_refused_one_changes_nothing(
    chunks: list[dict[str, Any]], data: st.DataObject
) -> None:
    state = UIMessageState()
    at = 0
    while at < len(chunks):
        size = data.draw(st.integers(1, len(chunks) - at))
        batch = chunks[at : at + size]
        at += size
        before = (state.message(), state.chunks())
        one_by_one = copy.deepcopy(state)
        failed_at = None
        for n, chunk in enumerate(batch):
            try:
                one_by_one.apply(chunk)
            except UIStreamError:
                failed_at = n
                break
        if failed_at is None:
            state.check(batch)
            state.apply_all(batch)
            assert state.message() == one_by_one.message()
        else:
            with pytest.raises(UIStreamError, match=f"chunk {failed_at}:"):
                state.check(batch)
            assert (state.message(), state.chunks()) == before


@pytest.mark.parametrize(
    "chunk",
    [
        None,
        {"type": 3},
        {"type": "text-start"},
        {"type": "text-delta", "id": "t", "delta": 1},
        {"type": "tool-input-start", "toolCallId": "c"},
        {"type": "tool-approval-response", "approvalId": "a"},
        {"type": "data-x"},
    ],
)
def test_a_malformed_chunk_is_refused_by_check_and_by_the_fold(chunk: Any) -> None:
    state = UIMessageState()
    state.apply({"type": "text-start", "id": "t"})
    with pytest.raises(UIStreamError):
        state.check([chunk])
    if (
        chunk is not None
        and chunk.get("type") != "data-x"
        and chunk.get("type") != "tool-approval-response"
    ):
        with pytest.raises(UIStreamError):
            state.apply(chunk)
