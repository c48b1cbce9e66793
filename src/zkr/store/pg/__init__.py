"""The PostgreSQL backend: the same store (every command, rule, record and error text) on a
PostgreSQL server, for the cloud replica and hosted agents (issue 16, docs/postgres.md).

``zkr --db postgresql://…`` and ``MemoryDb.open("postgresql://…")`` (also ``postgres://``)
open a store here instead of a SQLite file. Requires the ``postgres`` extra
(``pip install 'zkr[postgres]'``, psycopg 3); only this package imports psycopg.

**Which store a DSN opens.** A store is one PostgreSQL *schema*: the first schema of the
session's ``search_path`` (``public`` by default). Select another with libpq's ``options``
parameter, e.g. ``postgresql://user@host/db?options=-csearch_path%3Dalice``. zkr creates the
schema (``CREATE SCHEMA IF NOT EXISTS``, so the role needs ``CREATE`` on the database) and its
tables on first use, as SQLite creates a missing file; two DSNs naming different schemas (or
databases) are two independent stores. A ``search_path`` that selects no schema (empty, or
only a ``$user`` schema that does not exist) is refused with an error saying so. A test
harness that wants a fresh store per ``--db`` path therefore only has to pick an unused schema
name; nothing needs creating beforehand.

**How it works.** The store's modules run unchanged through
:class:`~zkr.store.pg.adapter.PgConnection` (the subset of ``sqlite3.Connection`` they use,
with a cached translation of their SQL); what differs by nature lives here: the layout
(:mod:`.schema`: scope-leading keys for distribution by person, trigger functions), zkr's
lexical index (:mod:`.search`: ``tsvector``/GIN, bm25 per scope); the dense lane scores a
person's whole lane exactly, from vectors kept in memory while the person's lane mark
(:data:`.schema.LANE_MARK_DDL`) is unchanged (no side files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zkr.store.pg.adapter import PgConnection

SCHEMES = ("postgresql://", "postgres://")


def is_dsn(path: str) -> bool:
    """Whether ``--db`` / ``MemoryDb.open`` names a PostgreSQL store."""
    return path.startswith(SCHEMES)


def connect(dsn: str) -> PgConnection:
    """Open the store ``dsn`` names, creating its schema and layout when missing.

    Raises :class:`~zkr.errors.MissingDependency` without psycopg,
    :class:`~zkr.errors.StorageError` with the server's message when it refuses.
    """
    from zkr.errors import MissingDependency, StorageError, ZkrError

    try:
        from zkr.store.pg import adapter, schema
    except ImportError as exc:
        raise MissingDependency(
            f"a postgresql:// database needs psycopg ({exc}): pip install 'zkr[postgres]'"
        ) from None
    import sqlite3

    try:
        conn = adapter.open_connection(dsn)
    except sqlite3.Error as exc:
        raise StorageError(f"unable to open database: {exc}") from None
    try:
        schema.ensure_schema(conn, adapter.translate)
    except ZkrError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise StorageError(str(exc)) from None
    return conn
