"""Where the dense lane's side files live and when they are trusted, without numpy: shared by
:mod:`zkr.store.vectorfile` (the files' formats, numpy) and :mod:`zkr.store.lanescan` (the
numpy-free warm search of a one-shot process).

``<database file>.zkr-vectors/<lane digest>.bin`` holds the vectors, ``.lane`` the derived
state, ``.add`` the overlay, ``.rows`` and ``.fast`` what the numpy-free search reads
(:mod:`zkr.store.lanescan`).
Set ``ZKR_VECTOR_CACHE=0`` to neither read nor write any of them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from zkr.codec import sha256_hex
from zkr.text import env_switch
from zkr.typelite import TYPE_CHECKING

if TYPE_CHECKING:  # pathlib (and what it imports) stays off the numpy-free search's path
    from pathlib import Path
    from typing import BinaryIO

STATE_LAG = 1024
"""Log entries that may pile up past the lane state file's position before a process whose
lane they do not touch rewrites that file (a one-shot search leaves that to the numpy path)."""

STATE, OVERLAY, ROWS, INDEX = ".lane", ".add", ".rows", ".fast"
"""The suffixes of a vectors file's companions (the vectors file itself ends in ``.bin``)."""


def enabled() -> bool:
    """``ZKR_VECTOR_CACHE`` (:func:`zkr.text.env_switch`'s words, any case): the side files are
    read and written unless it is off. Any other value leaves them on: they are a cache, and a
    search answers the same with or without them, so a typo must not fail every search (nor a
    ``MemoryDb.close`` that primes them)."""
    return env_switch("ZKR_VECTOR_CACHE") is not False


def lane_file(conn: sqlite3.Connection, scope: tuple[str, str, str, str]) -> str | None:
    """Where the lane's vectors file lives, or ``None`` for in-memory/temporary databases."""
    if not enabled():
        return None
    row = conn.execute("SELECT file FROM pragma_database_list WHERE name = 'main'").fetchone()
    if row is None or not row[0]:
        return None
    key = sha256_hex("\0".join(scope).encode("utf-8", "surrogatepass"))[:32]
    return os.path.join(row[0] + ".zkr-vectors", f"{key}.bin")


def companion(file: str, suffix: str) -> str:
    """The file next to the vectors file ``file`` with ``suffix`` (:data:`STATE`, ...)."""
    return os.path.splitext(file)[0] + suffix


def lane_path(conn: sqlite3.Connection, scope: tuple[str, str, str, str]) -> Path | None:
    """:func:`lane_file` as a :class:`~pathlib.Path`."""
    file = lane_file(conn, scope)
    if file is None:
        return None
    from pathlib import Path

    return Path(file)


def state_path(path: Path) -> Path:
    """The lane state file that goes with a vectors file."""
    return path.with_suffix(STATE)


def overlay_path(path: Path) -> Path:
    """The overlay file that goes with a vectors file: vectors written since it was saved,
    in the vectors file's own format (:func:`zkr.store.vectorfile.write`, no rows), named by
    the lane state."""
    return path.with_suffix(OVERLAY)


def prefilter_path(path: Path) -> Path:
    """The numpy-free search's index of a lane state (:mod:`zkr.store.lanescan`)."""
    return path.with_suffix(INDEX)


def rows_path(path: Path) -> Path:
    """The vectors file's vectors one after the other (row-major) for the numpy-free search
    (:mod:`zkr.store.lanescan`)."""
    return path.with_suffix(ROWS)


@contextmanager
def replacing(target: Path, magic: bytes, header: bytes) -> Iterator[BinaryIO]:
    """Write the side file ``target`` atomically: the block writes the body into a temporary
    file next to it that already starts with ``magic``, the header's length (8 bytes,
    little-endian) and ``header``; ``target`` is replaced only when the block ends without an
    exception, and the temporary file is removed when it does not. Raises ``OSError`` (every
    caller ignores it: side files are caches)."""
    import tempfile  # only writers need it (a CLI search that reads pays nothing)

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(magic)
            handle.write(len(header).to_bytes(8, "little"))
            handle.write(header)
            yield handle
        os.replace(tmp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
