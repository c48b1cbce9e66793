"""The ``zkr`` command line: grammar, framing and a dispatch table (spec/cli.md).

``zkr --db PATH COMMAND`` checks COMMAND, reads one JSON request of at most 1 MiB from stdin,
decodes and validates it, then opens (creating and migrating) PATH, runs the command through
:class:`zkr.MemoryDb` and prints one compact JSON value with sorted keys.
Any failure prints ``{"error": MESSAGE}`` on stderr and exits 1.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from zkr import model
from zkr.codec import cli_dumps, parse_json
from zkr.errors import RequestError, ZkrError, bounded
from zkr.memory import MemoryDb

REQUEST_LIMIT = 1_048_576
USAGE = "usage: zkr --db PATH COMMAND (use --help)"

Handler = Callable[[MemoryDb, Any], Any]


def _items(values: list[Any]) -> list[Any]:
    return [value.to_json() for value in values]


def _link(db: MemoryDb, request: Any) -> dict[str, bool]:
    db.link(model.LinkRequest.from_json(request))
    return {"ok": True}


# command -> (purpose, handler taking the decoded JSON request and returning a JSON value)
COMMANDS: dict[str, tuple[str, Handler]] = {
    "remember": (
        "store a source and its evidence, optionally with a typed claim and a transcript locator",
        lambda db, r: db.remember(model.RememberRequest.from_json(r)).to_json(),
    ),
    "locator": (
        "read the transcript locator of live evidence (null when there is none)",
        lambda db, r: (
            None
            if (loc := db.locator(model.LocatorRequest.from_json(r))) is None
            else loc.to_json()
        ),
    ),
    "search": (
        "bounded, cited retrieval pack for a query (lexical, optionally hybrid or as_of)",
        lambda db, r: db.search(model.SearchRequest.from_json(r)).to_json(),
    ),
    "get": (
        "read one live cited memory (source, evidence or claim) by target",
        lambda db, r: db.get(model.GetRequest.from_json(r)).to_json(),
    ),
    "correct": (
        "supersede an accepted claim with new correction evidence",
        lambda db, r: db.correct(model.CorrectRequest.from_json(r)).to_json(),
    ),
    "promote": (
        "move a processed short_term claim to long_term",
        lambda db, r: {"claim_id": db.promote(model.ClaimTierRequest.from_json(r))},
    ),
    "archive": (
        "move a processed claim to the archive tier, out of live retrieval",
        lambda db, r: {"claim_id": db.archive(model.ClaimTierRequest.from_json(r))},
    ),
    "link": (
        "attach supporting or contradicting evidence to a claim",
        lambda db, r: _link(db, r),
    ),
    "delete": (
        "tombstone a source and retract what it alone supported",
        lambda db, r: db.delete(model.DeleteRequest.from_json(r)).to_json(),
    ),
    "repair": (
        "drain a bounded batch of the projection-repair outbox",
        lambda db, r: {"processed": db.repair(model.LimitRequest.from_json(r))},
    ),
    "profile": (
        "project a live profile_fact claim into the current profile",
        lambda db, r: db.profile(model.ProfileRequest.from_json(r)).to_json(),
    ),
    "profiles": (
        "list bounded live profile entries, newest first",
        lambda db, r: _items(db.profiles(model.LimitRequest.from_json(r))),
    ),
    "review": (
        "store a cited daily review",
        lambda db, r: {"id": db.review(model.ReviewRequest.from_json(r))},
    ),
    "reviews": (
        "list bounded daily reviews",
        lambda db, r: _items(db.reviews(model.LimitRequest.from_json(r))),
    ),
    "projections": (
        "list bounded missing or stale embedding inputs for a model/version",
        lambda db, r: db.projections(model.ProjectionsRequest.from_json(r)),
    ),
    "embed": (
        "store a caller-computed embedding of a source, evidence or claim",
        lambda db, r: db.embed(model.EmbedRequest.from_json(r)),
    ),
    "export": (
        "read one page of the scoped authoritative commit feed",
        lambda db, r: db.export(model.ExportRequest.from_json(r)),
    ),
    "apply": (
        "materialize complete commits exported by another zkr database",
        lambda db, r: db.apply(model.ApplyRequest.from_json(r)),
    ),
    "trace": (
        "show a source, evidence or claim with its evidence, links, corrections, profile"
        " entries and reviews",
        lambda db, r: db.trace(model.TraceRequest.from_json(r)).to_json(),
    ),
    "lookup": (
        "current (or as_of) claims for a subject and predicate, with citations",
        lambda db, r: db.lookup(model.LookupRequest.from_json(r)),
    ),
    "browse": (
        "page through sources and claims, newest recorded first, with filters",
        lambda db, r: db.browse(model.BrowseRequest.from_json(r)),
    ),
    "settle": (
        "move a pending or blocked claim to processed (or pending to blocked)",
        lambda db, r: db.settle(model.SettleRequest.from_json(r)),
    ),
}


# Long-running modes with their own flags: ``zkr NAME ...`` -> (module with main(argv), purpose).
SERVERS: dict[str, tuple[str, str]] = {
    "serve": ("zkr.serve", "requests as JSON lines on stdin, one response line each"),
    "mcp": ("zkr.mcp_server", "Model Context Protocol server, stdio or HTTP (zkr[mcp])"),
}


def help_text() -> str:
    """The help screen, at most 80 columns wide."""
    import textwrap  # only the help path needs it

    lines = [
        "zkr --db PATH COMMAND",
        "zkr help COMMAND    request fields and an example",
        "zkr --version",
        "",
        "Each command reads one JSON object (at most 1 MiB) from stdin and writes one",
        'JSON value to stdout; errors are {"error":"MESSAGE"} on stderr, exit status 1.',
        "",
        "Commands:",
    ]
    for name, (purpose, _) in [*COMMANDS.items(), ("help", ("show this help", None))]:
        wrapped = textwrap.wrap(purpose, 80 - 15)
        lines.append(f"  {name:<13}{wrapped[0]}")
        lines.extend(f"{'':15}{more}" for more in wrapped[1:])
    lines += [
        "",
        "Import chat history (a ChatGPT or Claude export, JSONL; zkr import --help):",
        "  zkr import --db PATH --tenant T --person P [--format F] FILE",
    ]
    lines += ["", "Servers (one process answers many requests; NAME --help for options):"]
    lines += [f"  {f'zkr {name} --db PATH':<21}{purpose}" for name, (_, purpose) in SERVERS.items()]
    return "\n".join(lines) + "\n"


def _command_help(name: str, stdout: Any, stderr: Any) -> int:
    """``zkr help NAME``: the command's request fields and one example (:mod:`zkr.clihelp`)."""
    entry = COMMANDS.get(name)
    if entry is None:
        stderr.write(cli_dumps({"error": bounded(f"unknown command {_rust_debug(name)}")}) + "\n")
        return 1
    from zkr.clihelp import command_help

    return respond(stdout, stderr, command_help(name, entry[0]))


def _rust_debug(name: str) -> str:
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


def read_request(stream: BinaryIO) -> Any:
    """Read stdin up to the 1 MiB limit and decode exactly one JSON value (spec/cli.md §4)."""
    data = stream.read(REQUEST_LIMIT + 1)
    if len(data) > REQUEST_LIMIT:
        raise RequestError(f"request exceeds {REQUEST_LIMIT} bytes")
    return parse_json(data)


def run(argv: list[str], stdin: BinaryIO, stdout: Any, stderr: Any) -> int:
    """Run one invocation; returns the exit status. Never raises for bad input."""
    if not argv or (len(argv) == 1 and argv[0] in ("help", "--help", "-h")):
        return respond(stdout, stderr, help_text())
    if argv and argv[0] in SERVERS:
        from importlib import import_module

        server_main: Callable[[list[str]], int] = import_module(SERVERS[argv[0]][0]).main
        return server_main(argv[1:])
    if len(argv) == 3 and argv[0] == "--db" and argv[2] == "help":
        return respond(stdout, stderr, help_text())
    if argv[0] == "import":  # its own flags and a file argument (zkr.importer)
        from zkr.importer import main as import_main

        return import_main(argv[1:], stdout, stderr)
    if len(argv) == 2 and argv[0] == "help":
        return _command_help(argv[1], stdout, stderr)
    if argv == ["--version"]:
        from zkr import __version__

        return respond(stdout, stderr, f"zkr {__version__} (schema 10, zkr 0.3.1 compatible)\n")
    if len(argv) != 3 or argv[0] != "--db":
        stderr.write(cli_dumps({"error": USAGE}) + "\n")
        return 1
    path, command = argv[1], argv[2]
    try:
        # The command, then the request, are checked before PATH is touched: the file is opened
        # (created, migrated) only by the handler's first database call, after the request was
        # decoded and validated (docs/decisions-core.md; the reference opens first).
        entry = COMMANDS.get(command)
        if entry is None:
            raise RequestError(f"unknown command {_rust_debug(command)}")
        request = read_request(stdin)
        database = MemoryDb.deferred(path)
        try:
            result = entry[1](database, request)
        finally:
            database.close()
    except ZkrError as exc:
        stderr.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    except RecursionError:
        stderr.write(cli_dumps({"error": "request nesting is too deep"}) + "\n")
        return 1
    return respond(stdout, stderr, cli_dumps(result) + "\n")


def respond(stdout: Any, stderr: Any, text: str) -> int:
    """Write the whole answer to stdout, or report why not (exit status 1).

    A full disk or a reader that went away becomes one error envelope; the command itself has
    already taken effect. A stream with a file descriptor is written with ``os.write`` until
    every byte is out, because an unbuffered text stream (``PYTHONUNBUFFERED=1``) would drop
    the rest of a short write without an error.
    """
    try:
        _write_all(stdout, text)
    except OSError as exc:
        stderr.write(
            cli_dumps({"error": f"cannot write the response to stdout: {exc.strerror or exc}"})
            + "\n"
        )
        _discard_output(stdout)
        return 1
    return 0


def _write_all(stream: Any, text: str) -> None:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view) :]


def _discard_output(stream: Any) -> None:
    """Point a failed stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point (``zkr`` and ``python -m zkr``)."""
    args = sys.argv[1:] if argv is None else argv
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(encoding="utf-8")
    if sys.stdout is None or sys.stderr is None:  # started with a closed stdout/stderr
        if sys.stderr is not None:
            sys.stderr.write(cli_dumps({"error": "stdout is closed"}) + "\n")
        return 1
    stdin = sys.stdin.buffer if sys.stdin is not None else io.BytesIO()
    try:
        return run(args, stdin, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        sys.stderr.write(cli_dumps({"error": "interrupted"}) + "\n")
        return 1
    except Exception as exc:  # last resort: the contract forbids tracebacks
        sys.stderr.write(
            cli_dumps({"error": bounded(f"internal error: {type(exc).__name__}: {exc}")}) + "\n"
        )
        return 1
