"""The Durable Streams face: ElectricSQL's open protocol for resumable,
offset-addressed streams over plain HTTP, served at ``/v1/stream/{path}``.

- ``server.streams.model``: one stream's state and every rule of the protocol
  that does not wait (offsets, JSON mode, producers, forks, expiry, reads).
- ``server.streams.registry``: ``StreamRegistry``, the streams every request
  is answered from (each backend's: the memory store's are all there), and
  readers waiting for what comes next (long-poll and SSE).
- ``server.streams.log``: the port the registry writes each change through
  before answering (``StreamLog``; ``NoLog`` for the memory store).
- ``server.store.sqlite.streams``: ``SQLiteStreamLog``, the streams of the SQLite
  store in ``streams.sqlite3`` beside its database (durable across SIGKILL).
- ``server.streams.redis``: ``RedisRegistry``, the streams of the Redis store
  in Redis, shared by its replicas (each answers from a copy it brings up to
  date, writes with a check, and wakes its readers on the others' notices),
  through the store's streams part ``server.store.redis.streams``.
- ``server.streams.http``: the HTTP face (create, append, close, read in the
  three modes, HEAD, DELETE), the headers, ETags and cursors of the protocol.

docs/protocol.md ("Durable Streams") says what is implemented and how the
conformance suite is run.
"""
