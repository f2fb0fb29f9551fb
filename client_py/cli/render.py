"""How the client commands of ``tsync`` print: a message as ``[index] role:
text`` (or one JSON object), the drafts ``tail`` shows, presence notes,
tables, acks. No network here: text in, lines out."""

from __future__ import annotations

import base64
import binascii
import contextlib
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from client_py.errors import ClientError
from client_py.http import Ack
from client_py.mirror import EventStream, Mirror
from protocol.api import TranscriptSummary
from protocol.drafts import DraftClosed, DraftUpdated
from protocol.types import (
    AttachmentPart,
    ContentPart,
    ImageUrlPart,
    Message,
    TextPart,
)
from protocol.wire import PresenceFrame

JSON = msgspec.json.Encoder()


# --- output -----------------------------------------------------------------------


def message_line(transcript_id: str, index: int, message: Message, *, as_json: bool) -> str:
    """``[index] role: text``; a text of several lines goes on under the
    role, indented (``--json``: one JSON object, one line)."""
    if as_json:
        return JSON.encode(
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
            return f"[image: {mime}, {byte_count(size)}]"
        return f"[image: {url if len(url) <= 80 else url[:77] + '...'}]"
    if isinstance(part, AttachmentPart):
        textual = part.mime.startswith("text/") or part.mime.endswith(("json", "xml"))
        size = len(part.content.encode()) if textual else _decoded_size(part.content)
        return f"[attachment: {part.name}, {part.mime}, {byte_count(size)}]"
    return f"[{getattr(part, 'type', 'part')}]"


def _decoded_size(data: str) -> int:
    """Bytes of base64 ``data`` once decoded (its own length when it is not base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data.encode())


def byte_count(size: int) -> str:
    return f"{size:,} byte{'s' if size != 1 else ''}"


def emit(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


def note(text: str) -> None:
    print(f"tsync: {text}", file=sys.stderr, flush=True)


async def note_presence(names: dict[str, str], frames: EventStream[PresenceFrame]) -> None:
    """Note on stderr who is there (``names``: id -> who), then who joins
    and leaves (``tail``), from the presence frames (``frames``, opened in
    the step that read ``names``). Counts only above the server's limit."""
    if names:
        note(f"here now: {', '.join(sorted(names.values()))}")
    with contextlib.suppress(ClientError):
        async for frame in frames:
            if frame.members is not None:
                now = {m.id: m.who for m in frame.members}
                for member_id in sorted(now.keys() - names.keys()):
                    note(f"{now[member_id]} joined")
                for member_id in sorted(names.keys() - now.keys()):
                    note(f"{names[member_id]} left")
                names = now
            elif frame.crowd:
                counts = frame.counts
                note(
                    f"{counts.total} here ({counts.viewers} viewers, {counts.writers} "
                    f"writers, {counts.agents} agents)"
                )
                names = {}
            else:
                for member in frame.joined or ():
                    names[member.id] = member.who
                    note(f"{member.who} joined ({member.kind})")
                for member_id in frame.left or ():
                    note(f"{names.pop(member_id, member_id)} left")


class DraftDisplay:
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
        emit(self.out, line)

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
            emit(self.out, JSON.encode(record).decode())
        elif state is None:
            assert text is not None
            emit(self.out, f"~ {role} {draft_id}: {_escape(text)}")
        else:
            emit(self.out, f"~ {role} {draft_id} {state}")


def summary_row(t: TranscriptSummary) -> tuple[str, ...]:
    updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.updated_at / 1000))
    return (t.transcript_id, str(t.revision), str(t.length), updated)


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Columns aligned under ``header``, numbers right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    numeric = [all(row[i].isdigit() for row in rows) for i in range(len(header))]
    for row in (header, *rows):
        cells = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        print("  ".join(cells).rstrip())


def ack_dict(ack: Ack) -> dict[str, Any]:
    return {
        "transcriptId": ack.transcript_id,
        "revision": ack.revision,
        "start": ack.start,
        "count": ack.count,
        "duplicate": ack.duplicate,
    }
