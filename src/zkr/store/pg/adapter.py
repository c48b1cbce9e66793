"""A psycopg connection that speaks the subset of ``sqlite3.Connection`` the store uses.

The store modules hold the rules once, as SQLite-dialect SQL run through
``conn.execute(sql, params)``. :class:`PgConnection` runs the same calls on PostgreSQL:

* **Statements** are translated once and cached (:func:`translate`): placeholders ``?`` and
  ``:name`` become psycopg's ``%s`` and ``%(name)s``; ``json_each(X)`` becomes
  ``json_array_elements_text(X::json)`` (its column is also called ``value``),
  ``json_extract(X, '$.a')`` becomes ``X::json #>> '{a}'``, ``json_group_array`` ``json_agg``,
  ``unixepoch()`` the transaction's epoch second, ``lower(hex(randomblob(16)))`` a random
  UUID's hex, ``COLLATE BINARY`` ``COLLATE "C"``, ``BEGIN IMMEDIATE`` ``BEGIN``; an upsert on a
  row's id conflicts on ``(tenant_id, person_id, id)`` (ids are unique per scope here), except
  into the tables :data:`zkr.store.pg.schema.UNSCOPED_TABLES` names. ``PRAGMA`` statements
  (SQLite's page cache, ``secure_delete``, checkpoints) are answered without reaching the
  server.
* **Parameters** are bound client-side (psycopg's ``ClientCursor``), so an untyped ``?`` takes
  its type from where it stands as it does in SQLite; a Python ``bool`` is sent as 0/1.
* **Results** come back as SQLite returns them: ``numeric`` (PostgreSQL's ``sum`` of integers)
  as ``int`` when integral, ``boolean`` (a predicate in a select list) as 0/1, ``json`` as text.
* **Errors** become ``sqlite3`` exception types carrying the server's primary message, so every
  ``except sqlite3.Error`` / ``IntegrityError`` in the store (and :mod:`zkr.store.driver`) sees
  them unchanged: integrity violations (class 23, which zkr's trigger functions raise with the
  SQLite trigger's text) as ``IntegrityError``, everything else as ``OperationalError``.
* **Transactions** are explicit, as with ``sqlite3``'s ``isolation_level=None``: the store issues
  ``BEGIN``/``COMMIT``/``ROLLBACK``/``SAVEPOINT`` itself (:func:`zkr.store.db.write_tx`).
  :meth:`PgConnection.lock_scope` takes the per-scope write lock.

Only this package imports psycopg; the SQLite path never loads it.
"""

from __future__ import annotations

import json
import logging
import operator
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.adapt import Loader

from zkr.store.pg.schema import UNSCOPED_TABLES

# psycopg logs what it ignores while closing a failed pipeline ("error ignored terminating
# <psycopg.Pipeline …>"), after the error the adapter raises anyway. With no logging configured,
# Python's last-resort handler would print that line on stderr beside the CLI's JSON envelope
# (seen on an erase that failed); a host that configures logging still receives it.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

DIALECT = "postgresql"

Params = Sequence[Any] | Mapping[str, Any]


# --------------------------------------------------------------------------- result types


class _IntegralNumericLoader(Loader):
    """``numeric`` as ``int`` when integral (``sum`` of integers), else ``float``."""

    def load(self, data: Any) -> Any:
        text = bytes(data).decode()
        if "." in text or "e" in text or "N" in text:
            return float(text)
        return int(text)


class _BoolAsIntLoader(Loader):
    """``boolean`` as SQLite's 0/1."""

    def load(self, data: Any) -> int:
        return 1 if bytes(data) == b"t" else 0


class _TextLoader(Loader):
    """``json`` / ``jsonb`` as the text SQLite returns."""

    def load(self, data: Any) -> str:
        return bytes(data).decode()


def _configure(conn: psycopg.Connection[Any]) -> None:
    adapters = conn.adapters
    adapters.register_loader("numeric", _IntegralNumericLoader)
    adapters.register_loader("bool", _BoolAsIntLoader)
    adapters.register_loader("json", _TextLoader)
    adapters.register_loader("jsonb", _TextLoader)


# --------------------------------------------------------------------------- errors


class PgOperationalError(sqlite3.OperationalError):
    """A PostgreSQL failure other than an integrity violation (message: the server's)."""


class PgIntegrityError(sqlite3.IntegrityError):
    """A PostgreSQL integrity violation (SQLSTATE class 23), including zkr's trigger aborts."""


def driver_error(exc: psycopg.Error) -> sqlite3.Error:
    """``exc`` as the ``sqlite3`` exception type the store expects, with the primary message."""
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag is not None else None) or str(exc).split("\n")[0]
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("23"):
        return PgIntegrityError(message)
    return PgOperationalError(message)


# --------------------------------------------------------------------------- translation

_TOKEN = re.compile(
    r"--[^\n]*"  # comment (dropped)
    r"|'(?:[^']|'')*'"  # string literal
    r'|"(?:[^"]|"")*"'  # quoted identifier
    r"|::"  # a PostgreSQL cast (in statements written for PostgreSQL)
    r"|\?"
    r"|:[A-Za-z_][A-Za-z0-9_]*"
    r"|%"
    r"""|-|[^'"?:%-]+|:"""
)

_JSON_PATH = re.compile(r"\$((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)")
_ARG = r"((?:[^(),']|\([^()]*\))+?)"


def _pg_path(path: str) -> str:
    """``$.a.b[0]`` as PostgreSQL's path array literal ``'{a,b,0}'``."""
    match = _JSON_PATH.fullmatch(path)
    if match is None:
        raise ValueError(f"unsupported JSON path {path!r}")
    parts = re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", match.group(1))
    return "'{" + ",".join(name or index for name, index in parts) + "}'"


_REWRITES: tuple[tuple[re.Pattern[str], Any], ...] = (
    # a read transaction (zkr.store.db.read_tx): one snapshot for all its statements
    (re.compile(r"^\s*BEGIN\s*$"), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
    # a write transaction: read committed, after the scope lock (zkr.store.db.write_tx)
    (re.compile(r"\bBEGIN IMMEDIATE\b"), "BEGIN READ WRITE"),
    # SQLite's unary + (keeps its planner off an index) on a text column
    (re.compile(r"(?<=[\s(])\+(?=[A-Za-z_])"), ""),
    (
        re.compile(r"\blower\(hex\(randomblob\(16\)\)\)"),
        "replace(gen_random_uuid()::text, '-', '')",
    ),
    (re.compile(r"\bunixepoch\(\)"), "CAST(floor(extract(epoch FROM now())) AS bigint)"),
    (
        re.compile(r"\bjson_each\(\s*" + _ARG + r"\s*,\s*'([^']*)'\s*\)"),
        lambda m: f"json_array_elements_text(({m.group(1)})::json #> {_pg_path(m.group(2))})",
    ),
    (  # the listed values compare and sort as the "C" text columns they meet
        re.compile(r"\bSELECT value FROM json_each\(\s*" + _ARG + r"\s*\)"),
        lambda m: (
            f'SELECT value COLLATE "C" AS value FROM json_array_elements_text(({m.group(1)})::json)'
        ),
    ),
    (  # json_each's ``key`` of an array is the element's index
        re.compile(r"\bjson_each\(\s*" + _ARG + r"\s*\)\s+ORDER BY key\b"),
        lambda m: (
            f"json_array_elements_text(({m.group(1)})::json) WITH ORDINALITY AS je(value, key)"
            " ORDER BY key"
        ),
    ),
    (
        re.compile(r"\bjson_each\(\s*" + _ARG + r"\s*\)"),
        lambda m: f"json_array_elements_text(({m.group(1)})::json)",
    ),
    (
        re.compile(r"\bjson_extract\(\s*" + _ARG + r"\s*,\s*'([^']*)'\s*\)"),
        lambda m: f"(({m.group(1)})::json #>> {_pg_path(m.group(2))})",
    ),
    (
        re.compile(r"\bjson_group_array\(\s*" + _ARG + r"\s*\)"),
        lambda m: f"COALESCE(json_agg({m.group(1)})::text, '[]')",
    ),
    (re.compile(r"\bCOLLATE BINARY\b"), 'COLLATE "C"'),
    # SQLite's CROSS JOIN … ON fixes the join order; PostgreSQL plans an inner join itself
    (re.compile(r"\bCROSS JOIN (\w+(?: AS)? \w+ ON)\b"), r"JOIN \1"),
    # SQLite's NOCASE folds ASCII letters only, as lower() does under the "C" collation
    (
        re.compile(r"(\S+) = (%\(\w+\)s|%s) COLLATE NOCASE"),
        r'lower(\1) = lower(\2 COLLATE "C")',
    ),
    (re.compile(r"\blength\(CAST\((.+?) AS BLOB\)\)"), r"octet_length(\1)"),
    # events join their commit within its scope (zkr.store.pg.schema keys them so)
    (
        re.compile(r"\b(?:(\w+)\.)?commit_sequence = (\w+)\.sequence\b"),
        lambda m: (
            f"{m.group(0)} AND {m.group(1) + '.' if m.group(1) else ''}tenant_id ="
            f" {m.group(2)}.tenant_id AND {m.group(1) + '.' if m.group(1) else ''}person_id ="
            f" {m.group(2)}.person_id"
        ),
    ),
    (re.compile(r"\bmain\."), ""),
    # ids are unique per scope (zkr.store.pg.schema): an upsert on an id is an upsert on the
    # scoped key, except into the tables the layout keeps without a scope (zkr_embedder)
    (
        re.compile(r"\b(INSERT\s+INTO\s+(\w+)\b.*?)\bON CONFLICT \(id\)", re.S),
        lambda m: (
            m.group(0)
            if m.group(2) in UNSCOPED_TABLES
            else m.group(1) + "ON CONFLICT (tenant_id, person_id, id)"
        ),
    ),
)

# Statements whose SQLite form does not translate word for word: the SQLite text (whitespace
# collapsed) -> the PostgreSQL text. Each names the store module it belongs to.
_SPECIAL: dict[str, str] = {}


def special(sqlite_sql: str, pg_sql: str) -> None:
    """Register the PostgreSQL form of one store statement that needs more than translation."""
    _SPECIAL[" ".join(sqlite_sql.split())] = pg_sql


def _placeholders(sql: str) -> str:
    out: list[str] = []
    for token in _TOKEN.findall(sql):
        if token.startswith("--"):
            continue
        if token == "?":
            out.append("%s")
        elif token == "%":
            out.append("%%")
        elif token.startswith(":") and len(token) > 1 and token != "::":
            out.append(f"%({token[1:]})s")
        elif token.startswith("'"):
            out.append(token.replace("%", "%%"))
        else:
            out.append(token)
    return "".join(out)


_CACHE: dict[str, str] = {}
CACHE_LIMIT = 4096


def translate(sql: str) -> str:
    """The PostgreSQL form of one store statement. Cached per statement text."""
    found = _CACHE.get(sql)
    if found is not None:
        return found
    key = " ".join(sql.split())
    text = _SPECIAL.get(key)
    if text is None:
        text = _placeholders(sql)
        for pattern, replacement in _REWRITES:
            text = pattern.sub(replacement, text)
        text = _alias_subqueries(text)
    if len(_CACHE) >= CACHE_LIMIT:
        _CACHE.clear()  # statements built with a variable number of placeholders
    _CACHE[sql] = text
    return text


_SUBQUERY = re.compile(r"\bFROM\s*\(\s*(?:SELECT|WITH)\b", re.IGNORECASE)
_ALIASED = re.compile(
    r"\s*(?:AS\b|(?!(?:WHERE|ORDER|GROUP|LIMIT|UNION|JOIN|LEFT|CROSS|ON|HAVING)\b)[A-Za-z_])",
    re.IGNORECASE,
)


def _alias_subqueries(text: str) -> str:
    """Name every ``FROM (SELECT …)`` that SQLite lets go unnamed (PostgreSQL 15 needs one)."""
    out: list[str] = []
    at = 0
    count = 0
    for match in _SUBQUERY.finditer(text):
        open_at = text.index("(", match.start())
        depth = 0
        close_at = -1
        for i in range(open_at, len(text)):
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
                if depth == 0:
                    close_at = i
                    break
        if close_at < 0 or _ALIASED.match(text, close_at + 1):
            continue
        count += 1
        out.append(text[at : close_at + 1])
        out.append(f" AS zkr_sub{count}")
        at = close_at + 1
    out.append(text[at:])
    return "".join(out)


def _bind(params: Params | None) -> Any:
    if params is None:
        return None
    if isinstance(params, Mapping):
        return {k: int(v) if type(v) is bool else v for k, v in params.items()}
    return [int(v) if type(v) is bool else v for v in params]


# --------------------------------------------------------------------------- cursor


class PgCursor:
    """The rows of one statement, read like a ``sqlite3.Cursor``."""

    __slots__ = ("_at", "_rows", "lastrowid", "rowcount")

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int, lastrowid: int | None):
        self._rows = rows
        self._at = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]:
        rows = self._rows[self._at : self._at + size]
        self._at += len(rows)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows = self._rows[self._at :]
        self._at = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())


# --------------------------------------------------------------------------- deferred writes
#
# ``apply`` writes a few rows per record; sent one statement at a time, each costs a round trip
# and psycopg's per-statement work (pure Python here), several times SQLite's whole insert.
# Inside :meth:`PgConnection.deferred_writes` a write whose result nobody has asked for yet is
# queued instead, as SQL text with its values written in as literals, and the queue goes to the
# server as one multi-statement query (simple protocol) when anything reads, or at the end:
# the same statements in the same order, so triggers, identities and errors are the same.
# Consecutive INSERTs of the same ``VALUES`` row shape go as one multi-row INSERT (row triggers
# still fire row by row, each seeing the rows before it).

_WRITE = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s", re.IGNORECASE)
_HOLE = re.compile(r"%%|%s|%\((\w+)\)s")
_VALUES_ROW = re.compile(
    r"^(\s*INSERT\s+INTO\s+\w+\s*(?:\([^()']*\))?\s*VALUES\s*)(\(.*\))\s*$", re.IGNORECASE | re.S
)
FLUSH_BYTES = 8 << 20
"""Queued SQL text that is sent without waiting for a read (memory bound of one batch)."""


class _NotInlinable(Exception):
    """A value :func:`_literal` does not write: its statement is sent bound, at once."""


def _literal(value: Any) -> str:
    """``value`` as a SQL literal standing where the bound parameter stood: ``NULL``, an
    integer (negative ones parenthesised), a string (``standard_conforming_strings``: only
    quotes double). Anything else (and a string holding U+0000, which psycopg refuses with its
    own message) raises :class:`_NotInlinable`."""
    if value is None:
        return "NULL"
    kind = type(value)
    if kind is str:
        text: str = value
        if "\x00" in text:
            raise _NotInlinable
        return "'" + text.replace("'", "''") + "'"
    if kind is int:
        return str(value) if value >= 0 else f"({value})"
    raise _NotInlinable


def _one_group(text: str) -> bool:
    """Whether ``text`` is one parenthesised group: its first ``(`` closes at its end
    (quoted strings and identifiers skipped)."""
    depth = 0
    quote = ""
    for at, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return at == len(text) - 1
    return False


class _Template:
    """A translated statement split at its parameters, to be filled with literals.

    ``merge_key``: for ``INSERT … VALUES (…)`` without parameters before ``VALUES``, the text
    up to the row (consecutive statements with the same key become one multi-row INSERT);
    else None.
    """

    __slots__ = ("keys", "merge_key", "parts")

    def __init__(self, text: str) -> None:
        match = _VALUES_ROW.match(text)
        head = match.group(1) if match else ""
        self.merge_key: str | None = None
        if match and "%" not in head and _one_group(match.group(2)):
            self.merge_key = head
            text = match.group(2)
        self.parts: list[str] = []
        self.keys: list[str | None] = []
        at = 0
        literal: list[str] = []
        for hole in _HOLE.finditer(text):
            literal.append(text[at : hole.start()])
            at = hole.end()
            if hole.group(0) == "%%":
                literal.append("%")
                continue
            self.parts.append("".join(literal))
            literal = []
            self.keys.append(hole.group(1))
        literal.append(text[at:])
        self.parts.append("".join(literal))

    def render(self, params: Any) -> str:
        """The statement (or, with a ``merge_key``, its row) with ``params`` written in."""
        parts, keys = self.parts, self.keys
        if not keys:
            return parts[0]
        out = [parts[0]]
        if isinstance(params, Mapping):
            for i, key in enumerate(keys, 1):
                out.append(_literal(params[key]))
                out.append(parts[i])
        else:
            if params is None or len(params) != len(keys):
                raise _NotInlinable
            for i, value in enumerate(params, 1):
                out.append(_literal(value))
                out.append(parts[i])
        return "".join(out)


_TEMPLATES: dict[str, _Template | None] = {}


def _template(text: str) -> _Template | None:
    """The template of a deferrable translated statement, else None (cached).

    Deferrable: an ``INSERT``/``UPDATE``/``DELETE`` that returns nothing and is not an upsert
    (a caller may catch an upsert's conflict where it runs, as :mod:`zkr.store.apply_kinds`
    does for profile entries).
    """
    found = _TEMPLATES.get(text, False)
    if found is not False:
        return found  # type: ignore[return-value]
    upper = text.upper()
    template = None
    if _WRITE.match(text) and "RETURNING" not in upper and "ON CONFLICT" not in upper:
        template = _Template(text)
    if len(_TEMPLATES) >= CACHE_LIMIT:
        _TEMPLATES.clear()
    _TEMPLATES[text] = template
    return template


class DeferredCursor(PgCursor):
    """The cursor of a queued write: no rows; reading ``rowcount`` sends the queue first."""

    __slots__ = ("_conn", "_count")

    def __init__(self, conn: PgConnection) -> None:
        super().__init__([], -1, None)
        self._conn = conn
        self._count: int | None = None

    @property
    def rowcount(self) -> int:
        if self._count is None:
            self._conn.flush()
        return -1 if self._count is None else self._count

    @rowcount.setter
    def rowcount(self, value: int) -> None:
        self._count = None if value < 0 else value


_PRAGMA = re.compile(r"^\s*PRAGMA\s+([a-z_]+)\s*(?:\((.*)\))?\s*(=.*)?$", re.IGNORECASE | re.S)
# What a PRAGMA read answers on PostgreSQL (none of them has a meaning here).
_PRAGMA_ANSWERS: dict[str, tuple[Any, ...]] = {
    "secure_delete": (0,),
    "wal_checkpoint": (0, 0, 0),
    "data_version": (0,),
    "mmap_size": (0,),
    "cache_size": (0,),
    "user_version": (10,),
    "foreign_keys": (1,),
}


class PgConnection:
    """One PostgreSQL session used like a ``sqlite3.Connection`` by the store.

    ``zkr_dialect`` is ``"postgresql"`` (:func:`zkr.store.driver.is_postgres`); ``dsn`` the
    address it was opened with; ``schema`` the schema holding the store (first of the
    session's ``search_path``).
    """

    zkr_dialect = DIALECT

    def __init__(self, raw: psycopg.Connection[Any], dsn: str, schema: str) -> None:
        self.raw = raw
        self.dsn = dsn
        self.schema = schema
        self._cursor = raw.cursor()  # server-side binding, prepared after 5 runs
        self.total_changes = 0
        # deferred writes (deferred_writes): None outside; else the queue of
        # (merge key or None, statement or row text, its cursor), and its text's length
        self._queue: list[tuple[str | None, str, DeferredCursor]] | None = None
        self._queued = 0

    # -- sqlite3.Connection surface
    @property
    def in_transaction(self) -> bool:
        status = self.raw.info.transaction_status
        return status != psycopg.pq.TransactionStatus.IDLE

    def execute(self, sql: str, params: Params | None = None) -> PgCursor:
        pragma = _PRAGMA.match(sql) if sql.lstrip()[:6].upper() == "PRAGMA" else None
        if pragma is not None:
            answer = _PRAGMA_ANSWERS.get(pragma.group(1).lower(), (0,))
            return PgCursor([] if pragma.group(3) else [answer], -1, None)
        text = translate(sql)
        if text == "":
            return PgCursor([], 0, None)
        if self._queue is not None:
            template = _template(text)
            if template is not None:
                try:
                    return self._defer(template, _bind(params))
                except _NotInlinable:
                    pass
            elif text.lstrip()[:8].upper() == "ROLLBACK":
                self._queue.clear()  # nothing queued survives a rollback anyway
                self._queued = 0
        return self._run(text, _bind(params))

    def executemany(self, sql: str, seq: Iterable[Params]) -> PgCursor:
        text = translate(sql)
        rows = [_bind(p) for p in seq]
        if not rows:
            return PgCursor([], 0, None)
        if self._queue is not None:
            template = _template(text)
            if template is not None:
                try:
                    rendered = [template.render(row) for row in rows]
                except _NotInlinable:
                    pass
                else:
                    for row_text in rendered:
                        self._enqueue(template.merge_key, row_text)
                    return PgCursor([], len(rows), None)
        self.flush()
        try:
            self._cursor.executemany(text, rows)
        except psycopg.Error as exc:
            raise driver_error(exc) from None
        count = self._cursor.rowcount
        self.total_changes += max(count, 0)
        return PgCursor([], count, None)

    def execute_packed(self, sql: str, params: Params | None = None) -> PgCursor:
        """``execute`` of a query (the store's SQL) whose rows come back as one JSON value
        (``json_agg`` of the rows, in the query's order), decoded at once: for queries of many
        rows, where psycopg's per-value loading (pure Python here) would cost more than the
        query itself. Columns must be integers, text, booleans or NULL; a boolean comes back
        as ``True``/``False`` (equal to SQLite's 1/0, not the same type)."""
        text = translate(sql)
        wrapped = f"SELECT coalesce(json_agg(q), '[]')::text FROM ({text}) q"
        rows = self._run(wrapped, _bind(params)).fetchall()
        packed = json.loads(rows[0][0], object_pairs_hook=_row_values) if rows else []
        return PgCursor(packed, len(packed), None)

    def execute_native(self, sql: str, params: Any = None) -> PgCursor:
        """Run PostgreSQL SQL as written (``%s`` placeholders), for backend-specific modules."""
        return self._run(sql, params)

    def raw_executemany(self, sql: str, rows: list[Any]) -> None:
        """``executemany`` of PostgreSQL SQL as written (``%s`` placeholders)."""
        self.flush()
        try:
            self._cursor.executemany(sql, rows)
        except psycopg.Error as exc:
            raise driver_error(exc) from None
        self.total_changes += len(rows)

    def close(self) -> None:
        self.raw.close()

    def lock_scope(self, tenant_id: str, person_id: str) -> None:
        """Hold the scope's write lock until the transaction ends (every write transaction of
        a scope takes it first, so a scope's writes, and its feed sequences, are serialised
        like a SQLite file's while other scopes write at once)."""
        self._run(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"zkr\x1f{tenant_id}\x1f{person_id}"],
        )

    # -- deferred writes
    @contextmanager
    def deferred_writes(self) -> Iterator[None]:
        """Queue this block's writes and send them in batches (see "deferred writes" above).

        A queued statement's failure is raised by the call that sends the queue (the next
        read, :meth:`flush`, or the block's end), before anything the caller does after it
        fails: when the block ends with an exception, the queue is sent first and its error,
        if any, is raised instead, the one SQLite would have raised first. Meant inside a
        write transaction, which the caller rolls back on any error. Nested blocks share the
        outer queue.
        """
        if self._queue is not None or not self._literals_ok():
            yield
            return
        self._queue, self._queued = [], 0
        try:
            yield
        except Exception:
            self.flush()  # raises the queued statement's error, if one fails
            raise
        else:
            self.flush()
        finally:
            self._queue, self._queued = None, 0

    def _literals_ok(self) -> bool:
        """Whether :func:`_literal`'s quoting is the session's (``standard_conforming_strings``
        on, PostgreSQL's default since 9.1); else writes are sent bound, one at a time."""
        return self.raw.info.parameter_status("standard_conforming_strings") == "on"

    def flush(self) -> None:
        """Send the queued writes now, as one query; raises the first one's error."""
        queue = self._queue
        if not queue:
            return
        self._queue, self._queued = [], 0
        statements: list[str] = []
        cursors: list[list[DeferredCursor]] = []
        last_key: str | None = None
        for key, text, cursor in queue:
            if key is not None and key == last_key:
                statements[-1] += "," + text
                cursors[-1].append(cursor)
                continue
            statements.append(text if key is None else key + text)
            cursors.append([cursor])
            last_key = key
        cur = self._cursor
        try:
            cur.execute(";\n".join(statements), prepare=False)
            for group in cursors:
                count = cur.rowcount
                self.total_changes += max(count, 0)
                for cursor in group:
                    cursor.rowcount = count if len(group) == 1 else 1
                cur.nextset()
        except psycopg.Error as exc:
            raise driver_error(exc) from None

    def _defer(self, template: _Template, params: Any) -> DeferredCursor:
        return self._enqueue(template.merge_key, template.render(params))

    def _enqueue(self, key: str | None, text: str) -> DeferredCursor:
        assert self._queue is not None
        cursor = DeferredCursor(self)
        self._queue.append((key, text, cursor))
        self._queued += len(text)
        if self._queued > FLUSH_BYTES:
            self.flush()
        return cursor

    # -- internals
    def _run(self, text: str, params: Any) -> PgCursor:
        if self._queue:
            self.flush()
        cur = self._cursor
        try:
            cur.execute(text, params)
            rows = cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            raise driver_error(exc) from None
        count = cur.rowcount
        if cur.description is None:
            self.total_changes += max(count, 0)
        return PgCursor(rows, count, None)


def _row_values(pairs: list[tuple[str, Any]]) -> tuple[Any, ...]:
    """One packed row (a JSON object, its keys the column names, repeated ones included) as a
    tuple of its values in column order."""
    return tuple(map(_VALUE, pairs))


_VALUE = operator.itemgetter(1)


def open_connection(dsn: str) -> PgConnection:
    """Connect to ``dsn`` in autocommit mode (the store issues its own ``BEGIN``).

    Raises ``sqlite3.OperationalError`` (:func:`driver_error`) when the server refuses.
    """
    try:
        raw = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        raise driver_error(exc) from None
    _configure(raw)
    row = raw.execute("SELECT current_schemas(false), current_setting('search_path')").fetchone()
    existing, search_path = (row[0], row[1]) if row else ([], "")
    schema = _first_schema(search_path) or (existing[0] if existing else "")
    if not schema:
        # An empty search_path (or only a "$user" schema that does not exist) selects no
        # schema: every unqualified statement would fail with the server's "relation ... does
        # not exist" or "no schema has been selected to create in". Say what is wrong instead.
        raw.close()
        raise PgOperationalError(
            f"the session's search_path ({search_path or 'empty'}) selects no schema: "
            "name the store's schema with ?options=-csearch_path%3DNAME"
        )
    return PgConnection(raw, dsn, schema)


def _first_schema(search_path: str) -> str:
    """The first schema ``search_path`` names ("" for ``$user``: the server resolves it)."""
    first = search_path.split(",")[0].strip()
    if first.startswith('"') and first.endswith('"'):
        first = first[1:-1].replace('""', '"')
    return "" if first == "$user" else first
