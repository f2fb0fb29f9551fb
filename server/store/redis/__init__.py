"""``RedisStore``: the ``Store`` interface on Redis, shared by several replicas.

Keys of one transcript all carry the hash tag ``{<id>}`` so that they live on
one Redis Cluster slot and one Lua script can change them atomically::

    <prefix>{<id>}:meta     hash: epoch, created, updated, rev, len, active, ctoken,
                            vchanges (View changes), title, preview, ix ("1": the
                            three keys below hold the whole history)
    <prefix>{<id>}:log      list: every event (msgpack), revision r at index r-1;
                            the authoritative history, never trimmed
    <prefix>{<id>}:stream   stream: the same events with ids ``0-<revision>``,
                            trimmed to about ``stream_maxlen``; catch-up reads it
    <prefix>{<id>}:keys     hash: caller's idempotency key -> ack ("rev:start:count:call")
    <prefix>{<id>}:korder   zset: those keys by the time they were recorded (ms;
                            pruned after ``idempotency_ttl_s`` and past
                            ``idempotency_retention``, oldest first)
    <prefix>{<id>}:ikeys    hash/zset pair for the keys this store generates
    <prefix>{<id>}:iorder   itself when the caller gave none (see ``append``)
    <prefix>{<id>}:ends     zset: each append's revision, scored by one past its
                            last message: the appends holding messages [a, b) are
                            the revisions from the first scored > a to the first
                            scored >= b, read with one LRANGE of the log
    <prefix>{<id>}:segs     list: every closed segment, "start:end", oldest first
    <prefix>{<id>}:views    hash: View name -> "start:end" ("start:" when open)
    <prefix>ids             zset of ids (score 0) for ``list``; kept outside the
                            scripts (another slot), see ``create``/``delete``
    <prefix>changes         pub/sub channel: ``[id, epoch, revision]`` per change,
                            and every draft update relayed (a JSON object)
    <prefix>{<id>}:changes  on a Redis Cluster instead: the transcript's own
                            sharded channel (``SPUBLISH``), on its node only
    <prefix>{<id>}:drafts   the open and recently closed drafts, and their
    <prefix>{<id>}:draft:*  texts (``server.store.redis.drafts``)

Every change is one script (``create``, ``append``, ``delete``): it checks the
idempotency key, the epoch, the revision and the position (an append's start
must be the stored length), stores the event in the log and the stream,
records the key with its ack, and publishes a notice, all or nothing. The
appends of one transcript that ``append_many`` gets (the committer's run) are
ONE script: each is stored only where it was planned, and once one is not,
none after it is, so another replica's append landing in between can never
put a later one at a place computed for a history that did not happen.
redis-py retries a command after a connection error or a timeout, so an
append always carries an idempotency key (a generated one when the caller
gave none) and records it with an ack holding a token of the call: a retried
script that had already run finds its own token and answers as it did.

``events_after`` reads the stream: when it no longer holds the range (trimmed)
it returns ``None`` and the caller loads the whole transcript from the log.
``load_recent`` and ``read_messages`` are one script each that reads the
meta, ``segs``, ``views`` and, through ``ends``, only the events holding the
messages asked for. A transcript stored before ``ends`` existed (no ``ix``)
is indexed once, by a script that decodes its log with Redis's ``cmsgpack``,
the first time it is read so.

Errors: a connection error, a timeout, or a Redis still loading its data after
a restart raise ``StoreUnavailable``. After a timeout the outcome is unknown
(the command may still run once Redis answers again); a retry with the same
idempotency key then answers the first ack instead of appending twice.

URL: ``redis://[user:pass@]host:port/db`` or ``rediss://`` (TLS); its query
parameters are the options (``server.store.options.RedisOptions``: ``prefix``,
``stream_maxlen``, ``socket_timeout``...). An unknown one is refused.

Redis Cluster: ``redis+cluster://host:port,host:port`` (``rediss+cluster://``
with TLS; any nodes, the client learns the rest) uses redis-py's cluster
client. Every script touches one transcript's keys, all on its slot, and
publishes on the transcript's sharded channel (``server.store.redis.shards``
subscribes to it while this replica holds the transcript). A node that is
down makes its transcripts ``StoreUnavailable``; the others keep working.
``create``, ``delete`` and ``list`` also need the node of the ``ids`` index.

The package, one module a job: ``link`` (the clients, TLS, cluster nodes,
error mapping, THE pub/sub reconnect loop, ``Script``, what each part is
given), ``scripts`` (the store's Lua), ``store`` (``RedisStore``), ``shards``
(a cluster's sharded notices), ``drafts``, ``presence``, and ``streams``
(the Durable Streams of this store). No module here imports another
backend.
"""

from __future__ import annotations

from server.store.redis.store import INTERNAL_KEY_RETENTION, RedisStore

__all__ = ["INTERNAL_KEY_RETENTION", "RedisStore"]
