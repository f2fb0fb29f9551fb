"""``RedisStore``: the ``Store`` interface on Redis (``server.store.redis``
says how its keys, scripts and notices work).

Why one module of over 600 lines: one backend's every call of the ``Store``
and ``SharedStore`` interfaces, each encoding its script's arguments and
decoding its answers; the scripts, the connection and the parts are
modules of their own."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any, Final

import msgspec
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    RedisClusterException,
    RedisError,
)

from protocol.summary import preview_of, title_of
from protocol.types import (
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
    View,
    ViewChanged,
)
from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDEMPOTENCY_TTL_S,
    LOADED_KEYS,
    PRESENCE_MARK,
    AppendResult,
    Head,
    NewTranscript,
    Notice,
    Receipt,
    Recheck,
    RelayedDraft,
    RelayedOutcome,
    RelayedPresence,
    RevisionMismatch,
    StoredDraft,
    StoredPresence,
    StoredRange,
    StoredState,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
    append_alone,
    check_events_after_args,
    check_idempotency_args,
    check_list_args,
    check_range_args,
    digest_of_log,
    head_digest,
    messages_in,
    position_of,
)
from server.store.options import RedisOptions, parse_query, redis_address, validated
from server.store.redis.drafts import RedisDrafts
from server.store.redis.link import FAILURES, RedisLink, Script, StoreLink, resubscribed
from server.store.redis.presence import RedisPresence
from server.store.redis.scripts import (
    APPEND_SCRIPT,
    CREATE_SCRIPT,
    DELETE_SCRIPT,
    INDEX_SCRIPT,
    KEY_NAMES,
    RANGE_SCRIPT,
    STATE_SCRIPT,
)
from server.store.redis.shards import ShardChannels

__all__ = ["RedisStore"]

log = logging.getLogger("tsync.store.redis")

#: Keys generated for appends without one, kept per transcript: they only
#: have to outlive redis-py's retries of one call.
INTERNAL_KEY_RETENTION: Final = 64


def _receipt_text(receipt: Receipt) -> str:
    return f"{receipt.revision}:{receipt.start}:{receipt.count}"


def _receipt_from(raw: bytes | str) -> Receipt:
    """The receipt of a recorded ack, ``rev:start:count`` (then, for an
    append, ``:token`` of the call that stored it)."""
    revision, start, count = (raw.encode() if isinstance(raw, str) else raw).split(b":")[:3]
    return Receipt(int(revision), int(start), int(count))


def _segment(raw: bytes) -> Segment:
    start, end = raw.split(b":")
    return Segment(int(start), int(end))


def _view(name: bytes, raw: bytes) -> View:
    start, end = raw.split(b":")
    return View(name.decode(), int(start), int(end) if end else None)


class RedisStore:
    """A ``Store`` on one Redis server or a Redis Cluster.

    ``options`` (``RedisOptions``) default to the URL's query parameters;
    give them one way or the other, not both. ``idempotency_retention`` keys
    are kept per transcript (the newest). Nothing connects before ``open()``.
    """

    name = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        options: RedisOptions | None = None,
        *,
        idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
    ) -> None:
        address, query = redis_address(url)
        if options is None:
            options = parse_query(RedisOptions, query, url=url)
        elif query:
            raise ValueError(f"store URL {url!r}: give the options in the URL or as RedisOptions")
        check_idempotency_args(idempotency_retention, idempotency_ttl_s)
        self.options = options = validated(options)
        if not address.tls and any(
            getattr(options, name) is not None
            for name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname")
        ):
            raise ValueError(
                f"store URL {url!r}: ssl_* options need rediss:// or rediss+cluster://"
            )
        self.idempotency_retention = idempotency_retention
        self.address = address
        self.cluster = address.cluster
        self.url = address.url
        self.idempotency_ttl_s = idempotency_ttl_s
        self.prefix = options.prefix
        self.where = address.where
        #: The one channel of every notice (one server); on a cluster each
        #: transcript has its own (``channel_of``).
        self.channel = self.prefix + "changes"
        self._publish = "SPUBLISH" if self.cluster else "PUBLISH"
        self._index = self.prefix + "ids"
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(TranscriptEvent)
        self._notice = msgspec.json.Decoder(tuple[str, str, int])
        self._relayed = msgspec.json.Decoder(RelayedDraft)
        self._relayed_presence = msgspec.json.Decoder(RelayedPresence)
        #: The connection, shared with the parts (``server.store.redis.link``).
        self.link = RedisLink(address, options)
        self._shards: ShardChannels | None = None
        self._append = Script(APPEND_SCRIPT)
        self._create = Script(CREATE_SCRIPT)
        self._delete = Script(DELETE_SCRIPT)
        self._state = Script(STATE_SCRIPT)
        self._range = Script(RANGE_SCRIPT)
        self._index_script = Script(INDEX_SCRIPT)
        #: What each part is given (drafts, presence, the Durable Streams).
        self.parts = StoreLink(
            prefix=self.prefix,
            client=self._client,
            channel_of=self.channel_of,
            publish=self._publish,
            unavailable=self._unavailable,
            script=Script,
            redis=self.link,
        )
        self._drafts = RedisDrafts(self.parts)
        self._presence = RedisPresence(self.parts)

    def channel_of(self, transcript_id: str) -> str:
        """The channel that carries ``transcript_id``'s notices."""
        if self.cluster:
            return f"{self.prefix}{{{transcript_id}}}:changes"
        return self.channel

    # --- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Make the connection pool; a Redis that is down now is not an error
        (every call then raises ``StoreUnavailable`` until it is back)."""
        if self.link.redis is not None:
            return
        client = self.link.open()
        if isinstance(client, RedisCluster):
            self._shards = ShardChannels(
                client, self.link, channel_of=self.channel_of, decode=self._decode_notice
            )

    async def close(self) -> None:
        """Close the pool. Every accepted change is already in Redis."""
        await self.link.close()

    def _client(self) -> Any:
        """The client (``aioredis.Redis`` or ``RedisCluster``: the same commands)."""
        return self.link.client()

    def _unavailable(self, err: RedisError | RedisClusterException) -> StoreError:
        return self.link.unavailable(err)

    # --- keys -----------------------------------------------------------------------

    def _keys(self, transcript_id: str) -> list[str]:
        tag = f"{self.prefix}{{{transcript_id}}}:"
        return [tag + name for name in KEY_NAMES]

    def _event_args(
        self, event: TranscriptEvent | None, key: str, internal: bool, *, token: str = ""
    ) -> list[Any]:
        """The ``accept`` arguments of the scripts for ``event``; ``token``
        (an append's call) goes into the ack recorded with the key."""
        kind, item, name, title, preview = "", "", "", "", ""
        if event is None:
            blob: bytes | str = ""
            ack, length, active, updated = "", "", "", 0
        else:
            blob = self._encoder.encode(event)
            ack = _receipt_text(Receipt.for_event(event))
            if token:
                ack += ":" + token
            change = event.change
            updated = event.occurred_at
            length, active = "", ""
            if isinstance(change, MessagesAppended):
                kind, length = "a", str(change.end)
                title = title_of(change.messages) or ""
                preview = preview_of(change.messages) or ""
            elif isinstance(change, SegmentStarted):
                kind, active = "s", str(change.start)
                item = f"{change.previous_start}:{change.end}"
            else:
                kind = "v" if isinstance(change, ViewChanged) else "l"
                name = change.name
                item = f"{change.start}:{'' if change.end is None else change.end}"
        retention = INTERNAL_KEY_RETENTION if internal else self.idempotency_retention
        return [
            blob,
            key,
            "1" if internal else "0",
            ack,
            updated,
            length,
            active,
            retention,
            self.options.stream_maxlen,
            self.channel if event is None else self.channel_of(event.transcript_id),
            event.transcript_id if event is not None else "",
            event.epoch if event is not None else "",
            self._publish,
            int(self.idempotency_ttl_s * 1000),
            kind,
            item,
            name,
            title,
            preview,
        ]

    # --- writes ---------------------------------------------------------------------

    async def create(self, new: NewTranscript) -> None:
        """Create a transcript, with its first event if given.

        The id enters the ``list`` index first (a separate key that may live
        on another Cluster slot), then the script creates the transcript; an
        index entry whose transcript does not exist is skipped by ``list``.
        """
        client = self._client()
        tid, epoch = new.transcript_id, new.epoch
        # A retried create is recognised by its token (the script), not a key.
        args = self._event_args(new.first, new.idempotency_key or "", internal=False)
        args[9], args[10], args[11] = self.channel_of(tid), tid, epoch
        token = uuid.uuid4().hex
        try:
            await client.zadd(self._index, {tid: 0})
            answer = await self._create(
                client, self._keys(tid), [epoch, new.created_at, token, *args]
            )
        except FAILURES as err:
            raise self._unavailable(err) from err
        if answer[0] == b"exists":
            raise TranscriptExists(tid)

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """Append atomically (see ``Store.append``): a run of one.

        Without ``idempotency_key`` a generated one is sent, kept apart from
        the callers' keys. If redis-py retries the script after a timeout and
        the first attempt had run, the retry finds the key recorded with its
        own call's token and answers it as stored (not as a duplicate: for
        this caller it is the one append it asked for).
        """
        return await append_alone(self, event, idempotency_key)

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Several appends in one round trip: the appends of one transcript
        are one script (one atomic step: stored only at the revision and the
        position each was planned for, nothing after one that is not, see
        ``Store.append_many``); the scripts of several transcripts are
        pipelined. One outcome per item; ``StoreUnavailable`` when the round
        trip failed (then nothing or everything of each script ran: a retry
        with the same events or keys is recognised)."""
        client = self._client()
        token = uuid.uuid4().hex[:16]
        runs: dict[str, list[int]] = {}
        internal: list[bool] = []
        args: list[list[Any]] = []
        for i, (event, idempotency_key) in enumerate(items):
            runs.setdefault(event.transcript_id, []).append(i)
            # No key kept (retention 0): a generated one still recognises a retry.
            own = idempotency_key is None or self.idempotency_retention == 0
            internal.append(own)
            key = uuid.uuid4().hex if own or idempotency_key is None else idempotency_key
            position = position_of(event)
            args.append(
                [
                    event.epoch,
                    event.revision,
                    "" if position is None else position,
                    *self._event_args(event, key, own, token=token),
                ]
            )
        calls: list[tuple[Sequence[str], Sequence[Any]]] = [
            (self._keys(tid), [arg for i in indices for arg in args[i]])
            for tid, indices in runs.items()
        ]
        try:
            if len(calls) == 1:
                replies: list[Any] = [await self._append(client, *calls[0])]
            else:
                replies = await self._append.many(client, calls)
        except FAILURES as err:
            raise self._unavailable(err) from err
        outcomes: list[AppendResult | Exception] = [StoreError("no answer")] * len(items)
        for indices, reply in zip(runs.values(), replies, strict=True):
            for n, i in enumerate(indices):
                if isinstance(reply, FAILURES):
                    outcomes[i] = self._unavailable(reply)
                elif isinstance(reply, Exception):
                    outcomes[i] = StoreError(f"{self.where}: {reply}")
                else:
                    outcomes[i] = self._outcome(items[i][0], reply[n], internal[i])
        return outcomes

    def _outcome(
        self, event: TranscriptEvent, answer: Any, internal: bool
    ) -> AppendResult | Exception:
        status = answer[0]
        if status == b"ok":
            return AppendResult(Receipt.for_event(event))
        if status == b"dup":
            return AppendResult(_receipt_from(answer[1]), duplicate=not internal)
        if status == b"mismatch":
            return RevisionMismatch(event.transcript_id, event.revision - 1, int(answer[1]))
        return TranscriptNotFound(event.transcript_id)

    async def delete(self, transcript_id: str) -> bool:
        """Remove a transcript (script), then its index entry."""
        client = self._client()
        try:
            existed = await self._delete(
                client,
                self._keys(transcript_id),
                [self.channel_of(transcript_id), transcript_id, self._publish],
            )
            await client.zrem(self._index, transcript_id)
        except FAILURES as err:
            raise self._unavailable(err) from err
        return bool(existed)

    # --- reads ----------------------------------------------------------------------

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        """The whole transcript from its log (never trimmed), read in one
        MULTI/EXEC so the events and keys belong to one instant."""
        client = self._client()
        meta, log_key, _, keys, korder, *_ = self._keys(transcript_id)
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hmget(meta, "epoch", "created")
                pipe.lrange(log_key, 0, -1)
                pipe.zrange(korder, -LOADED_KEYS, -1)
                (epoch, created), blobs, order = await pipe.execute()
            # Only the newest keys (the hub's memory); a key pruned meanwhile is left out.
            acks = await client.hmget(keys, order) if order else []
        except FAILURES as err:
            raise self._unavailable(err) from err
        if epoch is None:
            return None
        events = tuple(self._decoder.decode(blob) for blob in blobs)
        idempotency = {
            k.decode(): _receipt_from(ack) for k, ack in zip(order, acks, strict=True) if ack
        }
        size = sum(len(blob) for blob in blobs)
        return StoredTranscript(
            transcript_id, epoch.decode(), int(created), events, idempotency, size
        )

    async def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        """The key's ack if it is held (an expired one is pruned at the
        transcript's next change: until then it still answers)."""
        keys = self._keys(transcript_id)[3]
        try:
            ack = await self._client().hget(keys, key)
        except RedisError as err:
            raise self._unavailable(err) from err
        return None if ack is None else _receipt_from(ack)

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision`` from the stream; ``None`` when the stream
        no longer holds revision + 1 (trimmed) or ``revision`` is beyond the
        stored one."""
        client = self._client()
        check_events_after_args(revision, limit)
        meta, _, stream, *_ = self._keys(transcript_id)
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hget(meta, "rev")
                if limit != 0:
                    pipe.xrange(stream, f"0-{revision + 1}", "+", count=limit)
                replies = await pipe.execute()
        except FAILURES as err:
            raise self._unavailable(err) from err
        if replies[0] is None:
            raise TranscriptNotFound(transcript_id)
        current = int(replies[0])
        if revision > current:
            return None
        if revision == current or limit == 0:
            return []
        entries = replies[1]
        if not entries or entries[0][0] != f"0-{revision + 1}".encode():
            return None
        return [self._decoder.decode(fields[b"e"]) for _, fields in entries]

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        """Transcripts by id from the index; entries whose transcript is gone
        (a create or delete interrupted between its two steps) are skipped."""
        client = self._client()
        check_list_args(limit)
        found: list[TranscriptInfo] = []
        start = "-" if after is None else "(" + after
        try:
            while len(found) < limit:
                want = limit - len(found)
                found_ids = await client.zrangebylex(self._index, start, "+", 0, want)
                # decode_responses is off: every reply is bytes.
                ids = [raw for raw in found_ids if isinstance(raw, bytes)]
                if not ids:
                    break
                async with client.pipeline(transaction=False) as pipe:
                    for raw in ids:
                        pipe.hmget(
                            self._keys(raw.decode())[0],
                            "epoch", "rev", "len", "created", "updated", "title", "preview",
                        )  # fmt: skip
                    metas = await pipe.execute()
                for raw, meta in zip(ids, metas, strict=True):
                    epoch, rev, length, created, updated, title, preview = meta
                    if epoch is not None:
                        numbers = (int(rev), int(length), int(created), int(updated))
                        found.append(
                            TranscriptInfo(
                                raw.decode(),
                                epoch.decode(),
                                *numbers,
                                title=None if title is None else title.decode(),
                                preview=None if preview is None else preview.decode(),
                            )
                        )
                start = "(" + ids[-1].decode()
                if len(ids) < want:
                    break
        except FAILURES as err:
            raise self._unavailable(err) from err
        return found

    async def load_recent(
        self, transcript_id: str, *, messages: int | None = None
    ) -> StoredState | None:
        """The state now with the newest ``messages`` messages: one script
        reads the meta, segments, Views, keys and only the events holding
        those messages (``ends``)."""
        self._client()
        keep = -1 if messages is None else messages
        answer = await self._indexed(self._state, transcript_id, [keep, LOADED_KEYS])
        if answer is None:
            return None
        (
            _, epoch, created, rev, length, active, vchanges, segs, views, first, blobs,
            acks, order, last,
        ) = answer  # fmt: skip
        length, first = int(length), int(first)
        segments = [_segment(raw) for raw in segs]
        segments.append(Segment(int(active), None))
        pairs = dict(zip(views[::2], views[1::2], strict=True))
        snapshot = TranscriptSnapshot(
            transcript_id=transcript_id,
            epoch=epoch.decode(),
            revision=int(rev),
            start=first,
            messages=self._messages(blobs, first, length),
            active_start=int(active),
            segments=tuple(segments),
            length=length,
            views=tuple(sorted((_view(k, v) for k, v in pairs.items()), key=lambda v: v.name)),
            view_changes=int(vchanges),
            digest=await self._digest(transcript_id, last),
        )
        # A key pruned between the two reads is left out (its HMGET is nil).
        idempotency = {
            k.decode(): _receipt_from(ack) for k, ack in zip(order, acks, strict=True) if ack
        }
        return StoredState(snapshot, int(created), idempotency)

    async def _digest(self, transcript_id: str, last: bytes) -> str | None:
        """The digest at the revision of ``last``, the newest event (``b''``:
        none): its own, or, for a transcript stored before events carried
        digests, computed from the whole log on every load (the log is never
        rewritten: another replica may be appending to it)."""
        digest = head_digest(transcript_id, self._decoder.decode(last) if last else None)
        if digest is not None:
            return digest
        whole = await self.load(transcript_id)
        return None if whole is None else digest_of_log(transcript_id, whole.events)

    async def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        """Messages ``[start, end)`` (clamped to the length): one script reads
        the events holding them through ``ends``."""
        self._client()
        check_range_args(start, end)
        answer = await self._indexed(self._range, transcript_id, [start, end])
        if answer is None:
            raise TranscriptNotFound(transcript_id)
        _, epoch, rev, length, first, blobs = answer
        first, last = int(first), min(end, int(length))
        return StoredRange(
            epoch.decode(), int(rev), int(length), first, self._messages(blobs, first, last)
        )

    async def _indexed(self, script: Any, transcript_id: str, args: Sequence[int]) -> Any:
        """Run a reading script; index the transcript first if it predates
        the index. ``None`` when there is no such transcript."""
        client = self._client()
        keys = self._keys(transcript_id)
        try:
            answer = await script(client, keys, args)
            if answer[0] == b"unindexed":
                await self._index_script(client, keys, [])
                await self._backfill_summary(transcript_id)
                answer = await script(client, keys, args)
        except FAILURES as err:
            raise self._unavailable(err) from err
        if answer[0] == b"missing":
            return None
        if answer[0] != b"ok":  # pragma: no cover - the scripts answer nothing else
            raise StoreError(f"{self.where}: unexpected answer {answer[0]!r}")
        return answer

    async def _backfill_summary(self, transcript_id: str) -> None:
        """The list's title and preview of a transcript stored before they
        were kept (the scripts keep them from then on)."""
        meta = self._keys(transcript_id)[0]
        stored = await self.load(transcript_id)
        if stored is None:
            return
        title = preview = None
        for event in stored.events:
            change = event.change
            if isinstance(change, MessagesAppended):
                title = title or title_of(change.messages)
                preview = preview_of(change.messages)
        client = self._client()
        if title is not None:
            await client.hsetnx(meta, "title", title)
        if preview is not None:
            await client.hsetnx(meta, "preview", preview)

    def _messages(self, blobs: Sequence[bytes], start: int, end: int) -> tuple[Any, ...]:
        return messages_in((self._decoder.decode(blob) for blob in blobs), start, end)

    # --- for the backplane ------------------------------------------------------------

    async def heads(self, transcript_ids: Iterable[str]) -> dict[str, Head | None]:
        """Epoch and revision of each transcript now (``None``: it does not
        exist). On a cluster each node is asked apart: the transcripts of a
        node that does not answer are left out (``StoreUnavailable`` when no
        node answers)."""
        client = self._client()
        ids = list(transcript_ids)
        if not ids:
            return {}
        groups = [ids]
        if isinstance(client, RedisCluster):
            try:
                await client.initialize()
                by_node: dict[str, list[str]] = {}
                for tid in ids:
                    node = client.get_node_from_key(self._keys(tid)[0])
                    by_node.setdefault(node.name if node else "", []).append(tid)
                groups = list(by_node.values())
            except FAILURES as err:
                raise self._unavailable(err) from err
        replies = await asyncio.gather(
            *(self._heads_of(client, group) for group in groups), return_exceptions=True
        )
        heads: dict[str, Head | None] = {}
        failed: list[BaseException] = []
        for reply in replies:
            if isinstance(reply, BaseException):
                failed.append(reply)
            else:
                heads.update(reply)
        if failed and (not heads or not isinstance(failed[0], StoreUnavailable)):
            raise failed[0]
        return heads

    async def _heads_of(self, client: Any, ids: Sequence[str]) -> dict[str, Head | None]:
        try:
            async with client.pipeline(transaction=False) as pipe:
                for tid in ids:
                    pipe.hmget(self._keys(tid)[0], "epoch", "rev")
                replies = await pipe.execute()
        except FAILURES as err:
            raise self._unavailable(err) from err
        return {
            tid: None if epoch is None else Head(epoch.decode(), int(rev))
            for tid, (epoch, rev) in zip(ids, replies, strict=True)
        }

    def watch(self, transcript_ids: Iterable[str]) -> bool:
        """One server: every change is announced already (``False``). A
        cluster: subscribe to their sharded channels; a ``Recheck`` of each
        follows its subscription (``True``)."""
        if self._shards is None:
            return False
        return self._shards.watch(transcript_ids)

    def unwatch(self, transcript_ids: Iterable[str]) -> None:
        if self._shards is not None:
            self._shards.unwatch(transcript_ids)

    def _decode_notice(self, data: bytes) -> Notice | RelayedDraft | RelayedPresence | None:
        try:
            if data[:1] == b"{":
                return self._relayed.decode(data)
            if data[:1] == PRESENCE_MARK:
                return self._relayed_presence.decode(data[1:])
            return Notice(*self._notice.decode(data))
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("ignored a malformed notice: %r", data[:200])
            return None

    # --- drafts (``SharedDrafts``, ``server.store.redis.drafts``) ---------------------

    async def relay_drafts(
        self, updates: Sequence[RelayedDraft], ttl_s: float
    ) -> builtins.list[RelayedOutcome]:
        """Store each draft update in its entry and announce it on the
        transcript's channel, in order (see ``server.store.redis.drafts``)."""
        return await self._drafts.relay(updates, ttl_s)

    async def drafts_of(
        self, transcript_ids: Iterable[str]
    ) -> dict[str, builtins.list[StoredDraft]]:
        """The open (with their text) and recently closed drafts of each transcript."""
        return await self._drafts.drafts_of(transcript_ids)

    # --- presence (``SharedPresence``, ``server.store.redis.presence``) --------------------

    async def relay_presence(self, updates: Sequence[RelayedPresence]) -> None:
        """Store and announce each replica's presence changes."""
        await self._presence.relay(updates)

    async def renew_presence(
        self, transcript_ids: Iterable[str], replica: str, ttl_s: float
    ) -> builtins.list[str]:
        """Keep ``replica``'s presence entries alive; those that had lapsed."""
        return await self._presence.renew(transcript_ids, replica, max(1, int(ttl_s * 1000)))

    async def presence_of(
        self, transcript_ids: Iterable[str]
    ) -> dict[str, builtins.list[StoredPresence]]:
        """Every live replica's presence members of each transcript."""
        return await self._presence.read(transcript_ids)

    async def notices(
        self, *, reconnect_delay: float = 0.1
    ) -> AsyncGenerator[Notice | Recheck | RelayedDraft | RelayedPresence | None, None]:
        """Every change's notice, from pub/sub, for as long as the caller iterates
        (and every draft update relayed, ``relay_drafts``).

        Pub/sub drops messages while a connection is down, so after every
        (re)subscription this yields ``None``: anything may have been missed,
        check every copy (on a cluster: a ``Recheck`` of the transcripts of
        the node whose subscription was made again). Connection errors are
        retried here forever (with a growing delay up to one second); they
        never end the iteration.
        """
        self._client()  # closed: StoreUnavailable ends the iteration
        if self._shards is not None:
            async for item in self._shards.notices(reconnect_delay):
                self._client()
                yield item
            return
        async with contextlib.aclosing(
            resubscribed(
                self.link.subscriber,
                self._subscription,
                what=f"backplane: {self.where}",
                delay=reconnect_delay,
            )
        ) as notices:
            async for notice in notices:
                yield notice

    async def _subscription(
        self, pubsub: Any
    ) -> AsyncGenerator[Notice | RelayedDraft | RelayedPresence | None, None]:
        """One subscription to the one channel (one server): ``None`` once
        subscribed, then the notices."""
        await pubsub.subscribe(self.channel)
        yield None
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is None or message.get("type") != "message":
                continue
            notice = self._decode_notice(message["data"])
            if notice is not None:
                yield notice
