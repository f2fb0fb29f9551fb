"""Reading ``.lmml``/``.lmmlz`` from memory, hostile archives first."""

from __future__ import annotations

import io
import re
import struct
import time
import zipfile

import pytest

from protocol.lmml import (
    BundleLimits,
    LmmlError,
    import_messages,
    read_bundle,
    write_bundle,
)
from protocol.types import AttachmentPart, TextPart

NARRATIVE = "## user\nSee @a.txt.\n"


def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def _chat(*extra: tuple[str, bytes]) -> bytes:
    return _zip([("chat.lmml", NARRATIVE.encode()), ("a.txt", b"A"), *extra])


def test_a_good_bundle_imports() -> None:
    result = import_messages(_chat(), filename="chat.lmmlz")
    assert result.messages[0].content == (
        TextPart(text="See @a.txt.\n"),
        AttachmentPart(name="a.txt", mime="text/plain", content="A"),
    )
    assert result.warnings == ()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../x", "'..' segment"),
        ("assets/../../x", "'..' segment"),
        ("/abs", "absolute"),
        ("C:/windows", "absolute"),
        ("a\\b", "backslash"),
        ("..\\x", "backslash"),
    ],
)
def test_unsafe_entry_names_are_refused(name: str, reason: str) -> None:
    with pytest.raises(LmmlError, match=reason):
        read_bundle(_chat((name, b"evil")), filename="chat.lmmlz")


def test_unsafe_names_are_refused_even_when_nothing_uses_them() -> None:
    data = _zip([("../../etc/cron.d/x", b"evil"), ("chat.lmml", b"## user\nhi\n")])
    with pytest.raises(LmmlError, match=r"\.\./\.\./etc"):
        read_bundle(data)


def test_a_zip_bomb_is_refused_from_the_central_directory() -> None:
    bomb = b"\0" * (4 << 20)
    data = _chat(("bomb.bin", bomb))
    assert len(data) < 64 << 10  # a ratio of more than 60:1
    limits = BundleLimits(max_entry_bytes=1 << 20)
    with pytest.raises(LmmlError, match=re.escape("'bomb.bin' is 4194304 bytes uncompressed")):
        read_bundle(data, filename="chat.lmmlz", limits=limits)


def test_the_total_uncompressed_size_is_bounded() -> None:
    entries = [(f"part{i}.bin", b"\0" * 1000) for i in range(10)]
    limits = BundleLimits(max_entry_bytes=1000, max_total_bytes=5000)
    with pytest.raises(LmmlError, match="more than the limit of 5000"):
        read_bundle(_chat(*entries), filename="chat.lmmlz", limits=limits)


def test_too_many_entries_are_refused() -> None:
    entries = [(f"e{i}.txt", b"") for i in range(20)]
    with pytest.raises(LmmlError, match="22 entries, more than the limit of 10"):
        read_bundle(_chat(*entries), filename="chat.lmmlz", limits=BundleLimits(max_entries=10))


def test_an_entry_that_lies_about_its_size_fails_instead_of_inflating() -> None:
    data = bytearray(_zip([("chat.lmml", b"## user\n@bomb.bin\n"), ("bomb.bin", b"\0" * 100_000)]))
    # Declare 10 bytes uncompressed in the local header and the central directory.
    for signature, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        start = data.find(signature)
        while start >= 0:
            if data[start + name_at : start + name_at + 8] == b"bomb.bin":
                data[start + size_at : start + size_at + 4] = struct.pack("<I", 10)
            start = data.find(signature, start + 4)
    lying = bytes(data)
    assert zipfile.ZipFile(io.BytesIO(lying)).getinfo("bomb.bin").file_size == 10
    with pytest.raises(LmmlError, match=re.escape("'bomb.bin' cannot be read: Bad CRC-32")):
        import_messages(lying, filename="chat.lmmlz")


def test_a_truncated_archive_is_refused() -> None:
    data = _chat()
    for cut in (len(data) // 2, len(data) - 10, 10):
        with pytest.raises(LmmlError, match="not a readable zip archive"):
            read_bundle(data[:cut], filename="chat.lmmlz")


def test_a_damaged_entry_is_refused() -> None:
    data = bytearray(_zip([("chat.lmml", b"## user\n" + b"hello " * 200)]))
    start = data.index(b"chat.lmml") + len("chat.lmml")
    data[start + 5 : start + 15] = b"\xff" * 10
    with pytest.raises(LmmlError, match="cannot be read"):
        read_bundle(bytes(data), filename="chat.lmmlz")


def test_a_non_zip_is_refused() -> None:
    with pytest.raises(LmmlError, match="not a readable zip archive"):
        read_bundle(b"this is not a zip", filename="chat.lmmlz")
    with pytest.raises(LmmlError, match="not a readable zip archive"):
        read_bundle(b"PK\x03\x04 but no more")


def test_binary_data_that_is_no_zip_is_not_utf8_text() -> None:
    with pytest.raises(LmmlError, match="not UTF-8"):
        read_bundle(b"\xff\xfe\x00garbage")


def test_duplicate_entry_names_are_refused() -> None:
    with (
        pytest.warns(UserWarning, match="Duplicate name"),
        pytest.raises(LmmlError, match="appears twice"),
    ):
        read_bundle(_chat(("a.txt", b"B")), filename="chat.lmmlz")


def test_encrypted_entries_are_refused() -> None:
    data = bytearray(_chat())
    central = data.index(b"PK\x01\x02")
    data[central + 8] |= 0x1
    with pytest.raises(LmmlError, match="encrypted"):
        read_bundle(bytes(data), filename="chat.lmmlz")


def test_a_reference_no_entry_satisfies_names_it_and_imports_nothing() -> None:
    data = _zip([("chat.lmml", b"## user\n@a.txt and @missing.png\n"), ("a.txt", b"A")])
    with pytest.raises(LmmlError, match=r"@missing\.png"):
        import_messages(data, filename="chat.lmmlz")


def test_orphaned_entries_and_conflicts_are_warnings() -> None:
    narrative = b"## user\n@@@b.txt\nfenced\n@@@\n@a.txt\n"
    data = _zip(
        [("chat.lmml", narrative), ("a.txt", b"A"), ("b.txt", b"entry"), ("extra.png", b"")]
    )
    result = import_messages(data, filename="chat.lmmlz")
    assert any("'extra.png'" in w and "orphaned" in w for w in result.warnings)
    assert any("'b.txt'" in w and "different contents" in w for w in result.warnings)
    assert len(result.warnings) == 2
    attachment = result.messages[0].content[1]
    assert isinstance(attachment, AttachmentPart)
    assert attachment.content == "fenced\n"  # every line, with its line ending


def test_the_primary_entry_is_the_archive_name_without_z() -> None:
    data = _zip([("one.lmml", b"## user\none\n"), ("two.lmml", b"## user\ntwo\n")])
    assert read_bundle(data, filename="dir/two.lmmlz").primary == "two.lmml"
    assert read_bundle(data, filename="C:\\x\\one.lmmlz").primary == "one.lmml"
    with pytest.raises(LmmlError, match=re.escape("several .lmml entries")):
        read_bundle(data)
    with pytest.raises(LmmlError, match=re.escape("no entry 'three.lmml'")):
        read_bundle(data, filename="three.lmmlz")


def test_without_a_filename_the_single_lmml_entry_is_primary() -> None:
    bundle = read_bundle(_chat())
    assert bundle.primary == "chat.lmml"
    assert dict(bundle.assets) == {"a.txt": b"A"}
    assert bundle.entries == ("chat.lmml", "a.txt")


def test_a_renamed_archive_falls_back_to_its_only_lmml_entry_with_a_warning() -> None:
    bundle = read_bundle(_chat(), filename="chat (1).lmmlz")
    assert bundle.primary == "chat.lmml"
    assert bundle.warnings == (
        "no entry 'chat (1).lmml'; the narrative is the only .lmml entry 'chat.lmml'",
    )


def test_an_archive_without_lmml_entry_is_refused() -> None:
    with pytest.raises(LmmlError, match=r"no \.lmml entry"):
        read_bundle(_zip([("a.txt", b"A")]))
    with pytest.raises(LmmlError, match=r"no \.lmml entry"):
        read_bundle(_zip([]))


def test_kind_comes_from_the_filename_then_the_magic() -> None:
    text = NARRATIVE.replace("@a.txt", "a").encode()
    assert read_bundle(text, filename="chat.lmml").primary is None
    assert read_bundle(text).primary is None
    assert read_bundle(_chat(), filename="upload.bin").primary == "chat.lmml"
    with pytest.raises(LmmlError, match="not UTF-8"):
        read_bundle(_chat(), filename="chat.lmml")


def test_a_plain_lmml_is_utf8_and_loses_only_a_byte_order_mark() -> None:
    bundle = read_bundle("\ufeff## user\né\n".encode())
    assert bundle.narrative.text == "## user\né\n"
    with pytest.raises(LmmlError, match="not UTF-8 text"):
        read_bundle(b"## user\n\xff\n", filename="x.lmml")
    with pytest.raises(LmmlError, match="more than the limit of 4"):
        read_bundle(b"## user\n", limits=BundleLimits(max_total_bytes=4))


def test_a_plain_lmml_reference_needs_an_inline_fence() -> None:
    with pytest.raises(
        LmmlError, match=re.escape("@a.txt is referenced but no inline fence defines it")
    ):
        read_bundle(NARRATIVE.encode())


def test_write_bundle_is_deterministic_and_checks_its_name() -> None:
    first = write_bundle(NARRATIVE, {"a.txt": b"A"}, name="chat")
    assert first == write_bundle(NARRATIVE, {"a.txt": b"A"}, name="chat")
    assert zipfile.ZipFile(io.BytesIO(first)).namelist() == ["chat.lmml", "a.txt"]
    for bad in ("", "a/b", "..", "a\\b"):
        with pytest.raises(LmmlError, match="not a plain file name"):
            write_bundle(NARRATIVE, {}, name=bad)
    with pytest.raises(LmmlError, match="named like the primary entry"):
        write_bundle(NARRATIVE, {"chat.lmml": b""}, name="chat")


def test_a_narrative_bomb_is_refused_before_inflating() -> None:
    # Issue 14: a 65 KB zip holding a 32 MiB narrative stalled the server 4 s.
    for size, reason in [
        (32 << 20, "is 33554440 bytes uncompressed, more than the limit of 33554432"),
        (24 << 20, "is 25165832 bytes, more than the limit of 16777216 for a narrative"),
    ]:
        data = _zip([("chat.lmml", b"## user\n" + b"`a" * (size // 2))])
        assert len(data) < 100 << 10
        started = time.perf_counter()
        with pytest.raises(LmmlError, match=f"entry 'chat.lmml' {reason}"):
            import_messages(data, filename="chat.lmmlz")
        assert time.perf_counter() - started < 0.5  # the central directory only
    limits = BundleLimits(max_narrative_bytes=100)
    with pytest.raises(LmmlError, match="narrative is 101 bytes, more than the limit of 100"):
        read_bundle(b"x" * 101, limits=limits)
    assert read_bundle(b"x" * 100, limits=limits).narrative.size == 100


def test_what_parsing_holds_is_bounded() -> None:
    # Each turn or reference costs objects: 16 MiB of "## user\n" or "@a "
    # would hold gigabytes. Parsing stops as soon as a bound is passed.
    limits = BundleLimits(max_delimiters=3, max_embed_marks=4)
    assert len(import_messages(b"## user\n" * 3, limits=limits).messages) == 3
    with pytest.raises(LmmlError, match="more than 3 role delimiters"):
        import_messages(b"## user\n" * 4, limits=limits)
    assert read_bundle(b"@@@a\nx\n@@@\n@a @a\n@@@b\n", limits=limits).narrative
    with pytest.raises(LmmlError, match="more than 4 embed fences and references"):
        read_bundle(b"@@@a\nx\n@@@\n@a @a @a @a\n", limits=limits)
    with pytest.raises(LmmlError, match="more than 1000 role delimiters"):
        import_messages(b"## user\n" * 1001)  # an import is one append of at most 1000


def test_unclosed_fence_warnings_are_counted_after_ten() -> None:
    result = import_messages(b"".join(b"@@@f%d.txt\n" % i for i in range(25)))
    assert len(result.warnings) == 11
    assert result.warnings[0].startswith("line 1: @@@f0.txt is never closed")
    assert result.warnings[-1] == "15 more @@@name lines are never closed"
