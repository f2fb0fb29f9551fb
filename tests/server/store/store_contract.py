"""The contract every ``Store`` backend must pass.

A backend's test module subclasses ``StoreContract`` and supplies the
``store_backend`` fixture::

    class TestMemoryStore(StoreContract):
        @pytest.fixture
        def store_backend(self) -> StoreBackend:
            return MemoryBackend()

``StoreBackend.make(**options)`` builds a new, unopened store over the SAME
place every time it is called within one test (same folder, same Redis key
prefix), so a persistent backend can be closed and opened again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec
import pytest

from protocol.digest import genesis_digest, history_digest
from protocol.types import (
    AttachmentPart,
    ImageUrl,
    ImageUrlPart,
    Message,
    MessagesAppended,
    Origin,
    Segment,
    SegmentStarted,
    TextPart,
    TranscriptEvent,
    ViewChanged,
    ViewLeft,
)
from server.model.transcript import Transcript
from server.store import (
    AppendResult,
    NewTranscript,
    Receipt,
    RevisionMismatch,
    Store,
    StoredTranscript,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
)

EPOCH = "e1"
CREATED_AT = 1_700_000_000_000
#: The digest of the history ``test_the_digest_at_every_revision_survives_a_reopen``
#: writes, the same in every backend (computed once, by hand: a change to how
#: digests are computed must change this too, and every stored history with it).
HISTORY_DIGEST = "178fb6c6eefe8881e3ae60c64fbe50df"


class StoreBackend(Protocol):
    #: Whether data survives ``close()`` and a new ``make()``.
    persistent: bool

    def make(self, **options: Any) -> Store:
        """A new, unopened store over this test's place; ``options`` go to the
        constructor (the contract uses ``idempotency_retention``)."""
        ...


def message(i: int, role: str = "user") -> Message:
    return Message(role=role, content=f"message {i}")  # type: ignore[arg-type]


def appended(
    revision: int,
    start: int,
    count: int = 1,
    *,
    transcript_id: str = "t1",
    epoch: str = EPOCH,
    origin: Origin | None = None,
) -> TranscriptEvent:
    """An event appending ``count`` plain messages at ``start``."""
    return TranscriptEvent(
        transcript_id=transcript_id,
        epoch=epoch,
        revision=revision,
        occurred_at=CREATED_AT + revision,
        change=MessagesAppended(start, tuple(message(start + i) for i in range(count))),
        origin=origin,
    )


def segment_started(
    revision: int, previous_start: int, start: int, end: int, *, transcript_id: str = "t1"
) -> TranscriptEvent:
    return TranscriptEvent(
        transcript_id=transcript_id,
        epoch=EPOCH,
        revision=revision,
        occurred_at=CREATED_AT + revision,
        change=SegmentStarted(previous_start, start, end),
    )


def view_event(revision: int, change: ViewChanged | ViewLeft) -> TranscriptEvent:
    return TranscriptEvent(
        transcript_id="t1",
        epoch=EPOCH,
        revision=revision,
        occurred_at=CREATED_AT + revision,
        change=change,
    )


def rich_messages() -> tuple[Message, ...]:
    """Messages using every field and content part kind."""
    return (
        Message(role="system", content="be brief", metadata={"source": "import"}),
        Message(
            role="user",
            content=(
                TextPart("look at this: "),
                ImageUrlPart(ImageUrl("data:image/png;base64,iVBORw0KGgo=", detail="low")),
                AttachmentPart("notes.txt", "text/plain", "line 1\nline 2 \u00e9\u4e2d"),
            ),
            name="ada",
            metadata={"nested": {"list": [1, 2.5, None, True, "x"]}, "n": -(2**40)},
        ),
        Message(
            role="assistant",
            content="",
            tool_calls=({"id": "call_1", "type": "function", "function": {"name": "f"}},),
        ),
        Message(role="tool", content="42", tool_call_id="call_1"),
        Message(role="context", content="Once upon a time"),
    )


class StoreContract:
    """Tests every backend must pass; see the module docstring."""

    @pytest.fixture
    def store_backend(self) -> StoreBackend:
        raise NotImplementedError("a backend's test class supplies store_backend")

    @pytest.fixture
    async def store(self, store_backend: StoreBackend) -> AsyncIterator[Store]:
        store = store_backend.make()
        await store.open()
        yield store
        await store.close()

    async def test_is_a_store(self, store: Store) -> None:
        assert isinstance(store, Store)
        assert store.name

    # --- create / exists / load -------------------------------------------------

    async def test_unknown_transcript(self, store: Store) -> None:
        assert await store.load("nope") is None
        assert await store.delete("nope") is False
        assert await store.list() == []
        with pytest.raises(TranscriptNotFound) as caught:
            await store.append(appended(1, 0, transcript_id="nope"))
        assert caught.value.transcript_id == "nope"
        with pytest.raises(TranscriptNotFound):
            await store.events_after("nope", 0)

    async def test_create_empty(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        assert await store.load("t1") == StoredTranscript("t1", EPOCH, CREATED_AT, (), {}, 0)
        assert await store.events_after("t1", 0) == []
        assert await store.list() == [TranscriptInfo("t1", EPOCH, 0, 0, CREATED_AT, CREATED_AT)]
        with pytest.raises(TranscriptExists) as caught:
            await store.create(NewTranscript("t1", "other", CREATED_AT))
        assert caught.value.transcript_id == "t1"
        loaded = await store.load("t1")
        assert loaded is not None
        assert loaded.epoch == EPOCH

    async def test_create_with_first_event(self, store: Store) -> None:
        first = appended(1, 0, 3)
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, first, idempotency_key="k1"))
        loaded = await store.load("t1")
        assert loaded is not None
        # ``size``: about the event's encoding, whatever the backend's format.
        assert 0.5 < loaded.size / len(msgspec.msgpack.encode(first)) < 2
        assert msgspec.structs.replace(loaded, size=0) == StoredTranscript(
            "t1", EPOCH, CREATED_AT, (first,), {"k1": Receipt(1, 0, 3)}
        )
        assert loaded.revision == 1
        [info] = await store.list()
        assert (info.revision, info.length, info.updated_at) == (1, 3, first.occurred_at)
        # The creating request retried as an append is recognised.
        retry = await store.append(appended(1, 0, 3), idempotency_key="k1")
        assert retry == AppendResult(Receipt(1, 0, 3), duplicate=True)

    async def test_create_refuses_a_foreign_first_event(self, store: Store) -> None:
        with pytest.raises(RevisionMismatch) as caught:
            await store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(2, 0)))
        assert caught.value.current == 0
        with pytest.raises(ValueError):
            await store.create(
                NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0, transcript_id="t2"))
            )
        with pytest.raises(ValueError):
            await store.create(
                NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0, epoch="other"))
            )
        assert await store.load("t1") is None

    # --- append -------------------------------------------------------------------

    async def test_append_in_order(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        events = [
            appended(1, 0, 2),
            appended(2, 2, 1),
            segment_started(3, 0, 3, 3),
            appended(4, 3, 2),
        ]
        acks = [(await store.append(e)).receipt for e in events]
        assert acks == [
            Receipt(1, 0, 2),
            Receipt(2, 2, 1),
            Receipt(3, 3, 0),
            Receipt(4, 3, 2),
        ]
        loaded = await store.load("t1")
        assert loaded is not None
        assert loaded.events == tuple(events)
        assert loaded.revision == 4
        assert loaded.idempotency == {}
        [info] = await store.list()
        assert info == TranscriptInfo(
            "t1", EPOCH, 4, 5, CREATED_AT, events[-1].occurred_at, "message 0", "message 4"
        )

    async def test_append_many_keeps_order_and_reports_each_outcome(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        await store.append(appended(1, 0), idempotency_key="seen")
        outcomes = await store.append_many(
            [(appended(2, 1), "a"), (appended(3, 2, 2), None), (appended(4, 4), "b")],
        )
        assert outcomes == [
            AppendResult(Receipt(2, 1, 1)),
            AppendResult(Receipt(3, 2, 2)),
            AppendResult(Receipt(4, 4, 1)),
        ]
        # A replayed key answers its first ack; what was planned on top of it
        # is refused as a mismatch and nothing after it is stored.
        outcomes = await store.append_many([(appended(5, 5), "seen"), (appended(6, 6), "c")])
        assert outcomes[0] == AppendResult(Receipt(1, 0, 1), duplicate=True)
        assert isinstance(outcomes[1], RevisionMismatch) and outcomes[1].current == 4
        loaded = await store.load("t1")
        assert loaded is not None and loaded.revision == 4
        assert [e.revision for e in loaded.events] == [1, 2, 3, 4]

    async def test_an_append_not_at_the_stored_position_is_refused(self, store: Store) -> None:
        # The next revision, but planned on another history (a length of 1,
        # not 2): storing it would put message 1 at index 1 a second time.
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0, 2)))
        for wrong in (appended(2, 1), appended(2, 3), segment_started(2, 0, 1, 1)):
            with pytest.raises(RevisionMismatch) as caught:
                await store.append(wrong, idempotency_key="k")
            assert caught.value.current == 1
            [outcome] = await store.append_many([(wrong, None)])
            assert isinstance(outcome, RevisionMismatch) and outcome.current == 1
        with pytest.raises(RevisionMismatch):
            await store.create(
                NewTranscript("t2", EPOCH, CREATED_AT, appended(1, 1, transcript_id="t2"))
            )
        assert await store.load("t2") is None
        loaded = await store.load("t1")
        assert loaded is not None and [e.revision for e in loaded.events] == [1]
        # The key of a refused append was not recorded; a View change has no position.
        assert await store.recorded("t1", "k") is None
        assert (await store.append(appended(2, 2), idempotency_key="k")).receipt == Receipt(2, 2, 1)
        assert (await store.append(view_event(3, ViewChanged("v", 0)))).receipt.revision == 3

    @pytest.mark.parametrize("overtaking", [1, 2], ids=["same-size", "other-size"])
    async def test_append_many_stores_nothing_past_an_append_that_was_overtaken(
        self, store: Store, overtaking: int
    ) -> None:
        """Another replica's append lands before a run planned without it:
        the run's first append no longer fits, and nothing after it may land,
        even one whose revision and position happen to fit again (equal sizes)."""
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0)))
        other = Origin(context_id="the other replica")
        await store.append(appended(2, 1, overtaking, origin=other))
        run = [(appended(2, 1), "a"), (appended(3, 2), None), (appended(4, 3), "c")]
        outcomes = await store.append_many(run)
        assert all(isinstance(o, RevisionMismatch) and o.current == 2 for o in outcomes), outcomes
        # Inside a run: once an append is not stored (here one planned at
        # a wrong position, then one whose key is recorded already), no later
        # one is, even one that would fit where the store is now.
        await store.append(
            appended(3, 1 + overtaking, overtaking, origin=other), idempotency_key="seen"
        )
        end = 1 + 2 * overtaking
        run = [
            (appended(4, end), "d"),
            (appended(5, end + 5), "e"),
            (appended(5, end + 1), "f"),
            (appended(6, end + 2), "g"),
        ]
        outcomes = await store.append_many(run)
        assert outcomes[0] == AppendResult(Receipt(4, end, 1))
        assert all(isinstance(o, RevisionMismatch) for o in outcomes[1:]), outcomes
        outcomes = await store.append_many(
            [
                (appended(5, end + 1), "h"),
                (appended(6, end + 2), "seen"),
                (appended(6, end + 2), "i"),
            ]
        )
        assert outcomes[0] == AppendResult(Receipt(5, end + 1, 1))
        assert outcomes[1] == AppendResult(Receipt(3, 1 + overtaking, overtaking), duplicate=True)
        assert isinstance(outcomes[2], RevisionMismatch), outcomes
        # Nothing past a refused append was stored, nor its key recorded.
        loaded = await store.load("t1")
        assert loaded is not None
        assert [e.revision for e in loaded.events] == [1, 2, 3, 4, 5]
        assert loaded.events[-2:] == (run[0][0], appended(5, end + 1))
        for key in ("a", "c", "e", "f", "g", "i"):
            assert await store.recorded("t1", key) is None
        state = await store.load_recent("t1")
        assert state is not None and state.snapshot.length == end + 2
        Transcript.restore(loaded.events)  # a consistent history: it loads

    async def test_append_many_stops_only_the_transcript_of_a_refused_append(
        self, store: Store
    ) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        await store.create(NewTranscript("t2", EPOCH, CREATED_AT))
        outcomes = await store.append_many(
            [
                (appended(2, 0), None),  # t1 is at 0: refused
                (appended(1, 0, transcript_id="t2"), None),
                (appended(1, 0), None),  # planned after the refused one: not stored
                (appended(2, 1, transcript_id="t2"), None),
            ]
        )
        assert isinstance(outcomes[0], RevisionMismatch)
        assert isinstance(outcomes[2], RevisionMismatch)
        assert outcomes[1] == AppendResult(Receipt(1, 0, 1))
        assert outcomes[3] == AppendResult(Receipt(2, 1, 1))
        assert await store.events_after("t1", 0) == []
        outcomes = await store.append_many([(appended(1, 0, transcript_id="gone"), None)] * 2)
        assert all(isinstance(o, TranscriptNotFound) for o in outcomes)

    async def test_revision_mismatch_carries_current(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0)))
        for wrong in (appended(3, 1), appended(1, 1)):
            with pytest.raises(RevisionMismatch) as caught:
                await store.append(wrong, idempotency_key=f"k{wrong.revision}")
            assert (caught.value.transcript_id, caught.value.current) == ("t1", 1)
            assert caught.value.expected == wrong.revision - 1
        loaded = await store.load("t1")
        assert loaded is not None
        assert (loaded.revision, loaded.idempotency) == (1, {})
        # A refused append recorded no key: the same key now appends.
        result = await store.append(appended(2, 1), idempotency_key="k3")
        assert result == AppendResult(Receipt(2, 1, 1))

    async def test_event_of_another_epoch_is_refused(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        with pytest.raises(RevisionMismatch) as caught:
            await store.append(appended(1, 0, epoch="stale"))
        assert caught.value.current == 0
        assert await store.events_after("t1", 0) == []

    async def test_idempotent_retry_returns_first_ack(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        await store.create(NewTranscript("t2", EPOCH, CREATED_AT))
        first = await store.append(appended(1, 0, 2), idempotency_key="k")
        assert first == AppendResult(Receipt(1, 0, 2), duplicate=False)
        # The same request again, and a retry built after a reload (next revision).
        for retry in (appended(1, 0, 2), appended(2, 2, 2)):
            again = await store.append(retry, idempotency_key="k")
            assert again == AppendResult(Receipt(1, 0, 2), duplicate=True)
        assert await store.events_after("t1", 0) == [appended(1, 0, 2)]
        # Keys belong to one transcript.
        other = await store.append(appended(1, 0, transcript_id="t2"), idempotency_key="k")
        assert other == AppendResult(Receipt(1, 0, 1))
        # A segment start's ack: the new active start and count 0.
        seg = await store.append(segment_started(2, 0, 1, 2), idempotency_key="s")
        assert seg.receipt == Receipt(2, 1, 0)
        assert (await store.append(segment_started(3, 1, 2, 2), idempotency_key="s")).duplicate

    async def test_key_is_reusable_after_retention(self, store_backend: StoreBackend) -> None:
        store = store_backend.make(idempotency_retention=3)
        await store.open()
        try:
            await store.create(
                NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0), idempotency_key="k1")
            )
            for r in (2, 3, 4):
                await store.append(appended(r, r - 1), idempotency_key=f"k{r}")
            await store.append(appended(5, 4))  # no key: prunes nothing
            loaded = await store.load("t1")
            assert loaded is not None
            assert list(loaded.idempotency) == ["k2", "k3", "k4"]
            assert loaded.idempotency["k4"] == Receipt(4, 3, 1)
            assert (await store.append(appended(5, 4), idempotency_key="k2")).duplicate
            reused = await store.append(appended(6, 5), idempotency_key="k1")
            assert reused == AppendResult(Receipt(6, 5, 1), duplicate=False)
            loaded = await store.load("t1")
            assert loaded is not None
            assert list(loaded.idempotency) == ["k3", "k4", "k1"]
        finally:
            await store.close()

    async def test_recorded_answers_a_kept_key(self, store_backend: StoreBackend) -> None:
        store = store_backend.make()
        await store.open()
        try:
            await store.create(
                NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0), idempotency_key="k1")
            )
            await store.append(appended(2, 1), idempotency_key="k2")
            assert await store.recorded("t1", "k1") == Receipt(1, 0, 1)
            assert await store.recorded("t1", "k2") == Receipt(2, 1, 1)
            assert await store.recorded("t1", "nope") is None
            assert await store.recorded("nobody", "k1") is None
        finally:
            await store.close()

    async def test_retention_zero_keeps_no_keys(self, store_backend: StoreBackend) -> None:
        store = store_backend.make(idempotency_retention=0)
        await store.open()
        try:
            await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
            await store.append(appended(1, 0), idempotency_key="k")
            result = await store.append(appended(2, 1), idempotency_key="k")
            assert result == AppendResult(Receipt(2, 1, 1))
        finally:
            await store.close()

    def test_idempotency_settings_are_checked(self, store_backend: StoreBackend) -> None:
        """Every backend refuses the same settings (``check_idempotency_args``)."""
        with pytest.raises(ValueError, match="idempotency_retention"):
            store_backend.make(idempotency_retention=-1)
        with pytest.raises(ValueError, match="idempotency_ttl_s"):
            store_backend.make(idempotency_ttl_s=0)

    # --- events_after ---------------------------------------------------------------

    async def test_events_after(self, store: Store) -> None:
        events = [appended(r, r - 1) for r in range(1, 6)]
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, events[0]))
        for e in events[1:]:
            await store.append(e)
        assert await store.events_after("t1", 0) == events
        assert await store.events_after("t1", 2) == events[2:]
        assert await store.events_after("t1", 2, limit=2) == events[2:4]
        assert await store.events_after("t1", 4, limit=10) == events[4:]
        assert await store.events_after("t1", 1, limit=0) == []
        assert await store.events_after("t1", 5) == []
        # Beyond the stored revision: a history this store does not have.
        assert await store.events_after("t1", 6) is None
        with pytest.raises(ValueError):
            await store.events_after("t1", -1)

    # --- list / delete ---------------------------------------------------------------

    async def test_list_orders_by_id_with_after_and_limit(self, store: Store) -> None:
        for tid in ("b", "d", "a", "c", "a.1"):
            await store.create(NewTranscript(tid, EPOCH, CREATED_AT))
        await store.append(appended(1, 0, 2, transcript_id="c"))

        async def ids(**kwargs: Any) -> list[str]:
            return [info.transcript_id for info in await store.list(**kwargs)]

        assert await ids() == ["a", "a.1", "b", "c", "d"]
        assert await ids(limit=2) == ["a", "a.1"]
        assert await ids(after="a.1", limit=2) == ["b", "c"]
        assert await ids(after="b") == ["c", "d"]
        assert await ids(after="bb") == ["c", "d"]
        assert await ids(after="d") == []
        assert await ids(limit=0) == []
        [c] = await store.list(after="b", limit=1)
        assert (c.revision, c.length) == (1, 2)

    async def test_delete(self, store: Store) -> None:
        await store.create(
            NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0), idempotency_key="k")
        )
        await store.create(NewTranscript("t2", EPOCH, CREATED_AT))
        assert await store.delete("t1") is True
        assert await store.load("t1") is None
        assert await store.delete("t1") is False
        assert [i.transcript_id for i in await store.list()] == ["t2"]
        with pytest.raises(TranscriptNotFound):
            await store.append(appended(2, 1))
        # Created again: a new history, nothing of the old one (not its keys).
        await store.create(NewTranscript("t1", "e2", CREATED_AT + 5))
        assert await store.load("t1") == StoredTranscript("t1", "e2", CREATED_AT + 5, (), {}, 0)
        result = await store.append(appended(1, 0, epoch="e2"), idempotency_key="k")
        assert not result.duplicate

    # --- exact round trip ---------------------------------------------------------------

    async def test_load_gives_back_exactly_the_events_written(self, store: Store) -> None:
        msgs = rich_messages()
        origin = Origin("conn-7")
        events = [
            TranscriptEvent("t1", EPOCH, 1, CREATED_AT, MessagesAppended(0, msgs[:2]), origin),
            TranscriptEvent("t1", EPOCH, 2, CREATED_AT + 1, SegmentStarted(0, 1, 2), origin),
            TranscriptEvent("t1", EPOCH, 3, CREATED_AT + 2, MessagesAppended(2, msgs[2:])),
        ]
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, events[0]))
        await store.append(events[1])
        await store.append(events[2])
        loaded = await store.load("t1")
        assert loaded is not None
        assert loaded.events == tuple(events)
        first = loaded.events[0].change
        assert isinstance(first, MessagesAppended)
        assert first.messages[1].content == msgs[1].content
        assert first.messages[1].metadata == msgs[1].metadata
        assert loaded.events[0].origin == origin
        assert await store.events_after("t1", 1) == events[1:]

    # --- digests (issue 29) --------------------------------------------------------------

    async def test_the_digest_at_every_revision_survives_a_reopen(
        self, store_backend: StoreBackend
    ) -> None:
        """Events keep the digest their transcript computed, ``load_recent``
        gives the one at the revision, and every backend gives the same
        ones for the same history (the digests are the history's, computed
        by ``protocol.digest``, never the store's)."""
        entity = Transcript(id="t1", epoch=EPOCH, clock=lambda: CREATED_AT)
        events = [entity.prepare_append([message(0), message(1)])]
        entity.apply(events[-1])  # type: ignore[arg-type]
        for change in (
            lambda: entity.prepare_segment(1),
            lambda: entity.prepare_view("v", 0),
            lambda: entity.prepare_append([message(2)]),
            lambda: entity.prepare_leave_view("v"),
        ):
            events.append(change())
            entity.apply(events[-1])  # type: ignore[arg-type]
        store = store_backend.make()
        await store.open()
        try:
            await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
            empty = await store.load_recent("t1", messages=1)
            assert empty is not None and empty.snapshot.digest == genesis_digest("t1")
            for event in events:
                assert event is not None
                await store.append(event)
            if store_backend.persistent:
                await store.close()
                store = store_backend.make()
                await store.open()
            state = await store.load_recent("t1", messages=1)
            assert state is not None
            assert state.snapshot.digest == entity.digest == HISTORY_DIGEST
            loaded = await store.load("t1")
            assert loaded is not None
            assert [e.digest for e in loaded.events] == [e.digest for e in events if e]
            assert Transcript.restore(loaded.events).digest == entity.digest
        finally:
            await store.close()

    async def test_the_digest_of_events_stored_without_one_is_computed(self, store: Store) -> None:
        """Events written before digests existed (or by hand) carry none:
        the digest at the revision is computed from the log."""
        events = [appended(1, 0, 2), segment_started(2, 0, 1, 2), appended(3, 2, 1)]
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, events[0]))
        for event in events[1:]:
            await store.append(event)
        state = await store.load_recent("t1", messages=1)
        assert state is not None
        assert state.snapshot.digest == history_digest("t1", [e.change for e in events])

    # --- concurrency ------------------------------------------------------------------

    async def test_one_winner_per_revision(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        outcomes = await asyncio.gather(
            *(store.append(appended(1, 0, origin=Origin(f"c{i}"))) for i in range(20)),
            return_exceptions=True,
        )
        winners = [o for o in outcomes if isinstance(o, AppendResult)]
        losers = [o for o in outcomes if isinstance(o, RevisionMismatch)]
        assert len(winners) == 1
        assert len(losers) == 19
        assert {e.current for e in losers} == {1}
        loaded = await store.load("t1")
        assert loaded is not None
        assert len(loaded.events) == 1

    async def test_concurrent_writers_never_lose_or_repeat(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        writers, per_writer = 8, 5

        async def writer(name: str) -> list[int]:
            mine: list[int] = []
            known = 0
            while len(mine) < per_writer:
                event = appended(known + 1, known, origin=Origin(name))
                try:
                    result = await store.append(event)
                except RevisionMismatch as err:
                    known = err.current
                    continue
                mine.append(result.receipt.revision)
                known = result.receipt.revision
            return mine

        won = await asyncio.gather(*(writer(f"w{i}") for i in range(writers)))
        total = writers * per_writer
        assert sorted(r for mine in won for r in mine) == list(range(1, total + 1))
        loaded = await store.load("t1")
        assert loaded is not None
        assert [e.revision for e in loaded.events] == list(range(1, total + 1))
        # Each stored event is the one its winner wrote.
        for i, mine in enumerate(won):
            for r in mine:
                assert loaded.events[r - 1].origin == Origin(f"w{i}")

    async def test_concurrent_retries_of_one_key_append_once(self, store: Store) -> None:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        results = await asyncio.gather(
            *(store.append(appended(1, 0, 2), idempotency_key="k") for _ in range(10))
        )
        assert [r.duplicate for r in results].count(False) == 1
        assert {r.receipt for r in results} == {Receipt(1, 0, 2)}
        assert len(await store.events_after("t1", 0) or []) == 1

    async def test_a_refused_append_does_not_fail_concurrent_ones(self, store: Store) -> None:
        ids = [f"t{i}" for i in range(10)]
        for tid in ids:
            await store.create(NewTranscript(tid, EPOCH, CREATED_AT))
        batch = [store.append(appended(1, 0, transcript_id=tid)) for tid in ids]
        batch.insert(3, store.append(appended(5, 0, transcript_id="t3")))
        batch.insert(6, store.append(appended(1, 0, transcript_id="missing")))
        outcomes = await asyncio.gather(*batch, return_exceptions=True)
        assert isinstance(outcomes[3], RevisionMismatch)
        assert isinstance(outcomes[6], TranscriptNotFound)
        ok = [o for i, o in enumerate(outcomes) if i not in (3, 6)]
        assert ok == [AppendResult(Receipt(1, 0, 1))] * len(ids)
        for info in await store.list():
            assert info.revision == 1

    # --- lifecycle ----------------------------------------------------------------------

    async def test_closed_store_is_unavailable(self, store_backend: StoreBackend) -> None:
        store = store_backend.make()
        await store.open()
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        await store.close()
        with pytest.raises(StoreUnavailable):
            await store.load("t1")
        with pytest.raises(StoreUnavailable):
            await store.append(appended(1, 0))

    async def test_close_and_open_again_keeps_everything(self, store_backend: StoreBackend) -> None:
        if not store_backend.persistent:
            pytest.skip("this backend keeps nothing across close")
        store = store_backend.make()
        await store.open()
        await store.create(
            NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0, 2), idempotency_key="k1")
        )
        await store.create(NewTranscript("t2", "e2", CREATED_AT + 1))
        length = 2
        for r in range(2, 6):
            await store.append(appended(r, length, r % 3 + 1), idempotency_key=f"k{r}")
            length += r % 3 + 1
        before = (await store.load("t1"), await store.load("t2"), await store.list())
        await store.close()

        reopened = store_backend.make()
        await reopened.open()
        try:
            after = (await reopened.load("t1"), await reopened.load("t2"), await reopened.list())
            assert after == before
            assert (await reopened.append(appended(1, 0, 2), idempotency_key="k1")).duplicate
            result = await reopened.append(appended(6, length))
            assert result.receipt.revision == 6
        finally:
            await reopened.close()

    # --- windows, ranges and Views (issue 18) ----------------------------------------

    async def _long(self, store: Store) -> list[TranscriptEvent]:
        """t1: 10 appends of 1..3 messages, two segment starts and View
        changes in between; returns the events."""
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        events: list[TranscriptEvent] = []
        length, active = 0, 0
        revision = 0
        for i in range(10):
            revision += 1
            event = appended(revision, length, i % 3 + 1)
            events.append(event)
            length += i % 3 + 1
            if i in (3, 7):
                revision += 1
                events.append(segment_started(revision, active, length - 1, length))
                active = length - 1
            if i == 5:
                revision += 1
                events.append(view_event(revision, ViewChanged("draft", 2, None)))
                revision += 1
                events.append(view_event(revision, ViewChanged("old", 0, 4)))
            if i == 8:
                revision += 1
                events.append(view_event(revision, ViewLeft("old", 0, 4)))
        for event in events:
            await store.append(event)
        return events

    async def test_load_recent_is_the_state_with_the_newest_messages(self, store: Store) -> None:
        events = await self._long(store)
        whole = Transcript.restore(events)
        for keep in (None, 0, 1, 5, whole.length, whole.length + 10):
            state = await store.load_recent("t1", messages=keep)
            assert state is not None
            start = 0 if keep is None else max(0, whole.length - keep)
            assert state.snapshot == whole.snapshot(start=start), keep
            assert state.created_at == CREATED_AT
        assert await store.load_recent("nope", messages=5) is None
        assert [v.name for v in whole.views()] == ["draft"]
        assert whole.state.view_changes == 3

    async def test_read_messages_reads_any_range(self, store: Store) -> None:
        events = await self._long(store)
        whole = Transcript.restore(events)
        length = whole.length
        for start, end in [(0, 0), (0, 1), (0, length), (3, 9), (length - 1, length), (4, 5)]:
            read = await store.read_messages("t1", start, end)
            assert (read.epoch, read.revision, read.length) == (EPOCH, whole.revision, length)
            assert (read.start, read.messages) == (start, whole.messages(start, end))
        beyond = await store.read_messages("t1", length - 2, length + 50)
        assert (beyond.start, beyond.end) == (length - 2, length)
        past = await store.read_messages("t1", length + 5, length + 9)
        assert (past.start, past.messages) == (length, ())
        with pytest.raises(ValueError):
            await store.read_messages("t1", 5, 4)
        with pytest.raises(TranscriptNotFound):
            await store.read_messages("nope", 0, 1)

    async def test_views_and_summary_survive_in_the_log(self, store: Store) -> None:
        events = await self._long(store)
        loaded = await store.load("t1")
        assert loaded is not None and loaded.events == tuple(events)
        [info] = await store.list()
        assert (info.title, info.preview) == ("message 0", f"message {info.length - 1}")

    async def test_deleted_and_created_again_reads_the_new_history(self, store: Store) -> None:
        await self._long(store)
        assert await store.delete("t1")
        await store.create(NewTranscript("t1", "e2", CREATED_AT, appended(1, 0, 2, epoch="e2")))
        state = await store.load_recent("t1", messages=10)
        assert state is not None
        assert (state.epoch, state.snapshot.length, state.snapshot.views) == ("e2", 2, ())
        assert state.snapshot.segments == (Segment(0, None),)
        read = await store.read_messages("t1", 0, 10)
        assert (read.epoch, len(read.messages)) == ("e2", 2)
