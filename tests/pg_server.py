"""A PostgreSQL server for the tests and benchmarks: the one ``ZKR_PG_DSN`` names, or a throwaway
one started from the machine's server binaries.

* ``ZKR_PG_DSN=postgresql://USER@HOST:PORT/DB`` (a URI): use that server. Its user must be
  allowed to ``CREATE DATABASE``; every database made here is named ``zkr_<purpose>_<hex>`` and
  dropped again by whoever made it.
* Otherwise, when PostgreSQL's server binaries are found (``ZKR_PG_BINDIR``, then
  ``pg_config --bindir``, then the newest ``/usr/lib/postgresql/*/bin``), ``initdb`` a cluster
  in a temporary directory and ``pg_ctl start`` it on a free loopback port (socket in the same
  directory), with durability off (``fsync``, ``synchronous_commit``, ``full_page_writes``: a
  test server keeps nothing worth a crash) unless ``durable`` (benchmarks). The server refuses
  to run as root, so as root the cluster belongs to the ``postgres`` system user (created as
  ``zkrpg`` when there is none) and every server command runs through ``runuser``; otherwise
  it runs as the current user. :meth:`PgServer.stop` stops it (``-m immediate``) and removes
  the directory.

Tests get a database of their own (``CREATE DATABASE … TEMPLATE template0``, under 0.1 s with
durability off), and inside it as many zkr stores as they like: a store is a schema
(:func:`with_schema`, docs/postgres.md). Needs the ``psycopg`` driver (``zkr[postgres]``) for
the catalogue statements; the server binaries only for a throwaway server.

Usable without pytest: ``python -m tests.pg_server`` starts a server, prints its DSN and stops
it on Ctrl-C (handy for the benchmark or a manual session).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ENV_DSN = "ZKR_PG_DSN"
ENV_BINDIR = "ZKR_PG_BINDIR"
SUPERUSER = "zkr"  # the throwaway cluster's bootstrap superuser (trust authentication)
START_TIMEOUT_S = 60
INITDB = ["-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"]
SETTINGS = "-c listen_addresses=127.0.0.1 -c max_connections=60 -c log_min_messages=warning"
# durability off (a test server keeps nothing worth a crash); not for benchmarks
NOT_DURABLE = " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"


class NoServer(Exception):
    """No PostgreSQL is available; ``str()`` says why and what would make one available."""


# --------------------------------------------------------------------------- DSNs


def with_database(dsn: str, database: str) -> str:
    """``dsn`` (a ``postgresql://`` URI) with its database replaced by ``database``."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + quote(database, safe="")))


def with_schema(dsn: str, schema: str) -> str:
    """``dsn`` opening the zkr store in ``schema`` of its database (libpq ``options`` setting
    ``search_path``; zkr creates the schema on first use, docs/postgres.md)."""
    parts = urlsplit(dsn)
    option = "options=" + quote(f"-csearch_path={schema}", safe="")
    return urlunsplit(parts._replace(query=f"{parts.query}&{option}" if parts.query else option))


def database_of(dsn: str) -> str:
    """The database a ``postgresql://`` URI names (``postgres`` when it names none)."""
    return urlsplit(dsn).path.lstrip("/") or "postgres"


def fresh_name(purpose: str) -> str:
    """A new database name ``zkr_<purpose>_<16 hex>`` (lower case, at most 63 bytes)."""
    tag = re.sub(r"[^a-z0-9_]", "_", purpose.lower())[:30]
    return f"zkr_{tag}_{uuid.uuid4().hex[:16]}"


def _connect(dsn: str) -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise NoServer(
            "the PostgreSQL tests need the psycopg driver: pip install -e '.[dev]' "
            "(or 'zkr[postgres]')"
        ) from exc
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


# --------------------------------------------------------------------------- servers


@dataclass
class PgServer:
    """A reachable server: ``dsn`` names its maintenance database (superuser or CREATEDB)."""

    dsn: str
    origin: str  # for messages: "ZKR_PG_DSN" or "throwaway server from BINDIR"
    _stop: list[Any] = field(default_factory=list, repr=False)

    def execute(self, sql: str, database: str | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) in ``database`` (default: the maintenance one)."""
        dsn = self.dsn if database is None else with_database(self.dsn, database)
        with _connect(dsn) as conn:
            cursor = conn.execute(sql)
            return list(cursor.fetchall()) if cursor.description else []

    def create_database(self, name: str) -> str:
        """``CREATE DATABASE name`` from ``template0`` (UTF8); returns its DSN."""
        self.execute(f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'")
        return with_database(self.dsn, name)

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS name WITH (FORCE)`` (ends sessions still connected)."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_databases(self, prefix: str) -> int:
        """Drop every database whose name starts with ``prefix``; returns how many."""
        rows = self.execute("SELECT datname FROM pg_database")
        names = [row[0] for row in rows if str(row[0]).startswith(prefix)]
        for name in names:
            self.drop_database(name)
        return len(names)

    @property
    def throwaway(self) -> bool:
        """True for a server started here (removed whole by :meth:`stop`)."""
        return bool(self._stop)

    def stop(self) -> None:
        """Stop a throwaway server and remove its directory (no-op for ``ZKR_PG_DSN``)."""
        while self._stop:
            self._stop.pop()()


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates: list[Path] = []
    if os.environ.get(ENV_BINDIR):
        candidates.append(Path(os.environ[ENV_BINDIR]))
    if shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for path in candidates:
        if all((path / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return path
    return None


def _server_user() -> str | None:
    """None when not root (run directly); else the unprivileged account that owns the cluster."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "zkrpg"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "zkrpg"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return "zkrpg"


def _as_user(user: str | None, argv: list[str]) -> list[str]:
    if user is None:
        return argv
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *argv]
    import shlex

    return ["su", "-s", "/bin/sh", user, "-c", shlex.join(argv)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_throwaway(bindir: Path, *, durable: bool = False) -> PgServer:
    """``initdb`` + ``pg_ctl start`` a cluster in a new temporary directory (see module doc);
    ``durable`` keeps PostgreSQL's default fsync/commit settings (benchmarks)."""
    user = _server_user()
    # as root, $TMPDIR may sit under a directory the server's user cannot enter: use /tmp
    root = Path(tempfile.mkdtemp(prefix="zkr-pg-", dir="/tmp" if user is not None else None))
    data, log = root / "data", root / "server.log"

    def run(argv: list[str], timeout: float) -> None:
        proc = subprocess.run(
            _as_user(user, argv), capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise NoServer(
                f"{Path(argv[0]).name} failed ({proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-1500:]}\n{tail}"
            )

    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        run(
            [str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-A", "trust", *INITDB],
            timeout=120,
        )
        for attempt in range(3):
            port = _free_port()
            try:
                options = f"{SETTINGS}{'' if durable else NOT_DURABLE} -p {port} -k {root}"
                pg_ctl = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-s"]
                run([*pg_ctl, "-t", str(START_TIMEOUT_S), "-o", options, "start"], 90)
                break
            except NoServer:
                if attempt == 2:
                    raise
                time.sleep(0.5)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise

    def stop() -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError, NoServer):
            run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-s", "stop"], 60)
        shutil.rmtree(root, ignore_errors=True)

    server = PgServer(
        f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres",
        f"a throwaway server from {bindir} (port {port}, data in {root})",
    )
    server._stop.append(stop)
    return server


def acquire(*, durable: bool = False) -> PgServer:
    """The server to test against: ``ZKR_PG_DSN``'s, else a throwaway one (stop it when done;
    ``durable``: with PostgreSQL's default fsync/commit settings).

    Raises :class:`NoServer` with the reason when neither is possible."""
    dsn = os.environ.get(ENV_DSN, "").strip()
    if dsn:
        if not dsn.startswith(("postgresql://", "postgres://")):
            raise NoServer(f"{ENV_DSN} must be a postgresql:// URI, got {dsn!r}")
        server = PgServer(dsn, ENV_DSN)
    else:
        bindir = find_bindir()
        if bindir is None:
            raise NoServer(
                f"no PostgreSQL server: set {ENV_DSN}=postgresql://… or install the server "
                "binaries (Debian: apt-get install postgresql; looked at $ZKR_PG_BINDIR, "
                "pg_config --bindir, /usr/lib/postgresql/*/bin)"
            )
        server = start_throwaway(bindir, durable=durable)
    try:
        server.execute("SELECT 1")
    except NoServer:
        server.stop()
        raise
    except Exception as exc:
        server.stop()
        raise NoServer(f"cannot reach PostgreSQL through {server.origin}: {exc}") from exc
    return server


if __name__ == "__main__":
    started = acquire()
    print(started.dsn, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        started.stop()
