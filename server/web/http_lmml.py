"""HTTP endpoints backed by ``protocol.lmml``: import, export and chat rendering.

- ``POST /v1/transcripts/import``: a ``.lmml`` or ``.lmmlz`` body becomes one new
  transcript, one message per turn, created as a single append (revision 1).
- ``GET /v1/transcripts/{id}/chat``: the body of a chat API call, OpenAI's
  (``{"messages": [...]}``) or Anthropic's (``format=anthropic``).
- ``GET /v1/transcripts/{id}/ui-messages``: the messages as the AI SDK's
  ``UIMessage``s (``protocol.ui_messages``).
- ``GET /v1/transcripts/{id}/export.lmml`` and ``export.lmmlz``: the transcript
  written so that importing it gives the same messages back.
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from protocol import api, codes, lmml
from protocol import chat as chat_api
from protocol import ui_messages as ui_api
from protocol.digest import history_digest
from protocol.types import Message, MessagesAppended, TranscriptSnapshot
from server.errors import Refused
from server.web import http_reads, offload_jobs
from server.web.http_api import (
    hub_of,
    int_param,
    media_type,
    origin_of,
    read_body_as,
    transcript_id_of,
)
from server.web.offload import Offload, encode_messages, inline_ok
from server.web.problems import json_response

_decode_messages = msgspec.msgpack.Decoder(tuple[Message, ...]).decode


def _offload(request: Request) -> Offload:
    offload: Offload = request.app.state.offload
    return offload


#: The first bytes of a zip archive (local file header, empty archive, spanned).
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_ZIP_TYPES = ("application/zip", "application/x-zip-compressed", "application/x-zip")
_TEXT_TYPES = ("text/markdown", "text/x-markdown")
#: What an import may be sent as: not ``text/plain`` nor a form, which a page
#: of another site could send without asking (``server.web.origins``).
LMML_TYPES = (*_TEXT_TYPES, *_ZIP_TYPES, "application/octet-stream")


def _upload_name(request: Request) -> str | None:
    """The uploaded file's base name: ``?filename=``, else the
    ``Content-Disposition`` header's ``filename`` (RFC 6266, ``filename*`` too)."""
    name = request.query_params.get("filename")
    if not name:
        header = request.headers.get("content-disposition")
        if header:
            parsed = email.message.Message()
            parsed["content-disposition"] = header
            name = parsed.get_filename()
    if not name:
        return None
    # Only the base name: a client's directories say nothing about the file.
    return name.replace("\\", "/").rpartition("/")[2] or None


def _import_filename(request: Request, body: bytes) -> str | None:
    """The file name to read ``body`` as: the upload's own name when it says
    ``.lmml`` or ``.lmmlz``, else a name that encodes what ``Content-Type``
    says (``None`` leaves it to the zip magic)."""
    name = _upload_name(request)
    if name is not None and name.lower().endswith((".lmml", ".lmmlz")):
        return name
    media = media_type(request) or ""
    if media in _ZIP_TYPES:
        if body[:4] not in _ZIP_MAGIC:
            # Without a .lmmlz name read_bundle would take it for text.
            raise Refused(
                codes.INVALID_LMML, f"the body is sent as {media} but is not a zip archive"
            )
        return name
    if media in _TEXT_TYPES:
        # A synthetic .lmml name makes read_bundle read it as text, magic or not.
        return "upload.lmml"
    return name


async def import_transcript(request: Request) -> Response:
    """Create a transcript from an LMML narrative or bundle; all or nothing.

    Answers 201 ``{transcriptId, epoch, revision, count, warnings}``; 400
    ``invalid-body`` when there is no body; 422
    ``invalid-lmml`` when the file cannot be read (nothing is created), 422
    ``invalid-message`` when a turn is not a message this server accepts,
    409 when ``?id=`` exists, 413 for a body over ``max_http_body_bytes``.
    """
    hub = hub_of(request)
    body = await read_body_as(request, LMML_TYPES)
    if not body:
        # No file at all is a client that forgot it (an empty transcript is
        # POST /v1/transcripts), not an empty narrative.
        raise Refused(
            codes.INVALID_BODY, "the body is empty: send the .lmml narrative or .lmmlz bundle"
        )
    filename = _import_filename(request, body)
    max_embed = int_param(request, "maxEmbedBytes")
    args = (body, filename, max_embed, hub.config.message_limits)
    try:
        if inline_ok(len(body)) and not body.startswith(b"PK"):
            encoded, warnings, source = offload_jobs.import_lmml(*args)
        else:
            # Large, or a zip (whose inflated size its header may lie about).
            encoded, warnings, source = await _offload(request).run(
                "reading the import", offload_jobs.import_lmml, *args
            )
    except lmml.LmmlError as exc:
        raise Refused(codes.INVALID_LMML, str(exc)) from None
    # Validated (with the configured limits) where they were read.
    messages = _decode_messages(encoded)
    tid, epoch, revision = await hub.writes.create(
        request.query_params.get("id") or None, messages, origin=origin_of(request)
    )
    return json_response(
        api.Imported(
            transcript_id=tid,
            epoch=epoch,
            revision=revision,
            count=len(messages),
            warnings=list(warnings),
            digest=history_digest(tid, [MessagesAppended(0, messages)] if messages else []),
            source=None if source is None else msgspec.convert(source, api.ImportedFrom),
        ),
        201,
    )


def _choice(request: Request, name: str, allowed: tuple[str, ...]) -> str:
    value = request.query_params.get(name, allowed[0])
    if value not in allowed:
        raise Refused(
            codes.INVALID_QUERY, f"query parameter {name!r} must be one of {', '.join(allowed)}"
        )
    return value


async def chat(request: Request) -> Response:
    """The messages of the active segment (``?segment=active``, the default) or
    of every message (``all``) as the request body of a chat API: OpenAI's
    chat completions (``?format=openai``, the default: ``{"messages": [...]}``)
    or Anthropic's Messages (``format=anthropic``: ``{"messages": [...],
    "system": ...}``), converted as ``protocol.chat`` says; ``context``
    messages are left out unless ``?context=system``."""
    tid = transcript_id_of(request)
    segment = _choice(request, "segment", ("active", "all"))
    chat_format = _choice(request, "format", ("openai", "anthropic"))
    context: Literal["omit", "system"] = (
        "system" if _choice(request, "context", ("omit", "system")) == "system" else "omit"
    )
    # The active segment only is read (a long transcript's history stays in
    # the store), and a long answer is streamed (server.web.http_reads).
    if chat_format == "anthropic":
        renderer = chat_api.AnthropicRenderer(context)
        return await http_reads.chat_response(
            hub_of(request),
            tid,
            active_only=segment == "active",
            render=lambda messages: renderer.feed(messages),
            finish=lambda: (renderer.finish(), renderer.system),
        )
    return await http_reads.chat_response(
        hub_of(request),
        tid,
        active_only=segment == "active",
        render=lambda messages: chat_api.openai_messages(messages, context=context),
    )


async def ui_messages(request: Request) -> Response:
    """The transcript as the AI SDK's ``UIMessage``s (``protocol.ui_messages``),
    for ``useChat({messages})``: every message (``?segment=all``, the
    default), the active segment (``segment=active``), the last ``tail``
    messages or those from index ``from`` on (one window at a time); a
    window that starts inside a reply shows its tool results as dynamic
    tools. Streamed past ``STREAM_MIN_ITEMS`` messages, as ``.../chat``."""
    tid = transcript_id_of(request)
    tail = int_param(request, "tail")
    since = int_param(request, "from")
    given = [name for name in ("segment", "tail", "from") if name in request.query_params]
    if len(given) > 1:
        raise Refused(
            codes.INVALID_QUERY, f"give one of segment, tail and from, not {' and '.join(given)}"
        )
    if (tail is not None and tail < 0) or (since is not None and since < 0):
        raise Refused(codes.INVALID_QUERY, "tail and from are non-negative integers")
    segment = _choice(request, "segment", ("all", "active"))
    context = _choice(request, "context", ("omit", "system"))

    def first(head: TranscriptSnapshot) -> int:
        if tail is not None:
            return max(0, head.length - tail)
        if since is not None:
            return min(since, head.length)
        return head.active_start if segment == "active" else 0

    renderer: list[ui_api.UIMessageRenderer] = []

    def render(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
        return renderer[0].feed(messages)

    def begin(head: TranscriptSnapshot) -> int:
        start = first(head)
        renderer.append(ui_api.UIMessageRenderer(start, context=context))
        return start

    return await http_reads.chat_response(
        hub_of(request),
        tid,
        active_only=False,
        render=render,
        finish=lambda: (renderer[0].finish(), None),
        first=begin,
    )


def _bundle_name(transcript_id: str) -> str:
    # ".." is a valid id but not a file name a bundle may hold.
    return "transcript" if transcript_id == ".." else transcript_id


def _download(
    body: bytes, media_type: str, filename: str, snapshot: TranscriptSnapshot
) -> Response:
    response = Response(body, media_type=media_type)
    # Ids are [A-Za-z0-9._:-]: nothing to quote or escape.
    response.headers["content-disposition"] = f'attachment; filename="{filename}"'
    response.headers["x-transcript-revision"] = str(snapshot.revision)
    if snapshot.digest is not None:
        response.headers["x-transcript-digest"] = snapshot.digest
    return response


def _origin_of(snapshot: TranscriptSnapshot) -> offload_jobs.ExportOrigin | None:
    """What an export's first line names (``None``: a snapshot without a digest)."""
    if snapshot.digest is None:
        return None
    return (snapshot.transcript_id, snapshot.revision, snapshot.digest)


async def _export(
    request: Request, messages: Sequence[Message], what: str, fn: Callable[..., bytes], *args: Any
) -> bytes:
    """``fn(chunks, *args)`` of the encoded ``messages``: on the loop when
    they are small, else in a worker (``server.web.offload``)."""
    chunks, size = await encode_messages(messages)
    if inline_ok(size):
        return fn(chunks, *args)
    return await _offload(request).run(what, fn, chunks, *args)


async def export_lmml(request: Request) -> Response:
    """The transcript as one ``.lmml`` narrative (embeds as inline fences)."""
    tid = transcript_id_of(request)
    snapshot = await hub_of(request).reads.snapshot(tid)
    data = await _export(
        request,
        snapshot.messages,
        "writing the export",
        offload_jobs.export_lmml,
        _origin_of(snapshot),
    )
    return _download(data, "text/markdown; charset=utf-8", f"{_bundle_name(tid)}.lmml", snapshot)


async def export_lmmlz(request: Request) -> Response:
    """The transcript as a ``.lmmlz`` whose primary entry is ``<id>.lmml``."""
    tid = transcript_id_of(request)
    snapshot = await hub_of(request).reads.snapshot(tid)
    name = _bundle_name(tid)
    data = await _export(
        request,
        snapshot.messages,
        "writing the export",
        offload_jobs.export_lmmlz,
        name,
        _origin_of(snapshot),
    )
    return _download(data, "application/zip", f"{name}.lmmlz", snapshot)
