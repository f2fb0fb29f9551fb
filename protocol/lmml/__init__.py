"""LMML: multi-turn conversations as a Markdown narrative with embeds.

Pure code, no I/O: everything works on ``str``/``bytes`` in memory.

- ``parse(text) -> Narrative``: delimiters, inline embed fences, references.
- ``segment(narrative) -> tuple[Turn, ...]``: the turns, preamble first.
- ``render_turns(turns, assets) -> list[Message]``: one message per turn.
- ``read_bundle(data, filename=...) -> Bundle``: a ``.lmml`` or a checked ``.lmmlz``.
- ``import_messages(data, ...) -> ImportResult``: all of that at once.
- ``export_lmml(messages)`` / ``export_lmmlz(messages)``: back again, losslessly.
- ``chat_messages(messages, context=...)``: chat-completions ``messages``.

Every failure is an ``LmmlError`` (a ``ValueError``); any text parses. Parsing,
segmenting, importing and exporting take time linear in the input. See
``docs/lmml.md``.
"""

from protocol.lmml.bundle import (
    Bundle,
    BundleLimits,
    ExportSource,
    ImportResult,
    import_messages,
    read_bundle,
    write_bundle,
)
from protocol.lmml.errors import LmmlError
from protocol.lmml.export import export_lmml, export_lmmlz
from protocol.lmml.narrative import (
    Delimiter,
    Embed,
    EmbedFence,
    Narrative,
    Reference,
    UnclosedFence,
    parse,
)
from protocol.lmml.render import chat_messages, embed_part, mime_type, render_turns
from protocol.lmml.turns import Turn, segment

__all__ = [
    "Bundle",
    "BundleLimits",
    "Delimiter",
    "Embed",
    "EmbedFence",
    "ExportSource",
    "ImportResult",
    "LmmlError",
    "Narrative",
    "Reference",
    "Turn",
    "UnclosedFence",
    "chat_messages",
    "embed_part",
    "export_lmml",
    "export_lmmlz",
    "import_messages",
    "mime_type",
    "parse",
    "read_bundle",
    "render_turns",
    "segment",
    "write_bundle",
]
