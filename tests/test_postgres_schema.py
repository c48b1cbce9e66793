"""The PostgreSQL layout can be distributed by person (issue 16 item 2; docs/postgres.md).

Read from the server's catalogue after zkr created a store: a table distributed by
``person_id`` (Citus ``create_distributed_table``) needs every primary key and unique
constraint/index to contain the distribution column, and foreign keys between distributed
tables to include it. zkr's keys go further and lead with ``(tenant_id, person_id)``, so every
index a command uses is a per-person range. Tables without ``person_id`` hold store-wide
settings and become reference tables; docs/postgres.md names every table with its call, and
this test keeps the document and the layout in step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.pg_server import with_schema
from zkr import MemoryDb
from zkr.store.pg.schema import ID_INDEXED

SCOPE = ["tenant_id", "person_id"]
DOC = Path(__file__).resolve().parent.parent / "docs" / "postgres.md"
SCHEMA = "zkr_layout"


def catalogue(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [tuple(row) for row in conn.execute(sql, {"schema": SCHEMA}).fetchall()]


def layout(pg_dsn: str) -> dict[str, Any]:
    """Tables with their columns, indexes (name, unique, method, columns) and foreign keys."""
    dsn = with_schema(pg_dsn, SCHEMA)
    with MemoryDb.open(dsn):  # creates the store's layout
        pass
    columns: dict[str, list[str]] = {}
    for table, column in catalogue(
        dsn,
        "SELECT c.relname, a.attname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        " WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') ORDER BY c.relname, a.attnum",
    ):
        columns.setdefault(table, []).append(column)
    indexes = catalogue(
        dsn,
        "SELECT t.relname, ic.relname, x.indisunique, x.indisprimary, am.amname,"
        " array(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(attnum, pos)"
        "       JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum"
        "       ORDER BY k.pos)"
        " FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid"
        " JOIN pg_class ic ON ic.oid = x.indexrelid JOIN pg_am am ON am.oid = ic.relam"
        " JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = %(schema)s",
    )
    foreign = catalogue(
        dsn,
        "SELECT c.conname, c.conrelid::regclass::text, c.confrelid::regclass::text,"
        " array(SELECT a.attname FROM unnest(c.conkey) k JOIN pg_attribute a"
        "       ON a.attrelid = c.conrelid AND a.attnum = k),"
        " array(SELECT a.attname FROM unnest(c.confkey) k JOIN pg_attribute a"
        "       ON a.attrelid = c.confrelid AND a.attnum = k)"
        " FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace"
        " WHERE n.nspname = %(schema)s AND c.contype = 'f'",
    )
    return {"columns": columns, "indexes": indexes, "foreign": foreign}


def documented() -> tuple[set[str], set[str]]:
    """(distributed, reference) tables as docs/postgres.md's Citus calls name them."""
    text = DOC.read_text(encoding="utf-8")
    distributed = set(
        re.findall(r"create_distributed_table\('(\w+)', 'person_id'", text, flags=re.IGNORECASE)
    )
    reference = set(re.findall(r"create_reference_table\('(\w+)'\)", text, flags=re.IGNORECASE))
    return distributed, reference


ID_INDEX_NAMES = {f"zkr_{table}_id" for table in ID_INDEXED}


def test_every_key_of_a_person_table_leads_with_the_scope(pg_dsn: str) -> None:
    found = layout(pg_dsn)
    columns: dict[str, list[str]] = found["columns"]
    person_tables = {t for t, cols in columns.items() if "person_id" in cols}
    assert {"sources", "claims", "memory_commits", "memory_export_events"} <= person_tables

    keyed = set()
    for table, index, unique, primary, method, cols in found["indexes"]:
        if table not in person_tables:
            continue
        where = f"{table}.{index} ({method}: {', '.join(cols)})"
        if primary:
            keyed.add(table)
        if index in ID_INDEX_NAMES:
            # apply's cross-person id check (pg/schema.py ID_INDEX_DDL): not unique, so a
            # distributed table may hold it; each shard answers from its own index
            assert not unique and list(cols) == ["id"], where
        elif unique or primary or method == "btree":
            # a unique key must contain the distribution column; ours also lead with the
            # scope, so every lookup and range scan stays inside one person's rows
            assert list(cols[:2]) == SCOPE, f"{where} does not lead with (tenant_id, person_id)"
        else:  # GIN over a document's terms: searched within one person's rows on each shard
            assert method == "gin", f"{where}: unexpected index method"
    # source_fts keeps the spec's full-text rows without a key (docs/postgres.md: give it a
    # replica identity before logical replication); every other table has one
    unkeyed = person_tables - keyed
    assert unkeyed == {"source_fts"}, f"without a primary key: {unkeyed}"

    for name, table, referenced, cols, ref_cols in found["foreign"]:
        assert "person_id" in cols and "person_id" in ref_cols, (name, table, referenced)
        assert cols.index("person_id") == ref_cols.index("person_id"), (name, cols, ref_cols)


def test_the_distribution_document_names_every_table(pg_dsn: str) -> None:
    columns: dict[str, list[str]] = layout(pg_dsn)["columns"]
    person_tables = {t for t, cols in columns.items() if "person_id" in cols}
    distributed, reference = documented()
    assert distributed == person_tables, (
        "docs/postgres.md's create_distributed_table calls do not match the person tables:"
        f" missing {sorted(person_tables - distributed)},"
        f" extra {sorted(distributed - person_tables)}"
    )
    assert reference == set(columns) - person_tables, (
        "docs/postgres.md's create_reference_table calls do not match the store-wide tables"
    )


def test_the_layout_names_its_unscoped_tables(pg_dsn: str) -> None:
    """``UNSCOPED_TABLES`` (the tables whose upserts on ``id`` the adapter leaves unscoped) is
    exactly the catalogue's tables without ``person_id``."""
    from zkr.store.pg.schema import UNSCOPED_TABLES

    columns: dict[str, list[str]] = layout(pg_dsn)["columns"]
    assert {t for t, cols in columns.items() if "person_id" not in cols} == UNSCOPED_TABLES


def test_an_upsert_on_id_is_scoped_except_into_an_unscoped_table() -> None:
    pytest.importorskip("psycopg")  # the adapter's module (the postgres extra)
    from zkr.store.pg.adapter import translate

    scoped = translate(
        "INSERT INTO profile_entries (id, tenant_id, person_id, key) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET key = excluded.key"
    )
    assert scoped.endswith(
        "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, person_id, id)"
        " DO UPDATE SET key = excluded.key"
    )
    store_wide = translate(
        "INSERT INTO zkr_embedder (id, model) VALUES (1, ?)\n"
        "ON CONFLICT (id) DO UPDATE SET model = excluded.model"
    )
    assert "ON CONFLICT (id) DO UPDATE" in store_wide


def test_the_cross_person_id_check_reads_an_index_not_the_table(pg_dsn: str) -> None:
    """apply asks every scope for a batch's new ids (pg/schema.py ID_INDEX_DDL): each of those
    questions must be answerable from an index, or apply slows with the store's size."""
    import psycopg

    layout(pg_dsn)
    dsn = with_schema(pg_dsn, SCHEMA)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET enable_seqscan = off")  # tiny tables: ask whether an index serves
        for table in ID_INDEXED:
            for sql in (
                f"SELECT id FROM {table} WHERE id IN ('a', 'b')",
                f"SELECT 1 FROM {table} WHERE id = 'a' AND NOT (tenant_id = 't' AND"
                " person_id = 'p')",
            ):
                plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql).fetchall())
                assert f"zkr_{table}_id" in plan, (sql, plan)
