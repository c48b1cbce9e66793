"""The DDL of every historical schema step, as data for :mod:`zkr.store.migrations`.

Each constant is the SQL one upgrade step of spec/storage.md §4.2 runs, written so that a
brand-new file that goes through all of them ends with exactly the v10 layout of §2 (tables,
column order, declared types, defaults, indexes and triggers). Every ``CREATE`` says ``IF NOT
EXISTS``: a table that an older release already created keeps its own DDL (§4.1), and columns a
later step needs are appended through :data:`Column` entries ("ensure column").

The statements are executed one at a time inside the migration's single ``BEGIN IMMEDIATE``
transaction (never through ``executescript``, which may commit implicitly, §1).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    """An "ensure column" rule (§4.1): append ``name declaration`` to ``table`` when missing."""

    table: str
    name: str
    declaration: str

    def add_sql(self) -> str:
        return f"ALTER TABLE {self.table} ADD COLUMN {self.name} {self.declaration}"


# Every table any zkr release created (spec/storage.md §2.1, §4.2 v1-v10), with the FTS5 shadow
# tables of source_fts. An unversioned file holding any other table is not a zkr file.
HISTORICAL_TABLES: frozenset[str] = frozenset(
    {
        "sources",
        "source_fts",
        "source_fts_data",
        "source_fts_idx",
        "source_fts_content",
        "source_fts_docsize",
        "source_fts_config",
        "evidence",
        "claims",
        "claim_evidence",
        "daily_reviews",
        "embeddings",
        "evidence_locators",
        "profile_entries",
        "corrections",
        "memory_commits",
        "memory_export_events",
        "memory_repair_outbox",
        "memory_operations",
        "memory_applied_records",
    }
)


# --------------------------------------------------------------------------- trigger helpers


def _absent(table: str, id_expr: str, extra: str = "") -> str:
    """SQL condition: no row of ``table`` with id ``id_expr`` in NEW's scope (§3 "in scope")."""
    return (
        f"NOT EXISTS (SELECT 1 FROM {table} AS t WHERE t.id = {id_expr}"
        f" AND t.tenant_id = NEW.tenant_id AND t.person_id = NEW.person_id{extra})"
    )


def _trigger_pair(
    name: str, table: str, update_of: str, condition: str, message: str
) -> tuple[str, str]:
    """``{name}_insert`` and ``{name}_update``: BEFORE … FOR EACH ROW, RAISE(ABORT, message) (§3).

    The update trigger fires only when one of ``update_of`` appears in the SET list.
    """
    body = f"FOR EACH ROW WHEN {condition}\nBEGIN SELECT RAISE(ABORT, '{message}'); END"
    create = "CREATE TRIGGER IF NOT EXISTS"
    return (
        f"{create} {name}_insert BEFORE INSERT ON {table}\n{body}",
        f"{create} {name}_update BEFORE UPDATE OF {update_of} ON {table}\n{body}",
    )


# --------------------------------------------------------------------------- v1: core tables

# §4.2 v1: the core tables in their ORIGINAL shape: sources without ingestion_key and the
# origin columns, claims without tier/processing_state/kind, embeddings without
# target_revision/created_at. Those columns are appended later (repair step, v5, v6), which
# gives the §2.1 column order of a fresh file.
V1_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS sources (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    captured_at INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    deleted_at INTEGER
)""",
    # §2.1: a normal FTS5 table, first three columns UNINDEXED, default unicode61 tokenizer.
    """CREATE VIRTUAL TABLE IF NOT EXISTS source_fts USING fts5(
    source_id UNINDEXED,
    tenant_id UNINDEXED,
    person_id UNINDEXED,
    content,
    tokenize = 'unicode61'
)""",
    """CREATE TABLE IF NOT EXISTS evidence (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    source_id TEXT NOT NULL REFERENCES sources (id),
    source_revision INTEGER NOT NULL,
    quote TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    deleted_at INTEGER
)""",
    """CREATE TABLE IF NOT EXISTS claims (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    predicate TEXT NOT NULL,
    value TEXT NOT NULL,
    valid_from INTEGER NOT NULL,
    valid_until INTEGER,
    recorded_from INTEGER NOT NULL,
    recorded_until INTEGER,
    status TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS claim_evidence (
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    claim_id TEXT NOT NULL REFERENCES claims (id),
    evidence_id TEXT NOT NULL REFERENCES evidence (id),
    relation TEXT NOT NULL,
    confidence_basis_points INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, person_id, claim_id, evidence_id)
)""",
    """CREATE TABLE IF NOT EXISTS daily_reviews (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    day TEXT NOT NULL,
    summary TEXT NOT NULL,
    evidence_ids TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS embeddings (
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    model TEXT NOT NULL,
    version TEXT NOT NULL,
    dimension INTEGER NOT NULL,
    input_hash TEXT NOT NULL,
    normalization TEXT NOT NULL,
    distance TEXT NOT NULL,
    vector TEXT NOT NULL,
    PRIMARY KEY (tenant_id, person_id, target_kind, target_id, model, version)
)""",
)

# §2.2 / §4.2 v1 and v3: the five scope indexes (v3 re-creates them when missing).
SCOPE_INDEXES: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS sources_scope ON sources (tenant_id, person_id, id)",
    "CREATE INDEX IF NOT EXISTS evidence_scope ON evidence (tenant_id, person_id, source_id)",
    "CREATE INDEX IF NOT EXISTS claims_scope ON claims (tenant_id, person_id, status)",
    "CREATE INDEX IF NOT EXISTS reviews_scope ON daily_reviews (tenant_id, person_id, day)",
    "CREATE INDEX IF NOT EXISTS embeddings_scope"
    " ON embeddings (tenant_id, person_id, target_kind, target_id)",
)

# --------------------------------------------------------------------------- repair v1 shape

CLAIM_TIER_COLUMNS: tuple[Column, ...] = (
    Column("claims", "tier", "TEXT NOT NULL DEFAULT 'long_term'"),
    Column("claims", "processing_state", "TEXT NOT NULL DEFAULT 'processed'"),
)

# §4.2 "Repair v1 shape" (runs for every starting version 0..9): legacy embeddings get
# target_revision 0 and created_at 0, so they report as stale.
REPAIR_V1_COLUMNS: tuple[Column, ...] = (
    Column("sources", "ingestion_key", "TEXT"),
    *CLAIM_TIER_COLUMNS,
    Column("embeddings", "target_revision", "INTEGER NOT NULL DEFAULT 0"),
    Column("embeddings", "created_at", "INTEGER NOT NULL DEFAULT 0"),
)

# §2.2: idempotent `remember` relies on this partial unique index. Creating it on a file with
# duplicate keys in one scope fails with SQLite's own UNIQUE error (§4.2, §4.5).
REPAIR_V1_INDEXES: tuple[str, ...] = (
    "CREATE UNIQUE INDEX IF NOT EXISTS sources_ingestion_key"
    " ON sources (tenant_id, person_id, ingestion_key) WHERE ingestion_key IS NOT NULL",
)

# --------------------------------------------------------------------------- v2: locators

# §2.1 / §4.2 v2: at most one transcript locator per evidence row.
V2_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS evidence_locators (
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    evidence_id TEXT NOT NULL REFERENCES evidence (id),
    device_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    stream_id TEXT NOT NULL,
    segment_id TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, person_id, evidence_id)
)""",
)

# --------------------------------------------------------------------------- v3: indexes

# §4.2 v3: re-create the five scope indexes if they are missing (a no-op after v1).
V3_INDEXES: tuple[str, ...] = SCOPE_INDEXES

# --------------------------------------------------------------------------- v4: scope triggers

_EMBEDDING_TARGET_MISSING = " OR ".join(
    f"(NEW.target_kind = '{kind}' AND {_absent(table, 'NEW.target_id')})"
    for kind, table in (("source", "sources"), ("evidence", "evidence"), ("claim", "claims"))
)

# CASE keeps json_each away from invalid JSON (SQLite does not promise OR short-circuiting).
_REVIEW_EVIDENCE_MISSING = (
    "CASE WHEN json_valid(NEW.evidence_ids) THEN EXISTS (SELECT 1 FROM json_each(NEW.evidence_ids)"
    f" AS cited WHERE {_absent('evidence', 'cited.value')}) ELSE 1 END"
)

# §3 (installed by §4.2 v4): the evidence, locator, claim-evidence, embedding and review pairs.
V4_TRIGGERS: tuple[str, ...] = (
    *_trigger_pair(
        "evidence_scope",
        "evidence",
        "source_id, tenant_id, person_id",
        _absent("sources", "NEW.source_id"),
        "evidence source scope mismatch",
    ),
    *_trigger_pair(
        "locator_scope",
        "evidence_locators",
        "evidence_id, tenant_id, person_id",
        _absent("evidence", "NEW.evidence_id"),
        "evidence locator scope mismatch",
    ),
    *_trigger_pair(
        "claim_evidence_scope",
        "claim_evidence",
        "claim_id, evidence_id, tenant_id, person_id",
        f"{_absent('claims', 'NEW.claim_id')} OR {_absent('evidence', 'NEW.evidence_id')}",
        "claim evidence scope mismatch",
    ),
    *_trigger_pair(
        "embedding_scope",
        "embeddings",
        "target_kind, target_id, tenant_id, person_id",
        f"NEW.target_kind NOT IN ('source', 'evidence', 'claim') OR {_EMBEDDING_TARGET_MISSING}",
        "embedding target scope mismatch",
    ),
    *_trigger_pair(
        "review_scope",
        "daily_reviews",
        "tenant_id, person_id, evidence_ids",
        _REVIEW_EVIDENCE_MISSING,
        "daily review evidence scope mismatch",
    ),
)

# --------------------------------------------------------------------------- v5: profiles

# §4.2 v5: claims.kind, stored bare (§2.3).
V5_COLUMNS: tuple[Column, ...] = (Column("claims", "kind", "TEXT NOT NULL DEFAULT 'fact'"),)

# §2.1 / §4.2 v5.
V5_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS profile_entries (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    stability TEXT NOT NULL,
    claim_id TEXT NOT NULL REFERENCES claims (id),
    recorded_at INTEGER NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS profile_entries_scope"
    " ON profile_entries (tenant_id, person_id, recorded_at)",
)

# §3 profile pair: the claim must be in scope, a profile_fact, with predicate = key and
# value = value (status is not checked).
PROFILE_TRIGGERS: tuple[str, ...] = _trigger_pair(
    "profile_entry_scope",
    "profile_entries",
    "key, value, claim_id, tenant_id, person_id",
    _absent(
        "claims",
        "NEW.claim_id",
        " AND t.kind = 'profile_fact' AND t.predicate = NEW.key AND t.value = NEW.value",
    ),
    "profile entry claim scope mismatch",
)

# --------------------------------------------------------------------------- v6: origins

# §4.2 v6 step 1.
V6_COLUMNS: tuple[Column, ...] = (
    Column("sources", "origin_evidence_id", "TEXT"),
    Column("sources", "origin_claim_id", "TEXT"),
)

# §4.2 v6 steps 2 and 3: backfill origins where NULL, only from an unambiguous single match
# (tombstoned evidence counts; only the JSON-quoted "supports" relation; claim status ignored).
# Written as UPDATE … FROM over a grouped subquery so that files without an index on
# claim_evidence(evidence_id) (or without evidence_scope) are not scanned once per source.
V6_BACKFILL: tuple[str, ...] = (
    """UPDATE sources SET origin_evidence_id = single.id
FROM (
    SELECT tenant_id, person_id, source_id, min(id) AS id FROM evidence
    GROUP BY tenant_id, person_id, source_id HAVING count(*) = 1
) AS single
WHERE sources.origin_evidence_id IS NULL
  AND single.source_id = sources.id
  AND single.tenant_id = sources.tenant_id
  AND single.person_id = sources.person_id""",
    """UPDATE sources SET origin_claim_id = single.claim_id
FROM (
    SELECT tenant_id, person_id, evidence_id, min(claim_id) AS claim_id FROM claim_evidence
    WHERE relation = '"supports"'
    GROUP BY tenant_id, person_id, evidence_id HAVING count(*) = 1
) AS single
WHERE sources.origin_claim_id IS NULL
  AND sources.origin_evidence_id IS NOT NULL
  AND single.evidence_id = sources.origin_evidence_id
  AND single.tenant_id = sources.tenant_id
  AND single.person_id = sources.person_id""",
)

# §4.2 v6 step 5: drop the profile pair so the rebuild is not blocked.
DROP_PROFILE_TRIGGERS: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS profile_entry_scope_insert",
    "DROP TRIGGER IF EXISTS profile_entry_scope_update",
)

_ENTRY_CLAIM = (
    "FROM claims AS c WHERE c.id = profile_entries.claim_id"
    " AND c.tenant_id = profile_entries.tenant_id AND c.person_id = profile_entries.person_id"
)

# §4.2 v6 step 6: every entry must cite a profile_fact claim in its scope.
PROFILE_REFERENCE_BROKEN = (
    f"SELECT EXISTS (SELECT 1 FROM profile_entries WHERE NOT EXISTS (SELECT 1 {_ENTRY_CLAIM}"
    " AND c.kind = 'profile_fact'))"
)

# §4.2 v6 steps 7 and 8: key/value from the claim (stability, recorded_at, id kept); then keep
# only the greatest (recorded_at, id) per (scope, key), whatever its claim's status.
V6_PROFILE_REBUILD: tuple[str, ...] = (
    f"UPDATE profile_entries SET key = (SELECT c.predicate {_ENTRY_CLAIM}),"
    f" value = (SELECT c.value {_ENTRY_CLAIM})",
    """DELETE FROM profile_entries WHERE EXISTS (
    SELECT 1 FROM profile_entries AS newer
    WHERE newer.tenant_id = profile_entries.tenant_id
      AND newer.person_id = profile_entries.person_id
      AND newer.key = profile_entries.key
      AND (newer.recorded_at > profile_entries.recorded_at
           OR (newer.recorded_at = profile_entries.recorded_at AND newer.id > profile_entries.id))
)""",
)

# §3 origin pair (installed by §4.2 v6 step 10).
ORIGIN_TRIGGERS: tuple[str, ...] = _trigger_pair(
    "source_origin_scope",
    "sources",
    "origin_evidence_id, origin_claim_id, tenant_id, person_id",
    f"(NEW.origin_evidence_id IS NOT NULL AND {_absent('evidence', 'NEW.origin_evidence_id')})"
    f" OR (NEW.origin_claim_id IS NOT NULL AND {_absent('claims', 'NEW.origin_claim_id')})",
    "source origin scope mismatch",
)

# §4.2 v6 step 10: one current entry per key (store_profile upserts on it), origin pair,
# profile pair reinstalled.
V6_FINISH: tuple[str, ...] = (
    "CREATE UNIQUE INDEX IF NOT EXISTS profile_entries_current"
    " ON profile_entries (tenant_id, person_id, key)",
    *ORIGIN_TRIGGERS,
    *PROFILE_TRIGGERS,
)

# --------------------------------------------------------------------------- v7: intervals

_EMPTY_INTERVAL = (
    "(NEW.valid_until IS NOT NULL AND NEW.valid_until <= NEW.valid_from)"
    " OR (NEW.recorded_until IS NOT NULL AND NEW.recorded_until <= NEW.recorded_from)"
)

# §4.2 v7: any legacy claim with an empty or inverted half-open interval blocks the upgrade.
INVALID_INTERVAL_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM claims"
    " WHERE (valid_until IS NOT NULL AND valid_until <= valid_from)"
    " OR (recorded_until IS NOT NULL AND recorded_until <= recorded_from))"
)

# §3 claim_time_interval pair.
V7_TRIGGERS: tuple[str, ...] = _trigger_pair(
    "claim_time_interval",
    "claims",
    "valid_from, valid_until, recorded_from, recorded_until",
    _EMPTY_INTERVAL,
    "invalid claim half-open time interval",
)

# --------------------------------------------------------------------------- v8: feed tables

# §2.1 / §4.2 v8 (sync.md §2): corrections, the AUTOINCREMENT commit table (one global
# sequence, never reused) and its events, which cascade away with their commit.
V8_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS corrections (
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    superseded_claim_id TEXT NOT NULL REFERENCES claims (id),
    claim_id TEXT NOT NULL REFERENCES claims (id),
    source_id TEXT NOT NULL REFERENCES sources (id),
    evidence_id TEXT NOT NULL REFERENCES evidence (id),
    valid_at INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, person_id, superseded_claim_id, claim_id)
)""",
    """CREATE TABLE IF NOT EXISTS memory_commits (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS memory_commits_scope"
    " ON memory_commits (tenant_id, person_id, sequence)",
    # §3: the only CHECK constraint in the schema.
    """CREATE TABLE IF NOT EXISTS memory_export_events (
    commit_sequence INTEGER NOT NULL REFERENCES memory_commits (sequence) ON DELETE CASCADE,
    event_index INTEGER NOT NULL,
    payload TEXT NOT NULL CHECK (json_valid(payload)),
    PRIMARY KEY (commit_sequence, event_index)
)""",
)

# §3 correction pair: both claims in scope, the source is the correction's origin, and the
# evidence quotes that source.
V8_TRIGGERS: tuple[str, ...] = _trigger_pair(
    "correction_scope",
    "corrections",
    "tenant_id, person_id, superseded_claim_id, claim_id, source_id, evidence_id",
    " OR ".join(
        (
            _absent("claims", "NEW.superseded_claim_id"),
            _absent("claims", "NEW.claim_id"),
            _absent(
                "sources",
                "NEW.source_id",
                " AND t.origin_claim_id = NEW.claim_id AND t.origin_evidence_id = NEW.evidence_id",
            ),
            _absent("evidence", "NEW.evidence_id", " AND t.source_id = NEW.source_id"),
        )
    ),
    "correction scope mismatch",
)

# §4.4 step 1: one commit per scope that has a source, evidence, claim, profile entry or review,
# recorded_at = the scope's newest recorded time, sequences in ascending binary scope order.
# Run even when there is no scope: the empty INSERT … SELECT still gives sqlite_sequence its
# (memory_commits, 0) row, as the reference's files have.
BOOTSTRAP_COMMITS = """INSERT INTO memory_commits (tenant_id, person_id, recorded_at)
SELECT tenant_id, person_id, max(recorded_at) FROM (
    SELECT tenant_id, person_id, recorded_at FROM sources
    UNION ALL SELECT tenant_id, person_id, recorded_at FROM evidence
    UNION ALL SELECT tenant_id, person_id, recorded_from FROM claims
    UNION ALL SELECT tenant_id, person_id, recorded_at FROM profile_entries
    UNION ALL SELECT tenant_id, person_id, recorded_at FROM daily_reviews
)
GROUP BY tenant_id, person_id
ORDER BY tenant_id COLLATE BINARY, person_id COLLATE BINARY"""

# --------------------------------------------------------------------------- v9: lifecycle

# §4.2 v9: re-ensures tier/processing_state (already done by the repair step).
V9_COLUMNS: tuple[Column, ...] = CLAIM_TIER_COLUMNS

# §2.1 / §4.2 v9: the projection-repair outbox and the operation log.
V9_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS memory_repair_outbox (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    processed_at INTEGER
)""",
    "CREATE INDEX IF NOT EXISTS memory_repair_outbox_scope"
    " ON memory_repair_outbox (tenant_id, person_id, processed_at, created_at)",
    """CREATE TABLE IF NOT EXISTS memory_operations (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    operation_type TEXT NOT NULL,
    status TEXT NOT NULL,
    target_kind TEXT,
    target_id TEXT,
    recorded_at INTEGER NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS memory_operations_scope"
    " ON memory_operations (tenant_id, person_id, recorded_at)",
)

# §3 claim_legal_state pair (lifecycle.md §2.1 matrix); existing claims are not validated.
V9_TRIGGERS: tuple[str, ...] = _trigger_pair(
    "claim_legal_state",
    "claims",
    "tier, processing_state, status",
    "(NEW.tier = 'archive' AND NEW.status = 'superseded')"
    " OR (NEW.tier IN ('long_term', 'archive') AND NEW.processing_state <> 'processed')",
    "illegal memory state combination",
)

# --------------------------------------------------------------------------- v10: apply ledger

# §2.1 / §4.2 v10 (sync.md §2): one record id may have several payload hashes.
V10_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS memory_applied_records (
    tenant_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    record_kind TEXT NOT NULL,
    record_id TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    applied_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, person_id, record_kind, record_id, payload_hash)
)""",
    "CREATE INDEX IF NOT EXISTS memory_applied_records_scope"
    " ON memory_applied_records (tenant_id, person_id, record_kind, record_id)",
)

# --------------------------------------------------------------------------- §4.3 validations


def _violation(table: str, alias: str, condition: str) -> str:
    return f"SELECT EXISTS (SELECT 1 FROM {table} AS {alias} WHERE {condition})"


def _missing(table: str, id_expr: str, row: str, extra: str = "") -> str:
    """No row of ``table`` with id ``id_expr`` in the scope of the checked row ``row``."""
    return (
        f"NOT EXISTS (SELECT 1 FROM {table} AS t WHERE t.id = {id_expr}"
        f" AND t.tenant_id = {row}.tenant_id AND t.person_id = {row}.person_id{extra})"
    )


# §4.3 core checks, in order: (name used in `legacy {name} is inconsistent with schema
# invariants`, query returning 1 when some row violates the rule).
CORE_CHECKS: tuple[tuple[str, str], ...] = (
    ("evidence", _violation("evidence", "r", _missing("sources", "r.source_id", "r"))),
    (
        "evidence locator",
        _violation("evidence_locators", "r", _missing("evidence", "r.evidence_id", "r")),
    ),
    (
        "claim evidence",
        _violation(
            "claim_evidence",
            "r",
            f"{_missing('claims', 'r.claim_id', 'r')}"
            f" OR {_missing('evidence', 'r.evidence_id', 'r')}",
        ),
    ),
    (
        "embedding",
        _violation(
            "embeddings",
            "r",
            "r.target_kind NOT IN ('source', 'evidence', 'claim') OR "
            + " OR ".join(
                f"(r.target_kind = '{kind}' AND {_missing(table, 'r.target_id', 'r')})"
                for kind, table in (
                    ("source", "sources"),
                    ("evidence", "evidence"),
                    ("claim", "claims"),
                )
            ),
        ),
    ),
    (
        "daily review",
        _violation(
            "daily_reviews",
            "r",
            # §4.3 (corrected): the empty array `[]` fails too, unlike the review trigger.
            "CASE WHEN NOT json_valid(r.evidence_ids) THEN 1"
            " WHEN json_type(r.evidence_ids) = 'array' AND json_array_length(r.evidence_ids) = 0"
            " THEN 1 ELSE EXISTS (SELECT 1 FROM"
            f" json_each(r.evidence_ids) AS cited WHERE {_missing('evidence', 'cited.value', 'r')})"
            " END",
        ),
    ),
)

# §4.3 origin check (v6 only).
ORIGIN_CHECK: tuple[str, str] = (
    "source origin",
    _violation(
        "sources",
        "r",
        "(r.origin_evidence_id IS NOT NULL"
        f" AND {_missing('evidence', 'r.origin_evidence_id', 'r')})"
        f" OR (r.origin_claim_id IS NOT NULL AND {_missing('claims', 'r.origin_claim_id', 'r')})",
    ),
)

# §4.3 profile-content check (second v6 run only).
PROFILE_CONTENT_CHECK: tuple[str, str] = (
    "profile entry",
    _violation(
        "profile_entries",
        "r",
        _missing(
            "claims",
            "r.claim_id",
            "r",
            " AND t.kind = 'profile_fact' AND t.predicate = r.key AND t.value = r.value",
        ),
    ),
)
