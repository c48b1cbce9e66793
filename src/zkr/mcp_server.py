"""``zkr mcp --db PATH``: zkr as a Model Context Protocol server (optional extra ``zkr[mcp]``).

Options (flags win over the environment)::

    --db PATH              the database (created and migrated like any CLI call; a
                           missing directory is created too, mode 0700)
    --tenant T, --person P the one scope every tool acts on ($ZKR_TENANT, $ZKR_PERSON;
                           default "local" / "me"); the model never chooses it. A blank
                           or non-UTF-8 value is an error naming where it came from.
    --http                 streamable HTTP instead of stdio, at http://HOST:PORT/mcp
    --host H, --port N     with --http: loopback only (127.0.0.1 by default, or ::1 /
                           localhost); 8765 (without --http they are refused)

This module stays importable without the SDK: it checks for it, then loads
:mod:`zkr.mcp_tools`. A bad command line, a missing SDK, an HTTP address that cannot be listened
on (a port in use) or an unopenable file is one ``{"error"}`` line on stderr and exit status 1,
as for any CLI call. SIGINT and SIGTERM end the server with status 0, the file closed after
the call in flight (stdio: :func:`stop_on_signals`; HTTP: uvicorn's shutdown).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys
import threading
from contextlib import suppress
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from zkr.codec import cli_dumps, require_utf8
from zkr.errors import RequestError, ZkrError
from zkr.text import is_blank

if TYPE_CHECKING:
    from zkr.memory import MemoryDb
    from zkr.servefile import FileWatch

DEFAULT_PORT = 8765
MISSING_SDK = "zkr mcp needs the MCP SDK: pip install 'zkr[mcp]'"
SCOPE_DEFAULTS = {"tenant": ("ZKR_TENANT", "local"), "person": ("ZKR_PERSON", "me")}
"""Option name: (the environment variable giving its default, the built-in default)."""


class Options(NamedTuple):
    db: str
    tenant: str
    person: str
    http: bool
    host: str
    port: int


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise RequestError(f"{message} ({self.format_usage().strip()})")


def parse_options(argv: list[str]) -> Options:
    """Read the command line and environment; raises :class:`RequestError` when unusable."""
    parser = _Parser(prog="zkr mcp", description="zkr as an MCP server (stdio or HTTP).")
    parser.add_argument(
        "--db",
        required=True,
        metavar="PATH",
        help="the database (created if missing, and its directory: mode 0700)",
    )
    for name, (variable, fallback) in SCOPE_DEFAULTS.items():
        parser.add_argument(
            f"--{name}", help=f"scope of every tool call (default ${variable} or '{fallback}')"
        )
    parser.add_argument(
        "--http", action="store_true", help="streamable HTTP at http://HOST:PORT/mcp, not stdio"
    )
    parser.add_argument(
        "--host", help="a loopback address: 127.0.0.1 (default), ::1 or localhost; needs --http"
    )
    parser.add_argument("--port", type=int, help=f"default {DEFAULT_PORT}; needs --http")
    args = parser.parse_args(argv)
    given = [name for name in ("host", "port") if getattr(args, name) is not None]
    args.host = "127.0.0.1" if args.host is None else args.host
    args.port = DEFAULT_PORT if args.port is None else args.port
    scope = [_scope_option(name, getattr(args, name)) for name in SCOPE_DEFAULTS]
    if not _is_loopback(args.host):
        raise RequestError(f"--host must be a loopback address (zkr mcp has no auth): {args.host}")
    if not 0 < args.port < 65536:
        raise RequestError(f"--port out of range: {args.port}")
    if given and not args.http:  # stdio would silently ignore them: refuse instead
        raise RequestError(f"--{given[0]} needs --http (without it zkr mcp speaks stdio)")
    return Options(args.db, scope[0], scope[1], args.http, args.host, args.port)


def _scope_option(name: str, flag: str | None) -> str:
    """The ``--tenant``/``--person`` value: the flag, else its environment variable, else the
    built-in default. Raises :class:`RequestError` for a blank or non-UTF-8 value, naming the
    environment variable when the value came from there (``ZKR_TENANT=""`` is a mistake to
    report, not a silent fall back to ``local``: it would mix two people's memories)."""
    variable, fallback = SCOPE_DEFAULTS[name]
    if flag is not None:
        value, origin, hint = flag, f"--{name}", ""
    elif variable in os.environ:
        value, origin = os.environ[variable], variable
        hint = f" (the environment variable gives --{name}'s default; unset it for '{fallback}')"
    else:
        return fallback
    if is_blank(value):  # (the scope rule's Unicode White_Space)
        raise RequestError(f"{origin} must not be blank{hint}")
    require_utf8(value, origin)
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(host: str, port: int) -> None:
    """Raise :class:`RequestError` when ``host``:``port`` cannot be listened on (a port in use,
    an address this machine lacks), checked the way the HTTP server binds (IPv6 for a host with
    a colon, ``SO_REUSEADDR``) so its failure is one error envelope instead of its log line and
    exit status 3. A port taken between this check and the server's bind still fails there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise RequestError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def stop_on_signals(database: MemoryDb, watch: FileWatch | None) -> None:
    """stdio: SIGINT and SIGTERM end the server at once, cleanly.

    The SDK reads stdin in a worker thread that no cancellation reaches, so Ctrl-C used to
    leave the server waiting for one more input line (and SIGTERM killed it unclosed). Now a
    signal starts a thread that closes the database, which waits for a tool call in flight to
    finish its transaction (:meth:`MemoryDb.close` takes the call lock), and ends the process
    with status 0 (1 when the file was lost: :class:`~zkr.servefile.FileWatch`). The answer of
    that last call may not reach the client; its write stands (resend with an
    ``ingestion_key``).
    """

    def finish() -> None:
        if watch is None:
            database.close()
        else:
            watch.close(database)  # not once the file was lost
            watch.exit_if_lost(1)
        with suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)

    def handler(signum: int, frame: object) -> None:
        threading.Thread(target=finish, name="zkr-mcp-stop", daemon=True).start()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handler)


def main(argv: list[str]) -> int:
    """Run the server until its client disconnects (stdio) or it is interrupted (HTTP)."""
    try:
        options = parse_options(argv)
        try:
            from zkr import mcp_tools
        except ImportError:
            raise RequestError(MISSING_SDK) from None
        if options.http:
            check_listen(options.host, options.port)
        from zkr.dbpath import prepare_own
        from zkr.memory import MemoryDb

        prepare_own(options.db)
        database = MemoryDb.open(options.db)
    except ZkrError as exc:
        sys.stderr.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    from zkr.serve import long_lived

    long_lived()
    watch = None
    checkpoints = None
    try:
        server = mcp_tools.build_server(database, options.tenant, options.person)
        watch = server.watch
        checkpoints = server.checkpoints
        if options.http:
            # uvicorn shuts down on SIGTERM, then re-raises it to the handler it found: make
            # that KeyboardInterrupt (as for SIGINT), so the file is closed below and the exit
            # status is 0 instead of death by the signal
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            server.run("streamable-http", host=options.host, port=options.port)
        else:
            stop_on_signals(database, watch)
            server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        if watch is None:
            database.close()
        else:
            watch.close(database)  # not once the file was lost (zkr.servefile.FileWatch.close)
        if checkpoints is not None and (watch is None or watch.lost is None):
            checkpoints.close()  # after the connection: it would drop SQLite's locks on PATH-shm
    if watch is not None:
        watch.exit_if_lost(1)
    return 0
