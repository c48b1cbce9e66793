"""The ``zkr`` command line: grammar, framing and a dispatch table (spec/cli.md).

``zkr --db PATH COMMAND`` checks COMMAND, reads one JSON request of at most 1 MiB from stdin,
decodes and validates it, then opens (creating and migrating) PATH, runs the command through
:class:`zkr.MemoryDb` and prints one compact JSON value with sorted keys.
Any failure prints ``{"error": MESSAGE}`` on stderr and exits 1.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

from zkr import model
from zkr.codec import cli_dumps, parse_json
from zkr.dbpath import refuse_throwaway, rust_debug
from zkr.errors import RequestError, ZkrError, bounded
from zkr.memory import MemoryDb
from zkr.output import respond
from zkr.typelite import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from typing import BinaryIO

REQUEST_LIMIT = 1_048_576
USAGE = "usage: zkr --db PATH COMMAND (use --help)"


class Command(NamedTuple):
    """One row of the dispatch table: every command is decode, call, encode.

    ``request`` names the :mod:`zkr.model` request type whose ``from_json`` decodes stdin (by
    name, so a call builds only its own family's types); the :class:`MemoryDb` method of the
    command's name is called with it; :func:`zkr.model.encode` turns its typed result into the
    printed JSON value.
    """

    purpose: str
    request: str


COMMANDS: dict[str, Command] = {
    "remember": Command(
        "store a source and its evidence, optionally with a typed claim and a transcript locator",
        "RememberRequest",
    ),
    "locator": Command(
        "read the transcript locator of live evidence (null when there is none)",
        "LocatorRequest",
    ),
    "search": Command(
        "bounded, cited retrieval pack for a query (lexical, optionally hybrid or as_of)",
        "SearchRequest",
    ),
    "get": Command(
        "read one live cited memory (source, evidence or claim) by target", "GetRequest"
    ),
    "context": Command(
        "the cited block to paste into a prompt: best pack for a query, current profile"
        " entries and latest reviews, within max_bytes",
        "ContextRequest",
    ),
    "correct": Command(
        "supersede an accepted claim with new correction evidence", "CorrectRequest"
    ),
    "promote": Command("move a processed short_term claim to long_term", "ClaimTierRequest"),
    "archive": Command(
        "move a processed claim to the archive tier, out of live retrieval", "ClaimTierRequest"
    ),
    "link": Command("attach supporting or contradicting evidence to a claim", "LinkRequest"),
    "delete": Command("tombstone a source and retract what it alone supported", "DeleteRequest"),
    "repair": Command("drain a bounded batch of the projection-repair outbox", "LimitRequest"),
    "profile": Command(
        "project a live profile_fact claim into the current profile", "ProfileRequest"
    ),
    "profiles": Command("list bounded live profile entries, newest first", "LimitRequest"),
    "review": Command("store a cited daily review", "ReviewRequest"),
    "reviews": Command("list bounded daily reviews", "LimitRequest"),
    "projections": Command(
        "list bounded missing or stale embedding inputs for a model/version",
        "ProjectionsRequest",
    ),
    "embed": Command(
        "store a caller-computed embedding of a source, evidence or claim", "EmbedRequest"
    ),
    "embed-pending": Command(
        "embed missing or stale inputs with the local model (zkr[embed]) and turn on query"
        " embedding for search; progress bar on a terminal, JSON summary",
        "EmbedPendingRequest",
    ),
    "export": Command("read one page of the scoped authoritative commit feed", "ExportRequest"),
    "apply": Command(
        "materialize complete commits exported by another zkr database", "ApplyRequest"
    ),
    "trace": Command(
        "show a source, evidence or claim with its evidence, links, corrections, profile"
        " entries and reviews",
        "TraceRequest",
    ),
    "lookup": Command(
        "current (or as_of) claims for a subject and predicate, with citations", "LookupRequest"
    ),
    "browse": Command(
        "page through sources and claims, newest recorded first, with filters", "BrowseRequest"
    ),
    "settle": Command(
        "move a pending or blocked claim to processed (or pending to blocked)", "SettleRequest"
    ),
    "erase": Command(
        "remove the text of deleted sources from the file and its feed for good"
        " (dry_run by default: a report)",
        "EraseRequest",
    ),
}


# Long-running modes with their own flags: ``zkr NAME ...`` -> (module with main(argv), purpose).
SERVERS: dict[str, tuple[str, str]] = {
    "serve": ("zkr.serve", "requests as JSON lines on stdin, one response line each"),
    "mcp": ("zkr.mcp_server", "Model Context Protocol server, stdio or HTTP (zkr[mcp])"),
}


def dispatch(database: MemoryDb, command: str, request: Any) -> Any:
    """Run ``command`` on a decoded JSON ``request``; returns the JSON value to print.

    Raises :class:`RequestError` (``unknown command``) for a name not in :data:`COMMANDS`.
    """
    if command not in COMMANDS:
        raise RequestError(f"unknown command {rust_debug(command)}")
    typed = getattr(model, COMMANDS[command].request).from_json(request)  # decode
    result = getattr(database, command.replace("-", "_"))(typed)  # call
    return model.encode(result)  # encode


OPTIONAL_REQUEST = frozenset({"embed-pending"})
"""zkr's own commands whose request may be left out (a terminal or empty stdin means ``{}``)."""


def _embed_pending(database: MemoryDb, request: Any, stderr: Any) -> Any:
    """``embed-pending`` with a tqdm progress bar on ``stderr`` when it is a terminal."""
    typed = model.EmbedPendingRequest.from_json(request)
    if not stderr.isatty():
        return model.encode(database.embed_pending(typed))
    from tqdm import tqdm

    with tqdm(unit="target", file=stderr, dynamic_ncols=True) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return model.encode(database.embed_pending(typed, progress))


def help_text() -> str:
    """The help screen, at most 80 columns wide."""
    import textwrap  # only the help path needs it

    lines = [
        "zkr --db PATH COMMAND",
        "zkr help COMMAND    request fields, response and an example",
        "zkr --version",
        "",
        "Each command reads one JSON object (at most 1 MiB) from stdin and writes one",
        'JSON value to stdout; errors are {"error":"MESSAGE"} on stderr, exit status 1.',
        "",
        "Commands:",
    ]
    rows = [(name, command.purpose) for name, command in COMMANDS.items()]
    rows.append(("help", "show this help"))
    indent = 2 + max(len(name) for name, _ in rows) + 2  # two spaces after the longest name
    for name, purpose in rows:
        wrapped = textwrap.wrap(purpose, 80 - indent)
        lines.append(f"  {name:<{indent - 2}}{wrapped[0]}")
        lines.extend(f"{'':{indent}}{more}" for more in wrapped[1:])
    lines += [
        "",
        "Import chat history (ChatGPT, Claude, OpenAI, JSONL; zkr import --help):",
        "  zkr import --db PATH --tenant T --person P [--format F] [--time WHEN] FILE",
    ]
    lines += ["", "Servers (one process answers many requests; NAME --help for options):"]
    lines += [f"  {f'zkr {name} --db PATH':<21}{purpose}" for name, (_, purpose) in SERVERS.items()]
    return "\n".join(lines) + "\n"


def _command_help(name: str, stdout: Any, stderr: Any) -> int:
    """``zkr help NAME``: the command's request fields and one example (:mod:`zkr.clihelp`)."""
    entry = COMMANDS.get(name)
    if name == "import" or name in SERVERS:  # modes with their own flags: their module doc
        from importlib import import_module

        try:
            text = import_module("zkr.importer" if name == "import" else SERVERS[name][0]).__doc__
        except ImportError:  # an optional extra is not installed
            text = None
        if not text:
            return respond(stdout, stderr, f"zkr {name}: {SERVERS[name][1]}\n")
        from zkr.clihelp import plain_text

        return respond(stdout, stderr, plain_text(text))
    if name == "help":  # listed among the commands of the help screen
        return respond(stdout, stderr, help_text())
    if entry is None:
        stderr.write(cli_dumps({"error": bounded(f"unknown command {rust_debug(name)}")}) + "\n")
        return 1
    from zkr.clihelp import command_help

    return respond(stdout, stderr, command_help(name, entry.purpose))


def read_request(stream: BinaryIO, optional: bool = False) -> Any:
    """Read stdin up to the 1 MiB limit and decode exactly one JSON value (spec/cli.md §4).

    With ``optional``, a terminal or an empty (or blank) stdin is the empty request ``{}``.
    """
    if optional:
        isatty = getattr(stream, "isatty", None)
        if isatty is not None and isatty():
            return {}
    data = stream.read(REQUEST_LIMIT + 1)
    if optional and not data.strip():
        return {}
    if len(data) > REQUEST_LIMIT:
        raise RequestError(f"request exceeds {REQUEST_LIMIT} bytes")
    return parse_json(data)


def run(argv: list[str], stdin: BinaryIO, stdout: Any, stderr: Any) -> int:
    """Run one invocation; returns the exit status. Never raises for bad input."""
    if not argv or (len(argv) == 1 and argv[0] in ("help", "--help", "-h")):
        return respond(stdout, stderr, help_text())
    # a mode's --help / -h anywhere among its options prints its help (nothing is opened)
    asks_help = any(arg in ("--help", "-h") for arg in argv[1:])
    if argv and argv[0] in SERVERS:
        from importlib import import_module

        server_main: Callable[[list[str]], int] = import_module(SERVERS[argv[0]][0]).main
        return server_main(["--help"] if asks_help else argv[1:])
    # (`--db PATH --help` stays an unknown command: spec/cli.md, the reference's contract)
    if len(argv) == 3 and argv[0] == "--db" and argv[2] == "help":
        return respond(stdout, stderr, help_text())
    if argv[0] == "import":  # its own flags and a file argument (zkr.importer)
        from zkr.importer import main as import_main

        return import_main(["--help"] if asks_help else argv[1:], stdout, stderr)
    if len(argv) == 2 and argv[0] == "help":
        return _command_help(argv[1], stdout, stderr)
    if len(argv) == 4 and argv[0] == "--db" and argv[2] == "help":  # PATH is not opened
        return _command_help(argv[3], stdout, stderr)
    if argv[-1] in ("--help", "-h") and (
        len(argv) == 2 or (len(argv) == 4 and argv[0] == "--db")
    ):  # zkr COMMAND --help, zkr --db PATH COMMAND --help: PATH is not opened
        return _command_help(argv[-2], stdout, stderr)
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
        if command not in COMMANDS:
            raise RequestError(f"unknown command {rust_debug(command)}")
        refuse_throwaway(path)
        request = read_request(stdin, optional=command in OPTIONAL_REQUEST)
        database = MemoryDb.deferred(path)
        try:
            if command == "embed-pending":
                result = _embed_pending(database, request, stderr)
            else:
                result = dispatch(database, command, request)
        finally:
            database.close()
    except ZkrError as exc:
        stderr.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    except RecursionError:
        stderr.write(cli_dumps({"error": "request nesting is too deep"}) + "\n")
        return 1
    return respond(stdout, stderr, cli_dumps(result) + "\n")


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
