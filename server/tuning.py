"""Fixed tunables: numbers that are not worth a setting, named and explained
in one place (settings live in ``server.config`` and the stores' options in
``server.store.options``).

Change one only with a measurement: each was chosen against a benchmark or a
failure described next to it.
"""

from __future__ import annotations

from typing import Final

# --- the outbound queue of a connection (server.live.outbound) -------------------------------

#: Acks, pongs and errors a connection's queue may hold beyond
#: ``queue_max_frames`` and ``queue_max_bytes`` (they are never dropped on lag).
#: A client that lets even these pile up does not read at all: it is closed with
#: 4008. Every frame counts its real size, so a flood of errors from a client
#: that never reads holds at most ``queue_max_bytes`` + 1 MiB.
CONTROL_FRAME_SLACK: Final = 1024
CONTROL_BYTES_SLACK: Final = 1 << 20

#: The longest error ``message`` the server sends, in characters; longer ones
#: (which quote what the client sent) are cut with an ellipsis. A client sending
#: a 4 MiB unknown op must not get 4 MiB back per frame (issue 14, item 3).
MAX_ERROR_MESSAGE_CHARS: Final = 300

#: Seconds the endpoint waits to send its close frame to a client that is not
#: reading (its socket buffer is full) before it lets the connection go; the
#: WebSocket keepalive then ends the TCP connection.
CLOSE_SEND_TIMEOUT_S: Final = 5.0

# --- baselines (server.live: baselines, live_transcript, hub) -------------------------

#: Bytes of encoded messages per chunk of a live transcript's encoded messages.
#: A chunk is encoded in one call (about 0.1 ms per 64 KiB): the longest the event
#: loop waits for a baseline encode, and the size of one fragment of a baseline
#: streamed to a connection that takes raw frames. Measured: a 98 MiB
#: transcript encodes in 0.4 s in one call, stalling every client for that long.
BASELINE_CHUNK_BYTES: Final = 64 << 10

#: Baselines that encode (their first chunks) at once, server-wide. Each takes its
#: turn a chunk at a time, so others still run; the bound keeps a storm of
#: subscribes to many big transcripts from holding all their encodes in memory
#: at once, and gives the queued ones the encoded messages when their turn comes.
BASELINE_ENCODES_AT_ONCE: Final = 2

#: A baseline that starts before the messages a live transcript holds reads
#: the older ones from the store in pieces of about this many bytes (by the
#: average message size encoded so far; ``BASELINE_READ_FIRST`` messages
#: first), and encodes each before reading the next: a 60 MB transcript is
#: never all in memory as objects for one baseline, only its encoding.
BASELINE_READ_BYTES: Final = 4 << 20
BASELINE_READ_FIRST: Final = 256

#: Resumes from beyond the event window that read their events from the store
#: at once, server-wide (each read holds up to ``max_resume_events`` events in
#: memory until they are queued: 50 at once held gigabytes, issue 14 item 4).
RESUME_FETCHES_AT_ONCE: Final = 4

#: Bytes one connection's raw writes put out in one turn of the event loop
#: before its writer lets the others run (a client on a fast link reading a
#: 98 MiB baseline would otherwise have it written in one go).
RAW_FLUSH_BYTES: Final = 1 << 20

# --- the WebSocket reader (server.web.ws, server.web.ws_protocol) ---------------------------------

#: The WebSocket protocol stops reading a connection's socket once this many
#: messages wait for the app, or as soon as one waiting message is this big
#: (uvicorn stops after every message: two epoll_ctl calls per message). What a
#: connection holds unread stays under about 1 MiB plus one message.
INBOUND_QUEUED_MESSAGES: Final = 16
INBOUND_PAUSE_BYTES: Final = 64 << 10

#: The WebSocket parser takes a socket read this many bytes at a time, and
#: lets the loop run once a turn of slices took ``INBOUND_PARSE_TURN_S`` (the
#: rest waits, reading paused, for the next turn). A frame costs the parser a
#: few microseconds whatever its size: 64 KiB of empty fragments is 11,000
#: frames, about 35 ms in one call; 4 KiB of them about 2 ms, while 4 KiB of
#: a large frame is a copy (issue 24).
INBOUND_PARSE_SLICE_BYTES: Final = 4 << 10
INBOUND_PARSE_TURN_S: Final = 0.002

#: Appends of one connection waiting for their commit before its reader stops
#: reading for a moment (back-pressure on a client that pipelines appends).
MAX_APPENDS_IN_FLIGHT: Final = 256

#: The reader lets the pump and the writers run after this many ops even when
#: the store answered without suspending. After every op, a reader taking one
#: op per loop turn falls behind busy writers (uvicorn then stops reading the
#: socket, pongs included); never, a burst from one client starves everyone's
#: deliveries.
OPS_PER_YIELD: Final = 16

# --- the hub (server.live.hub) ---------------------------------------------------------------

#: The idle sweeper looks for unused live transcripts this many times per
#: ``idle_ttl_s``, and at least every ``MIN_IDLE_SWEEP_S`` seconds apart.
IDLE_SWEEPS_PER_TTL: Final = 4
MIN_IDLE_SWEEP_S: Final = 0.05

#: Transcripts loaded from the store at once (the others wait): a burst of
#: requests for many transcripts cannot hold all of them in memory at once
#: before ``max_live_transcripts`` is even checked.
MAX_CONCURRENT_LOADS: Final = 16

#: What ``Retry-After`` says when the server holds as many transcripts as it may.
LIVE_FULL_RETRY_AFTER_S: Final = 1

# --- the backplane (server.replicas: backplane, draft_relay) -----------------------------------

#: Live copies the backplane brings up to date at once (each one a store read).
BACKPLANE_CONCURRENCY: Final = 32

#: First delay before the draft relay tries again after Redis refused
#: (doubles up to 1 s).
DRAFT_RELAY_RETRY_S: Final = 0.05
#: Seconds the draft relay's ``stop`` waits for what is pending to be relayed.
DRAFT_RELAY_STOP_FLUSH_S: Final = 1.0
#: Draft updates relayed in one round trip at most.
DRAFT_RELAY_BATCH: Final = 512
#: Draft updates waiting to be relayed past which each draft's whole text goes
#: instead (Redis slow or away): what waits is then one entry per draft.
DRAFT_RELAY_BACKLOG: Final = 10_000
#: Draft updates of one transcript held while its drafts are read back; past
#: it they are dropped and the drafts read again.
DRAFT_RECOVERY_BUFFER: Final = 1024

# --- presence (server.live.presence) ---------------------------------------------------

#: What a member costs against ``max_connection_presence_bytes`` besides its
#: state's compact JSON (its ``Member``, its entries in the transcript's
#: tables): about what it takes. Measured: 601 bytes per member with a small
#: state (25,600 members on 256 transcripts), 1,623 with a 1 KiB one.
PRESENCE_MEMBER_COST: Final = 640

# --- drafts (server.live: drafts, hub) --------------------------------------------------

#: What an open draft costs against ``max_draft_bytes`` and
#: ``max_connection_draft_bytes`` besides its text's UTF-8 bytes (its
#: objects and frames), and what a remembered close costs against
#: ``max_draft_bytes`` (its id, entry and frame): about what they take.
OPEN_DRAFT_COST: Final = 1024
CLOSED_DRAFT_COST: Final = 256

#: Seconds a draft copied from another replica lives past ``draft_ttl_s``
#: without an update before this replica expires it itself: its own replica
#: normally publishes the ``expired`` first; this is for one that died.
REMOTE_DRAFT_GRACE_S: Final = 2.0

#: The draft sweeper looks for idle drafts this many times per ``draft_ttl_s``,
#: at least ``MIN_DRAFT_SWEEP_S`` apart, and lets the loop run after every
#: ``DRAFT_SWEEP_BATCH`` transcripts it looked at.
DRAFT_SWEEPS_PER_TTL: Final = 4
MIN_DRAFT_SWEEP_S: Final = 0.02
DRAFT_SWEEP_BATCH: Final = 500

# --- the offload workers (server.web.offload) ----------------------------------------------

#: Jobs a worker process runs before it is replaced by a fresh one.
OFFLOAD_JOBS_PER_WORKER: Final = 50
#: How much lower the workers' CPU priority is than the server's (``nice``).
OFFLOAD_WORKER_NICENESS: Final = 10
#: What ``Retry-After`` says when the offload queue is full.
OFFLOAD_FULL_RETRY_AFTER_S: Final = 1
#: Messages encoded in one piece by ``encode_messages`` between yields.
ENCODE_CHUNK_MESSAGES: Final = 64
#: The longest ``encode_messages`` holds the loop before it yields.
ENCODE_SLICE_S: Final = 0.005
