"""The client commands of ``tsync`` as they run: each ``run_*`` takes the
parsed arguments and returns the exit code; ``command`` runs one in a fresh
event loop and turns errors into one line on stderr and an exit code
(``client_py.cli`` says which)."""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import io
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from client_py.cli.render import (
    JSON,
    DraftDisplay,
    ack_dict,
    byte_count,
    message_line,
    note_presence,
    summary_row,
    table,
)
from client_py.client import Client, connect
from client_py.errors import ClientError, ServerError, Unreachable
from client_py.http import HttpApi, endpoints
from client_py.mirror import DraftEvent, Mirror, MirrorUpdate
from protocol.api import TranscriptSummary
from protocol.drafts import DraftClosed, DraftUpdated
from protocol.errors import InvalidId
from protocol.lmml.bundle import renamed_bundle
from protocol.lmml.errors import LmmlError
from protocol.state import DigestMismatch, InvalidChange, TranscriptState
from protocol.types import (
    MessagesAppended,
    TranscriptSnapshot,
)
from protocol.validation import validate_id

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad usage found after parsing (exit 2)."""


# --- running a command ------------------------------------------------------------


def command(
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


async def run_tail(args: argparse.Namespace) -> int:
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
                note_presence(
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


async def _follow(args: argparse.Namespace, mirror: Mirror) -> int:
    out = sys.stdout
    mode = args.drafts
    if mode == "auto":
        mode = "live" if out.isatty() and not args.json else "off"
    # Read the copy and open the stream in one step: nothing falls between.
    stream = mirror.events(drafts=mode != "off")
    epoch = mirror.epoch
    drafts = DraftDisplay(out, mode, args.id, as_json=args.json)
    for view in mirror.drafts.values():
        drafts.opened(view.draft_id, view.role, view.n, view.text)
    for index, message in enumerate(mirror.messages, mirror.start):
        drafts.emit(message_line(args.id, index, message, as_json=args.json))
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
                    drafts.emit(message_line(args.id, index, message, as_json=args.json))
            printed = max(printed, update.end)
        elif isinstance(update.change, MessagesAppended):
            change = update.change
            for index, message in enumerate(change.messages, change.start):
                if index >= printed:
                    drafts.emit(message_line(args.id, index, message, as_json=args.json))
            printed = max(printed, change.end)
        if not stream.pending:
            # Drawn once the updates that came together are taken: a committed
            # message and its draft's close never show the draft again between.
            drafts.redraw()
    drafts.clear()
    return EXIT_OK


async def run_append(args: argparse.Namespace) -> int:
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
        print(JSON.encode(ack_dict(ack)).decode())
    else:
        note = " (duplicate: already appended)" if ack.duplicate else ""
        print(f"appended at index {ack.start}, revision {ack.revision}{note}")
    return EXIT_OK


async def run_stream(args: argparse.Namespace) -> int:
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
        print(JSON.encode(ack_dict(ack)).decode())
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


async def run_get(args: argparse.Namespace) -> int:
    for name in ("start", "end"):
        if (getattr(args, name) or 0) < 0:
            raise UsageError(f"--{name} must be >= 0")
    async with _api(args) as api:
        snapshot = await api.get(args.id, start=args.start, end=args.end)
    if args.json:
        print(JSON.encode(snapshot).decode())
        return EXIT_OK
    for index, message in enumerate(snapshot.messages, snapshot.start):
        print(message_line(args.id, index, message, as_json=False))
    return EXIT_OK


async def run_list(args: argparse.Namespace) -> int:
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
                    print(JSON.encode(summary).decode())
            else:
                found += summaries  # printed together, in aligned columns
            shown += len(summaries)
            if len(summaries) < page:
                break
            after = summaries[-1].transcript_id
    if not args.json:
        if found:
            table(("ID", "REVISION", "MESSAGES", "UPDATED"), [summary_row(t) for t in found])
        else:
            print("no transcripts")
    return EXIT_OK


async def run_delete(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        await api.delete(args.id)
    print(f"deleted {args.id}")
    return EXIT_OK


async def run_segment(args: argparse.Namespace) -> int:
    if args.start is not None and args.start < 0:
        raise UsageError("--start must be >= 0")
    async with _api(args) as api:
        ack = await api.start_segment(args.id, args.start)
    if args.json:
        print(JSON.encode(ack_dict(ack)).decode())
    else:
        print(f"segment started at index {ack.start}, revision {ack.revision}")
    return EXIT_OK


async def run_views(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        found = await api.views(args.id)
    if args.json:
        for view in found:
            print(JSON.encode(view).decode())
        return EXIT_OK
    if not found:
        print("no views")
        return EXIT_OK
    rows = [(v.name, str(v.start), "open" if v.end is None else str(v.end)) for v in found]
    table(("NAME", "START", "END"), rows)
    return EXIT_OK


async def run_view(args: argparse.Namespace) -> int:
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
        print(JSON.encode(ack_dict(ack)).decode())
    elif args.leave:
        done = "there was no such View" if ack.duplicate else "left"
        print(f"View {args.name}: {done}, revision {ack.revision}")
    else:
        done = "unchanged" if ack.duplicate else "set"
        print(f"View {args.name}: {done}, revision {ack.revision}")
    return EXIT_OK


async def run_usage(args: argparse.Namespace) -> int:
    names = None if args.views is None else [n for n in args.views.split(",") if n]
    async with _api(args) as api:
        found = await api.usage(args.id, segments=args.segments, views=names)
    if args.json:
        print(JSON.encode(found).decode())
        return EXIT_OK
    for each in found.ranges:
        print(
            f"{each.name}  [{each.start}, {each.end})  {each.messages} messages  "
            f"{byte_count(each.bytes)}"
        )
    print(
        f"in all: {found.messages} distinct messages, {byte_count(found.bytes)} "
        f"({found.references} uses by the ranges above)"
    )
    return EXIT_OK


async def run_create(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        created = await api.create(args.id)
    if args.json:
        print(
            JSON.encode(
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


async def run_import(args: argparse.Namespace) -> int:
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


async def run_export(args: argparse.Namespace) -> int:
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


async def run_verify(args: argparse.Namespace) -> int:
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
        print(JSON.encode({**outcome, "problem": problem} if problem else outcome).decode())
    elif problem is None:
        print(f"{args.id}: revision {revision}: digest {copy.digest} matches the server's")
    else:
        print(f"{args.id}: revision {revision}: MISMATCH: {problem}")
    return EXIT_OK if problem is None else EXIT_REFUSED
