"""``tsync bench``: a load-test harness for any transcript-sync deployment.

Subscribers speak the wire protocol directly (``websockets`` +
``protocol.wire`` + ``protocol.continuity``), check every frame's continuity
and measure append->delivery latency from a timestamp the writer puts in each
message's ``metadata``. See ``docs/benchmarks.md``.
"""
