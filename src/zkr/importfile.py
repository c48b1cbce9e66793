"""The bytes ``zkr import`` reads (:mod:`zkr.importer`): a file or standard input, as text.

The export's ZIP archive, as ChatGPT and Claude hand it out, may be given as it is (its one
``conversations.json`` is read); a gzip file is decompressed. A device (``/dev/zero``,
``- < /dev/urandom``) is refused before anything is read: it never ends, and reading it would
take all memory (a terminal on standard input is still read).
"""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO

from zkr.errors import RequestError


def display_name(file: str) -> str:
    """How errors name ``file`` (``-`` is ``standard input``)."""
    return "standard input" if file == "-" else file


def read_text(file: str) -> str:
    """The whole of ``file`` (``-``: standard input) as text, unpacked (:func:`unpack`).

    Raises ``RequestError`` when it cannot be read, is a device (:func:`refuse_device`), is a
    damaged archive or is not UTF-8 (a leading byte order mark is dropped). A file larger
    than memory raises ``MemoryError`` (the caller says so in one envelope).
    """
    name = display_name(file)
    try:
        if file == "-":
            refuse_device(sys.stdin.buffer, name)
            raw = sys.stdin.buffer.read()
        else:
            with open(file, "rb") as handle:
                refuse_device(handle, name)
                raw = handle.read()
    except OSError as exc:
        raise RequestError(f"cannot read {name}: {exc.strerror or exc}") from None
    raw = unpack(raw, name)
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise RequestError(f"{name} is not UTF-8 text (bad byte at offset {exc.start})") from None


def refuse_device(handle: BinaryIO, name: str) -> None:
    """Raise ``RequestError`` when ``handle`` (an open binary file) is a character or block
    device other than a terminal; a regular file, a pipe (``<(...)``) or a terminal passes."""
    mode = os.fstat(handle.fileno()).st_mode
    if (stat.S_ISCHR(mode) and not handle.isatty()) or stat.S_ISBLK(mode):
        raise RequestError(f"cannot read {name}: a device, not a file or a pipe")


def unpack(raw: bytes, name: str) -> bytes:
    """The file's own bytes, or what it packs: a ZIP archive (ChatGPT's and Claude's exports
    come as one) gives its one ``conversations.json``, a gzip file its content.

    Raises ``RequestError`` for an archive without exactly one ``conversations.json`` and for a
    damaged or encrypted archive.
    """
    if raw.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # a ZIP archive (or an empty one)
        import io
        import zipfile

        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                found = [
                    info
                    for info in archive.infolist()
                    if not info.is_dir()
                    and info.filename.rsplit("/", 1)[-1] == "conversations.json"
                ]
                if len(found) != 1:
                    what = "without a" if not found else f"with {len(found)} files named"
                    raise RequestError(
                        f"{name} is a ZIP archive {what} conversations.json (unzip it and import"
                        " the conversations file)"
                    )
                return archive.read(found[0])
        except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, OSError) as exc:
            # (RuntimeError: encrypted; NotImplementedError: a compression zipfile lacks)
            raise RequestError(f"{name} is a damaged ZIP archive: {exc}") from None
    if raw.startswith(b"\x1f\x8b"):  # gzip
        import gzip
        import zlib

        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise RequestError(f"{name} is a damaged gzip file: {exc}") from None
    return raw
