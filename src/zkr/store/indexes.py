"""Indexes zkr adds beyond the reference's layout, for speed only.

spec/README.md allows extra indexes: the reference opens such files unchanged and they change no
stored data. They are created at open when missing (a reference-written v10 file gains them once;
a file written by this zkr already has them, so reopening it writes nothing). Each names the
query it serves.
"""

from __future__ import annotations

import sqlite3

EXTRA_INDEXES: dict[str, tuple[str, str]] = {
    # search/delete/materialise join claim links by evidence id; the reference's primary key
    # (tenant, person, claim, evidence) cannot serve that (spec/README.md, "Extra indexes").
    "zkr_claim_evidence_by_evidence": (
        "claim_evidence",
        "CREATE INDEX IF NOT EXISTS zkr_claim_evidence_by_evidence"
        " ON claim_evidence (evidence_id, relation)",
    ),
    # embed/projections/repair find the lane (spec/retrieval.md §9.3) by seeking the distinct
    # (dimension, normalization, distance) of a (scope, model, version) and then its newest
    # rows, so their cost does not grow with the lane (the reference re-validates every row).
    "zkr_embeddings_config": (
        "embeddings",
        "CREATE INDEX IF NOT EXISTS zkr_embeddings_config ON embeddings"
        " (tenant_id, person_id, model, version, dimension, normalization, distance, created_at)",
    ),
    # the dense scan (store/dense.py) reads a lane's rows per target kind in target order,
    # with every small column it checks, without reading any row's vector.
    "zkr_embeddings_rows": (
        "embeddings",
        "CREATE INDEX IF NOT EXISTS zkr_embeddings_rows ON embeddings"
        " (tenant_id, person_id, model, version, target_kind, target_id, dimension,"
        " normalization, distance, target_revision, input_hash, created_at)",
    ),
    # "does this source have live evidence" (the dense lane's §5.4 mapping, and any query that
    # joins a source's evidence with deleted_at IS NULL) answered from the index alone.
    "zkr_evidence_by_source_live": (
        "evidence",
        "CREATE INDEX IF NOT EXISTS zkr_evidence_by_source_live"
        " ON evidence (tenant_id, person_id, source_id, deleted_at)",
    ),
    # browse (store/inspect.py) reads a scope's sources and claims newest recorded first, from
    # a cursor, a page at a time: each list is one index range, no sort of the scope.
    "zkr_sources_recorded": (
        "sources",
        "CREATE INDEX IF NOT EXISTS zkr_sources_recorded"
        " ON sources (tenant_id, person_id, recorded_at, id)",
    ),
    "zkr_claims_recorded": (
        "claims",
        "CREATE INDEX IF NOT EXISTS zkr_claims_recorded"
        " ON claims (tenant_id, person_id, recorded_from, id)",
    ),
    # correct/delete remove the profile entries backed by given claims.
    "zkr_profile_entries_by_claim": (
        "profile_entries",
        "CREATE INDEX IF NOT EXISTS zkr_profile_entries_by_claim ON profile_entries (claim_id)",
    ),
}


def ensure_extra_indexes(conn: sqlite3.Connection) -> None:
    """Create any missing extra index in one transaction (no write when all exist).

    Tables missing from odd legacy files are skipped rather than failing the open.
    """
    present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    missing = [
        sql
        for name, (table, sql) in EXTRA_INDEXES.items()
        if name not in present and table in present
    ]
    if not missing:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql in missing:
            conn.execute(sql)
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if "readonly" in str(exc):
            return  # they only speed queries up: a file zkr may not write is read without them
        raise
    conn.execute("COMMIT")
