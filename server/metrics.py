"""Prometheus metrics of one server (its own registry, so tests can run many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    """Every metric the server exports. Hot paths update them per WebSocket
    message or per event, never per subscriber per frame."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.connections = Gauge("tsync_connections", "Open WebSocket connections", registry=r)
        self.subscriptions = Gauge("tsync_subscriptions", "Active subscriptions", registry=r)
        self.live_transcripts = Gauge(
            "tsync_live_transcripts", "Transcripts held in memory", registry=r
        )
        self.frames_sent = Counter("tsync_frames_sent", "Frames sent to clients", registry=r)
        self.messages_sent = Counter(
            "tsync_ws_messages_sent", "WebSocket messages sent (frames coalesced)", registry=r
        )
        self.bytes_sent = Counter("tsync_bytes_sent", "Bytes of frames sent", registry=r)
        self.appends = Counter(
            "tsync_appends", "Accepted changes", ["transport", "kind"], registry=r
        )
        self.duplicates = Counter(
            "tsync_idempotent_replays", "Appends answered from an idempotency key", registry=r
        )
        self.lagged = Counter("tsync_lagged", "Subscriptions dropped as lagged", registry=r)
        self.subscribes = Counter(
            "tsync_subscribes", "Subscribes by how they were served", ["mode"], registry=r
        )
        self.errors = Counter(
            "tsync_errors", "Error frames and problems sent", ["code"], registry=r
        )
        self.append_latency = Histogram(
            "tsync_append_latency_seconds",
            "Time from receiving an append to its ack (store commit included)",
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.store_errors = Counter(
            "tsync_store_errors", "Store operations that failed", ["op"], registry=r
        )
        self.backplane_events = Counter(
            "tsync_backplane_events", "Changes learnt from other replicas", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
