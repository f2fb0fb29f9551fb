"""Fixed tunables: numbers that are not worth a setting, named and explained
in one place (settings live in ``server.config`` and the stores' options in
``server.store.options``).

Change one only with a measurement: each was chosen against a benchmark or a
failure described next to it.
"""

from __future__ import annotations

from typing import Final

# --- the outbound queue of a connection (server.outbound) -------------------------------

#: Bytes added to an encoded event's or snapshot's length to estimate the frame
#: the connection's queue holds for it (``{"type":"increment","seq":N,"event":``
#: and the closing brace). An estimate: the queue's byte bound only needs to be
#: about right, and measuring exactly would mean rendering every frame twice.
FRAME_ENVELOPE_BYTES: Final = 40

#: Estimated bytes of a queued ack, pong or error frame.
CONTROL_FRAME_BYTES: Final = 160

#: Acks, pongs and errors a connection's queue may hold beyond
#: ``queue_max_frames`` (they are never dropped on lag). A client that lets even
#: these pile up does not read at all: it is closed with 4008.
CONTROL_FRAME_SLACK: Final = 1024

# --- the WebSocket reader (server.ws) ---------------------------------------------------

#: Appends of one connection waiting for their commit before its reader stops
#: reading for a moment (back-pressure on a client that pipelines appends).
MAX_APPENDS_IN_FLIGHT: Final = 256

#: The reader lets the pump and the writers run after this many ops even when
#: the store answered without suspending. After every op, a reader taking one
#: op per loop turn falls behind busy writers (uvicorn then stops reading the
#: socket, pongs included); never, a burst from one client starves everyone's
#: deliveries.
OPS_PER_YIELD: Final = 16

# --- the hub (server.hub) ---------------------------------------------------------------

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

# --- the backplane (server.backplane) ---------------------------------------------------

#: Live copies the backplane brings up to date at once (each one a store read).
BACKPLANE_CONCURRENCY: Final = 32
