"""The fast subscriber check (``tsync bench --fast``): the envelope only.

A full subscriber (``subscriber.Subscriber`` driving ``protocol.consumer``)
validates every frame and applies every event to a copy, which costs the
generator more CPU per delivery than the server spends on it: at a thousand
subscribers the generator saturates first and the run measures it instead of
the server. ``FastCheck`` decodes only the envelope of each frame (type,
``seq``, the event's id, epoch, revision and start, and how many messages it
carries, each kept as raw bytes) and checks what a consumer relies on:

- ``seq`` is 1, 2, 3, ... on each connection (a gap or a repeat is counted);
- per transcript, after a baseline at revision R the increments are R+1,
  R+2, ... of the same epoch, each starting where the last one ended (a gap
  is counted and answered with a resubscribe from the revision held, as a
  real client does; a repeat is counted and ignored);
- ``lagged`` is counted and answered with a resubscribe; other errors are
  counted.

Latency comes from the writer's timestamp, found in each message's raw bytes
(``"t":<ns>``) without decoding it. Draft frames go to a
``client_py.bench.draftcheck.DraftCheck``, and so does the content of each
message that committed a draft (``metadata.d``, the only messages decoded).
Pure: bytes in, ops out.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

import msgspec

if TYPE_CHECKING:
    from client_py.bench.draftcheck import DraftCheck
    from client_py.bench.stats import GroupStats

__all__ = ["SENT", "FastCheck", "sent_ns"]

#: The writer's timestamp in a message's raw JSON (``metadata.t``, ns).
SENT: Final = re.compile(rb'"t":(\d+)')
_DRAFT_ID: Final = re.compile(rb'"d":"')


class _Change(msgspec.Struct):
    kind: str
    start: int = 0
    messages: list[msgspec.Raw] = []


class _Event(msgspec.Struct, rename="camel"):
    transcript_id: str
    epoch: str
    revision: int
    change: _Change


class _Snapshot(msgspec.Struct, rename="camel"):
    transcript_id: str
    epoch: str
    revision: int
    start: int = 0
    messages: list[msgspec.Raw] = []
    #: The whole transcript's length (absent: the snapshot is whole).
    length: int | None = None


class _Frame(msgspec.Struct, rename="camel"):
    type: str
    seq: int = 0
    event: _Event | None = None
    snapshot: _Snapshot | None = None
    code: str | None = None
    transcript_id: str | None = None
    # A draft frame's:
    draft_id: str = ""
    n: int = 0
    delta: str | None = None
    text: str | None = None
    state: str = "open"


class _Committed(msgspec.Struct):
    """A message that committed a draft: its content and ``metadata.d``."""

    content: object = None
    metadata: dict[str, object] = {}


_decode = msgspec.json.Decoder(_Frame).decode
_decode_committed = msgspec.json.Decoder(_Committed).decode
_encode = msgspec.json.encode


def sent_ns(raw: bytes | msgspec.Raw) -> int | None:
    """The writer's timestamp in a message's raw JSON (``"t":<ns>``)."""
    found = SENT.search(memoryview(raw))
    return int(found.group(1)) if found else None


class FastCheck:
    """One subscription's checks on the fast path; counts go into ``stats``."""

    def __init__(
        self, transcript_id: str, stats: GroupStats, drafts: DraftCheck | None = None
    ) -> None:
        self.transcript_id = transcript_id
        self.stats = stats
        self.drafts = drafts
        self.revision: int | None = None
        self.epoch: str | None = None
        self.length = 0
        self.next_seq = 1

    def connection_made(self) -> None:
        """A new connection: its ``seq`` starts again at 1."""
        self.next_seq = 1

    def subscribe_op(self) -> bytes:
        """Subscribe, resuming from the revision held (a baseline when none)."""
        op: dict[str, object] = {"op": "subscribe", "transcriptId": self.transcript_id}
        if self.revision is not None and self.epoch is not None:
            op["fromRevision"] = self.revision
            op["epoch"] = self.epoch
        return _encode(op)

    def receive(
        self, message: str | bytes, now_ns: int
    ) -> tuple[bool, list[tuple[int | None, int]]]:
        """Check one WebSocket message. Returns whether to resubscribe, and
        the baselines it carried as (revision before, revision of the baseline)."""
        stats = self.stats
        data = message.encode() if isinstance(message, str) else message
        stats.ws_messages += 1
        stats.received_bytes += len(data)
        resubscribe = False
        baselines: list[tuple[int | None, int]] = []
        for line in data.split(b"\n"):
            if not line:
                continue
            stats.frames += 1
            try:
                frame = _decode(line)
            except msgspec.DecodeError:
                stats.invalid += 1
                continue
            if frame.seq != self.next_seq:
                if frame.seq < self.next_seq:
                    stats.repeats += 1
                else:
                    stats.seq_gaps += 1
                    stats.gaps += 1
            self.next_seq = frame.seq + 1
            kind = frame.type
            if kind == "increment" and frame.event is not None:
                resubscribe |= self._increment(frame.event, now_ns)
            elif kind == "baseline" and frame.snapshot is not None:
                snapshot = frame.snapshot
                if snapshot.transcript_id != self.transcript_id:
                    stats.foreign += 1
                    continue
                baselines.append((self.revision, snapshot.revision))
                self.revision, self.epoch = snapshot.revision, snapshot.epoch
                self.length = (
                    snapshot.length
                    if snapshot.length is not None
                    else snapshot.start + len(snapshot.messages)
                )
            elif kind == "draft" and self.drafts is not None:
                if frame.transcript_id != self.transcript_id:
                    stats.foreign += 1
                    continue
                self.drafts.frame(
                    frame.draft_id, frame.n, frame.delta, frame.text, frame.state, now_ns
                )
            elif kind == "error":
                if frame.code == "lagged":
                    stats.lagged += 1
                    resubscribe = True
                else:
                    stats.errors += 1
        return resubscribe, baselines

    def _committed(self, raw: msgspec.Raw) -> None:
        assert self.drafts is not None
        try:
            message = _decode_committed(raw)
        except msgspec.DecodeError:
            return
        draft_id = message.metadata.get("d")
        if isinstance(draft_id, str) and isinstance(message.content, str):
            self.drafts.committed(draft_id, message.content)

    def _increment(self, event: _Event, now_ns: int) -> bool:
        """Apply one increment's envelope; True when it calls for a resubscribe."""
        stats = self.stats
        if event.transcript_id != self.transcript_id:
            stats.foreign += 1
            return False
        if self.revision is None or event.epoch != self.epoch:
            stats.gaps += 1  # an increment before any baseline, or of another history
            return True
        if event.revision <= self.revision:
            stats.repeats += 1
            return False
        change = event.change
        appended = change.kind == "messages-appended"
        if event.revision != self.revision + 1 or (appended and change.start != self.length):
            stats.gaps += 1
            return True
        self.revision = event.revision
        if appended:
            self.length += len(change.messages)
            for raw in change.messages:
                sent = sent_ns(raw)
                if sent is not None:
                    stats.latency.record_ns(now_ns - sent)
                    stats.messages += 1
                if self.drafts is not None and _DRAFT_ID.search(memoryview(raw)):
                    self._committed(raw)
        stats.delivered += 1
        stats.last_apply_ns = now_ns
        return False
