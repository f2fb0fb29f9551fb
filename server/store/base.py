"""The ``Store`` interface: where transcripts live when no process holds them.

Every backend (``memory``, ``sqlite``, ``redis``) implements ``Store`` and
passes the one shared contract suite in ``tests/server/store/store_contract.py``.
A store several replicas share also implements ``SharedStore`` (the
backplane's port: change notices and heads), with its own contract suite in
``tests/server/store/shared_store_contract.py``. Backends share what they have in
common through this module only; none imports another.

The unit of storage is the event: a transcript is its creation record (id,
epoch, creation time) plus its events in revision order. Each backend also
keeps, updated by the same atomic step, what lets it answer without reading
the whole history: the length, the active start, the closed segments, the
Views, an index from message positions to the events that hold them, and the
list's title and preview. ``load_recent`` then reads a transcript's state
with only its newest messages, and ``read_messages`` any range of them, in
time that grows with what is read, not with the history. ``append`` is one
atomic step that checks the revision, records the event and the idempotency
key together, so a retried append after a crash or a reconnect is recognised
and never applied twice.

Errors::

    StoreError
    ├── TranscriptNotFound   no transcript with that id
    ├── TranscriptExists     create() of an id that exists
    ├── RevisionMismatch     append() of an event whose revision is not stored+1,
    │                        or whose position is not the stored length;
    │                        ``current`` is the stored revision
    └── StoreUnavailable     the backend cannot be reached now; nothing was
                             applied, the caller may retry (same idempotency key)

Why one module of over 600 lines: it is the contract every backend keeps (the
``Store``, ``SharedStore`` and drafts interfaces, their result types and the checks
they share), read as one by whoever writes a backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeAlias, runtime_checkable

import msgspec

from protocol.digest import genesis_digest, history_digest
from protocol.types import (
    Message,
    MessagesAppended,
    NonNegative,
    Role,
    SegmentStarted,
    TranscriptEvent,
    TranscriptId,
    TranscriptSnapshot,
)
from protocol.wire import DraftId, DraftState, Member


class StoreError(Exception):
    """Base class of store errors."""


class TranscriptNotFound(StoreError):
    def __init__(self, transcript_id: str) -> None:
        super().__init__(f"transcript {transcript_id!r} not found")
        self.transcript_id = transcript_id


class TranscriptExists(StoreError):
    def __init__(self, transcript_id: str) -> None:
        super().__init__(f"transcript {transcript_id!r} already exists")
        self.transcript_id = transcript_id


class RevisionMismatch(StoreError):
    def __init__(self, transcript_id: str, expected: int, current: int) -> None:
        super().__init__(
            f"transcript {transcript_id!r}: event for revision {expected + 1} "
            f"but the store is at {current}"
        )
        self.transcript_id = transcript_id
        self.expected = expected
        self.current = current


class StoreUnavailable(StoreError):
    """The backend is unreachable or timed out; nothing was applied."""


#: Idempotency keys kept per transcript at most (the newest) unless configured
#: otherwise (the server's ``idempotency_retention`` setting passes its value
#: to the store): a bound on what one transcript's keys may take, far above
#: what ``DEFAULT_IDEMPOTENCY_TTL_S`` of appends usually leaves.
DEFAULT_IDEMPOTENCY_RETENTION: Final = 100_000
#: Seconds every store remembers an idempotency key (``idempotency_ttl_s``):
#: a retry within this window is answered with the first ack, even after a
#: crash or a restart.
DEFAULT_IDEMPOTENCY_TTL_S: Final = 86_400.0
#: The newest keys ``load`` returns with a transcript (all of them are still
#: checked by ``append`` and ``recorded``): what the hub keeps in memory.
LOADED_KEYS: Final = 1000


class Receipt(msgspec.Struct, frozen=True):
    """What an accepted change answered (the body of its ``ack``); kept per
    idempotency key so that a retry gets the same answer.

    For a segment start ``start`` is the new active start and ``count`` is 0.
    """

    revision: int
    start: int
    count: int

    @classmethod
    def for_event(cls, event: TranscriptEvent) -> Receipt:
        """The ack that accepting ``event`` answers (the same in every backend)."""
        change = event.change
        if isinstance(change, MessagesAppended):
            return cls(event.revision, change.start, len(change.messages))
        return cls(event.revision, change.start, 0)


class NewTranscript(msgspec.Struct, frozen=True):
    """What ``Store.create`` writes: a transcript's creation record (id,
    epoch, creation time in ms) and, when it starts with messages, its first
    event (revision 1) and that append's idempotency key, recorded with the
    first event's receipt (without a first event the key is ignored).

    Checks itself when made: a first event must be revision 1 (else
    ``RevisionMismatch`` against 0); one of another id or epoch is a
    caller's bug (``ValueError``).
    """

    transcript_id: str
    epoch: str
    created_at: int
    first: TranscriptEvent | None = None
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        first = self.first
        if first is None:
            return
        if first.transcript_id != self.transcript_id or first.epoch != self.epoch:
            raise ValueError(
                f"first event belongs to {first.transcript_id!r}/{first.epoch!r}, "
                f"not {self.transcript_id!r}/{self.epoch!r}"
            )
        if first.revision != 1 or position_of(first) not in (None, 0):
            raise RevisionMismatch(self.transcript_id, first.revision - 1, 0)


class StoredTranscript(msgspec.Struct, frozen=True):
    """Everything needed to bring a transcript back into memory.

    ``events`` is the complete event log, oldest first (revision 1..N), so that
    ``Transcript.restore`` rebuilds exactly the same transcript.
    ``idempotency`` holds the newest retained keys (at most ``LOADED_KEYS``)
    and their receipts, oldest first.
    """

    transcript_id: str
    epoch: str
    created_at: int
    events: tuple[TranscriptEvent, ...]
    idempotency: dict[str, Receipt] = {}
    #: About how many bytes the events took in the store (their encoded
    #: size): what the hub counts against ``max_live_bytes``.
    size: int = 0

    @property
    def revision(self) -> int:
        return self.events[-1].revision if self.events else 0


class StoredState(msgspec.Struct, frozen=True):
    """A transcript as a live copy needs it, without its whole history.

    ``snapshot`` is the transcript now (revision, length, segments, Views)
    holding only its newest messages (a partial snapshot whose messages
    reach the length); ``idempotency`` the retained keys and their receipts.
    """

    snapshot: TranscriptSnapshot
    created_at: int
    idempotency: dict[str, Receipt] = {}

    @property
    def transcript_id(self) -> str:
        return self.snapshot.transcript_id

    @property
    def epoch(self) -> str:
        return self.snapshot.epoch

    @property
    def revision(self) -> int:
        return self.snapshot.revision


class StoredRange(msgspec.Struct, frozen=True):
    """Messages ``[start, start + len(messages))`` of the transcript of
    ``epoch``, read when it was at ``revision`` with ``length`` messages."""

    epoch: str
    revision: int
    length: int
    start: int
    messages: tuple[Message, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.messages)


class TranscriptInfo(msgspec.Struct, frozen=True, rename="camel"):
    """A line of ``list()``: enough to show a transcript in a list.
    ``title``/``preview``: see ``protocol.summary``."""

    transcript_id: str
    epoch: str
    revision: int
    length: int
    created_at: int
    updated_at: int
    title: str | None = None
    preview: str | None = None


class AppendResult(msgspec.Struct, frozen=True):
    """The outcome of an append: ``Store.append``'s and ``Writes.append``'s.

    ``duplicate`` is true when the idempotency key was already recorded: then
    nothing was stored and ``receipt`` is the first append's.
    """

    receipt: Receipt
    duplicate: bool = False


class Notice(NamedTuple):
    """A change stored by some replica (this one too): enough to decide whether
    a copy is behind, never the change itself. ``epoch`` is ``""`` and
    ``revision`` 0 after a delete."""

    transcript_id: str
    epoch: str
    revision: int


class Recheck(NamedTuple):
    """Notices of these transcripts may have been missed (a subscription that
    covers them was just made, or made again): compare their copies with the
    store. ``notices()`` yields one after ``watch`` took effect."""

    transcript_ids: frozenset[str]


class RelayedDraft(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """One update of a draft as replicas relay it to each other (the payload
    of a draft frame, and ``origin``: the replica that relayed it).

    An open draft's update carries ``delta`` (update ``n`` appended it to
    the text of update ``n`` - 1) or ``text`` (the whole text as of update
    ``n``), or neither (a keep-alive, or a draft opened empty); a close
    carries its ``state`` (``final`` with the ``revision`` of its messages,
    ``cancelled``, ``expired``) and no text. Read back from the store
    (``SharedDrafts.drafts_of``), an open draft carries its whole ``text``.

    A reply with parts carries, beside its ``delta`` or ``text``, the
    ``chunks`` of update ``n`` (fold them into the reply of update ``n`` -
    1) or, with a ``text``, its ``replay`` (the whole reply as chunks: fold
    them into a new one); read back from the store, its ``replay``. Neither:
    a draft of text alone (and all a replica before them relays).
    """

    transcript_id: TranscriptId
    draft_id: DraftId
    role: Role
    n: NonNegative
    delta: str | None = None
    text: str | None = None
    state: DraftState = "open"
    revision: NonNegative | None = None
    origin: str = ""
    chunks: list[dict[str, Any]] | None = None
    replay: list[dict[str, Any]] | None = None


class StoredDraft(NamedTuple):
    """A draft as the store holds it (``SharedDrafts.drafts_of``): its
    latest update (an open draft's with its whole ``text``) and the seconds
    until it lapses unless it is updated again."""

    draft: RelayedDraft
    expires_in_s: float


#: See ``RelayedOutcome``.
RelayedKind: TypeAlias = Literal["stored", "stale", "closed", "behind", "repeated"]


class RelayedOutcome(NamedTuple):
    """What ``relay_drafts`` did with one update, and the ``n`` of the
    stored draft after it (-1: there is none).

    ``outcome``: ``stored``; ``stale``: a delta the stored text was not the
    text of update ``n`` - 1 for (it was announced all the same; relay the
    whole text next); ``closed``: the stored draft is closed already;
    ``behind``: the stored draft is at a later update than this one (another
    replica wrote it further: renumber past ``n`` and relay the whole text);
    ``repeated``: the stored draft is at this update already (a retried
    relay). Nothing is stored or announced for the last three.
    """

    outcome: RelayedKind
    n: int


@runtime_checkable
class SharedDrafts(Protocol):
    """Where a shared store keeps the open drafts of its transcripts for
    every replica, and how it relays their updates (``server.replicas.draft_relay``).

    A store that implements it also yields, from ``notices()``, every
    ``RelayedDraft`` some replica relayed (this one's too), in the order
    relayed and in order with the change notices of the same transcript.
    """

    async def relay_drafts(
        self, updates: Sequence[RelayedDraft], ttl_s: float
    ) -> list[RelayedOutcome]:
        """Store each update in its draft's entry (kept ``ttl_s`` after its
        last update) and announce it, in order; one outcome per update."""
        ...

    async def drafts_of(self, transcript_ids: Iterable[str]) -> dict[str, list[StoredDraft]]:
        """The drafts of each transcript that are open (with their whole
        text) or closed within their ``ttl_s``."""
        ...


#: The first byte of a presence message on a notice channel (notices are
#: JSON arrays, draft updates JSON objects).
PRESENCE_MARK: Final = b"P"


class RelayedPresence(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """One replica's changes of one transcript's members, as relayed:
    ``version`` counts that replica's writes of that transcript (a gap means
    a message was missed: read the keys back); ``ttl_ms``: how long the
    entries live unless renewed."""

    transcript_id: TranscriptId
    replica: str
    version: int
    ttl_ms: int
    members: list[Member] = []
    gone: list[str] = []


class StoredPresence(NamedTuple):
    """One replica's members of one transcript as Redis holds them."""

    replica: str
    version: int
    expires_in_s: float
    members: list[Member]


@runtime_checkable
class SharedPresence(Protocol):
    """Where a shared store keeps each replica's presence members and how it
    relays their changes (``server.replicas.presence_relay``). A store that
    implements it also yields, from ``notices()``, every
    ``RelayedPresence`` some replica relayed (this one's too)."""

    async def relay_presence(self, updates: Sequence[RelayedPresence]) -> None:
        """Store and announce each replica's changes (entries kept ``ttl_ms``)."""
        ...

    async def renew_presence(
        self, transcript_ids: Iterable[str], replica: str, ttl_s: float
    ) -> list[str]:
        """Keep ``replica``'s entries of ``transcript_ids`` alive another
        ``ttl_s``; the ids whose entries had lapsed (write them again)."""
        ...

    async def presence_of(self, transcript_ids: Iterable[str]) -> dict[str, list[StoredPresence]]:
        """Every live replica's members of each transcript."""
        ...


class Head(NamedTuple):
    """Where a stored transcript is now."""

    epoch: str
    revision: int


@runtime_checkable
class Store(Protocol):
    """Async storage of transcripts. Implementations must be safe to call from
    one event loop with many concurrent tasks."""

    #: A short name for logs and metrics: "memory", "sqlite", "redis".
    name: str
    #: Idempotency keys kept per transcript (the newest), each for
    #: ``idempotency_ttl_s`` seconds. The store is the authority: the hub
    #: keeps only the newest few in memory and asks ``recorded`` otherwise.
    idempotency_retention: int
    idempotency_ttl_s: float

    async def open(self) -> None:
        """Connect / create files. Called once before any other method."""

    async def close(self) -> None:
        """Flush and release everything. Nothing acknowledged may be lost."""

    async def create(self, new: NewTranscript) -> None:
        """Create ``new.transcript_id``, atomically with its first event if
        given. Raises ``TranscriptExists``."""

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        """The whole transcript, or ``None`` if there is no such id."""

    async def load_recent(
        self, transcript_id: str, *, messages: int | None = None
    ) -> StoredState | None:
        """The transcript now holding only its newest ``messages`` messages
        (``None``: all of them), or ``None`` if there is no such id. Reads
        what it returns, not the history before it."""

    async def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        """Messages ``[start, end)``, both clamped to the length, with the
        epoch and revision they were read at; reads only the events that hold
        them. Raises ``TranscriptNotFound``; ``ValueError`` unless
        ``0 <= start <= end``."""

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """Atomically: if ``idempotency_key`` is recorded for this transcript,
        return its ack with ``duplicate=True`` and store nothing; else require
        ``event.revision == stored revision + 1`` and the event's position
        (``position_of``) to be the stored length (else ``RevisionMismatch``:
        it was planned on a history that is not the stored one), store the
        event and the key with its ack. Raises ``TranscriptNotFound``.
        An event of another ``epoch`` (a stale copy of a transcript that was
        deleted and created again) is refused with ``RevisionMismatch`` too.
        """

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Several appends ``(event, idempotency_key)`` in order, each one as
        ``append`` would do it, committed together where the backend can (one
        transaction, one round trip). One outcome per item: ``append``'s result
        or the exception it would raise. Raises ``StoreUnavailable`` when
        nothing could be committed.

        A run of one transcript is stored as a prefix: each item was planned
        on top of the ones before it, so once an item of a transcript is not
        stored now (a mismatch, a duplicate, an error), no later item of that
        transcript is stored in this call, whatever its revision and position
        (it answers ``RevisionMismatch``, or ``TranscriptNotFound``). What was
        stored before it stays (a refused item does not undo the others).
        Without this, another replica's append landing inside the run would
        let a later item land at a place computed for a history that did not
        happen."""

    async def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        """The receipt recorded for ``key`` (an append's idempotency key) if
        it is still remembered; ``None`` otherwise (or no such transcript)."""

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events with revision > ``revision`` in order (at most ``limit``),
        ``[]`` when ``revision`` is current, or ``None`` when the store no
        longer holds all of them (trimmed history) or ``revision`` is beyond
        the stored one (a history this store does not have). Raises
        ``TranscriptNotFound``.
        """

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        """Transcripts ordered by id, starting after ``after``."""

    async def delete(self, transcript_id: str) -> bool:
        """Remove a transcript and its history; ``False`` if it did not exist."""


@runtime_checkable
class SubmitsAppends(Protocol):
    """A store that can start ``append_many`` without a task (optional: the
    SQLite and memory stores have it). ``submit_appends`` queues the appends
    before it returns and gives the future of their outcomes (those of
    ``append_many``); the writes happen whether or not anyone still awaits
    that future, so a caller can shield it (``asyncio.shield`` of a future
    costs no task) and finish the commit even when it is cancelled. A
    subclass that changes ``append_many`` changes this too, or sets it to
    ``None`` (then the committer queues every append)."""

    def submit_appends(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> asyncio.Future[list[AppendResult | Exception]]: ...


@runtime_checkable
class SharedStore(Store, Protocol):
    """A store several replicas share, which tells them about changes (the
    backplane's port).

    A replica ``watch``es the transcripts it holds in memory; ``notices()``
    announces every change to a watched transcript (a store may announce
    others too). A store that announces every change anyway (one channel for
    all, as a single Redis) answers ``watch`` with ``False``; one that
    subscribes per transcript (a Redis Cluster's sharded channels) answers
    ``True`` and yields a ``Recheck`` naming the transcripts once their
    subscription is made: changes stored before that moment were not
    announced, so their copies must be compared with the store then.
    """

    def notices(
        self,
    ) -> AsyncIterator[Notice | Recheck | RelayedDraft | RelayedPresence | None]:
        """A notice per change of a watched transcript, for as long as the
        caller iterates. ``None`` first and after every (re)connection of
        the whole store: notices may have been missed, every copy must be
        checked; ``Recheck(ids)`` says the same of some transcripts only (a
        watch took effect, or one shard's subscription was made again). A
        store that implements ``SharedDrafts`` also yields the draft updates
        relayed (``RelayedDraft``). Ends (with ``StoreUnavailable``) only
        when the store is closed. One iteration at a time per store."""
        ...

    def watch(self, transcript_ids: Iterable[str]) -> bool:
        """Announce the changes of these transcripts from now on (idempotent,
        never blocks). ``True``: a ``Recheck`` naming them follows once the
        store announces them; ``False``: it announced them already."""
        ...

    def unwatch(self, transcript_ids: Iterable[str]) -> None:
        """Their notices are no longer needed (the replica let them go)."""
        ...

    async def heads(self, transcript_ids: Iterable[str]) -> dict[str, Head | None]:
        """Epoch and revision of each transcript now (``None``: it does not
        exist). A store of several shards leaves out the transcripts whose
        shard it cannot reach now, and raises ``StoreUnavailable`` only when
        it reaches none."""
        ...


# --- checks every backend makes ---------------------------------------------------------


async def append_alone(
    store: Store, event: TranscriptEvent, idempotency_key: str | None
) -> AppendResult:
    """``Store.append`` as ``append_many`` of one item: for a backend whose
    appends all go in runs (one transaction, one round trip)."""
    (outcome,) = await store.append_many([(event, idempotency_key)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def position_of(event: TranscriptEvent) -> int | None:
    """The stored length an event was planned for: an append's ``start``, a
    segment start's ``end``; ``None`` for a View change (it depends on no
    position). ``append`` refuses an event whose position is not the stored
    length, as it refuses one whose revision is not the next."""
    change = event.change
    if isinstance(change, MessagesAppended):
        return change.start
    if isinstance(change, SegmentStarted):
        return change.end
    return None


def check_idempotency_args(retention: int, ttl_s: float) -> None:
    """A store's ``idempotency_retention`` must not be negative and its
    ``idempotency_ttl_s`` must be positive."""
    if retention < 0:
        raise ValueError("idempotency_retention must be >= 0")
    if ttl_s <= 0:
        raise ValueError("idempotency_ttl_s must be > 0")


def check_events_after_args(revision: int, limit: int | None) -> None:
    """``revision`` and ``limit`` of ``events_after`` must not be negative."""
    if revision < 0:
        raise ValueError("revision must be >= 0")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")


def check_list_args(limit: int) -> None:
    """``limit`` of ``list`` must not be negative."""
    if limit < 0:
        raise ValueError("limit must be >= 0")


def check_range_args(start: int, end: int) -> None:
    """``start`` and ``end`` of ``read_messages`` must satisfy ``0 <= start <= end``."""
    if not 0 <= start <= end:
        raise ValueError(f"range [{start}, {end}) must satisfy 0 <= start <= end")


def recent_start(length: int, messages: int | None) -> int:
    """Where ``load_recent`` begins: the newest ``messages`` of ``length``."""
    return 0 if messages is None else max(0, length - messages)


def messages_in(events: Iterable[TranscriptEvent], start: int, end: int) -> tuple[Message, ...]:
    """The messages ``[start, end)`` that the appends among ``events`` (in
    revision order, covering the range) hold."""
    found: list[Message] = []
    for event in events:
        change = event.change
        if not isinstance(change, MessagesAppended) or change.end <= start:
            continue
        if change.start >= end:
            break
        found.extend(change.messages[max(0, start - change.start) : end - change.start])
    return tuple(found)


def head_digest(transcript_id: str, last: TranscriptEvent | None) -> str | None:
    """The digest at a transcript's revision from its newest event (``None``:
    there is none, revision 0): the event's own, or ``None`` when it was
    stored before events carried digests; then the caller computes it from
    the whole log (``digest_of_log``)."""
    return genesis_digest(transcript_id) if last is None else last.digest


def digest_of_log(transcript_id: str, events: Iterable[TranscriptEvent]) -> str:
    """The digest at the end of a complete event log (revision 1..N in
    order), computed from the changes: every store gets the same one for the
    same history, whatever it stored (``protocol.digest``)."""
    return history_digest(transcript_id, (event.change for event in events))
