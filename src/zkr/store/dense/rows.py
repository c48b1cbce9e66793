"""The SQL by which the dense lane's cache reads a lane's rows (spec/retrieval.md §5.2, §5.4,
§9.1): per target kind, every row's small columns (never the vector text) with its target's
revision, text and mappability; the same restricted to some targets (a patch); the captures a
patch widens its targets to; the targets of written rows."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from zkr.store.driver import is_postgres
from zkr.store.lanesql import (
    KINDS as _KINDS,
    LANE_WHERE as _LANE,
    PATCH_SQL as PATCH_SQL,
    ROWS_SQL as ROWS_SQL,
)


def schema_version(conn: sqlite3.Connection) -> int:
    """``PRAGMA schema_version`` (a VACUUM, which may renumber rowids, moves it)."""
    return int(conn.execute("PRAGMA schema_version").fetchone()[0])


# A first refresh in bulk (zkr.store.dense.bulk): per target kind, the lane's rows in §5.2
# order folded into a few values, so that no Python object is made per row: rowids, target
# ids, a digit per row for "current" (§9.1: the target is live with the stored revision and
# the SHA-256 of its text is the row's input_hash, by the connection function
# zkr_input_hash_ok) and one for mappable, evidence rows' source ids, and a count of rows the
# bulk path does not handle (a cell of an unusual type, a row of the current second: the
# row-by-row refresh takes those lanes).
BULK_SQL = tuple(
    (
        kind,
        f"""
SELECT count(*), json_group_array(rowid), json_group_array(target_id), group_concat(ok, ''),
  group_concat(mappable, ''), json_group_array(capture), total(unusual)
FROM (
  SELECT em.rowid AS rowid, em.target_kind AS target_kind, em.target_id AS target_id,
    em.dimension AS dimension, em.normalization AS normalization, em.distance AS distance,
    em.target_revision AS target_revision, em.input_hash AS input_hash,
    em.created_at AS created_at,
    CASE WHEN {revision} IS NULL OR em.target_revision IS NOT {revision} THEN 0
      ELSE zkr_input_hash_ok({text}, em.input_hash) END AS ok,
    {mappable} AS mappable, {capture} AS capture,
    typeof(em.target_kind) != 'text' OR typeof(em.target_id) != 'text'
      OR typeof(em.dimension) != 'integer' OR typeof(em.normalization) != 'text'
      OR typeof(em.distance) != 'text' OR typeof(em.input_hash) != 'text'
      OR typeof(em.target_revision) NOT IN ('integer', 'null')
      OR typeof(em.created_at) != 'integer' OR em.created_at >= :now AS unusual
  FROM embeddings em
  LEFT JOIN {target}
  WHERE {_LANE} AND em.target_kind = '{kind}'
  ORDER BY em.target_id
)""",
    )
    for kind, target, revision, text, mappable, capture in _KINDS
)

# Every row's small columns as JSON, per target kind in §5.2 order with the rowids (to check
# that order), for the vector file's rows (a bulk refresh that read vectors from JSON text):
# :n rows after the target id :after at a time, the last id to go on from.
BULK_META_SQL = tuple(
    (
        kind,
        f"""
SELECT count(*), max(target_id), json_group_array(rowid),
  CAST(json_group_array(json_array(target_kind, target_id, dimension, normalization, distance,
    target_revision, input_hash, created_at)) AS BLOB)
FROM (
  SELECT em.rowid AS rowid, em.target_kind AS target_kind, em.target_id AS target_id,
    em.dimension AS dimension, em.normalization AS normalization, em.distance AS distance,
    em.target_revision AS target_revision, em.input_hash AS input_hash,
    em.created_at AS created_at
  FROM embeddings em
  WHERE {_LANE} AND em.target_kind = '{kind}' AND em.target_id > :after
  ORDER BY em.target_id
  LIMIT :n
)""",
    )
    for kind, *_ in _KINDS
)

# The lane's distinct configuration cells with their types (the bulk path takes lanes of one
# configuration; index seeks on zkr_embeddings_config).
BULK_CONFIGS_SQL = (
    "SELECT DISTINCT dimension, typeof(dimension), normalization, typeof(normalization),"
    " distance, typeof(distance) FROM embeddings em WHERE " + _LANE
)

# zkr's float32 copies of the lane's rows, checked against their rows in SQL as
# zkr.store.changes.copies' callers check them (the same kind, target id and created_at).
BULK_COPIES_SQL = (
    "SELECT em.rowid, v.vector FROM embeddings em"
    " JOIN zkr_vectors v ON v.row = em.rowid AND v.lane = :lane"
    " AND v.kind = em.target_kind AND v.target_id = em.target_id"
    " AND v.created_at = em.created_at"
    " AND typeof(v.vector) = 'blob' AND length(v.vector) = :bytes"
    f" WHERE {_LANE}"
)


# A patch re-reads whole captures (spec/retrieval.md §14 #12 folding looks at every Evidence
# target of a source and at the Source target): the given ids, the sources of those that are
# evidence of the scope, and every evidence of the scope of all those sources.
CAPTURES_SQL = """
WITH ids(id) AS (SELECT value FROM json_each(:ids)),
caps(id) AS (
  SELECT id FROM ids
  UNION SELECT e.source_id FROM ids CROSS JOIN evidence e
    ON e.id = ids.id AND e.tenant_id = :t AND e.person_id = :p
)
SELECT id FROM caps
UNION SELECT e.id FROM caps CROSS JOIN evidence e
  ON e.tenant_id = :t AND e.person_id = :p AND e.source_id = caps.id
"""


PG_VERSIONS_SQL = """
SELECT rowid, CAST(xmin AS TEXT) FROM embeddings
WHERE tenant_id = ? AND person_id = ? AND model = ? AND version = ?"""
"""PostgreSQL only: each lane row's tuple version."""

PG_MARK_SQL = "SELECT mark FROM zkr_lane_marks WHERE tenant_id = ? AND person_id = ?"
"""PostgreSQL only: the person's lane mark (``zkr_lane_marks``, :mod:`zkr.store.pg.schema`)."""


def fetch_all(conn: sqlite3.Connection, sql: str, params: Any) -> Iterable[tuple[Any, ...]]:
    """The rows of a query reading the whole lane: on PostgreSQL packed into one JSON value
    (:meth:`zkr.store.pg.adapter.PgConnection.execute_packed`; psycopg would load thousands
    of values one at a time), on SQLite as they come (one at a time: 100k rows with their
    target texts held at once would add tens of MB to a first call's peak)."""
    if is_postgres(conn):
        rows: list[tuple[Any, ...]] = conn.execute_packed(sql, params).fetchall()  # type: ignore[attr-defined]
        return rows
    return conn.execute(sql, params)
