"""Reading and writing ``.lmml`` files and ``.lmmlz`` bundles, in memory.

A ``.lmmlz`` is a zip archive whose primary entry is the archive's name
without the trailing ``z`` (``chat.lmmlz`` holds ``chat.lmml``) and whose
other entries are assets that external references (``@name``, ``@dir/name``)
name. Archives come from strangers, so the central directory is checked as a
whole before any entry is read: entry names must be relative, use ``/`` only
and have no ``..`` segment; no name may appear twice; the entry count, each
entry's size, the narrative's size and the total uncompressed size are
bounded (``BundleLimits``). Reads are capped at the declared sizes, so an
archive that lies about them fails its CRC check instead of inflating.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from protocol.digest import is_digest
from protocol.limits import ID_PATTERN, MAX_MESSAGES_PER_BATCH
from protocol.lmml.errors import LmmlError
from protocol.lmml.narrative import Narrative, parse
from protocol.lmml.render import render_turn, resolver
from protocol.lmml.turns import Turn, segment
from protocol.types import Message

__all__ = [
    "Bundle",
    "BundleLimits",
    "ExportSource",
    "ImportResult",
    "decode_narrative",
    "defaults_line",
    "export_source",
    "import_messages",
    "imported_turns",
    "read_bundle",
    "renamed_bundle",
    "with_defaults",
    "write_bundle",
]

_ZIP_MAGIC: Final = (b"PK\x03\x04", b"PK\x05\x06")
_BOM: Final = "\ufeff"
# What a damaged or hostile archive can make zipfile raise.
_ZIP_ERRORS: Final = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    OverflowError,
    IndexError,
)
#: A fixed timestamp, so that writing the same bundle twice gives the same bytes.
_EPOCH: Final = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class BundleLimits:
    """Bounds on what ``read_bundle`` accepts (bytes are uncompressed sizes).

    ``max_narrative_bytes`` bounds the narrative, a plain ``.lmml`` or a
    ``.lmmlz``'s primary entry (checked from the central directory, before
    anything is inflated): it is what gets parsed, so it bounds the work of
    an import. The default matches the server's largest request body, so a
    small archive cannot smuggle in a narrative larger than a plain upload.
    ``max_delimiters`` (turns; by default what one append may carry) and
    ``max_embed_marks`` (fences, references and unclosed fence lines) bound
    what parsing holds in memory, checked while parsing.
    """

    max_entries: int = 1000
    max_entry_bytes: int = 32 << 20
    max_total_bytes: int = 64 << 20
    max_narrative_bytes: int = 16 << 20
    max_delimiters: int = MAX_MESSAGES_PER_BATCH
    max_embed_marks: int = 100_000


@dataclass(frozen=True, slots=True)
class Bundle:
    """A narrative and the assets its references name.

    ``primary`` is the entry the narrative came from (``None`` for a plain
    ``.lmml``); ``assets`` holds the entries that embeds use, by name;
    ``entries`` names every file entry; ``warnings`` are readable sentences
    about orphaned entries and conflicting duplicate embeds.
    """

    narrative: Narrative
    primary: str | None = None
    assets: Mapping[str, bytes] = field(default_factory=dict)
    entries: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ImportResult:
    """The messages a narrative's turns become, and what the reader noticed.
    ``source``: what the document's first line says about the transcript it
    was exported from (``None`` for a document that says nothing);
    ``omitted``: the embeds left out for ``max_embed_bytes``."""

    messages: tuple[Message, ...]
    warnings: tuple[str, ...]
    source: ExportSource | None = None
    omitted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExportSource:
    """Where an exported document came from, as its first line says:
    ``<!-- lmml {"digest": ..., "messagesDigest": ..., "revision": ...,
    "transcriptId": ...} -->`` (beside any defaults). ``digest`` is the
    transcript's rolling digest at ``revision``, ``messages_digest`` the
    digest of the exported messages alone (``protocol.digest``), which an
    import of the document checks."""

    transcript_id: str
    revision: int
    digest: str
    messages_digest: str

    def as_json(self) -> dict[str, object]:
        return {
            "digest": self.digest,
            "messagesDigest": self.messages_digest,
            "revision": self.revision,
            "transcriptId": self.transcript_id,
        }


def decode_narrative(data: bytes, what: str = "narrative") -> str:
    """UTF-8 text of a narrative, without a leading byte order mark."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LmmlError(f"{what} is not UTF-8 text (byte {exc.start})") from None
    return text[1:] if text.startswith(_BOM) else text


def _is_zip(data: bytes, filename: str | None) -> bool:
    if filename is not None:
        lower = filename.lower()
        if lower.endswith(".lmmlz"):
            return True
        if lower.endswith(".lmml"):
            return False
    return data[:4] in _ZIP_MAGIC


def read_bundle(
    data: bytes, *, filename: str | None = None, limits: BundleLimits = BundleLimits()
) -> Bundle:
    """Read a ``.lmml`` (UTF-8 text) or ``.lmmlz`` (zip) from memory.

    The kind comes from ``filename``'s extension, else from the zip magic.
    Raises ``LmmlError`` for an unsafe or damaged archive, a narrative that
    is not UTF-8 or does not parse, and an external reference that neither an
    inline fence nor an entry supplies (the error names it).
    """
    if not _is_zip(data, filename):
        _check_narrative_size(len(data), "narrative", limits)
        narrative = _parse(decode_narrative(data), limits)
        _check_resolved(narrative, {}, "no inline fence defines it")
        return Bundle(narrative=narrative, warnings=narrative.warnings)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except _ZIP_ERRORS as exc:
        raise LmmlError(f"not a readable zip archive: {exc}") from None
    with archive:
        infos = _checked_entries(archive, limits)
        files = {info.filename: info for info in infos if not info.is_dir()}
        primary, notes = _primary_entry(list(files), filename)
        _check_narrative_size(files[primary].file_size, f"entry {primary!r}", limits)
        narrative = _parse(decode_narrative(_read(archive, files[primary]), primary), limits)
        wanted = {embed.name: embed for embed in narrative.embeds}
        assets = {
            name: _read(archive, info)
            for name, info in files.items()
            if name in wanted and name != primary
        }
    _check_resolved(narrative, assets, "no entry of the archive supplies it")
    warnings = [*notes, *narrative.warnings]
    for name in files:
        if name == primary:
            continue
        embed = wanted.get(name)
        if embed is None:
            warnings.append(f"entry {name!r} is not referenced by the narrative (orphaned)")
        elif embed.content is not None and embed.content != assets[name]:
            warnings.append(
                f"embed {name!r} has an inline fence and an entry with different contents;"
                " the inline fence is used"
            )
    return Bundle(
        narrative=narrative,
        primary=primary,
        assets=assets,
        entries=tuple(files),
        warnings=tuple(warnings),
    )


def _checked_entries(archive: zipfile.ZipFile, limits: BundleLimits) -> list[zipfile.ZipInfo]:
    """The central directory, refused as a whole if anything in it is unsafe."""
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise LmmlError(
            f"archive has {len(infos)} entries, more than the limit of {limits.max_entries}"
        )
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.orig_filename
        if not name or "\x00" in name:
            raise LmmlError(f"entry name {name!r} is empty or holds a NUL byte")
        if "\\" in name:
            raise LmmlError(f"entry name {name!r} contains a backslash")
        if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
            raise LmmlError(f"entry name {name!r} is absolute")
        if ".." in name.split("/"):
            raise LmmlError(f"entry name {name!r} has a '..' segment")
        if name in seen:
            raise LmmlError(f"entry name {name!r} appears twice")
        seen.add(name)
        if info.flag_bits & 0x1:
            raise LmmlError(f"entry {name!r} is encrypted")
        if info.file_size > limits.max_entry_bytes:
            raise LmmlError(
                f"entry {name!r} is {info.file_size} bytes uncompressed,"
                f" more than the limit of {limits.max_entry_bytes}"
            )
        total += info.file_size
    if total > limits.max_total_bytes:
        raise LmmlError(
            f"archive holds {total} bytes uncompressed,"
            f" more than the limit of {limits.max_total_bytes}"
        )
    return infos


def _primary_entry(names: list[str], filename: str | None) -> tuple[str, list[str]]:
    """The narrative's entry and any note about how it was chosen."""
    roots = [n for n in names if "/" not in n and n.lower().endswith(".lmml")]
    if filename is not None and filename.lower().endswith(".lmmlz"):
        expected = filename.replace("\\", "/").rpartition("/")[2][:-1]
        if expected in names:
            return expected, []
        if len(roots) == 1:
            return roots[0], [
                f"no entry {expected!r}; the narrative is the only .lmml entry {roots[0]!r}"
            ]
        raise LmmlError(f"the archive has no entry {expected!r} (the primary entry)")
    if len(roots) == 1:
        return roots[0], []
    if not roots:
        raise LmmlError("the archive has no .lmml entry")
    raise LmmlError(
        f"the archive has several .lmml entries ({', '.join(sorted(roots))});"
        " name the archive after the primary one"
    )


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    try:
        with archive.open(info) as entry:
            data = entry.read(info.file_size + 1)
    except _ZIP_ERRORS as exc:
        raise LmmlError(f"entry {info.filename!r} cannot be read: {exc}") from None
    if len(data) != info.file_size:
        raise LmmlError(
            f"entry {info.filename!r} does not hold its declared {info.file_size} bytes"
        )
    return data


def _check_resolved(narrative: Narrative, assets: Mapping[str, bytes], why: str) -> None:
    for embed in narrative.embeds:
        if embed.content is None and embed.name not in assets:
            raise LmmlError(f"@{embed.name} is referenced but {why}")


def _parse(text: str, limits: BundleLimits) -> Narrative:
    return parse(text, max_delimiters=limits.max_delimiters, max_embed_marks=limits.max_embed_marks)


def _check_narrative_size(size: int, what: str, limits: BundleLimits) -> None:
    limit = min(limits.max_narrative_bytes, limits.max_total_bytes)
    if size > limit:
        raise LmmlError(f"{what} is {size} bytes, more than the limit of {limit} for a narrative")


def imported_turns(narrative: Narrative) -> tuple[Turn, ...]:
    """The turns an import makes messages of: ``segment``'s, except an empty
    narrative's one empty ``context`` turn (an empty file is no message),
    with the document's defaults line (``with_defaults``) applied."""
    return _imported(segment(narrative))


def _imported(segmented: tuple[Turn, ...]) -> tuple[Turn, ...]:
    turns = with_defaults(segmented)
    if len(turns) == 1 and not turns[0].delimiter and not turns[0].text:
        return ()
    return turns


#: The first line of a document that sets what its delimiters' attributes
#: default to: ``<!-- lmml {"string": true, "chomp": true} -->``.
DEFAULTS_LINE: Final = re.compile(r"<!-- lmml (\{[^\r\n]*\}) -->(?:\r?\n|$)")
#: The attributes a defaults line may set.
DEFAULTABLE: Final = ("chomp", "string")
#: What the same line may say about the transcript it was exported from
#: (``ExportSource``): all four or none.
SOURCE_KEYS: Final = ("digest", "messagesDigest", "revision", "transcriptId")
_ID: Final = re.compile(ID_PATTERN.removeprefix("^").removesuffix("$"))


def defaults_line(defaults: Mapping[str, bool], source: ExportSource | None = None) -> str:
    """The line that makes ``defaults`` the document's and names its
    ``source`` (``""`` for neither)."""
    fields: dict[str, object] = {**defaults, **(source.as_json() if source else {})}
    if not fields:
        return ""
    return f"<!-- lmml {json.dumps(dict(sorted(fields.items())), separators=(',', ':'))} -->\n"


def _first_line(turns: tuple[Turn, ...]) -> tuple[re.Match[str], dict[str, object]] | None:
    """The document's first line ``<!-- lmml {...} -->`` and what it sets,
    checked; ``None`` without one. Raises ``LmmlError``."""
    if not turns or turns[0].delimiter:
        return None
    match = DEFAULTS_LINE.match(turns[0].text)
    if match is None:
        return None
    line = match[0].strip()
    try:
        fields = json.loads(match[1])
    except ValueError:
        raise LmmlError(f"the defaults line {line!r} is not JSON") from None
    if not isinstance(fields, dict) or not all(
        (key in DEFAULTABLE and isinstance(value, bool)) or key in SOURCE_KEYS
        for key, value in fields.items()
    ):
        raise LmmlError(
            f"the defaults line {line!r} may only set "
            f"{' and '.join(DEFAULTABLE)} to true or false (and name the transcript it "
            f"was exported from with {', '.join(SOURCE_KEYS)})"
        )
    named = [key for key in SOURCE_KEYS if key in fields]
    if named and (
        len(named) != len(SOURCE_KEYS)
        or not is_digest(fields["digest"])
        or not is_digest(fields["messagesDigest"])
        or type(fields["revision"]) is not int
        or fields["revision"] < 0
        or not isinstance(fields["transcriptId"], str)
        or _ID.fullmatch(fields["transcriptId"]) is None
    ):
        raise LmmlError(
            f"the defaults line {line!r} names its source with {', '.join(SOURCE_KEYS)} "
            "together: two digests (32 lowercase hex digits), a revision >= 0 and a "
            "transcript id"
        )
    return match, fields


def export_source(turns: tuple[Turn, ...]) -> ExportSource | None:
    """What the first line of a document (its ``segment``ed turns) says about
    the transcript it was exported from. Raises ``LmmlError`` as
    ``with_defaults`` does."""
    found = _first_line(turns)
    if found is None or "digest" not in found[1]:
        return None
    fields = found[1]
    revision = fields["revision"]
    assert isinstance(revision, int)  # checked by _first_line
    return ExportSource(
        transcript_id=str(fields["transcriptId"]),
        revision=revision,
        digest=str(fields["digest"]),
        messages_digest=str(fields["messagesDigest"]),
    )


def with_defaults(turns: tuple[Turn, ...]) -> tuple[Turn, ...]:
    """``turns`` with the defaults of a first line ``<!-- lmml {...} -->``
    (in the preamble, before any delimiter) under each turn's own
    attributes; the line itself is no text of the preamble (a preamble of
    only that line is no turn). Raises ``LmmlError`` for a line that sets
    anything but ``string`` and ``chomp`` to true or false, or names its
    source (``export_source``) in another way."""
    found = _first_line(turns)
    if found is None:
        return turns
    match, fields = found
    defaults = {key: value for key, value in fields.items() if key in DEFAULTABLE}
    first = turns[0]
    rest = first.text[match.end() :]
    preamble = (
        [replace(first, text=rest, start=first.start + len(match[0].encode()))] if rest else []
    )
    return tuple(
        replace(turn, attributes={**defaults, **turn.attributes})
        for turn in [*preamble, *turns[1:]]
    )


def write_bundle(text: str, assets: Mapping[str, bytes], *, name: str = "transcript") -> bytes:
    """A ``.lmmlz``: ``text`` as entry ``name.lmml``, then each asset as an entry.

    The same arguments always give the same bytes (fixed timestamps).
    """
    primary = f"{name}.lmml"
    if not name or "/" in name or "\\" in name or ".." in name.split("/"):
        raise LmmlError(f"bundle name {name!r} is not a plain file name")
    if primary in assets:
        raise LmmlError(f"an asset is named like the primary entry {primary!r}")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry, data in [(primary, text.encode()), *assets.items()]:
            info = zipfile.ZipInfo(entry, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def renamed_bundle(data: bytes, filename: str, limits: BundleLimits = BundleLimits()) -> bytes:
    """The ``.lmmlz`` ``data`` with its primary entry named after ``filename``
    (``out.lmmlz`` holds ``out.lmml``), as a reader finds the narrative of a
    file of that name; the other entries as they are. ``data`` itself when
    the name already fits."""
    stem = filename.replace("\\", "/").rpartition("/")[2]
    stem = stem[: -len(".lmmlz")] if stem.lower().endswith(".lmmlz") else stem
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = _checked_entries(archive, limits)
            primary, _ = _primary_entry([i.filename for i in infos], None)
            if primary == f"{stem}.lmml":
                return data
            entries = {i.filename: _read(archive, i) for i in infos if not i.is_dir()}
    except LmmlError:
        raise
    except _ZIP_ERRORS as exc:
        raise LmmlError(f"not a readable .lmmlz archive: {exc}") from None
    text = entries.pop(primary).decode("utf-8")
    return write_bundle(text, entries, name=stem)


def import_messages(
    data: bytes,
    *,
    filename: str | None = None,
    limits: BundleLimits = BundleLimits(),
    max_embed_bytes: int | None = None,
) -> ImportResult:
    """A ``.lmml``/``.lmmlz`` as messages, one per turn; all or nothing.

    Either every turn renders (see ``render_turns``) or ``LmmlError`` is
    raised and nothing is returned. Warnings include embeds left out for
    ``max_embed_bytes``.
    """
    bundle = read_bundle(data, filename=filename, limits=limits)
    omitted: list[str] = []
    resolve = resolver(bundle.assets)
    segmented = segment(bundle.narrative)
    messages = tuple(
        render_turn(turn, resolve, max_embed_bytes=max_embed_bytes, omitted=omitted)
        for turn in _imported(segmented)
    )
    warnings = list(bundle.warnings)
    warnings += [
        f"embed {name!r} is larger than {max_embed_bytes} bytes and was left out"
        for name in omitted
    ]
    return ImportResult(
        messages=messages,
        warnings=tuple(warnings),
        source=export_source(segmented),
        omitted=tuple(omitted),
    )
