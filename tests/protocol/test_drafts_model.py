"""Drafts through a faulty channel: a model check of ``protocol.drafts`` in the consumer core.

A model server holds one transcript and one or two drafts being written at
once. It numbers each draft's updates and queues them for one connection the
way ``server.live.outbound`` does: each update on its own, merged into one ``text``
of the draft's state when the connection falls behind (rendered when it is
sent), a commit's increment and ``final`` together, and after every answered
subscribe one ``text`` per open draft and the close of every draft closed
recently, with the answer, in one message. The channel between the two
delays frames (several land in one message), drops single frames (the seq
shows the gap), and cuts the connection (whatever was queued is lost).

Whatever happens:

- the text of every draft the consumer holds is the server's text of some
  update of that draft (a prefix state: never a mix, never ahead);
- without dropped frames, no message leaves the consumer showing both a
  committed draft and its message, or (once shown) neither;
- at the end every draft is closed, the copy holds the committed messages,
  and a draft the consumer saw closes with exactly the committed text when
  no frame was dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.consumer import Consumer, DraftClosed, Subscription
from protocol.wire import Ping, Subscribe

T = "t1"
EPOCH = "e1"


@dataclass
class Draft:
    draft_id: str
    states: list[str] = field(default_factory=lambda: [""])
    closed: str | None = None  # "final", "cancelled"
    revision: int | None = None

    @property
    def n(self) -> int:
        return len(self.states) - 1


@dataclass
class Item:
    """A queued frame: a rendered frame, or a merged draft rendered when sent."""

    frame: dict[str, Any] | None = None
    current_of: str | None = None


class Server:
    """One transcript, its drafts, and one connection's outbound queue."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.drafts: dict[str, Draft] = {}
        self.queue: list[list[Item]] = []  # groups: each leaves in one message
        self.seq = 0
        self.subscribed = False
        self.dropped = 0

    @property
    def revision(self) -> int:
        return len(self.messages)

    # --- what the writer does --------------------------------------------------------

    def update(self, draft_id: str, delta: str | None, text: str | None) -> None:
        draft = self.drafts.setdefault(draft_id, Draft(draft_id))
        assert draft.closed is None
        new = draft.states[-1] + delta if delta is not None else text
        assert new is not None
        draft.states.append(new)
        frame = self._draft_frame(draft)
        frame["delta" if delta is not None else "text"] = delta if delta is not None else text
        if self.subscribed:
            self.queue.append([Item(frame)])

    def commit(self, draft_id: str) -> None:
        draft = self.drafts[draft_id]
        self.messages.append(draft.states[-1])
        draft.closed, draft.revision = "final", self.revision
        if self.subscribed:
            self.queue.append([Item(self._increment(self.revision)), Item(self._close(draft))])

    def cancel(self, draft_id: str) -> None:
        draft = self.drafts[draft_id]
        draft.closed = "cancelled"
        if self.subscribed:
            self.queue.append([Item(self._close(draft))])

    def merge(self, draft_id: str) -> None:
        """The connection fell behind: its queued updates of the draft become
        one text of the draft's state when it is sent."""
        lone = [
            i
            for i, group in enumerate(self.queue)
            if len(group) == 1
            and group[0].frame is not None
            and group[0].frame.get("draftId") == draft_id
            and group[0].frame.get("state") is None
        ]
        if not lone:
            return
        first = lone[0]
        self.queue = [g for i, g in enumerate(self.queue) if i not in lone[1:]]
        self.queue[first] = [Item(current_of=draft_id)]

    # --- frames --------------------------------------------------------------------------

    def _draft_frame(self, draft: Draft) -> dict[str, Any]:
        return {
            "type": "draft",
            "transcriptId": T,
            "draftId": draft.draft_id,
            "role": "assistant",
            "n": draft.n,
        }

    def _close(self, draft: Draft) -> dict[str, Any]:
        frame = self._draft_frame(draft) | {"state": draft.closed}
        if draft.revision is not None:
            frame["revision"] = draft.revision
        return frame

    def _text(self, draft: Draft) -> dict[str, Any]:
        return self._draft_frame(draft) | {"text": draft.states[-1]}

    def _increment(self, revision: int) -> dict[str, Any]:
        return {
            "type": "increment",
            "transcriptId": T,
            "event": {
                "transcriptId": T,
                "epoch": EPOCH,
                "revision": revision,
                "occurredAt": 1,
                "change": {
                    "kind": "messages-appended",
                    "start": revision - 1,
                    "messages": [{"role": "assistant", "content": self.messages[revision - 1]}],
                },
            },
        }

    def _baseline(self) -> dict[str, Any]:
        return {
            "type": "baseline",
            "snapshot": {
                "transcriptId": T,
                "epoch": EPOCH,
                "revision": self.revision,
                "start": 0,
                "messages": [{"role": "assistant", "content": m} for m in self.messages],
                "activeStart": 0,
                "segments": [{"start": 0, "end": None}],
                "length": self.revision,
            },
        }

    # --- the connection ----------------------------------------------------------------

    def handle(self, op: object) -> None:
        if isinstance(op, Subscribe):
            self.subscribed = True
            if op.from_revision is None or op.epoch != EPOCH:
                answer = [Item(self._baseline())]
            else:
                answer = [
                    Item(self._increment(r)) for r in range(op.from_revision + 1, self.revision + 1)
                ]
            for draft in self.drafts.values():
                answer.append(
                    Item(self._text(draft) if draft.closed is None else self._close(draft))
                )
            self.queue.append(answer)
        elif isinstance(op, Ping):
            self.queue.append([Item({"type": "pong", "ref": op.ref})])

    def render(self, item: Item) -> dict[str, Any]:
        if item.frame is not None:
            return item.frame
        assert item.current_of is not None
        # The draft's last text, even when it has closed since: its close
        # comes behind (with its message, for a commit).
        return self._text(self.drafts[item.current_of])

    def send(self, groups: int, drop: bool = False) -> str | None:
        """The next ``groups`` groups as one message (``drop``: the first
        frame is lost on the way, its seq with it)."""
        taken, self.queue = self.queue[:groups], self.queue[groups:]
        lines = []
        for item in (item for group in taken for item in group):
            self.seq += 1
            if drop:
                drop = False
                self.dropped += 1
                continue
            lines.append(json.dumps(self.render(item) | {"seq": self.seq}))
        return "\n".join(lines) if lines else None

    def reconnect(self) -> None:
        self.queue.clear()
        self.seq = 0
        self.subscribed = False


class Run:
    """The server, the consumer, and the checks made after every message."""

    def __init__(self) -> None:
        self.server = Server()
        self.consumer = Consumer()
        self.consumer.subscribe(T)
        self.seen: set[str] = set()  # drafts the consumer has shown
        self.closed: dict[str, DraftClosed] = {}
        self.lost = False
        self.connect()

    @property
    def subscription(self) -> Subscription:
        return self.consumer.subscriptions[T]

    def connect(self) -> None:
        self.consumer.connection_made()
        self._ops()

    def _ops(self) -> None:
        for op in self.consumer.ops_to_send():
            self.server.handle(op)

    def deliver(self, groups: int, drop: bool = False) -> None:
        message = self.server.send(groups, drop)
        if message is None:
            return
        self.consumer.receive_data(message)
        for update in self.consumer.updates_received():
            if isinstance(update, DraftClosed):
                self.closed[update.draft_id] = update
        self._ops()
        self.check()

    def reconnect(self) -> None:
        self.lost = self.lost or bool(self.server.queue)
        self.consumer.connection_lost()
        self.server.reconnect()
        self.connect()

    def check(self) -> None:
        subscription = self.subscription
        copy = subscription.copy
        for draft_id, held in subscription.drafts.items():
            truth = self.server.drafts[draft_id]
            assert held.n <= truth.n
            assert held.text == truth.states[held.n], (draft_id, held.n, held.text)
            self.seen.add(draft_id)
        for draft_id, truth in self.server.drafts.items():
            if truth.revision is None or draft_id not in self.seen:
                continue
            shown = draft_id in subscription.drafts
            has_message = copy is not None and copy.revision >= truth.revision
            # A final frame lost on the way leaves the draft until the resubscribe
            # answers; nothing ever removes it before its message is there.
            assert shown or has_message, f"{draft_id}: neither the draft nor its message"
            if not self.server.dropped:
                assert not (shown and has_message), f"{draft_id}: both the draft and its message"

    def finish(self) -> None:
        """Deliver everything, answering the consumer, until nothing moves
        (a heartbeat ping first: its pong shows a frame lost at the end)."""
        self.server.handle(Ping(ref="heartbeat"))
        for _ in range(100):
            if not self.server.queue:
                break
            self.deliver(len(self.server.queue))
        assert not self.server.queue


DRAFTS = ("d1", "d2")
WORDS = st.sampled_from(["a", "b", "cd", " ", "é", "\n", "x" * 5])
ACTIONS = st.one_of(
    st.tuples(st.just("delta"), st.sampled_from(DRAFTS), WORDS),
    st.tuples(st.just("text"), st.sampled_from(DRAFTS), st.text(max_size=6)),
    st.tuples(st.just("deliver"), st.integers(1, 4), st.just(False)),
    st.tuples(st.just("deliver"), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("merge"), st.sampled_from(DRAFTS), st.none()),
    st.tuples(st.just("reconnect"), st.none(), st.none()),
    st.tuples(st.sampled_from(["commit", "cancel"]), st.sampled_from(DRAFTS), st.none()),
)


def play(actions: list[tuple[Any, Any, Any]], order: list[str], cancel: bool) -> Run:
    run = Run()
    server = run.server
    for kind, a, b in actions:
        draft = server.drafts.get(a) if isinstance(a, str) else None
        if draft is not None and draft.closed is not None:
            continue  # it took its last update
        if kind == "delta":
            server.update(a, b, None)
        elif kind == "text":
            server.update(a, None, b)
        elif kind in ("commit", "cancel"):
            if draft is not None:
                (server.commit if kind == "commit" else server.cancel)(a)
        elif kind == "deliver":
            run.deliver(a, drop=b)
        elif kind == "merge":
            server.merge(a)
        else:
            run.reconnect()
    for draft_id in order:
        if draft_id in server.drafts and server.drafts[draft_id].closed is None:
            if cancel and draft_id == "d2":
                server.cancel(draft_id)
            else:
                server.commit(draft_id)
            run.deliver(1)
    run.finish()
    return run


@settings(max_examples=300, deadline=None)
@given(
    st.lists(ACTIONS, max_size=60),
    st.permutations(list(DRAFTS)),
    st.booleans(),
)
def test_a_consumer_only_ever_shows_a_state_the_draft_had_and_ends_with_its_message(
    actions: list[tuple[Any, Any, Any]], order: list[str], cancel: bool
) -> None:
    run = play(actions, order, cancel)
    server, subscription = run.server, run.subscription
    assert subscription.drafts == {}, "every draft is closed at the end"
    copy = subscription.copy
    assert copy is not None and copy.messages is not None
    assert [m.content for m in copy.messages] == server.messages
    for draft_id in run.seen:
        truth = server.drafts[draft_id]
        closed = run.closed[draft_id]
        assert closed.state in (truth.closed, "gone")
        if closed.state == "final":
            assert closed.revision == truth.revision
        if not server.dropped and not run.lost and closed.state == "final":
            assert closed.text == truth.states[-1] == server.messages[truth.revision - 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DRAFTS), WORDS), max_size=30), st.data())
def test_every_grouping_of_the_frames_into_messages_keeps_the_commit_atomic(
    deltas: list[tuple[str, str]], data: st.DataObject
) -> None:
    """No frame lost, any number of frames per message: the consumer never
    shows a committed draft together with its message, or neither."""
    run = Run()
    run.deliver(len(run.server.queue))
    for draft_id, word in deltas:
        run.server.update(draft_id, word, None)
    for draft_id in DRAFTS:
        if draft_id in run.server.drafts:
            run.server.commit(draft_id)
    while run.server.queue:
        run.deliver(data.draw(st.integers(1, 3)))
    assert run.subscription.drafts == {}
    for draft_id, truth in run.server.drafts.items():
        assert run.closed[draft_id].state == "final"
        assert run.closed[draft_id].text == truth.states[-1]
