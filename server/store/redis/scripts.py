"""The Lua scripts of the Redis store (``server.store.redis.store``): each
changes or reads one transcript's keys, all on its slot, atomically; the
store runs them through ``server.store.redis.link.Script``."""

from __future__ import annotations

from typing import Final

__all__ = [
    "APPEND_SCRIPT",
    "CREATE_SCRIPT",
    "DELETE_SCRIPT",
    "INDEX_SCRIPT",
    "KEY_NAMES",
    "PER_APPEND",
    "RANGE_SCRIPT",
    "STATE_SCRIPT",
]

# --- the scripts -----------------------------------------------------------------------

# KEYS: meta, log, stream, keys, korder, ikeys, iorder, ends, segs, views
# Shared body: store one event (ARGV from index 4 on, see _event_args) and publish.
ACCEPT = """
local function accept(rev, a)
  local event, key, internal, ack = a[1], a[2], a[3], a[4]
  local updated, length, active = a[5], a[6], a[7]
  local retention, maxlen, channel = tonumber(a[8]), tonumber(a[9]), a[10]
  local tid, epoch, publish, ttl_ms = a[11], a[12], a[13], tonumber(a[14])
  local kind, item, vname, title, preview = a[15], a[16], a[17], a[18], a[19]
  redis.call('RPUSH', KEYS[2], event)
  if maxlen > 0 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '0-' .. rev, 'e', event)
  end
  redis.call('HSET', KEYS[1], 'rev', rev, 'updated', updated)
  if length ~= '' then redis.call('HSET', KEYS[1], 'len', length) end
  if active ~= '' then redis.call('HSET', KEYS[1], 'active', active) end
  if kind == 'a' then
    redis.call('ZADD', KEYS[8], length, rev)
    -- A transcript stored before titles were kept gets its own when indexed.
    if title ~= '' and redis.call('HGET', KEYS[1], 'ix') == '1' then
      redis.call('HSETNX', KEYS[1], 'title', title)
    end
    redis.call('HSET', KEYS[1], 'preview', preview)
  elseif kind == 's' then
    redis.call('RPUSH', KEYS[9], item)
  elseif kind == 'v' then
    redis.call('HSET', KEYS[10], vname, item)
    redis.call('HINCRBY', KEYS[1], 'vchanges', 1)
  elseif kind == 'l' then
    redis.call('HDEL', KEYS[10], vname)
    redis.call('HINCRBY', KEYS[1], 'vchanges', 1)
  end
  if key ~= '' and retention > 0 then
    local h, z = KEYS[4], KEYS[5]
    if internal == '1' then h, z = KEYS[6], KEYS[7] end
    redis.call('HSET', h, key, ack)
    redis.call('ZADD', z, updated, key)
    local extra = redis.call('ZCARD', z) - retention
    if extra > 0 then
      local old = redis.call('ZPOPMIN', z, extra)
      for i = 1, #old, 2 do redis.call('HDEL', h, old[i]) end
    end
    -- Keys older than the ttl, a bounded number per change.
    local expired = redis.call('ZRANGEBYSCORE', z, '-inf', '(' .. (tonumber(updated) - ttl_ms),
                               'LIMIT', 0, 100)
    for i = 1, #expired do
      redis.call('HDEL', h, expired[i])
      redis.call('ZREM', z, expired[i])
    end
  end
  redis.call(publish, channel, cjson.encode({tid, epoch, rev}))
end
"""

#: ARGV per append of a run: epoch, revision, position ('' for none), then
#: the 19 accept arguments (``_event_args``).
PER_APPEND: Final = 22

# A run of appends of one transcript, in order, in one atomic step: ARGV is
# ``PER_APPEND`` arguments per append. -> one answer per append:
# {'ok'} | {'dup', ack} | {'mismatch', current} | {'missing'}
# An append is stored only at the revision AND the position (the length) it
# was planned for; once one is not stored, none after it is (each was planned
# on top of the ones before it): they answer 'mismatch'. Every append carries
# a key (generated when the caller gave none) and the ack to record with it,
# which holds a token of the call: a key recorded with this very ack was
# stored by this call's first attempt (redis-py retried the call after a
# connection error or a timeout), so it answers 'ok' again, not 'dup'; so
# does an append whose key is no longer kept and whose very event (the same
# bytes) is stored at its revision.
APPEND_SCRIPT = (
    ACCEPT
    + f"local per = {PER_APPEND}\n"
    + """
local n = #ARGV / per
local answers = {}
local m = redis.call('HMGET', KEYS[1], 'epoch', 'rev', 'len')
if not m[1] then
  for i = 1, n do answers[i] = {'missing'} end
  return answers
end
local current, len = tonumber(m[2]), tonumber(m[3])
local broken = false
for i = 1, n do
  local o = (i - 1) * per
  local rev, pos = tonumber(ARGV[o + 2]), ARGV[o + 3]
  local a = {unpack(ARGV, o + 4, o + per)}
  local key, internal = a[2], a[3]
  local answer = nil
  if broken or ARGV[o + 1] ~= m[1] then
    answer = {'mismatch', current}
  else
    if key ~= '' then
      local h = KEYS[4]
      if internal == '1' then h = KEYS[6] end
      local ack = redis.call('HGET', h, key)
      -- The very ack this call records (its token in it): its first attempt ran.
      if ack == a[4] then answer = {'ok'}
      elseif ack then answer = {'dup', ack} end
    end
    if not answer and rev <= current and redis.call('LINDEX', KEYS[2], rev - 1) == a[1] then
      -- Stored as this very event, its key pruned since (a resent run longer
      -- than the generated keys kept): the first attempt stored it.
      answer = {'ok'}
    end
    if not answer then
      if rev ~= current + 1 or (pos ~= '' and tonumber(pos) ~= len) then
        answer = {'mismatch', current}
      else
        accept(rev, a)
        current = rev
        if a[6] ~= '' then len = tonumber(a[6]) end
        answer = {'ok'}
      end
    end
  end
  if answer[1] ~= 'ok' then broken = true end
  answers[i] = answer
end
return answers
"""
)

# ARGV: epoch, created, ctoken, then the accept arguments (event '' for none).
# -> {'ok'} | {'exists'}
CREATE_SCRIPT = (
    ACCEPT
    + """
local token = redis.call('HGET', KEYS[1], 'ctoken')
if token then
  -- The same create() retried by redis-py after its first attempt ran.
  if token == ARGV[3] then return {'ok'} end
  return {'exists'}
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
           KEYS[10])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'created', ARGV[2], 'updated', ARGV[2],
           'rev', 0, 'len', 0, 'active', 0, 'ctoken', ARGV[3], 'vchanges', 0, 'ix', 1)
local a = {unpack(ARGV, 4)}
if a[1] ~= '' then
  accept(1, a)
else
  redis.call(a[13], a[10], cjson.encode({a[11], ARGV[1], 0}))
end
return {'ok'}
"""
)

# ARGV: channel, id, publish command -> 1 if it existed
DELETE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8],
           KEYS[9], KEYS[10])
redis.call(ARGV[3], ARGV[1], cjson.encode({ARGV[2], '', 0}))
return 1
"""

# The revisions of the appends holding messages [s, e) of a transcript of len
# messages, as the log's index range: {first - 1, last - 1}, or nil (none).
SPAN = """
local function span(s, e)
  if s >= e then return nil end
  local a = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. s, '+inf', 'LIMIT', 0, 1)
  local b = redis.call('ZRANGEBYSCORE', KEYS[8], e, '+inf', 'LIMIT', 0, 1)
  if #a == 0 or #b == 0 then return nil end
  return {tonumber(a[1]) - 1, tonumber(b[1]) - 1}
end
"""

# ARGV: keep (-1: every message), loaded keys -> {'missing'} | {'unindexed'} |
# {'ok', epoch, created, rev, len, active, vchanges, segs, views, first, blobs, acks, order,
#  last} (the newest ``loaded keys`` idempotency keys, oldest first, and their acks; the
# newest event, whose digest is the transcript's, '' at revision 0)
STATE_SCRIPT = (
    SPAN
    + """
local m = redis.call('HMGET', KEYS[1], 'epoch', 'created', 'rev', 'len', 'active', 'vchanges',
                     'ix')
if not m[1] then return {'missing'} end
if m[7] ~= '1' then return {'unindexed'} end
local len, keep = tonumber(m[4]), tonumber(ARGV[1])
local first = 0
if keep >= 0 and len > keep then first = len - keep end
local blobs = {}
local r = span(first, len)
if r then blobs = redis.call('LRANGE', KEYS[2], r[1], r[2]) end
local order = redis.call('ZRANGE', KEYS[5], -tonumber(ARGV[2]), -1)
local acks = {}
if #order > 0 then acks = redis.call('HMGET', KEYS[4], unpack(order)) end
local last = ''
if tonumber(m[3]) > 0 then last = redis.call('LINDEX', KEYS[2], tonumber(m[3]) - 1) or '' end
return {'ok', m[1], m[2], m[3], m[4], m[5], m[6] or '0',
        redis.call('LRANGE', KEYS[9], 0, -1), redis.call('HGETALL', KEYS[10]), first, blobs,
        acks, order, last}
"""
)

# ARGV: start, end -> {'missing'} | {'unindexed'} | {'ok', epoch, rev, len, first, blobs}
RANGE_SCRIPT = (
    SPAN
    + """
local m = redis.call('HMGET', KEYS[1], 'epoch', 'rev', 'len', 'ix')
if not m[1] then return {'missing'} end
if m[4] ~= '1' then return {'unindexed'} end
local len = tonumber(m[3])
local s, e = math.min(tonumber(ARGV[1]), len), math.min(tonumber(ARGV[2]), len)
local blobs = {}
local r = span(s, e)
if r then blobs = redis.call('LRANGE', KEYS[2], r[1], r[2]) end
return {'ok', m[1], m[2], m[3], s, blobs}
"""
)

# Indexes a transcript stored before ``ends``/``segs``/``views`` existed (it has
# no View events then): decodes its log once. -> 1 indexed now, 0 no such id.
INDEX_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'ix') == '1' then return 1 end
redis.call('DEL', KEYS[8], KEYS[9], KEYS[10])
local blobs = redis.call('LRANGE', KEYS[2], 0, -1)
for i, blob in ipairs(blobs) do
  local change = cmsgpack.unpack(blob)['change']
  if change['kind'] == 'messages-appended' then
    redis.call('ZADD', KEYS[8], change['start'] + #change['messages'], i)
  elseif change['kind'] == 'segment-started' then
    redis.call('RPUSH', KEYS[9], change['previousStart'] .. ':' .. change['end'])
  end
end
redis.call('HSET', KEYS[1], 'ix', 1, 'vchanges', 0)
return 1
"""


KEY_NAMES: Final = (
    "meta", "log", "stream", "keys", "korder", "ikeys", "iorder", "ends", "segs", "views"
)  # fmt: skip
