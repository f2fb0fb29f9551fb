"""The client commands of ``tsync``: tail, append, stream, get, list, create,
delete, segment, views, view, usage, import, export, verify.

``server.run.cli`` calls ``register(subparsers)``. Every command takes ``--url``
(default ``$TSYNC_URL`` or http://127.0.0.1:8765) and ``--token``
(default ``$TSYNC_TOKEN``). Errors are one line on stderr; the exit code is 2
for bad usage (the line ends with ``see 'tsync COMMAND --help'``), 1 when the
server says no or cannot be reached, 130 after Ctrl-C. ``verify`` answers
0 (the copy's digest is the server's), 1 (it is not) or 2 (it could not tell:
bad usage, a server that says no or cannot be reached).

Why one module of over 600 lines: the client's subcommands of ``tsync`` (get, tail,
list, export, import, stream, views, ...) are many small functions over one argument
parser and one way of printing and failing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import codecs
import contextlib
import io
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit, urlunsplit

import msgspec

from client_py.client import Client, connect
from client_py.errors import ClientError, ServerError, Unreachable
from client_py.http import Ack, HttpApi, endpoints
from client_py.mirror import DraftEvent, EventStream, Mirror, MirrorUpdate
from protocol.api import TranscriptSummary
from protocol.drafts import DraftClosed, DraftUpdated
from protocol.errors import InvalidId
from protocol.lmml.bundle import renamed_bundle
from protocol.lmml.errors import LmmlError
from protocol.state import DigestMismatch, InvalidChange, TranscriptState
from protocol.types import (
    AttachmentPart,
    ContentPart,
    ImageUrlPart,
    Message,
    MessagesAppended,
    TextPart,
    TranscriptSnapshot,
)
from protocol.validation import validate_id
from protocol.wire import PresenceFrame

__all__ = ["register"]

DEFAULT_URL = "http://127.0.0.1:8765"
EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_json = msgspec.json.Encoder()


class UsageError(Exception):
    """Bad usage found after parsing (exit 2)."""


def register(subparsers: Any) -> None:
    """Add the client commands to ``tsync``'s subparsers (``server.run.cli`` makes
    each command's parser accept options between positionals)."""
    _add_commands(subparsers)


def _add_commands(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("TSYNC_URL") or DEFAULT_URL,
        help="server URL, http(s)://host:port or ws(s)://host:port/v1/ws; a chat page's "
        "link (http://host:port/t/ID) works too (default $TSYNC_URL, else %(default)s)",
    )
    common.add_argument(
        "--token",
        default=os.environ.get("TSYNC_TOKEN") or None,
        help="bearer token (default $TSYNC_TOKEN, else none)",
    )
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the server (default 10)"
    )

    tail = subparsers.add_parser(
        "tail",
        parents=[common],
        help="print a transcript, then every new message live",
        description="Print every message of the transcript, then each new one as it arrives, "
        "one line per message ([index] role: text). Survives server restarts: a note on "
        "stderr says when it reconnected.",
    )
    tail.add_argument("id", help="transcript id")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    where = tail.add_mutually_exclusive_group()
    where.add_argument(
        "--last", type=int, metavar="N", help="start with the last N messages, not all of them"
    )
    where.add_argument("--view", metavar="NAME", help="start where this View starts")
    tail.add_argument(
        "--drafts",
        choices=["auto", "live", "lines", "off"],
        default="auto",
        help="messages being written: 'live' shows the newest one growing on one line "
        "rewritten in place (below the messages), 'lines' prints one line per update "
        "(~ role draftId: whole text so far; '~ role draftId cancelled' when one closes "
        "without a message), 'off' shows only committed messages; 'auto' (default) is "
        "'live' on a terminal and 'off' otherwise",
    )
    tail.add_argument(
        "--no-presence",
        dest="presence",
        action="store_false",
        help="do not note on stderr who joins and leaves the transcript (its presence: "
        "'tsync: Ana joined (writer)', 'tsync: Ana left')",
    )
    tail.set_defaults(func=_command(_tail))

    stream = subparsers.add_parser(
        "stream",
        parents=[common],
        help="stream stdin as a draft, then append it",
        description="Share stdin live as a draft (a message being written: every subscriber "
        "sees it grow, chunk by chunk as it arrives), then append it as one message at "
        "end of file, e.g. 'llm \"...\" | tsync stream chat-1'. Ctrl-C cancels the draft "
        "(nothing is appended) and exits 130.",
    )
    stream.add_argument("id", help="transcript id")
    stream.add_argument(
        "--role",
        default="assistant",
        choices=["user", "assistant", "system", "tool", "context"],
        help="message role (default assistant)",
    )
    stream.add_argument("--name", help="the message's name field")
    stream.add_argument("--draft-id", help="the draft's id (default: generated)")
    stream.add_argument("--json", action="store_true", help="print the ack as JSON")
    stream.set_defaults(func=_command(_stream))

    append = subparsers.add_parser(
        "append",
        parents=[common],
        help="append one message",
        description='Append one message; the text comes from stdin when omitted or "-".',
    )
    append.add_argument("id", help="transcript id")
    append.add_argument("text", nargs="?", default=None, help='message text ("-": stdin)')
    append.add_argument(
        "--role",
        default="user",
        choices=["user", "assistant", "system", "tool", "context"],
        help="message role (default user)",
    )
    append.add_argument("--name", help="the message's name field")
    append.add_argument("--expected-revision", type=int, help="append only at this revision")
    append.add_argument("--idempotency-key", help="retrying with the same key appends once")
    append.add_argument("--json", action="store_true", help="print the ack as JSON")
    append.set_defaults(func=_command(_append))

    get = subparsers.add_parser(
        "get",
        parents=[common],
        help="print a transcript",
        description="Print a transcript, one line per message ([index] role: text); images "
        "and attachments show as [image: ...] and [attachment: name, mime, size].",
    )
    get.add_argument("id", help="transcript id")
    get.add_argument("--start", type=int, help="index of the first message (default 0)")
    get.add_argument("--end", type=int, help="index after the last message (default: all)")
    get.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    get.set_defaults(func=_command(_get))

    listing = subparsers.add_parser(
        "list",
        parents=[common],
        help="list transcripts",
        description="List transcripts, the most recently updated first (as the chat page), "
        "in aligned columns: id, revision, messages, last change.",
    )
    listing.add_argument(
        "--after", metavar="ID", help="start after this transcript (default: the newest)"
    )
    listing.add_argument(
        "--limit", type=int, default=None, help="list at most this many (default: all)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per transcript")
    listing.set_defaults(func=_command(_list))

    delete = subparsers.add_parser(
        "delete",
        parents=[common],
        help="delete a transcript",
        description="Delete a transcript for good; its subscribers are told (not-found).",
    )
    delete.add_argument("id", help="transcript id")
    delete.set_defaults(func=_command(_delete))

    segment = subparsers.add_parser(
        "segment",
        parents=[common],
        help="start a segment",
        description="Start a new segment (the messages that feed the next model call) at "
        "--start, by default at the end of the transcript.",
    )
    segment.add_argument("id", help="transcript id")
    segment.add_argument(
        "--start", type=int, default=None, help="index where it starts (default: the length)"
    )
    segment.add_argument("--json", action="store_true", help="print the ack as JSON")
    segment.set_defaults(func=_command(_segment))

    views = subparsers.add_parser(
        "views",
        parents=[common],
        help="list a transcript's Views",
        description="List the Views (named ranges) of a transcript: name, start, end.",
    )
    views.add_argument("id", help="transcript id")
    views.add_argument("--json", action="store_true", help="one JSON object per View")
    views.set_defaults(func=_command(_views))

    view = subparsers.add_parser(
        "view",
        parents=[common],
        help="create, move or leave a View",
        description="Create the View NAME over messages [--start, --end) of a transcript, or "
        "move it there (no --end: it stays open and follows the transcript); --leave leaves "
        "it. A View never changes a message or a segment; leaving one deletes nothing.",
    )
    view.add_argument("id", help="transcript id")
    view.add_argument("name", help="the View's name (1 to 64 of A-Z a-z 0-9 . _ : -)")
    view.add_argument("--start", type=int, help="index of its first message")
    view.add_argument("--end", type=int, help="index after its last message (default: open)")
    view.add_argument("--leave", action="store_true", help="leave the View")
    view.add_argument("--json", action="store_true", help="print the ack as JSON")
    view.set_defaults(func=_command(_view))

    usage = subparsers.add_parser(
        "usage",
        parents=[common],
        help="how segments and Views use the messages",
        description="Count the messages the chosen segments and Views use, each message "
        "once however many of them share it, and their bytes (compact JSON).",
    )
    usage.add_argument("id", help="transcript id")
    usage.add_argument(
        "--segments", help="all, active or indices like 0,2 (default: all, none with --views)"
    )
    usage.add_argument("--views", help="View names separated by commas (default: every View)")
    usage.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    usage.set_defaults(func=_command(_usage))

    create = subparsers.add_parser(
        "create",
        parents=[common],
        help="create a transcript",
        description="Create an empty transcript and print its id (generated when omitted).",
    )
    create.add_argument("id", nargs="?", default=None, help="transcript id (default: generated)")
    create.add_argument("--json", action="store_true", help="print id, epoch and revision as JSON")
    create.set_defaults(func=_command(_create))

    imp = subparsers.add_parser(
        "import",
        parents=[common],
        help="import an .lmml or .lmmlz file",
        description="Make a new transcript from an .lmml narrative or an .lmmlz bundle "
        "and print its id.",
    )
    imp.add_argument("file", help=".lmml or .lmmlz file")
    imp.add_argument("--id", dest="transcript_id", help="id of the new transcript")
    imp.set_defaults(func=_command(_import))

    export = subparsers.add_parser(
        "export",
        parents=[common],
        help="export a transcript as .lmml or .lmmlz",
        description="Write the transcript as LMML: to FILE (an .lmmlz name gives a bundle) "
        "or to stdout.",
    )
    export.add_argument("id", help="transcript id")
    export.add_argument("-o", "--output", help="output file (default stdout)")
    export.add_argument("--bundle", action="store_true", help="write an .lmmlz bundle")
    export.set_defaults(func=_command(_export))

    verify = subparsers.add_parser(
        "verify",
        parents=[common],
        help="check that a copy of a transcript is exactly the server's",
        description="Mirror the transcript (a baseline: the server's digest at its revision), "
        "rebuild a copy of it from its events, computing the digest of every revision from "
        "the transcript id on (docs/protocol.md, The digest), and say whether the copy's "
        "digest and messages are the server's at that revision. Exit 0: they are; 1: they "
        "are not; 2: it could not tell (bad usage, an error, the history no longer held).",
    )
    verify.add_argument("id", help="transcript id")
    verify.add_argument("--json", action="store_true", help="print the outcome as JSON")
    verify.set_defaults(func=_command(_verify, failure=EXIT_USAGE))


# --- running a command ------------------------------------------------------------


def _command(
    body: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
    *,
    failure: int = EXIT_REFUSED,
) -> Callable[[argparse.Namespace], int]:
    """Run ``body`` in a fresh event loop and turn errors into one line and an
    exit code (``failure`` when the server says no or cannot be reached)."""

    def run(args: argparse.Namespace) -> int:
        hint = f" (see 'tsync {args.command} --help')"
        try:
            args.url, token = server_url(args.url)
            if args.token is None and token is not None:
                args.token = token
            try:
                endpoints(args.url)
            except ValueError as exc:
                raise UsageError(f"--url: {exc}; expected http(s)://host:port") from None
            if getattr(args, "id", None) is not None:
                validate_id(args.id)
            if getattr(args, "transcript_id", None) is not None:
                validate_id(args.transcript_id)
            return asyncio.run(body(args))
        except (UsageError, InvalidId) as exc:
            return _fail(str(exc) + hint, EXIT_USAGE)
        except Unreachable as exc:
            return _fail(f"cannot reach the server: {exc}", failure)
        except ServerError as exc:
            return _fail(exc.message or exc.code, failure, exc.code)
        except ClientError as exc:
            return _fail(str(exc), failure)
        except OSError as exc:
            return _fail(str(exc), failure)
        except KeyboardInterrupt:
            if args.command == "stream":
                print("tsync: interrupted: the draft was cancelled", file=sys.stderr)
            return EXIT_INTERRUPTED

    return run


#: A path of the server's own pages or API, after the server's base path.
_PAGE_OR_API = re.compile(r"(?P<base>.*?)/(?:t/[^/]*|v1(?:/.*)?)/?")


def server_url(url: str) -> tuple[str, str | None]:
    """The server's URL from what a person pasted: a chat page's link
    (``http://h:8765/t/demo-1#token=...``) or an API URL gives its origin
    (and base path, behind a proxy), and the token in its fragment if there
    is one; a ``ws(s)://`` URL and anything else are left as they are."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        return url, None
    match = _PAGE_OR_API.fullmatch(parts.path)
    path = match["base"] if match else parts.path.rstrip("/")
    token = parse_qs(parts.fragment).get("token", [None])[0]
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), token


def _fail(message: str, code: int, error_code: str | None = None) -> int:
    suffix = f" ({error_code})" if error_code and error_code not in message else ""
    print(f"tsync: {message}{suffix}", file=sys.stderr)
    return code


def _api(args: argparse.Namespace) -> HttpApi:
    return HttpApi(args.url, args.token, timeout=args.timeout)


# --- output -----------------------------------------------------------------------


def _line(transcript_id: str, index: int, message: Message, *, as_json: bool) -> str:
    """``[index] role: text``; a text of several lines goes on under the
    role, indented (``--json``: one JSON object, one line)."""
    if as_json:
        return _json.encode(
            {"transcriptId": transcript_id, "index": index, "message": message}
        ).decode()
    head = f"[{index}] "
    first, *rest = _printable(_content_text(message)).split("\n")
    indent = " " * len(head)
    return "\n".join(
        [f"{head}{message.role}: {first}", *(f"{indent}{line}".rstrip() for line in rest)]
    )


#: Control characters but newline and tab, which a message may not move
#: the terminal's cursor or colours with.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if chr(c) not in "\n\t"}


def _printable(text: str) -> str:
    """``text`` for a terminal: line breaks as they are (CRLF and CR as LF),
    other control characters escaped (``\\x1b``)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").translate(_CONTROLS)


def _escape(text: str) -> str:
    """The text on one line (backslashes, CR and LF escaped)."""
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def _content_text(message: Message) -> str:
    """The text, with each image or attachment shown in brackets where it
    stands (text parts join as ``Message.text()`` joins them)."""
    if isinstance(message.content, str):
        return message.content
    text = ""
    previous_was_text = False
    for part in message.content:
        is_text = isinstance(part, TextPart)
        piece = part.text if isinstance(part, TextPart) else _describe(part)
        if text and not (is_text and previous_was_text):
            text += " "
        text += piece
        previous_was_text = is_text
    return text


def _describe(part: ContentPart) -> str:
    if isinstance(part, ImageUrlPart):
        url = part.image_url.url
        if url.startswith("data:"):
            head, _, data = url.partition(",")
            mime = head[5:].split(";")[0] or "image"
            size = _decoded_size(data) if ";base64" in head else len(data.encode())
            return f"[image: {mime}, {_bytes(size)}]"
        return f"[image: {url if len(url) <= 80 else url[:77] + '...'}]"
    if isinstance(part, AttachmentPart):
        textual = part.mime.startswith("text/") or part.mime.endswith(("json", "xml"))
        size = len(part.content.encode()) if textual else _decoded_size(part.content)
        return f"[attachment: {part.name}, {part.mime}, {_bytes(size)}]"
    return f"[{getattr(part, 'type', 'part')}]"


def _decoded_size(data: str) -> int:
    """Bytes of base64 ``data`` once decoded (its own length when it is not base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data.encode())


def _bytes(size: int) -> str:
    return f"{size:,} byte{'s' if size != 1 else ''}"


def _emit(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


# --- the commands -----------------------------------------------------------------


async def _note_reconnects(client: Client, revision: Callable[[], int]) -> None:
    """One line on stderr each time the client had to connect again."""
    seen = client.counters.connections
    while True:
        await asyncio.sleep(0.2)
        now = client.counters.connections
        if now > seen:
            seen = now
            print(
                f"tsync: reconnected to the server; resuming after revision {revision()}",
                file=sys.stderr,
                flush=True,
            )


async def _tail(args: argparse.Namespace) -> int:
    async with connect(
        args.url,
        args.token,
        connect_timeout=args.timeout,
        request_timeout=args.timeout,
        backoff_max=2.0,
    ) as client:
        if args.last is not None and args.last < 0:
            raise UsageError("--last must be >= 0")
        window: dict[str, Any] | None = None
        if args.last is not None:
            window = {"tail": args.last}
        elif args.view is not None:
            window = {"view": args.view}
        mirror = await client.subscribe(args.id, window=window, presence=args.presence)
        notes = asyncio.create_task(_note_reconnects(client, lambda: mirror.revision))
        joins = (
            asyncio.create_task(
                _note_presence(
                    {m.id: m.who for m in mirror.presence.listed()},
                    mirror.presence_frames(),
                )
            )
            if mirror.presence is not None
            else None
        )
        try:
            return await _follow(args, mirror)
        finally:
            notes.cancel()
            if joins is not None:
                joins.cancel()


def _note(text: str) -> None:
    print(f"tsync: {text}", file=sys.stderr, flush=True)


async def _note_presence(names: dict[str, str], frames: EventStream[PresenceFrame]) -> None:
    """Note on stderr who is there (``names``: id -> who), then who joins
    and leaves (``tail``), from the presence frames (``frames``, opened in
    the step that read ``names``). Counts only above the server's limit."""
    if names:
        _note(f"here now: {', '.join(sorted(names.values()))}")
    with contextlib.suppress(ClientError):
        async for frame in frames:
            if frame.members is not None:
                now = {m.id: m.who for m in frame.members}
                for member_id in sorted(now.keys() - names.keys()):
                    _note(f"{now[member_id]} joined")
                for member_id in sorted(names.keys() - now.keys()):
                    _note(f"{names[member_id]} left")
                names = now
            elif frame.crowd:
                counts = frame.counts
                _note(
                    f"{counts.total} here ({counts.viewers} viewers, {counts.writers} "
                    f"writers, {counts.agents} agents)"
                )
                names = {}
            else:
                for member in frame.joined or ():
                    names[member.id] = member.who
                    _note(f"{member.who} joined ({member.kind})")
                for member_id in frame.left or ():
                    _note(f"{names.pop(member_id, member_id)} left")


async def _follow(args: argparse.Namespace, mirror: Mirror) -> int:
    out = sys.stdout
    mode = args.drafts
    if mode == "auto":
        mode = "live" if out.isatty() and not args.json else "off"
    # Read the copy and open the stream in one step: nothing falls between.
    stream = mirror.events(drafts=mode != "off")
    epoch = mirror.epoch
    drafts = _DraftDisplay(out, mode, args.id, as_json=args.json)
    for view in mirror.drafts.values():
        drafts.opened(view.draft_id, view.role, view.n, view.text)
    for index, message in enumerate(mirror.messages, mirror.start):
        drafts.emit(_line(args.id, index, message, as_json=args.json))
    drafts.redraw()
    printed = mirror.length
    update: MirrorUpdate | DraftEvent
    async for update in stream:
        if isinstance(update, DraftUpdated):
            drafts.updated(update, mirror)
        elif isinstance(update, DraftClosed):
            drafts.closed(update)
        elif isinstance(update, TranscriptSnapshot):
            if update.epoch != epoch:
                print(
                    f"tsync: transcript {args.id!r} was re-created (new epoch); "
                    "printing it from the start",
                    file=sys.stderr,
                )
                epoch = update.epoch
                printed = update.start
            for index, message in enumerate(update.messages, update.start):
                if index >= printed:
                    drafts.emit(_line(args.id, index, message, as_json=args.json))
            printed = max(printed, update.end)
        elif isinstance(update.change, MessagesAppended):
            change = update.change
            for index, message in enumerate(change.messages, change.start):
                if index >= printed:
                    drafts.emit(_line(args.id, index, message, as_json=args.json))
            printed = max(printed, change.end)
        if not stream.pending:
            # Drawn once the updates that came together are taken: a committed
            # message and its draft's close never show the draft again between.
            drafts.redraw()
    drafts.clear()
    return EXIT_OK


class _DraftDisplay:
    """How ``tail`` shows the drafts (``--drafts``): ``live`` keeps one
    status line below the messages, rewritten in place (the end of the
    draft updated last, as much as fits the terminal); ``lines`` prints a
    line per update; ``off`` nothing. ``emit`` prints a message line (the
    live line is wiped first and drawn again by ``redraw``)."""

    def __init__(self, out: TextIO, mode: str, transcript_id: str, *, as_json: bool) -> None:
        self.out = out
        self.mode = mode
        self.transcript_id = transcript_id
        self.as_json = as_json
        #: draft id -> (role, n, text), the latest updated last
        self.texts: dict[str, tuple[str, int, str]] = {}
        self.shown = False  # the live line is on screen

    def opened(self, draft_id: str, role: str, n: int, text: str) -> None:
        self.texts[draft_id] = (role, n, text)

    def updated(self, update: DraftUpdated, mirror: Mirror) -> None:
        known = self.texts.pop(update.draft_id, None)
        if known is not None and update.n <= known[1]:
            self.texts[update.draft_id] = known  # older than what was read at the start
            return
        if update.text is not None:
            text = update.text
        elif known is not None:
            text = known[2] + (update.delta or "")
        else:  # opened before the stream: the mirror has it
            view = mirror.drafts.get(update.draft_id)
            text = view.text if view is not None else update.delta or ""
        self.texts[update.draft_id] = (update.role, update.n, text)
        if self.mode == "lines" and text:  # (a draft opens empty: nothing to say yet)
            self._line(update.draft_id, update.role, text, None)

    def closed(self, update: DraftClosed) -> None:
        self.texts.pop(update.draft_id, None)
        if self.mode == "lines" and update.state != "final":
            self._line(update.draft_id, update.role, None, update.state)

    def emit(self, line: str) -> None:
        """Print a message line; the live line comes back with ``redraw``."""
        self.clear()
        _emit(self.out, line)

    def clear(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.shown = False

    def redraw(self) -> None:
        if self.mode != "live":
            return
        if not self.texts:
            self.clear()
            return
        role, _, text = self.texts[next(reversed(self.texts))]
        more = f" (+{len(self.texts) - 1} more)" if len(self.texts) > 1 else ""
        head = f"… {role}{more}: "
        width = max(20, shutil.get_terminal_size().columns - 1)
        flat = " ".join(text.split())
        room = max(1, width - len(head))
        if len(flat) > room:
            flat = "…" + flat[-(room - 1) :] if room > 1 else "…"
        self.out.write("\r\x1b[K" + head + flat)
        self.out.flush()
        self.shown = True

    def _line(self, draft_id: str, role: str, text: str | None, state: str | None) -> None:
        if self.as_json:
            record: dict[str, Any] = {
                "transcriptId": self.transcript_id,
                "draftId": draft_id,
                "role": role,
            }
            record.update({"text": text} if state is None else {"state": state})
            _emit(self.out, _json.encode(record).decode())
        elif state is None:
            assert text is not None
            _emit(self.out, f"~ {role} {draft_id}: {_escape(text)}")
        else:
            _emit(self.out, f"~ {role} {draft_id} {state}")


async def _append(args: argparse.Namespace) -> int:
    text = args.text
    if text is None or text == "-":
        if sys.stdin.isatty() and text is None:
            raise UsageError('no text: give it as an argument or on stdin ("-")')
        text = sys.stdin.read()
        if text.endswith("\n"):
            text = text[:-1]
    message: dict[str, Any] = {"role": args.role, "content": text}
    if args.name:
        message["name"] = args.name
    async with _api(args) as api:
        ack = await api.append(
            args.id,
            [message],
            expected_revision=args.expected_revision,
            idempotency_key=args.idempotency_key,
        )
    if args.json:
        print(_json.encode(_ack_dict(ack)).decode())
    else:
        note = " (duplicate: already appended)" if ack.duplicate else ""
        print(f"appended at index {ack.start}, revision {ack.revision}{note}")
    return EXIT_OK


async def _stream(args: argparse.Namespace) -> int:
    if args.draft_id is not None:
        validate_id(args.draft_id)  # a draft id has the characters of a transcript id
    async with (
        connect(
            args.url,
            args.token,
            connect_timeout=args.timeout,
            request_timeout=args.timeout,
            backoff_max=2.0,
        ) as client,
        client.draft(args.id, role=args.role, draft_id=args.draft_id) as draft,
    ):
        async for chunk in _stdin_chunks():
            await draft.write(chunk)
        # Like ``tsync append``: the newline that ends the input is not the message's.
        text = draft.text
        fields: dict[str, Any] = {"content": text[:-1] if text.endswith("\n") else text}
        if args.name:
            fields["name"] = args.name
        ack = await draft.commit(fields)
    if args.json:
        print(_json.encode(_ack_dict(ack)).decode())
    else:
        print(f"appended at index {ack.start}, revision {ack.revision}")
    return EXIT_OK


async def _stdin_chunks(size: int = 65536) -> AsyncIterator[str]:
    """Stdin's text as it arrives (whatever one read gives: a line from a
    terminal, what a pipe holds), decoded as UTF-8 across chunk boundaries.
    A pipe or a terminal is watched by the event loop (no thread, so Ctrl-C
    ends at once); a regular file is read straight through."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # replaced by a test
        for text in iter(lambda: sys.stdin.read(size), ""):
            yield text
        return
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes | OSError] = asyncio.Queue()

    def readable() -> None:
        try:
            data: bytes | OSError = os.read(fd, size)
        except BlockingIOError:
            return
        except OSError as exc:
            data = exc
        if not data or isinstance(data, OSError):
            loop.remove_reader(fd)
        chunks.put_nowait(data)

    try:
        loop.add_reader(fd, readable)
    except (PermissionError, ValueError, NotImplementedError):  # a regular file
        while data := os.read(fd, size):
            if text := decoder.decode(data):
                yield text
    else:
        try:
            while True:
                got = await chunks.get()
                if isinstance(got, OSError):
                    raise got
                if not got:
                    break
                if text := decoder.decode(got):
                    yield text
        finally:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(fd)
    if tail := decoder.decode(b"", final=True):
        yield tail


async def _get(args: argparse.Namespace) -> int:
    for name in ("start", "end"):
        if (getattr(args, name) or 0) < 0:
            raise UsageError(f"--{name} must be >= 0")
    async with _api(args) as api:
        snapshot = await api.get(args.id, start=args.start, end=args.end)
    if args.json:
        print(_json.encode(snapshot).decode())
        return EXIT_OK
    for index, message in enumerate(snapshot.messages, snapshot.start):
        print(_line(args.id, index, message, as_json=False))
    return EXIT_OK


async def _list(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    after = args.after
    shown = 0
    found: list[TranscriptSummary] = []
    async with _api(args) as api:
        while args.limit is None or shown < args.limit:
            page = 1000 if args.limit is None else min(1000, args.limit - shown)
            summaries = await api.list(after=after, limit=page, order="updated")
            if args.json:
                for summary in summaries:
                    print(_json.encode(summary).decode())
            else:
                found += summaries  # printed together, in aligned columns
            shown += len(summaries)
            if len(summaries) < page:
                break
            after = summaries[-1].transcript_id
    if not args.json:
        if found:
            _table(("ID", "REVISION", "MESSAGES", "UPDATED"), [_summary_row(t) for t in found])
        else:
            print("no transcripts")
    return EXIT_OK


def _summary_row(t: TranscriptSummary) -> tuple[str, ...]:
    updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.updated_at / 1000))
    return (t.transcript_id, str(t.revision), str(t.length), updated)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Columns aligned under ``header``, numbers right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    numeric = [all(row[i].isdigit() for row in rows) for i in range(len(header))]
    for row in (header, *rows):
        cells = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        print("  ".join(cells).rstrip())


async def _delete(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        await api.delete(args.id)
    print(f"deleted {args.id}")
    return EXIT_OK


async def _segment(args: argparse.Namespace) -> int:
    if args.start is not None and args.start < 0:
        raise UsageError("--start must be >= 0")
    async with _api(args) as api:
        ack = await api.start_segment(args.id, args.start)
    if args.json:
        print(_json.encode(_ack_dict(ack)).decode())
    else:
        print(f"segment started at index {ack.start}, revision {ack.revision}")
    return EXIT_OK


async def _views(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        found = await api.views(args.id)
    if args.json:
        for view in found:
            print(_json.encode(view).decode())
        return EXIT_OK
    if not found:
        print("no views")
        return EXIT_OK
    rows = [(v.name, str(v.start), "open" if v.end is None else str(v.end)) for v in found]
    _table(("NAME", "START", "END"), rows)
    return EXIT_OK


async def _view(args: argparse.Namespace) -> int:
    if args.leave and (args.start is not None or args.end is not None):
        raise UsageError("--leave takes no --start or --end")
    if not args.leave and args.start is None:
        raise UsageError("--start is needed (or --leave)")
    if any((value or 0) < 0 for value in (args.start, args.end)):
        raise UsageError("--start and --end must be >= 0")
    async with _api(args) as api:
        if args.leave:
            ack = await api.leave_view(args.id, args.name)
        else:
            ack = await api.set_view(args.id, args.name, args.start, args.end)
    if args.json:
        print(_json.encode(_ack_dict(ack)).decode())
    elif args.leave:
        done = "there was no such View" if ack.duplicate else "left"
        print(f"View {args.name}: {done}, revision {ack.revision}")
    else:
        done = "unchanged" if ack.duplicate else "set"
        print(f"View {args.name}: {done}, revision {ack.revision}")
    return EXIT_OK


async def _usage(args: argparse.Namespace) -> int:
    names = None if args.views is None else [n for n in args.views.split(",") if n]
    async with _api(args) as api:
        found = await api.usage(args.id, segments=args.segments, views=names)
    if args.json:
        print(_json.encode(found).decode())
        return EXIT_OK
    for each in found.ranges:
        print(
            f"{each.name}  [{each.start}, {each.end})  {each.messages} messages  "
            f"{_bytes(each.bytes)}"
        )
    print(
        f"in all: {found.messages} distinct messages, {_bytes(found.bytes)} "
        f"({found.references} uses by the ranges above)"
    )
    return EXIT_OK


async def _create(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        created = await api.create(args.id)
    if args.json:
        print(
            _json.encode(
                {
                    "transcriptId": created.transcript_id,
                    "epoch": created.epoch,
                    "revision": created.revision,
                }
            ).decode()
        )
    else:
        print(created.transcript_id)
    return EXIT_OK


async def _import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        data = await asyncio.to_thread(path.read_bytes)
    except (FileNotFoundError, IsADirectoryError):
        raise UsageError(f"no such file: {args.file}") from None
    async with _api(args) as api:
        imported = await api.import_file(path.name, data, transcript_id=args.transcript_id)
    for warning in imported.warnings:
        print(f"tsync: warning: {warning}", file=sys.stderr)
    print(imported.transcript_id)
    return EXIT_OK


async def _export(args: argparse.Namespace) -> int:
    bundle = args.bundle or bool(args.output and args.output.lower().endswith(".lmmlz"))
    async with _api(args) as api:
        data = await api.export(args.id, bundle=bundle)
    if bundle and args.output and args.output != "-":
        # The narrative inside is named after the file, as an import looks for it.
        try:
            data = renamed_bundle(data, args.output)
        except LmmlError as exc:
            raise UsageError(f"-o {args.output}: {exc}") from None
    if args.output and args.output != "-":
        await asyncio.to_thread(Path(args.output).write_bytes, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return EXIT_OK


async def _verify(args: argparse.Namespace) -> int:
    async with connect(
        args.url, args.token, connect_timeout=args.timeout, request_timeout=args.timeout
    ) as client:
        mirror = await client.subscribe(args.id, timeout=args.timeout)
        # The mirror's copy is the server's word at its revision; the copy
        # rebuilt from the events is this program's own computation.
        revision, server_digest = mirror.revision, mirror.digest
        server_messages = mirror.messages
        async with _api(args) as api:
            try:
                events = await api.events(args.id, after=0)
            except ServerError as exc:
                if exc.code != "gone":
                    raise
                raise ClientError(
                    f"the server no longer holds the events of {args.id!r} from revision 1 "
                    "on: nothing to rebuild a copy from"
                ) from None
    copy = TranscriptState(args.id, mirror.epoch or "")
    problem: str | None = None
    try:
        for event in events:
            if event.revision > revision:
                break  # changed since the baseline: compare at the baseline's revision
            copy.apply(event)
    except DigestMismatch as exc:
        problem = f"the event of revision {exc.revision} carries digest {exc.carried}, " + (
            f"the copy computes {exc.computed}"
        )
    except InvalidChange as exc:
        problem = f"the events do not make a history: {exc}"
    if problem is None and copy.revision != revision:
        raise ClientError(
            f"the events end at revision {copy.revision}, the baseline is at {revision}"
        )
    if problem is None and copy.digest != server_digest:
        problem = f"the copy's digest is {copy.digest}, the server's {server_digest}"
    if problem is None and tuple(copy.messages or ()) != server_messages:
        problem = "the copy's messages differ from the server's"
    if args.json:
        outcome = {
            "transcriptId": args.id,
            "revision": revision,
            "digest": copy.digest,
            "serverDigest": server_digest,
            "match": problem is None,
        }
        print(_json.encode({**outcome, "problem": problem} if problem else outcome).decode())
    elif problem is None:
        print(f"{args.id}: revision {revision}: digest {copy.digest} matches the server's")
    else:
        print(f"{args.id}: revision {revision}: MISMATCH: {problem}")
    return EXIT_OK if problem is None else EXIT_REFUSED


def _ack_dict(ack: Ack) -> dict[str, Any]:
    return {
        "transcriptId": ack.transcript_id,
        "revision": ack.revision,
        "start": ack.start,
        "count": ack.count,
        "duplicate": ack.duplicate,
    }
