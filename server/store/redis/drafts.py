"""Drafts on Redis: the entry of every open draft for late joiners on other
replicas, and the relay of each update on the transcript's notice channel.

Keys (the transcript's hash tag, so one script changes them on one slot)::

    <prefix>{<id>}:drafts       hash: draft id -> "n:until:state:revision:origin:role"
                                (``until``: ms, Redis's clock; an entry past
                                it is gone; ``origin``: the replica that wrote
                                it last); expires ``ttl`` after its last write
    <prefix>{<id>}:draft:<did>  string: the open draft's text as of update n;
                                expires ``ttl`` after its last update
    <prefix>{<id>}:ui:<did>     string, a reply with parts only: its chunks, one
                                line ``<n> <JSON array>`` per update (``APPEND``ed;
                                a whole resend sets it to one line, its replay);
                                valid when its last line is of update n (else,
                                as with no key, the draft is of text alone);
                                expires with the text

One script per update (``_UPDATE``) applies it to the entry and publishes it
on the transcript's channel (the one that carries its change notices:
``<prefix>changes``, or ``<prefix>{<id>}:changes`` with ``SPUBLISH`` on a
Cluster). Publishing from the script that stored it means a replica that
learns of update n from pub/sub always finds update n or a later one in the
entry: recovering from a gap is one read, never a wait. A delta is appended
(``APPEND``, amortised O(delta)) only to the text of update n - 1 that the
same replica wrote; otherwise the script answers ``stale`` and announces
nothing (the relaying replica then sends the whole text: other replicas'
copies never get a delta that follows another writer's text). An update
older than the entry's is ``behind``: a writer moved to this replica before
it had read the draft back, so the replica numbers its copy past the
entry's and sends its whole text. A closed entry keeps its state (and
``revision``) for ``ttl`` without its text, so that a replica that loads the
transcript later knows the draft closed, and takes no more updates.

A reply with parts: each update's ``chunks`` are appended to the ``ui`` key
only where its text may be (an update that carries them with a whole
``text`` too must follow update n - 1 of the same replica, as a delta
must), and a resend's ``replay`` sets it; an update of text alone drops it.
What it holds is bounded like the text: the writing replica counts the
bytes of every chunk a reply takes against ``max_message_bytes`` (a replay
is compacted, never longer). The replica that reads it folds the lines into
its copy (``Drafts.apply_remote``), which compacts them for its late joiners.

Why per update rather than a write of the text every 100 ms beside a bare
``PUBLISH``: the relay pipelines whatever is pending in one round trip, so
the script costs the replica about 15 us more per update than a
``PUBLISH`` and Redis about 10 us more, but a throttled entry would trail
the updates (a replica recovering a gap would read an older text and have
to wait and read again), and nothing would check an update against the
stored draft before the other replicas apply it (docs/deploy.md, "Drafts
across replicas", has the measurements).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import msgspec

from server.store.base import RelayedDraft, RelayedKind, RelayedOutcome, StoredDraft
from server.store.redis.link import RedisPart, StoreLink

__all__ = ["RedisDrafts"]

log = logging.getLogger("tsync.store.redis")


# KEYS: drafts hash, the draft's text key, its chunks key. ARGV: draft id, n, kind ('d' delta,
# 't' text, 'k' keep-alive, 'c' close), body (delta or text), role, state,
# revision ('' for none), ttl ms, publish command, channel, message, text key
# prefix, origin, chunks mode ('' none: drop them, 'a' append, 's' set), the
# chunks' line, chunks key prefix -> {outcome, the entry's n or -1}: 1 stored
# and announced;
# and, with nothing stored or announced: 0 stale (a delta or keep-alive the
# entry cannot take: not on update n - 1, or from another replica than the
# entry's last writer, or no entry), 2 closed (the entry is closed), 3 behind
# (the entry is at a later update, or at this one from another replica),
# 4 repeated (the entry is at this update from this replica: a retried relay)
_UPDATE: Final = """
local did, n, kind, body = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local role, state, rev, ttl = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local origin, uimode, uibody = ARGV[13], ARGV[14], ARGV[15]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HGET', KEYS[1], did)
local curn, curstate, curorigin = nil, nil, nil
if cur then
  local a, u, b, o = string.match(cur, '^(%d+):(%d+):(%a+):%d*:(%w*):')
  if tonumber(u) >= now then curn, curstate, curorigin = tonumber(a), b, o end
end
if curstate and curstate ~= 'open' then return {2, curn} end
local entryn = n
if kind == 'c' then
  redis.call('DEL', KEYS[2], KEYS[3])
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if tonumber(string.match(all[i + 1], '^%d+:(%d+):')) < now then
      redis.call('HDEL', KEYS[1], all[i])
      redis.call('DEL', ARGV[12] .. all[i], ARGV[16] .. all[i])
    end
  end
elseif kind == 'k' then
  if not curn then return {0, -1} end
  entryn = curn
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
else
  local follows = kind == 'd' or uimode == 'a'
  if curn then
    local same = curorigin == origin
    if n < curn or (n == curn and not same) then return {3, curn} end
    if n == curn then return {4, curn} end
    if follows and (n ~= curn + 1 or not same) then return {0, curn} end
  elseif follows and n ~= 1 then
    return {0, -1}
  end
  if kind == 't' then
    redis.call('SET', KEYS[2], body, 'PX', ttl)
  else
    redis.call('APPEND', KEYS[2], body)
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  if uimode == 's' then
    redis.call('SET', KEYS[3], uibody, 'PX', ttl)
  elseif uimode == 'a' then
    redis.call('APPEND', KEYS[3], uibody)
    redis.call('PEXPIRE', KEYS[3], ttl)
  else
    redis.call('DEL', KEYS[3])
  end
end
redis.call('HSET', KEYS[1], did, entryn .. ':' .. (now + ttl) .. ':' .. state .. ':' .. rev ..
           ':' .. origin .. ':' .. role)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call(ARGV[9], ARGV[10], ARGV[11])
return {1, entryn}
"""

# KEYS: drafts hash. ARGV: text key prefix, chunks key prefix -> {did,
# entry, text or nil, chunks or nil, ms left, ...} of the entries not past
# their time (the others are deleted).
_READ: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local did, entry = all[i], all[i + 1]
  local u, st = string.match(entry, '^%d+:(%d+):(%a+):')
  if tonumber(u) < now then
    redis.call('HDEL', KEYS[1], did)
    redis.call('DEL', ARGV[1] .. did, ARGV[2] .. did)
  else
    local text, ui = false, false
    if st == 'open' then
      text = redis.call('GET', ARGV[1] .. did)
      ui = redis.call('GET', ARGV[2] .. did)
    end
    out[#out + 1] = did
    out[#out + 1] = entry
    out[#out + 1] = text
    out[#out + 1] = ui
    out[#out + 1] = tonumber(u) - now
  end
end
return out
"""

_OUTCOMES: Final[dict[int, RelayedKind]] = {
    1: "stored",
    0: "stale",
    2: "closed",
    3: "behind",
    4: "repeated",
}

Script = Callable[..., Any]


class RedisDrafts(RedisPart):
    """The draft entries and relay of a ``RedisStore`` (its
    ``relay_drafts``/``drafts_of``), reaching Redis through ``link``."""

    def __init__(self, link: StoreLink) -> None:
        super().__init__(link)
        self._update = link.script(_UPDATE)
        self._read = link.script(_READ)

    def _tag(self, transcript_id: str) -> str:
        return f"{self.prefix}{{{transcript_id}}}:"

    def _call(self, update: RelayedDraft, ttl_ms: int) -> tuple[list[str], list[Any]]:
        tag = self._tag(update.transcript_id)
        uimode, uibody = "", b""
        if update.state != "open":
            kind, body = "c", ""
        elif update.delta is not None:
            kind, body = "d", update.delta
        elif update.text is not None:
            kind, body = "t", update.text
        else:
            kind, body = "k", ""
        if kind == "t" and update.replay is not None:
            uimode, uibody = "s", self._line(update.n, update.replay)
        elif kind in ("d", "t") and update.chunks is not None:
            uimode, uibody = "a", self._line(update.n, update.chunks)
        args = [
            update.draft_id,
            update.n,
            kind,
            body,
            update.role,
            update.state,
            "" if update.revision is None else update.revision,
            ttl_ms,
            self._publish,
            self._channel_of(update.transcript_id),
            self._encode(update),
            tag + "draft:",
            update.origin,
            uimode,
            uibody,
            tag + "ui:",
        ]
        keys = [tag + "drafts", tag + "draft:" + update.draft_id, tag + "ui:" + update.draft_id]
        return keys, args

    def _line(self, n: int, chunks: list[dict[str, Any]]) -> bytes:
        """One line of a reply's chunks key: ``<n> <JSON array>`` (compact
        JSON holds no newline)."""
        return b"%d %s\n" % (n, self._encode(chunks))

    async def relay(self, updates: Sequence[RelayedDraft], ttl_s: float) -> list[RelayedOutcome]:
        """Store and announce ``updates`` in order, pipelined (one round trip
        per node). Raises ``StoreError`` when Redis did not take them all
        (the caller relays the drafts' whole texts again)."""
        if not updates:
            return []
        ttl_ms = max(1, int(ttl_s * 1000))
        calls = [self._call(update, ttl_ms) for update in updates]
        replies = await self._many(self._update, calls, "relaying a draft")
        return [RelayedOutcome(_OUTCOMES[int(reply[0])], int(reply[1])) for reply in replies]

    async def drafts_of(self, transcript_ids: Iterable[str]) -> dict[str, list[StoredDraft]]:
        """The open (with their text) and recently closed drafts of each
        transcript (one script per transcript, pipelined). A malformed entry
        is left out (and logged)."""
        ids = list(transcript_ids)
        if not ids:
            return {}
        calls = [
            ([self._tag(tid) + "drafts"], [self._tag(tid) + "draft:", self._tag(tid) + "ui:"])
            for tid in ids
        ]
        replies = await self._many(self._read, calls, "reading drafts")
        out: dict[str, list[StoredDraft]] = {}
        for tid, reply in zip(ids, replies, strict=True):
            drafts = out[tid] = []
            for i in range(0, len(reply), 5):
                try:
                    draft = _entry(tid, reply[i], reply[i + 1], reply[i + 2], reply[i + 3])
                except (ValueError, msgspec.ValidationError) as err:
                    log.warning("ignored a malformed draft entry of %r: %s", tid, err)
                    continue
                drafts.append(StoredDraft(draft, max(0, int(reply[i + 4])) / 1000))
        return out


def _entry(
    transcript_id: str, draft_id: bytes, entry: bytes, text: bytes | None, ui: bytes | None
) -> RelayedDraft:
    """A stored entry as a ``RelayedDraft`` (validated as one read from the
    channel), with its chunks as ``replay`` when they are of its update."""
    n, _until, state, revision, _origin, role = entry.decode().split(":", 5)
    fields = {
        "transcriptId": transcript_id,
        "draftId": draft_id.decode(),
        "role": role,
        "n": int(n),
        "state": state,
    }
    if state == "open":
        fields["text"] = (text or b"").decode()
        replay = _replay(ui, int(n))
        if replay is not None:
            fields["replay"] = replay
    if revision:
        fields["revision"] = int(revision)
    return msgspec.convert(fields, RelayedDraft)


def _replay(ui: bytes | None, n: int) -> list[Any] | None:
    """The chunks a reply's ``ui`` key holds, in order, when its last line
    is of update ``n`` (else ``None``: a draft of text alone, or chunks left
    behind by a replica that relays none)."""
    if not ui:
        return None
    lines = ui.splitlines()
    try:
        if int(lines[-1].split(b" ", 1)[0]) != n:
            return None
        replay: list[Any] = []
        for line in lines:
            replay += _DECODE(line.split(b" ", 1)[1])
    except (ValueError, IndexError, msgspec.DecodeError) as err:
        log.warning("ignored the malformed chunks of a draft: %s", err)
        return None
    return replay


_DECODE: Final = msgspec.json.Decoder(list[dict[str, Any]]).decode
