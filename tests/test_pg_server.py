"""The throwaway PostgreSQL of the test session (tests/pg_server.py) is a working server with a
fresh database per test."""

from __future__ import annotations

from tests.pg_server import PgServer, database_of


def test_each_test_gets_its_own_empty_database(pg_server: PgServer, pg_dsn: str) -> None:
    name = database_of(pg_dsn)
    assert name.startswith("zkr_each_test_gets")
    listed = {row[0] for row in pg_server.execute("SELECT datname FROM pg_database")}
    assert name in listed
    tables = pg_server.execute(
        "SELECT count(*) FROM pg_tables"
        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
        database=name,
    )
    assert tables == [(0,)]
    assert pg_server.execute("SHOW server_encoding", database=name) == [("UTF8",)]
