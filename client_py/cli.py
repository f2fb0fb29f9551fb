"""The client commands of ``tsync``: tail, append, get, create, import, export.

``server.cli`` calls ``register(subparsers)``. Every command takes ``--url``
(default ``$TSYNC_URL`` or http://127.0.0.1:8765) and ``--token``
(default ``$TSYNC_TOKEN``). Errors are one line on stderr; the exit code is 2
for bad usage, 1 when the server says no or cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

import msgspec

from client_py.client import connect
from client_py.errors import ClientError, ServerError, Unreachable
from client_py.http import Ack, HttpApi, endpoints
from protocol.errors import InvalidId
from protocol.types import Message, MessagesAppended, TranscriptSnapshot
from protocol.validation import validate_id

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
    """Add the client commands to ``tsync``'s subparsers (``server.cli`` makes
    each command's parser accept options between positionals)."""
    _add_commands(subparsers)


def _add_commands(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("TSYNC_URL") or DEFAULT_URL,
        help="server URL, http(s)://host:port or ws(s)://host:port/v1/ws "
        "(default $TSYNC_URL or %(default)s)",
    )
    common.add_argument(
        "--token",
        default=os.environ.get("TSYNC_TOKEN") or None,
        help="bearer token (default $TSYNC_TOKEN)",
    )
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the server (default 10)"
    )

    tail = subparsers.add_parser(
        "tail",
        parents=[common],
        help="print a transcript, then every new message live",
        description="Print every message of the transcript, then each new one as it arrives, "
        "one line per message ([index] role: text). Survives server restarts.",
    )
    tail.add_argument("id", help="transcript id")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.set_defaults(func=_command(_tail))

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
        "get", parents=[common], help="print a transcript", description="Print a transcript."
    )
    get.add_argument("id", help="transcript id")
    get.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    get.set_defaults(func=_command(_get))

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


# --- running a command ------------------------------------------------------------


def _command(
    body: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    """Run ``body`` in a fresh event loop and turn errors into one line and an exit code."""

    def run(args: argparse.Namespace) -> int:
        try:
            try:
                endpoints(args.url)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if getattr(args, "id", None) is not None:
                validate_id(args.id)
            if getattr(args, "transcript_id", None) is not None:
                validate_id(args.transcript_id)
            return asyncio.run(body(args))
        except (UsageError, InvalidId) as exc:
            return _fail(str(exc), EXIT_USAGE)
        except Unreachable as exc:
            return _fail(f"cannot reach the server: {exc}", EXIT_REFUSED)
        except ServerError as exc:
            return _fail(exc.message or exc.code, EXIT_REFUSED, exc.code)
        except ClientError as exc:
            return _fail(str(exc), EXIT_REFUSED)
        except OSError as exc:
            return _fail(str(exc), EXIT_REFUSED)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED

    return run


def _fail(message: str, code: int, error_code: str | None = None) -> int:
    suffix = f" ({error_code})" if error_code and error_code not in message else ""
    print(f"tsync: {message}{suffix}", file=sys.stderr)
    return code


def _api(args: argparse.Namespace) -> HttpApi:
    return HttpApi(args.url, args.token, timeout=args.timeout)


# --- output -----------------------------------------------------------------------


def _line(transcript_id: str, index: int, message: Message, *, as_json: bool) -> str:
    if as_json:
        return _json.encode(
            {"transcriptId": transcript_id, "index": index, "message": message}
        ).decode()
    text = message.text() if message.content else ""
    if not isinstance(message.content, str) and not text:
        text = f"<{len(message.content)} content part(s)>"
    escaped = text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
    return f"[{index}] {message.role}: {escaped}"


def _emit(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


# --- the commands -----------------------------------------------------------------


async def _tail(args: argparse.Namespace) -> int:
    out = sys.stdout
    async with connect(
        args.url,
        args.token,
        connect_timeout=args.timeout,
        request_timeout=args.timeout,
        backoff_max=2.0,
    ) as client:
        mirror = await client.subscribe(args.id)
        # Read the copy and open the stream in one step: nothing falls between.
        stream = mirror.events()
        epoch = mirror.epoch
        for index, message in enumerate(mirror.messages, mirror.start):
            _emit(out, _line(args.id, index, message, as_json=args.json))
        printed = mirror.length
        async for update in stream:
            if isinstance(update, TranscriptSnapshot):
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
                        _emit(out, _line(args.id, index, message, as_json=args.json))
                printed = max(printed, update.end)
            elif isinstance(update.change, MessagesAppended):
                change = update.change
                for index, message in enumerate(change.messages, change.start):
                    if index >= printed:
                        _emit(out, _line(args.id, index, message, as_json=args.json))
                printed = max(printed, change.end)
    return EXIT_OK


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


async def _get(args: argparse.Namespace) -> int:
    async with _api(args) as api:
        snapshot = await api.get(args.id)
    if args.json:
        print(_json.encode(snapshot).decode())
        return EXIT_OK
    for index, message in enumerate(snapshot.messages, snapshot.start):
        print(_line(args.id, index, message, as_json=False))
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
    if args.output and args.output != "-":
        await asyncio.to_thread(Path(args.output).write_bytes, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return EXIT_OK


def _ack_dict(ack: Ack) -> dict[str, Any]:
    return {
        "transcriptId": ack.transcript_id,
        "revision": ack.revision,
        "start": ack.start,
        "count": ack.count,
        "duplicate": ack.duplicate,
    }
