"""Prometheus metrics of one server (its own registry, so tests can run many)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# A ``<name>_created`` series per counter and histogram doubles what every
# scrape stores and no dashboard reads it.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Methods counted by name; anything else is counted as "other" (a label per
#: made-up method would let a client grow the registry without bound).
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class SendTotals:
    """Plain integers the connection writers add to on every send; folded into
    the registry only when ``/metrics`` is scraped (a prometheus-client
    ``Counter.inc`` takes a lock: too dear for the per-send path)."""

    __slots__ = ("bytes", "frames", "messages")

    def __init__(self) -> None:
        self.frames = 0
        self.messages = 0
        self.bytes = 0


class _SendTotalsCollector(Collector):
    def __init__(self, totals: SendTotals) -> None:
        self.totals = totals

    def collect(self) -> Iterator[CounterMetricFamily]:
        t = self.totals
        yield CounterMetricFamily("tsync_frames_sent", "Frames sent to clients", value=t.frames)
        yield CounterMetricFamily(
            "tsync_ws_messages_sent", "WebSocket messages sent (frames coalesced)", value=t.messages
        )
        yield CounterMetricFamily("tsync_bytes_sent", "Bytes of frames sent", value=t.bytes)


class Metrics:
    """Every metric the server exports. Hot paths update them per WebSocket
    message or per event, never per subscriber per frame."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # The standard collectors (process_cpu_seconds_total,
        # process_resident_memory_bytes, open fds, python_info, GC).
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)
        self.connections = Gauge("tsync_connections", "Open WebSocket connections", registry=r)
        self.subscriptions = Gauge("tsync_subscriptions", "Active subscriptions", registry=r)
        self.live_transcripts = Gauge(
            "tsync_live_transcripts", "Transcripts held in memory", registry=r
        )
        self.sent = SendTotals()
        r.register(_SendTotalsCollector(self.sent))
        self.appends = Counter(
            "tsync_appends", "Accepted changes", ["transport", "kind"], registry=r
        )
        self._appended: dict[tuple[str, str], Counter] = {}
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
        self.drafts_open = Gauge(
            "tsync_drafts_open", "Open drafts of the transcripts held in memory", registry=r
        )
        self.presence_members = Gauge(
            "tsync_presence_members",
            "Presence members of every transcript this replica knows (its own and relayed)",
            registry=r,
        )
        self.presence_frames = Counter(
            "tsync_presence_frames",
            "Presence change frames made (one per transcript per interval, shared by its watchers)",
            registry=r,
        )
        self.draft_updates = Counter(
            "tsync_draft_updates",
            "Draft updates and closes fanned out, by kind (delta, text, final, cancelled, expired)",
            ["kind"],
            registry=r,
        )
        self.backplane_events = Counter(
            "tsync_backplane_events", "Changes learnt from other replicas", registry=r
        )
        self.digest_mismatches = Counter(
            "tsync_digest_mismatches",
            "Changes from the store whose digest did not follow from this replica's copy "
            "(the transcript was reloaded)",
            registry=r,
        )
        self.replans = Counter(
            "tsync_append_replans",
            "Appends planned again after catching up: another replica's change landed first",
            registry=r,
        )

        self.http_requests = Counter(
            "tsync_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "tsync_http_request_duration_seconds",
            "Time from receiving an HTTP request to the end of its answer",
            ["method", "route", "status"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
        )

    def appended(self, transport: str, kind: str) -> None:
        """Count one accepted change (``tsync_appends``). The labelled child
        is looked up once per label pair and kept: ``labels()`` takes a lock
        and builds a key on every call, and this runs once per append."""
        key = (transport, kind)
        child = self._appended.get(key)
        if child is None:
            child = self._appended[key] = self.appends.labels(transport, kind)
        child.inc()

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered HTTP request (``route`` is its template)."""
        labels = (method if method in HTTP_METHODS else "other", route, str(status))
        self.http_requests.labels(*labels).inc()
        self.http_duration.labels(*labels).observe(seconds)

    def http_observer(self, method: str, route: str, status: int) -> Callable[[float], None]:
        """``observe_http`` of one method, route and status, its labels
        looked up once (``server.streams.longpoll`` keeps one per status)."""
        labels = (method if method in HTTP_METHODS else "other", route, str(status))
        requests = self.http_requests.labels(*labels)
        duration = self.http_duration.labels(*labels)

        def observe(seconds: float) -> None:
            requests.inc()
            duration.observe(seconds)

        return observe

    def render(self) -> bytes:
        return generate_latest(self.registry)
