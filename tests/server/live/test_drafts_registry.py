"""``server.live.drafts``: the registry of one transcript's drafts, driven with a
clock the test holds. Every frame it makes is checked through the wire
validator, and a consumer's copy fed with them must show the server's text
(hypothesis drives random op sequences)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import codes, wire
from protocol.drafts import DraftCopy
from server.errors import Refused
from server.live.drafts import DraftBudget, DraftRules, Drafts, Written
from server.live.frames import EncodedDraft
from server.tuning import CLOSED_DRAFT_COST, OPEN_DRAFT_COST, REMOTE_DRAFT_GRACE_S


def frame_of(update: EncodedDraft | None, seq: int = 1, binary: bool = False) -> wire.DraftFrame:
    assert update is not None
    frame = wire.accept_transcript_update(update.render(seq, binary))
    assert isinstance(frame, wire.DraftFrame)
    return frame


def drafts(budget: DraftBudget | None = None, **rules: Any) -> Drafts:
    return Drafts("t", DraftRules(**{"max_open": 4, "max_bytes": 32, "ttl": 10.0, **rules}), budget)


def write(d: Drafts, draft_id: str, *, now: float, writer: str | None = None, **op: Any) -> Written:
    """``Drafts.write`` of the ``draft`` op of these fields that ``writer`` sent."""
    return d.write(wire.Draft(d.transcript_id, draft_id, **op), now=now, writer=writer)


def refused(code: str, call: Any, *args: Any, **kw: Any) -> Refused:
    with pytest.raises(Refused) as caught:
        call(*args, **kw)
    assert caught.value.code == code
    return caught.value


def test_a_draft_opens_grows_by_numbered_deltas_and_is_replaced_by_a_text() -> None:
    d = drafts()
    first = write(d, "a", now=0, delta="Hel")
    assert first.n == 1
    assert frame_of(first.update) == wire.DraftFrame(
        seq=1, transcript_id="t", draft_id="a", role="assistant", n=1, delta="Hel"
    )
    second = write(d, "a", now=1, delta="lo", role="user")  # later ops keep the role
    assert (second.n, frame_of(second.update).delta, frame_of(second.update).role) == (
        2,
        "lo",
        "assistant",
    )
    assert d.open["a"].text == "Hello"
    text = write(d, "a", now=2, text="Bye")
    assert (text.n, frame_of(text.update).text) == (3, "Bye")
    # MessagePack renders the same frame.
    assert frame_of(text.update, binary=True) == frame_of(text.update)


def test_an_op_without_text_opens_an_empty_draft_or_only_keeps_it_alive() -> None:
    d = drafts()
    opened = write(d, "a", now=0, role="tool")
    assert (opened.n, frame_of(opened.update).text, frame_of(opened.update).role) == (1, "", "tool")
    kept = write(d, "a", now=9)
    assert kept[:2] == (1, None)
    assert write(d, "a", now=9.5, delta="")[:2] == (1, None)
    assert d.expire(now=18) == ([], [])  # kept alive at 9.5: not idle for 10 s yet
    (expired,), _ = d.expire(now=20)
    assert frame_of(expired).state == "expired"


def test_limits_refuse_and_change_nothing() -> None:
    d = drafts(max_open=2, max_bytes=8)
    write(d, "a", now=0, delta="1234")
    write(d, "b", now=0)
    refused(codes.TOO_MANY_DRAFTS, write, d, "c", now=0, delta="x")
    assert set(d.open) == {"a", "b"}
    refused(codes.DRAFT_TOO_LARGE, write, d, "a", now=0, delta="12345")
    assert (d.open["a"].text, d.open["a"].n) == ("1234", 1)
    # Bytes of UTF-8, not characters: 3 euro signs are 9 bytes.
    refused(codes.DRAFT_TOO_LARGE, write, d, "b", now=0, text="\u20ac\u20ac\u20ac")
    assert write(d, "b", now=0, text="\u20ac\u20ac").n == 2
    assert d.open["b"].size == 6
    refused(codes.DRAFT_TOO_LARGE, write, d, "b", now=0, delta="\u20ac")
    # Closing one makes room for another.
    write(d, "a", now=0, cancel=True)
    assert write(d, "c", now=0).n == 1


def test_a_closed_draft_takes_no_more_updates_for_the_ttl() -> None:
    d = drafts()
    write(d, "a", now=0, delta="x")
    final = d.commit("a", 7, now=1)
    assert frame_of(final).state == "final" and frame_of(final).revision == 7
    error = refused(codes.DRAFT_CLOSED, write, d, "a", now=2, delta="late")
    assert "final" in error.message
    # A cancel of a draft never seen here is remembered too: a late first
    # token opens no ghost draft.
    assert write(d, "b", now=2, cancel=True)[:2] == (0, None)
    refused(codes.DRAFT_CLOSED, write, d, "b", now=3, delta="late")
    # A commit of a draft not open appends all the same and is remembered.
    assert d.commit("c", 8, now=3) is None
    refused(codes.DRAFT_CLOSED, write, d, "c", now=3, delta="late")
    # After the ttl the ids are forgotten.
    d.expire(now=13.5)
    assert not d
    assert write(d, "a", now=14, delta="again").n == 1


def test_catch_up_is_the_text_of_each_open_draft_and_the_finals_a_resume_needs() -> None:
    """Behind a baseline: the text of each open draft only. Behind a resume
    from revision R: also the ``final`` of each draft committed after R (the
    final of R came with increment R); never a ``cancelled`` or ``expired``
    (a consumer holding such a draft closes it as gone) nor the close of a
    draft that was never open."""
    d = drafts()
    write(d, "a", now=0, delta="Hel")
    write(d, "a", now=0, delta="lo")
    write(d, "b", now=0, delta="x")
    write(d, "b", now=1, cancel=True)
    write(d, "never", now=1, cancel=True)
    write(d, "c", now=1, delta="y")
    d.commit("c", 5, now=1)
    d.commit("ghost", 6, now=1)  # never open: nobody can hold it
    assert [(f.draft_id, f.n, f.text, f.state) for f in map(frame_of, d.catch_up(now=2))] == [
        ("a", 2, "Hello", "open")
    ]
    for resumed_from, finals in ((0, ["c"]), (4, ["c"]), (5, []), (6, [])):
        frames = [frame_of(f) for f in d.catch_up(now=2, resumed_from=resumed_from)]
        assert [(f.draft_id, f.state) for f in frames] == [
            ("a", "open"),
            *((c, "final") for c in finals),
        ]
    # The text frame is encoded once per update and shared.
    assert d.catch_up(now=2)[0] is d.catch_up(now=2)[0]
    assert [frame_of(f).draft_id for f in d.catch_up(now=11.5, resumed_from=0)] == ["a"]


def test_every_close_is_remembered_for_the_ttl_and_a_flood_is_refused() -> None:
    """Issue 23.5: 1,100 cancels of made-up ids once made the registry
    forget a committed draft (the oldest of 1,024), and a late token then
    reopened it. Now no close is forgotten before the ttl: past
    ``max_closed`` remembered, cancelling an unknown id or opening a draft is
    refused (``too-many-drafts`` naming the setting), a commit never is."""
    d = drafts(ttl=1000.0, max_closed=1024)
    write(d, "real", now=0, delta="x")
    d.commit("real", 1, now=0)
    refusals = 0
    for i in range(1100):
        try:
            write(d, f"made-up-{i}", now=1, cancel=True)
        except Refused as exc:
            assert exc.code == codes.TOO_MANY_DRAFTS and "max_closed_drafts" in exc.message
            refusals += 1
    assert refusals == 1100 - 1023 and len(d.closed) == 1024
    refused(codes.DRAFT_CLOSED, write, d, "real", now=2, delta="late")
    refused(codes.TOO_MANY_DRAFTS, write, d, "new", now=2, delta="x")
    assert d.commit("committed-anyway", 2, now=2) is None
    assert len(d.closed) == 1025
    refused(codes.DRAFT_CLOSED, write, d, "committed-anyway", now=2, delta="late")
    # Once forgotten (the ttl passed), drafts open again.
    d.expire(now=1002.5)
    assert not d.closed and write(d, "new", now=1003, delta="x").n == 1


def test_the_budget_counts_open_drafts_per_writer_and_in_all() -> None:
    """Issue 24.2: drafts count their bytes server-wide and per writing
    connection, subscribed to or not; past either an update is refused and
    the draft stays as it was; closing releases the bytes."""
    budget = DraftBudget(max_bytes=3 * OPEN_DRAFT_COST + 101, max_per_writer=OPEN_DRAFT_COST + 60)
    d = drafts(max_bytes=1000, budget=budget)
    write(d, "a", now=0, delta="x" * 50, writer="c1")
    assert budget.total == OPEN_DRAFT_COST + 50 and budget.by_writer == {"c1": budget.total}
    error = refused(codes.TOO_MANY_DRAFTS, write, d, "a", now=0, delta="y" * 11, writer="c1")
    assert "max_connection_draft_bytes" in error.message
    assert d.open["a"].text == "x" * 50
    refused(codes.TOO_MANY_DRAFTS, write, d, "b", now=0, delta="y", writer="c1")
    write(d, "b", now=0, delta="y" * 50, writer="c2")
    # Another writer going on with a draft takes its whole charge over.
    refused(codes.TOO_MANY_DRAFTS, write, d, "a", now=0, delta="z", writer="c2")
    write(d, "c", now=0, delta="z", writer="c3")
    error = refused(codes.TOO_MANY_DRAFTS, write, d, "d", now=0, delta="z", writer="c4")
    assert "max_draft_bytes)" in error.message
    write(d, "a", now=1, cancel=True, writer="c2")
    assert budget.by_writer == {"c2": OPEN_DRAFT_COST + 50, "c3": OPEN_DRAFT_COST + 1}
    # A close keeps the draft's text for its Durable Stream's late readers.
    assert budget.total == 2 * OPEN_DRAFT_COST + 51 + CLOSED_DRAFT_COST + 50
    d.commit("b", 3, now=1)
    d.expire(now=20)  # "c" expires; the closes older than the ttl are forgotten
    assert budget.by_writer == {} and budget.total == CLOSED_DRAFT_COST + 1
    d.expire(now=40)
    assert budget.total == 0
    write(d, "e", now=41, text="t", writer="c1")
    d.drop()
    assert budget.total == 0 and not d


def test_a_draft_built_from_one_character_deltas_costs_about_its_bytes() -> None:
    """Issue 24.2: one-character deltas, each its own update, cost 72 bytes
    per character (a string object and a list slot each); the text is now
    kept as UTF-8 in one growable buffer."""
    import tracemalloc

    d = drafts(max_bytes=1 << 20)
    ops = [
        wire.decode_client_op(f'{{"op":"draft","transcriptId":"t","draftId":"a","delta":"{c}"}}')
        for c in "abcdefghij" * 20_000
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, op in enumerate(ops):
            assert isinstance(op, wire.Draft)
            write(d, "a", now=i, delta=op.delta)
        del op
        ops.clear()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert d.open["a"].text == "abcdefghij" * 20_000
    assert held < 3 * 200_000, f"{held / 200_000:.1f} bytes per character"


def _remote(n: int, **kw: Any) -> wire.DraftFrame:
    return wire.DraftFrame(seq=0, transcript_id="t", draft_id="r", role="assistant", n=n, **kw)


def test_remote_updates_apply_in_order_and_report_gaps() -> None:
    d = drafts()
    assert d.apply_remote(_remote(2, delta="x"), now=0) is False  # its start was missed
    assert "r" not in d.open
    assert frame_of(d.apply_remote(_remote(2, text="ab"), now=0)).text == "ab"  # type: ignore[arg-type]
    assert d.apply_remote(_remote(3, delta="c"), now=0) is not None
    assert d.apply_remote(_remote(3, delta="c"), now=0) is None  # a repeat
    assert d.apply_remote(_remote(5, delta="e"), now=0) is False  # a gap
    assert (d.open["r"].text, d.open["r"].n, d.open["r"].size) == ("abc", 3, 3)
    assert frame_of(d.open["r"].text_frame()).text == "abc"
    closed = d.apply_remote(_remote(4, state="final", revision=9), now=1)
    assert frame_of(closed).revision == 9  # type: ignore[arg-type]
    assert d.apply_remote(_remote(5, delta="late"), now=1) is None
    assert d.apply_remote(_remote(5, state="expired"), now=1) is None


def test_a_remote_close_of_a_draft_never_open_here_refuses_a_late_local_token() -> None:
    d = drafts()
    assert d.apply_remote(_remote(3, state="final", revision=7), now=0) is None
    assert "r" not in d.open
    refused(codes.DRAFT_CLOSED, write, d, "r", now=1, delta="late")
    # A consumer that held it on the other replica and resumes here gets it.
    assert [frame_of(f).state for f in d.catch_up(now=1, resumed_from=6)] == ["final"]
    assert d.catch_up(now=1, resumed_from=7) == []


def test_a_remote_copy_written_here_becomes_this_replicas_own() -> None:
    d = drafts()
    d.apply_remote(_remote(1, delta="x"), now=0)
    assert d.open["r"].remote
    write(d, "r", now=1, delta="y")  # the writer moved to this replica
    assert not d.open["r"].remote
    local, remote = d.expire(now=11.5)
    assert ([frame_of(f).draft_id for f in local], remote) == (["r"], [])


def test_remote_copies_expire_later_and_apart_from_local_drafts() -> None:
    d = drafts()
    d.apply_remote(_remote(1, delta="x"), now=0)
    write(d, "a", now=0, delta="y")
    local, remote = d.expire(now=10.5)
    assert ([frame_of(f).draft_id for f in local], remote) == (["a"], [])
    local, remote = d.expire(now=10.5 + REMOTE_DRAFT_GRACE_S)
    assert (local, [frame_of(f).draft_id for f in remote]) == ([], ["r"])


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("delta"), st.text(max_size=6)),
        st.tuples(st.just("text"), st.text(max_size=10)),
        st.tuples(st.just("keep"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, drop=st.sets(st.integers(0, 40)))
def test_a_consumer_fed_the_frames_shows_a_prefix_state_and_a_catch_up_repairs_it(
    ops: list[tuple[str, str | None]], drop: set[int]
) -> None:
    """Whatever frames a consumer misses, its text is always the server's
    text of some update, and the catch-up's text makes it equal."""
    d = drafts(max_bytes=10_000)
    copy = DraftCopy("a", "assistant")
    states = {0: ""}
    for i, (kind, value) in enumerate(ops):
        if kind == "delta":
            written = write(d, "a", now=i, delta=value)
        elif kind == "text":
            written = write(d, "a", now=i, text=value)
        else:
            written = write(d, "a", now=i)
        states[written.n] = d.open["a"].text
        if written.update is not None and i not in drop:
            copy.take(frame_of(written.update))
        assert copy.text == states[copy.n]
    if "a" in d.open:
        copy.take(frame_of(d.catch_up(now=len(ops))[0]))
        assert (copy.text, copy.n) == (d.open["a"].text, d.open["a"].n)


STREAM_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("delta"), st.text(max_size=6)),
        st.tuples(st.just("text"), st.text(max_size=10)),
        st.tuples(st.just("keep"), st.none()),
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("read"), st.integers(0, 3)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=STREAM_OPS, close=st.sampled_from(["commit", "cancel", "expire", None]))
def test_a_drafts_stream_only_grows_and_every_reader_reads_the_same_bytes(
    ops: list[tuple[str, object]], close: str | None
) -> None:
    """Issue 27.2: a draft's Durable Stream is its text (UTF-8) while every
    update extends it; readers resuming from their offsets, at any time,
    assemble the same bytes; a text that rewrites it closes it, frozen at
    what both texts share; a close keeps what it held."""
    d = drafts(max_bytes=10_000, coalesce=0.5)
    readers = [b""] * 4
    seen = b""  # the stream's longest content so far
    closed_at: bytes | None = None
    for i, (kind, value) in enumerate(ops):
        now = i / 10
        if kind == "delta":
            assert isinstance(value, str)
            write(d, "a", now=now, delta=value)
        elif kind == "text":
            assert isinstance(value, str)
            write(d, "a", now=now, text=value)
        elif kind == "keep":
            write(d, "a", now=now)
        elif kind == "flush":
            d.flush("a", now)
        else:
            assert isinstance(value, int)
            found = d.stream("a", len(readers[value]))
            if found is None:
                assert not d.open  # not opened yet
                continue
            data, end, closed = found
            readers[value] += data
            assert len(readers[value]) == end or closed
        found = d.stream("a", 0)
        if found is None:
            continue
        whole, end, closed = found
        assert len(whole) == end
        if closed_at is not None:
            assert closed and whole == closed_at  # a closed stream never changes
        elif closed:
            closed_at = whole
            assert seen.startswith(whole)
        else:
            draft = d.open["a"]
            assert whole == draft.text.encode("utf-8", "surrogatepass")
            assert whole.startswith(seen)  # it only grows
            seen = whole
        for read in readers:
            assert whole[: len(read)] == read[: len(whole)]
    if "a" not in d.open:
        return
    text = d.stream("a", 0)
    assert text is not None
    if close == "commit":
        d.flush("a", 100)
        text = d.stream("a", 0)
        d.commit("a", 1, now=100)
    elif close == "cancel":
        write(d, "a", now=100, cancel=True)
    elif close == "expire":
        d.expire(now=100)
    else:
        return
    after = d.stream("a", 0)
    assert text is not None and after is not None
    assert after == (text[0], text[1], True)


def test_deltas_within_the_coalescing_interval_wait_and_go_out_as_one_update() -> None:
    d = drafts(coalesce=0.1, max_bytes=6)
    assert frame_of(write(d, "a", now=0, delta="a").update).delta == "a"  # at once
    held = write(d, "a", now=0.05, delta="b")
    assert held == (1, None, 0.1)  # the first held delta says when to flush
    assert write(d, "a", now=0.06, delta="c") == (1, None, None)
    assert (d.open["a"].text, d.open["a"].size) == ("a", 3)  # held: counted, not in the text
    refused(codes.DRAFT_TOO_LARGE, write, d, "a", now=0.07, delta="1234")
    flushed = frame_of(d.flush("a", now=0.1))
    assert (flushed.n, flushed.delta) == (2, "bc")
    assert d.flush("a", now=0.1) is None  # nothing waits
    assert frame_of(write(d, "a", now=0.25, delta="d").update).n == 3  # after a pause: at once
    write(d, "a", now=0.26, delta="e")
    replaced = frame_of(write(d, "a", now=0.27, text="T").update)
    assert (replaced.n, replaced.text) == (4, "T")  # a text drops what waited
    assert d.flush_all(now=0.4) == [] and d.open["a"].size == 1
    write(d, "a", now=0.28, delta="f")
    assert [frame_of(f).delta for f in d.flush_all(now=0.29)] == ["f"]
