"""The parsers of the client commands of ``tsync`` (``add_commands``): their
arguments and help texts; each command's ``func`` is its ``run_*`` in
``client_py.cli.commands``, wrapped by ``command``."""

from __future__ import annotations

import argparse
import os
from typing import Any

from client_py.cli.commands import (
    EXIT_USAGE,
    command,
    run_append,
    run_create,
    run_delete,
    run_export,
    run_get,
    run_import,
    run_list,
    run_segment,
    run_stream,
    run_tail,
    run_usage,
    run_verify,
    run_view,
    run_views,
)

DEFAULT_URL = "http://127.0.0.1:8765"


def register(subparsers: Any) -> None:
    """Add the client commands to ``tsync``'s subparsers (``server.run.cli`` makes
    each command's parser accept options between positionals)."""
    add_commands(subparsers)


def add_commands(subparsers: Any) -> None:
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
    tail.set_defaults(func=command(run_tail))

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
    stream.set_defaults(func=command(run_stream))

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
    append.set_defaults(func=command(run_append))

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
    get.set_defaults(func=command(run_get))

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
    listing.set_defaults(func=command(run_list))

    delete = subparsers.add_parser(
        "delete",
        parents=[common],
        help="delete a transcript",
        description="Delete a transcript for good; its subscribers are told (not-found).",
    )
    delete.add_argument("id", help="transcript id")
    delete.set_defaults(func=command(run_delete))

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
    segment.set_defaults(func=command(run_segment))

    views = subparsers.add_parser(
        "views",
        parents=[common],
        help="list a transcript's Views",
        description="List the Views (named ranges) of a transcript: name, start, end.",
    )
    views.add_argument("id", help="transcript id")
    views.add_argument("--json", action="store_true", help="one JSON object per View")
    views.set_defaults(func=command(run_views))

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
    view.set_defaults(func=command(run_view))

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
    usage.set_defaults(func=command(run_usage))

    create = subparsers.add_parser(
        "create",
        parents=[common],
        help="create a transcript",
        description="Create an empty transcript and print its id (generated when omitted).",
    )
    create.add_argument("id", nargs="?", default=None, help="transcript id (default: generated)")
    create.add_argument("--json", action="store_true", help="print id, epoch and revision as JSON")
    create.set_defaults(func=command(run_create))

    imp = subparsers.add_parser(
        "import",
        parents=[common],
        help="import an .lmml or .lmmlz file",
        description="Make a new transcript from an .lmml narrative or an .lmmlz bundle "
        "and print its id.",
    )
    imp.add_argument("file", help=".lmml or .lmmlz file")
    imp.add_argument("--id", dest="transcript_id", help="id of the new transcript")
    imp.set_defaults(func=command(run_import))

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
    export.set_defaults(func=command(run_export))

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
    verify.set_defaults(func=command(run_verify, failure=EXIT_USAGE))
