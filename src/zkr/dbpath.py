"""What a ``--db`` value may name (spec/cli.md §2), one rule for every entry point that opens a
database from the command line: the CLI, ``zkr serve``, ``zkr mcp`` and ``zkr import``; and the
quoted form of a command-line value in error messages (``format!("{:?}")``, as the reference
prints it).

Kept free of zkr imports so that each entry point can ask it without importing another.
"""

from zkr.errors import RequestError

# --db values SQLite opens as a private database discarded at exit (checked by ``run``).
THROWAWAY_PATHS = frozenset({"", ":memory:"})


def refuse_throwaway(path: str) -> None:
    """Raise ``RequestError`` for a ``--db`` that SQLite opens as a database vanishing when the
    process exits (``""``, ``:memory:``; spec/cli.md §2: honoured by the reference, relied on
    by nobody): a CLI call, ``zkr serve`` or ``zkr mcp`` would report ids for memories it never
    kept. The library (:meth:`zkr.MemoryDb.open`) still opens them.

    A blank path (only whitespace, e.g. ``" "``, or a ``file:`` URI naming one) is refused too:
    it is a slip, not a name, and would create a file named by invisible characters in the
    working directory."""
    if path in THROWAWAY_PATHS or _throwaway_uri(path):
        raise RequestError(
            f"--db {rust_debug(path)} is a database that vanishes when this process ends;"
            " give a file path or a postgresql:// URL"
        )
    if not path.strip() or not uri_file_name(path).strip():
        raise RequestError(
            f"--db {rust_debug(path)} is blank; give a file path or a postgresql:// URL"
        )


def uri_file_name(path: str) -> str:
    """The file name a SQLite ``file:`` URI opens (percent-decoded, without its authority,
    query and fragment); ``path`` itself when it is not such a URI."""
    if not path.startswith("file:"):
        return path
    from urllib.parse import unquote

    rest = path[5:].partition("#")[0].partition("?")[0]
    if rest.startswith("//"):  # an authority (empty or localhost) before the path
        rest = rest[2 + len(rest[2:].partition("/")[0]) :]
    return unquote(rest)


def _throwaway_uri(path: str) -> bool:
    """Whether ``path`` is a SQLite ``file:`` URI (opened as one, zkr.store.db) naming a
    database discarded at exit: ``file::memory:``, an empty file name (a temporary database) or
    ``mode=memory`` (https://sqlite.org/uri.html)."""
    if not path.startswith("file:"):
        return False
    from urllib.parse import parse_qsl

    query = path[5:].partition("#")[0].partition("?")[2]
    modes = [value for key, value in parse_qsl(query, keep_blank_values=True) if key == "mode"]
    return uri_file_name(path) in THROWAWAY_PATHS or "memory" in modes


def rust_debug(name: str) -> str:
    """``format!("{:?}", name)``: the quoted, escaped form used in ``unknown command``."""
    out = ['"']
    for ch in name:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            # control characters, and argv bytes that were not UTF-8 (surrogate escapes)
            out.append(f"\\u{{{code:x}}}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
