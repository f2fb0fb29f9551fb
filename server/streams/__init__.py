"""The Durable Streams face: ElectricSQL's open protocol for resumable,
offset-addressed streams over plain HTTP, served at ``/v1/stream/{path}``.

- ``server.streams.model``: one stream's state and every rule of the protocol
  that does not wait (offsets, JSON mode, producers, forks, expiry, reads).
- ``server.streams.registry``: ``StreamRegistry``, the streams every request
  is answered from (one class for every store, holding its ``StreamPort``),
  and readers waiting for what comes next (long-poll and SSE).
- ``server.streams.port``: ``StreamPort``, what the registry needs of a
  store (its verbs: ``load``, ``forks``, ``write`` of one change record,
  ``remove``, ``sweep``, and the lifecycle), and ``LogPort``, the port over a
  ``StreamLog``.
- ``server.streams.open``: ``stream_port``, the port of the streams part
  ``server.store.open.open_backend`` opened with its store.
- ``server.streams.log``: ``StreamLog``, where a store of the process's own
  writes each change before it is answered (``NoLog`` for the memory store).
- ``server.store.sqlite.streams``: ``SQLiteStreamLog``, the streams of the SQLite
  store in ``streams.sqlite3`` beside its database (durable across SIGKILL).
- ``server.streams.shared``: ``SharedPort``, the port of the Redis store's
  streams, shared by its replicas (each answers from a copy the port brings
  up to date, writes with a check, and wakes its readers on the others'
  notices), through the store's streams part ``server.store.redis.streams``.
- ``server.streams.http``: the HTTP face (create, append, close, read in the
  three modes, HEAD, DELETE), the headers, ETags and cursors of the protocol.

docs/protocol.md ("Durable Streams") says what is implemented and how the
conformance suite is run.
"""
