"""``zkr`` on PostgreSQL behind the shared runners' ``--db PATH`` argv.

    ZKR_PG_DSN=postgresql://USER@HOST:PORT/DATABASE python tests/pg_zkr.py --db PATH COMMAND

The conformance runner and the sync checker call ``PREFIX --db <tmp>/<name>.db COMMAND``; with
``PREFIX = python tests/pg_zkr.py`` every distinct ``PATH`` becomes a store of its own: the
schema ``s<sha1 of the absolute path, 24 hex>`` in the database ``ZKR_PG_DSN`` names (a zkr
store on PostgreSQL is one schema, the first of the session's ``search_path``, created on first
use: docs/postgres.md). The call runs as ``zkr --db 'postgresql://…?options=-csearch_path%3D
<schema>' COMMAND``, in this process (the same ``zkr.entry.main`` as the ``zkr`` script; no
second interpreter start). Any other argv (usage errors, ``--help``) is passed to zkr untouched,
so those cases behave exactly as on SQLite. Drop the database afterwards.

The sync checker also reads two feed tables of the replica *file* with ``sqlite3`` (the apply
ledger and the stored payload bytes). After every successful ``apply``, this wrapper therefore
copies those rows, as PostgreSQL stores them, into a SQLite file at ``PATH``
(``memory_applied_records``, ``memory_commits``, ``memory_export_events``; the columns the
checker reads, values unchanged), so the checker compares what PostgreSQL holds.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.pg_server` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pg_server import ENV_DSN, with_schema

# The columns sync/check reads from the replica file (spec/storage.md feed tables).
MIRRORED = {
    "memory_applied_records": (
        *("tenant_id", "person_id", "record_kind", "record_id", "payload_hash"),
    ),
    "memory_commits": ("sequence", "tenant_id", "person_id"),
    "memory_export_events": ("commit_sequence", "event_index", "payload"),
}


def store_dsn(database_dsn: str, path: str) -> str:
    """The DSN of the store standing for the runner's file ``path``: a schema of its own."""
    schema = "s" + hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:24]
    return with_schema(database_dsn, schema)


def mirror_feed(dsn: str, path: str) -> None:
    """Copy the feed tables' checked columns from PostgreSQL into the SQLite file ``path``."""
    import psycopg

    with psycopg.connect(dsn) as source:
        rows = {
            table: source.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            for table, columns in MIRRORED.items()
        }
    target = sqlite3.connect(path)
    try:
        with target:
            for table, columns in MIRRORED.items():
                target.execute(f"DROP TABLE IF EXISTS {table}")
                target.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
                marks = ", ".join("?" * len(columns))
                target.executemany(f"INSERT INTO {table} VALUES ({marks})", rows[table])
    finally:
        target.close()


def main() -> int:
    argv = sys.argv[1:]
    server = os.environ.get(ENV_DSN, "").strip()
    if not server:
        sys.stderr.write(f'{{"error": "pg_zkr.py needs {ENV_DSN}=postgresql://…"}}\n')
        return 2
    path = None
    if len(argv) >= 2 and argv[0] == "--db" and not argv[1].startswith("postgres"):
        path = argv[1]
        argv = ["--db", store_dsn(server, path), *argv[2:]]
    sys.argv = [sys.argv[0], *argv]
    from zkr.entry import main as zkr_main

    code = zkr_main()
    if code == 0 and path is not None and argv[2:3] == ["apply"]:
        mirror_feed(argv[1], path)
    return code


if __name__ == "__main__":
    sys.exit(main())
