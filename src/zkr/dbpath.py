"""What a ``--db`` value may name (spec/cli.md §2), one rule for every entry point that opens a
database from the command line: the CLI, ``zkr serve``, ``zkr mcp`` and ``zkr import``; and the
quoted form of a command-line value in error messages (``format!("{:?}")``, as the reference
prints it); and the directory rule of zkr's own commands (:func:`prepare_own`).

It imports only :mod:`zkr.errors`, so each entry point can ask it without importing another.
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


def prepare_own(path: str) -> None:
    """The ``--db`` rule of zkr's own commands (``zkr serve``, ``zkr mcp``, ``zkr import``):
    :func:`refuse_throwaway`, then create the file's missing directory (``mkdir -p``; the last
    level private to the user, mode 0700), as SQLite creates the missing file itself.

    These commands are configured once and started by a host (Claude Desktop runs ``zkr mcp
    --db ~/.zkr/memory.db``) where a ``unable to open database file`` on stderr goes unseen;
    agent-memory tools create their data directory (mem0's ``~/.mem0``), and a typo in a
    directory name is no worse than one in the file name, which already makes a new file. The
    one-shot CLI commands keep the reference's ``unable to open database file: PATH``.

    Nothing is created for a ``postgresql://`` URL, nor for a ``file:`` URI whose ``mode`` is
    not ``rwc`` (it may not create the file either), nor for a directory starting with ``~``
    (a host's JSON configuration passes ``~/.zkr/memory.db`` unexpanded: a directory named
    ``~`` in the working directory is never what was meant; the error gives the full path).
    Raises ``RequestError`` (``cannot open PATH: cannot create its directory DIR (REASON)``)
    when the directory cannot be made (a file in the way, no permission).
    """
    refuse_throwaway(path)
    if path.startswith(("postgresql://", "postgres://")):
        return
    modes = uri_modes(path)
    if any(mode != "rwc" for mode in modes):
        return
    import os

    directory = os.path.dirname(uri_file_name(path))
    if not directory or os.path.isdir(directory):
        return
    if directory.startswith("~"):  # from a JSON config: no shell expanded it
        raise RequestError(
            f"cannot open {path}: its directory {directory} does not exist and ~ is not"
            f" expanded here (no shell read it); give the full path: {os.path.expanduser(path)}"
        )
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RequestError(
            f"cannot open {path}: cannot create its directory {directory} ({reason})"
        ) from None


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
    return uri_file_name(path) in THROWAWAY_PATHS or "memory" in uri_modes(path)


def uri_modes(path: str) -> list[str]:
    """The ``mode`` values of a SQLite ``file:`` URI's query, in order; ``[]`` for a path."""
    if not path.startswith("file:"):
        return []
    from urllib.parse import parse_qsl

    query = path[5:].partition("#")[0].partition("?")[2]
    return [value for key, value in parse_qsl(query, keep_blank_values=True) if key == "mode"]


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
