"""The schema migration driver (spec/storage.md §1 and §4).

:func:`migrate` runs on every open, right after ``PRAGMA foreign_keys = ON``, on a connection in
autocommit mode. It upgrades any file at schema version 0..9 (0 = a brand-new empty file or a
pre-versioning legacy file) to version 10 inside ONE ``BEGIN IMMEDIATE`` transaction, so a
failure at any step, or a crash, leaves the file exactly at its old version. A file already at
version 10 is left alone: no transaction, no write, no shape check. There is no separate "create
a fresh schema" path: an empty file simply runs every step.

Statements are executed one by one (never ``executescript``, which can commit implicitly).
The DDL of each step lives in :mod:`zkr.store.schema`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from zkr.codec import canonical
from zkr.errors import InvalidInput, SchemaTooNew, StorageError
from zkr.store import feed, schema
from zkr.store.driver import DRIVER_ERRORS, rollback, storage_error

CURRENT_VERSION = 10

# §4.4 step 3: a bootstrap record strictly larger than this many UTF-8 bytes fails the upgrade.
EXPORT_RECORD_LIMIT = 1_048_576
LEGACY_RECORD_TOO_LARGE = (
    f"legacy authoritative record exceeds the {EXPORT_RECORD_LIMIT}-byte export compatibility limit"
)
INVALID_LEGACY_INTERVAL = "legacy claim has an invalid half-open time interval"


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the file behind ``conn`` to schema version 10 (spec/storage.md §1, §4.1).

    ``conn`` must be in autocommit mode (``isolation_level=None``) with no open transaction.

    Raises :class:`SchemaTooNew` for a ``user_version`` outside 0..10 and :class:`InvalidInput`
    ``not a zkr database: …`` for an unversioned file holding other tables (nothing is written),
    :class:`InvalidInput` for the spec's named legacy-data failures, and
    :class:`StorageError` carrying SQLite's own text for raw errors (missing tables, duplicate
    ingestion keys, lock contention) and undecodable legacy rows. Every failure rolls back.
    """
    version = _user_version(conn)
    if version == CURRENT_VERSION:
        return
    if version == 0:
        _refuse_foreign(conn)  # before any lock or write: another application's file
    try:
        conn.execute("BEGIN IMMEDIATE")
    except DRIVER_ERRORS as exc:
        raise storage_error(exc) from None
    try:
        # Re-read under the write lock: another connection may have upgraded the file between
        # the first read and BEGIN IMMEDIATE; its steps must not run a second time.
        version = _user_version(conn)
        if version == 0:
            _refuse_foreign(conn)
        if version != CURRENT_VERSION:
            _upgrade(conn, version)
            conn.execute(f"PRAGMA user_version = {CURRENT_VERSION}")
        conn.execute("COMMIT")
    except BaseException as exc:
        rollback(conn)
        if isinstance(exc, DRIVER_ERRORS):
            raise storage_error(exc) from None
        raise


def _user_version(conn: sqlite3.Connection) -> int:
    """``PRAGMA user_version``; outside 0..10 raises before anything is written (§1 step 2)."""
    row = conn.execute("PRAGMA user_version").fetchone()
    version = int(row[0])
    if not 0 <= version <= CURRENT_VERSION:
        # The reference uses "newer" for negative versions too (§6).
        raise SchemaTooNew(
            f"database schema version {version} is newer than supported version {CURRENT_VERSION}"
        )
    return version


def _refuse_foreign(conn: sqlite3.Connection) -> None:
    """Refuse an unversioned file holding tables zkr never created (issue 18, fault 4).

    A ``user_version`` 0 file is either new, a pre-versioning zkr file (its tables are among
    :data:`zkr.store.schema.HISTORICAL_TABLES`) or another application's database, which zkr
    must leave byte-for-byte as it is rather than add its 22 tables to it. SQLite's own
    ``sqlite_*`` tables and zkr's rebuildable ``zkr_*`` tables are allowed.
    """
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name"
        )
    ]
    foreign = [
        name
        for name in names
        if name not in schema.HISTORICAL_TABLES and not name.startswith(("sqlite_", "zkr_"))
    ]
    if foreign:
        raise InvalidInput(
            f"not a zkr database: it holds tables zkr never creates ({', '.join(foreign)})"
        )


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """§4.1 driver order: v1 if V < 1, always the repair step, then every step N > V."""
    if version < 1:
        _step_v1(conn)
    _repair_v1_shape(conn)
    steps: tuple[tuple[int, Callable[[sqlite3.Connection], None]], ...] = (
        (2, _step_v2),
        (3, _step_v3),
        (4, _step_v4),
        (5, _step_v5),
        (6, _step_v6),
        (7, _step_v7),
        (8, _step_v8),
        (9, _step_v9),
        (10, _step_v10),
    )
    for number, step in steps:
        if version < number:
            step(conn)


# --------------------------------------------------------------------------- helpers


def _execute_all(conn: sqlite3.Connection, statements: Iterable[str]) -> None:
    for statement in statements:
        conn.execute(statement)


def _ensure_columns(conn: sqlite3.Connection, columns: Iterable[schema.Column]) -> None:
    """Append each column its table lacks (§4.1 "ensure column").

    An existing column's type and constraints are not checked. On a missing table ``table_info``
    is empty and the ALTER fails with SQLite's own ``no such table`` error.
    """
    for column in columns:
        present = {
            str(row[1]).lower() for row in conn.execute(f"PRAGMA table_info({column.table})")
        }
        if column.name.lower() not in present:
            conn.execute(column.add_sql())


def _validate(conn: sqlite3.Connection, checks: Iterable[tuple[str, str]]) -> None:
    """Run §4.3 checks in order; the first failing one aborts with its named message."""
    for name, query in checks:
        row = conn.execute(query).fetchone()
        if row is not None and row[0]:
            raise InvalidInput(f"legacy {name} is inconsistent with schema invariants")


# --------------------------------------------------------------------------- steps


def _step_v1(conn: sqlite3.Connection) -> None:
    """§4.2 v1: core tables in their original shape and the five scope indexes."""
    _execute_all(conn, schema.V1_TABLES)
    _execute_all(conn, schema.SCOPE_INDEXES)


def _repair_v1_shape(conn: sqlite3.Connection) -> None:
    """§4.2 repair step (every V in 0..9): appended v1 columns, then the ingestion-key index."""
    _ensure_columns(conn, schema.REPAIR_V1_COLUMNS)
    _execute_all(conn, schema.REPAIR_V1_INDEXES)


def _step_v2(conn: sqlite3.Connection) -> None:
    """§4.2 v2: evidence_locators."""
    _execute_all(conn, schema.V2_TABLES)


def _step_v3(conn: sqlite3.Connection) -> None:
    """§4.2 v3: re-create the scope indexes if missing."""
    _execute_all(conn, schema.V3_INDEXES)


def _step_v4(conn: sqlite3.Connection) -> None:
    """§4.2 v4: core validation (§4.3), then the core scope trigger pairs."""
    _validate(conn, schema.CORE_CHECKS)
    _execute_all(conn, schema.V4_TRIGGERS)


def _step_v5(conn: sqlite3.Connection) -> None:
    """§4.2 v5: claims.kind, profile_entries with its scope index, the profile trigger pair."""
    _ensure_columns(conn, schema.V5_COLUMNS)
    _execute_all(conn, schema.V5_TABLES)
    _execute_all(conn, schema.PROFILE_TRIGGERS)


def _step_v6(conn: sqlite3.Connection) -> None:
    """§4.2 v6: origin columns and backfill, profile rebuild and dedupe, then their guards."""
    _ensure_columns(conn, schema.V6_COLUMNS)  # 1
    _execute_all(conn, schema.V6_BACKFILL)  # 2, 3
    _validate(conn, (*schema.CORE_CHECKS, schema.ORIGIN_CHECK))  # 4
    _execute_all(conn, schema.DROP_PROFILE_TRIGGERS)  # 5
    row = conn.execute(schema.PROFILE_REFERENCE_BROKEN).fetchone()  # 6
    if row is not None and row[0]:
        raise InvalidInput(
            f"legacy {schema.PROFILE_CONTENT_CHECK[0]} is inconsistent with schema invariants"
        )
    _execute_all(conn, schema.V6_PROFILE_REBUILD)  # 7, 8
    _validate(conn, (*schema.CORE_CHECKS, schema.ORIGIN_CHECK, schema.PROFILE_CONTENT_CHECK))  # 9
    _execute_all(conn, schema.V6_FINISH)  # 10


def _step_v7(conn: sqlite3.Connection) -> None:
    """§4.2 v7: refuse empty/inverted claim intervals (no repair), then the interval pair."""
    row = conn.execute(schema.INVALID_INTERVAL_EXISTS).fetchone()
    if row is not None and row[0]:
        raise InvalidInput(INVALID_LEGACY_INTERVAL)
    _execute_all(conn, schema.V7_TRIGGERS)


def _step_v8(conn: sqlite3.Connection) -> None:
    """§4.2 v8: corrections and the commit feed tables, the correction pair, the bootstrap."""
    _execute_all(conn, schema.V8_TABLES)
    _execute_all(conn, schema.V8_TRIGGERS)
    _bootstrap_feed(conn)


def _step_v9(conn: sqlite3.Connection) -> None:
    """§4.2 v9: tier/processing_state again, outbox and operations, the legal-state pair."""
    _ensure_columns(conn, schema.V9_COLUMNS)
    _execute_all(conn, schema.V9_TABLES)
    _execute_all(conn, schema.V9_TRIGGERS)


def _step_v10(conn: sqlite3.Connection) -> None:
    """§4.2 v10: the apply ledger."""
    _execute_all(conn, schema.V10_TABLES)


# --------------------------------------------------------------------------- v8 bootstrap


def _bootstrap_feed(conn: sqlite3.Connection) -> None:
    """§4.4: one commit per legacy scope holding every authoritative row, if no commit exists.

    Rows are read back through the feed's record builders, which refuse non-canonical stored
    encodings; such a row fails the whole upgrade.
    """
    if conn.execute("SELECT EXISTS (SELECT 1 FROM memory_commits)").fetchone()[0]:
        return
    conn.execute(schema.BOOTSTRAP_COMMITS)
    commits = conn.execute(
        "SELECT sequence, tenant_id, person_id FROM memory_commits ORDER BY sequence"
    ).fetchall()
    for sequence, tenant_id, person_id in commits:
        try:
            payloads = [canonical(record) for record in _scope_records(conn, tenant_id, person_id)]
        except (ValueError, TypeError, LookupError) as exc:
            raise StorageError(f"legacy row cannot be decoded: {exc}") from None
        # Every record of the commit is sized before any of its events is written.
        if any(len(payload.encode("utf-8")) > EXPORT_RECORD_LIMIT for payload in payloads):
            raise InvalidInput(LEGACY_RECORD_TOO_LARGE)
        conn.executemany(
            "INSERT INTO memory_export_events (commit_sequence, event_index, payload)"
            " VALUES (?, ?, ?)",
            [(sequence, index, payload) for index, payload in enumerate(payloads)],
        )


def _ids(conn: sqlite3.Connection, table: str, tenant_id: str, person_id: str) -> list[Any]:
    rows = conn.execute(
        f"SELECT id FROM {table} WHERE tenant_id = ? AND person_id = ? ORDER BY id",
        (tenant_id, person_id),
    ).fetchall()
    return [row[0] for row in rows]


def _scope_records(
    conn: sqlite3.Connection, tenant_id: str, person_id: str
) -> Iterator[dict[str, Any]]:
    """§4.4 step 2 record order: sources, evidence, claims (each by id, tombstones and every
    status included), links by (claim_id, evidence_id), profile entries, daily reviews."""
    for source_id in _ids(conn, "sources", tenant_id, person_id):
        yield feed.source_record(conn, source_id)
    for evidence_id in _ids(conn, "evidence", tenant_id, person_id):
        yield feed.evidence_record(conn, evidence_id)
    for claim_id in _ids(conn, "claims", tenant_id, person_id):
        yield feed.claim_record(conn, claim_id)
    links = conn.execute(
        "SELECT claim_id, evidence_id FROM claim_evidence WHERE tenant_id = ? AND person_id = ?"
        " ORDER BY claim_id, evidence_id",
        (tenant_id, person_id),
    ).fetchall()
    for claim_id, evidence_id in links:
        yield feed.claim_evidence_record(conn, tenant_id, person_id, claim_id, evidence_id)
    for profile_id in _ids(conn, "profile_entries", tenant_id, person_id):
        yield feed.profile_record(conn, profile_id)
    for review_id in _ids(conn, "daily_reviews", tenant_id, person_id):
        yield feed.review_record(conn, review_id)
