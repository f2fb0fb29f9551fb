"""The HTTP half of the client (docs/protocol.md, section 3, HTTP API), over httpx.

``HttpApi`` makes one request per call and maps ``application/problem+json``
answers to the typed errors of ``client_py.errors``. The WebSocket client uses
it for ``create`` and ``get``; the command line uses it for the one-shot
commands.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec

from client_py.errors import ServerError, Unreachable, error_for
from client_py.tokens import TokenProvider, TokenSource
from protocol import codes
from protocol.api import (
    EventsBody,
    MessageRange,
    TranscriptList,
    TranscriptSummary,
    UsageBody,
    ViewList,
)
from protocol.types import TranscriptEvent, TranscriptSnapshot, View

__all__ = ["Ack", "Created", "HttpApi", "Imported", "Receipt", "endpoints"]

WS_PATH = "/v1/ws"


@dataclass(frozen=True, slots=True)
class Receipt:
    """What the server answered to an append or a segment start (its ``ack``).

    ``start``/``count`` are the appended range (``count`` is ``None`` for a
    segment start). ``duplicate`` is true when the server had already applied
    this idempotency key, possibly from an earlier attempt of the same call
    that the client retried after losing its connection.
    """

    transcript_id: str
    revision: int
    start: int | None = None
    count: int | None = None
    duplicate: bool = False
    #: ``client.stream``'s reply was stopped by a reader: what it held was
    #: committed (by the server) as ``revision``, marked stopped.
    stopped: bool = False


#: The old name of ``Receipt`` (``protocol.wire.Ack`` is the frame); kept so
#: that code written against it keeps working.
Ack = Receipt


@dataclass(frozen=True, slots=True)
class Created:
    """A new transcript: its id, its epoch and its revision (1 with messages, else 0)."""

    transcript_id: str
    epoch: str
    revision: int


@dataclass(frozen=True, slots=True)
class Imported:
    """A transcript made from an imported LMML file, with the importer's warnings."""

    transcript_id: str
    epoch: str
    revision: int
    warnings: tuple[str, ...] = ()


def endpoints(url: str) -> tuple[str, str]:
    """``(http_base, ws_url)`` for a server URL given either way.

    ``ws://h:p/v1/ws`` gives ``http://h:p``; ``http://h:p`` gives
    ``ws://h:p/v1/ws`` (``wss``/``https`` likewise). Raises ``ValueError``
    for any other scheme.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    path = parts.path.rstrip("/")
    if scheme in ("ws", "wss"):
        if path.endswith(WS_PATH):
            base_path = path[: -len(WS_PATH)]
        else:
            base_path, path = path, path + WS_PATH
        http_scheme = "https" if scheme == "wss" else "http"
        return (
            urlunsplit((http_scheme, parts.netloc, base_path, "", "")),
            urlunsplit((scheme, parts.netloc, path, parts.query, "")),
        )
    if scheme in ("http", "https"):
        ws_scheme = "wss" if scheme == "https" else "ws"
        return (
            urlunsplit((scheme, parts.netloc, path, "", "")),
            urlunsplit((ws_scheme, parts.netloc, path + WS_PATH, "", "")),
        )
    raise ValueError(f"not a ws://, wss://, http:// or https:// URL: {url!r}")


class _Bearer(httpx.Auth):
    """``Authorization: Bearer`` from a ``TokenSource``; a 401 with a token
    provider is tried once more with a new token."""

    def __init__(self, tokens: TokenSource) -> None:
        self.tokens = tokens

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self.tokens.get()
        if token:
            request.headers["authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401 and self.tokens.renewable:
            token = await self.tokens.renew()
            request.headers["authorization"] = f"Bearer {token}"
            yield request


_snapshot_decoder = msgspec.json.Decoder(TranscriptSnapshot)
_list_decoder = msgspec.json.Decoder(TranscriptList)
_range_decoder = msgspec.json.Decoder(MessageRange)
_events_decoder = msgspec.json.Decoder(EventsBody)
_views_decoder = msgspec.json.Decoder(ViewList)
_usage_decoder = msgspec.json.Decoder(UsageBody)


class HttpApi:
    """The HTTP API of one server. Use as ``async with HttpApi(url) as api:``
    or call ``aclose()``. Every method raises ``ServerError`` (typed by code)
    when the server says no and ``Unreachable`` when it cannot be reached."""

    def __init__(
        self,
        url: str,
        token: str | TokenProvider | TokenSource | None = None,
        *,
        timeout: float = 10.0,
    ) -> None:
        self.base, self.ws_url = endpoints(url)
        #: Where the bearer token comes from (shared with a ``Client``'s WebSocket).
        self.tokens = token if isinstance(token, TokenSource) else TokenSource(token)
        self._http = httpx.AsyncClient(
            base_url=self.base, auth=_Bearer(self.tokens), timeout=timeout
        )

    async def __aenter__(self) -> HttpApi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create(self, transcript_id: str | None = None, messages: Any = ()) -> Created:
        """``POST /v1/transcripts``: a new transcript, optionally with messages."""
        body: dict[str, Any] = {}
        if transcript_id is not None:
            body["id"] = transcript_id
        if messages:
            body["messages"] = _plain(messages)
        obj = await self._json("POST", "/v1/transcripts", json=body)
        return Created(obj["transcriptId"], obj["epoch"], obj["revision"])

    async def get(
        self, transcript_id: str, *, start: int | None = None, end: int | None = None
    ) -> TranscriptSnapshot:
        """``GET /v1/transcripts/{id}``: the snapshot now (or of ``[start, end)``)."""
        params = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
        response = await self._request("GET", f"/v1/transcripts/{transcript_id}", params=params)
        return _snapshot_decoder.decode(response.content)

    async def events(self, transcript_id: str, *, after: int = 0) -> list[TranscriptEvent]:
        """``GET /v1/transcripts/{id}/events?after=``: the events after
        revision ``after`` up to now, oldest first. Raises ``ServerError``
        with code ``gone`` when the server no longer holds them."""
        path = f"/v1/transcripts/{transcript_id}/events"
        response = await self._request("GET", path, params={"after": after})
        return _events_decoder.decode(response.content).events

    async def messages(
        self, transcript_id: str, start: int, end: int, *, epoch: str | None = None
    ) -> MessageRange:
        """``GET /v1/transcripts/{id}/messages``: messages ``[start, end)``
        (the server answers at most 1000: ``end`` may come back lower). With
        ``epoch``, a transcript created again since raises ``EpochChanged``."""
        params: dict[str, Any] = {"start": start, "end": end}
        if epoch is not None:
            params["epoch"] = epoch
        path = f"/v1/transcripts/{transcript_id}/messages"
        response = await self._request("GET", path, params=params)
        return _range_decoder.decode(response.content)

    async def views(self, transcript_id: str) -> list[View]:
        """``GET /v1/transcripts/{id}/views``: the Views, ordered by name."""
        response = await self._request("GET", f"/v1/transcripts/{transcript_id}/views")
        return _views_decoder.decode(response.content).views

    async def set_view(
        self, transcript_id: str, name: str, start: int, end: int | None = None
    ) -> Receipt:
        """``PUT /v1/transcripts/{id}/views/{name}``: create or move a View
        (``duplicate``: it already had that range)."""
        body = {"start": start, "end": end}
        obj = await self._json("PUT", f"/v1/transcripts/{transcript_id}/views/{name}", json=body)
        return _ack(obj, transcript_id)

    async def leave_view(self, transcript_id: str, name: str) -> Receipt:
        """``DELETE /v1/transcripts/{id}/views/{name}``: leave a View (no
        message is deleted; ``duplicate``: there was none)."""
        obj = await self._json("DELETE", f"/v1/transcripts/{transcript_id}/views/{name}")
        return _ack(obj, transcript_id)

    async def usage(
        self,
        transcript_id: str,
        *,
        segments: str | None = None,
        views: list[str] | None = None,
    ) -> UsageBody:
        """``GET /v1/transcripts/{id}/usage``: how segments (``all``,
        ``active`` or indices ``0,2``) and Views use the messages."""
        params: dict[str, Any] = {}
        if segments is not None:
            params["segments"] = segments
        if views is not None:
            params["views"] = ",".join(views)
        path = f"/v1/transcripts/{transcript_id}/usage"
        response = await self._request("GET", path, params=params)
        return _usage_decoder.decode(response.content)

    async def list(
        self, *, after: str | None = None, limit: int | None = None, order: str | None = None
    ) -> list[TranscriptSummary]:
        """``GET /v1/transcripts``: one page of transcripts ordered by id (or,
        with ``order="updated"``, the most recently updated first), after
        ``after`` (the server caps ``limit`` at 1000; default 100)."""
        params: dict[str, Any] = {}
        if order is not None:
            params["order"] = order
        if after is not None:
            params["after"] = after
        if limit is not None:
            params["limit"] = limit
        response = await self._request("GET", "/v1/transcripts", params=params)
        return _list_decoder.decode(response.content).transcripts

    async def delete(self, transcript_id: str) -> None:
        """``DELETE /v1/transcripts/{id}``: gone for good; subscribers get ``not-found``."""
        await self._request("DELETE", f"/v1/transcripts/{transcript_id}")

    async def append(
        self,
        transcript_id: str,
        messages: Any,
        *,
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        format: Literal["openai", "anthropic", "ui"] | None = None,
        system: Any = None,
    ) -> Receipt:
        """``POST /v1/transcripts/{id}/messages``: append one batch;
        ``format``: what that API's SDK gives (``?format=``, see
        ``Client.append``), ``system`` Anthropic's system prompt."""
        body: dict[str, Any] = {"messages": _plain(messages)}
        if expected_revision is not None:
            body["expectedRevision"] = expected_revision
        if idempotency_key is not None:
            body["idempotencyKey"] = idempotency_key
        if system is not None:
            body["system"] = sdk_plain(system)
        params = {} if format is None else {"format": format}
        obj = await self._json(
            "POST", f"/v1/transcripts/{transcript_id}/messages", json=body, params=params
        )
        return _ack(obj, transcript_id)

    async def start_segment(self, transcript_id: str, start: int | None = None) -> Receipt:
        """``POST /v1/transcripts/{id}/segments``: start a segment."""
        body = {} if start is None else {"start": start}
        obj = await self._json("POST", f"/v1/transcripts/{transcript_id}/segments", json=body)
        return _ack(obj, transcript_id)

    async def import_file(
        self, filename: str, data: bytes, *, transcript_id: str | None = None
    ) -> Imported:
        """``POST /v1/transcripts/import``: make a transcript from ``.lmml``/``.lmmlz`` bytes.

        The file name travels as ``?filename=`` (and ``Content-Disposition``)
        so the server can tell a bundle from a narrative.
        """
        params = {"filename": filename}
        if transcript_id is not None:
            params["id"] = transcript_id
        zipped = filename.lower().endswith(".lmmlz")
        headers = {
            "content-type": "application/zip" if zipped else "text/markdown; charset=utf-8",
            "content-disposition": f'attachment; filename="{_quoted(filename)}"',
        }
        obj = await self._json(
            "POST", "/v1/transcripts/import", content=data, params=params, headers=headers
        )
        warnings = tuple(str(w) for w in obj.get("warnings") or ())
        return Imported(obj["transcriptId"], obj["epoch"], obj["revision"], warnings)

    async def export(self, transcript_id: str, *, bundle: bool = False) -> bytes:
        """``GET /v1/transcripts/{id}/export.lmml`` (or ``.lmmlz`` when ``bundle``)."""
        suffix = "lmmlz" if bundle else "lmml"
        response = await self._request("GET", f"/v1/transcripts/{transcript_id}/export.{suffix}")
        return response.content

    async def chat(
        self,
        transcript_id: str,
        *,
        format: Literal["openai", "anthropic"] = "openai",
        segment: Literal["active", "all"] = "active",
        context: Literal["omit", "system"] = "omit",
    ) -> dict[str, Any]:
        """``GET /v1/transcripts/{id}/chat``: the body of a chat API call, to
        pass on as it is: ``openai.chat.completions.create(model=...,
        **body)`` (``{"messages"}``), or with ``format="anthropic"``
        ``anthropic.messages.create(model=..., max_tokens=..., **body)``
        (``{"messages", "system"?}``). See "Chat output" in docs/protocol.md."""
        params = {"format": format, "segment": segment, "context": context}
        return await self._json("GET", f"/v1/transcripts/{transcript_id}/chat", params=params)

    # -- internals ------------------------------------------------------------------

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self._request(method, path, **kwargs)
        obj = response.json()
        if not isinstance(obj, dict):
            raise ServerError("invalid-frame", f"{method} {path}: expected a JSON object")
        return obj

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unreachable(f"{self.base}: {exc or type(exc).__name__}") from exc
        if response.is_success:
            return response
        raise _problem(response)


def _problem(response: httpx.Response) -> ServerError:
    try:
        obj = response.json()
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        text = response.text.strip().splitlines()
        message = text[0] if text else response.reason_phrase
        return error_for(
            codes.code_for_status(response.status_code), message, status=response.status_code
        )
    code = str(obj.get("code") or codes.code_for_status(response.status_code))
    message = str(obj.get("detail") or obj.get("title") or response.reason_phrase)
    return error_for(code, message, status=response.status_code, details=obj)


def _ack(obj: dict[str, Any], transcript_id: str) -> Receipt:
    return Ack(
        transcript_id=obj.get("transcriptId", transcript_id),
        revision=obj["revision"],
        start=obj.get("start"),
        count=obj.get("count"),
        duplicate=bool(obj.get("duplicate", False)),
    )


def sdk_plain(value: Any) -> Any:
    """Plain data for the wire from a message: a ``Message`` struct, a plain
    dict, or an SDK's object (anything with pydantic's ``model_dump``, as
    the openai and anthropic packages' types have; no SDK is imported)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    if isinstance(value, list | tuple):
        return [sdk_plain(v) for v in value]
    return msgspec.to_builtins(value)


def _plain(messages: Any) -> list[Any]:
    # Messages may be Message structs, plain dicts or SDK objects; the wire wants plain data.
    return [sdk_plain(m) for m in messages]


def _quoted(filename: str) -> str:
    return filename.replace("\\", "_").replace('"', "_")
