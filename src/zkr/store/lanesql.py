"""The SQL reading a dense lane's rows per target kind (spec/retrieval.md §5.2, §5.4, §9.1),
without numpy: the numpy lane's refresh and patch (:mod:`zkr.store.dense.rows` re-exports it)
and the numpy-free search's rows written since a lane state (:mod:`zkr.store.lanedelta`) read
rows with the same queries."""

from __future__ import annotations

from zkr.store.eligibility import LIVE_CLAIM, LIVE_EVIDENCE, LIVE_SOURCE

ROW_ORDER = {"claim": 0, "evidence": 1, "source": 2}
"""The place of each target kind in §5.2 row order (the refresh reads kinds in this order; a
surviving row's order key in a lane state starts with this byte)."""

# One query per target kind, in §5.2 row order (target_kind, then target_id; the
# zkr_embeddings_rows index serves each part in order, reading no row's vector). Each row
# carries: its small columns; the target's §9.1 revision and text (NULL when the target is
# not live); for §5.4, whether the target can be mapped at all (evidence: source live; source:
# has live evidence; claims: see eligibility.LIVE_LINKS_SQL).
ROW_COLUMNS = (
    "em.rowid, em.target_kind, em.target_id, em.dimension, em.normalization, em.distance,"
    " em.target_revision, em.input_hash, em.created_at"
)
LANE_WHERE = "em.tenant_id = :t AND em.person_id = :p AND em.model = :m AND em.version = :v"


def _rows_sql(kind: str, target: str, revision: str, text: str, mappable: str, capture: str) -> str:
    """The lane's rows of one target ``kind`` with their ``target`` (a LEFT JOIN: NULL columns
    when it is not live); ``{only}`` is where a patch restricts them to some target ids."""
    return f"""
SELECT {ROW_COLUMNS}, {revision}, {text}, {mappable}, {capture}
FROM embeddings em
LEFT JOIN {target}
WHERE {LANE_WHERE} AND em.target_kind = '{kind}'{{only}}
ORDER BY em.target_id"""


# per target kind: (kind, the live target joined, its revision, its text, mappable, capture)
KINDS = (
    (
        "claim",
        f"claims c ON c.id = em.target_id AND c.tenant_id = :t AND c.person_id = :p"
        f" AND {LIVE_CLAIM}",
        "c.recorded_from",
        "c.subject || ' ' || c.predicate || ' ' || c.value",
        "1",
        "NULL",
    ),
    (
        "evidence",
        f"evidence e ON e.id = em.target_id AND e.tenant_id = :t AND e.person_id = :p"
        f" AND {LIVE_EVIDENCE}",
        "e.source_revision",
        "e.quote",
        "EXISTS (SELECT 1 FROM sources s WHERE s.id = e.source_id AND s.tenant_id = :t"
        f" AND s.person_id = :p AND {LIVE_SOURCE})",
        "e.source_id",
    ),
    (
        "source",
        f"sources s ON s.id = em.target_id AND s.tenant_id = :t AND s.person_id = :p"
        f" AND {LIVE_SOURCE}",
        "s.revision",
        "s.content",
        "EXISTS (SELECT 1 FROM evidence e WHERE e.source_id = s.id AND e.tenant_id = :t"
        f" AND e.person_id = :p AND {LIVE_EVIDENCE})",
        "NULL",
    ),
)

_TEMPLATES = tuple((kind[0], _rows_sql(*kind)) for kind in KINDS)


PATCH_SQL = tuple(
    (kind, sql.replace("{only}", " AND em.target_id IN (SELECT value FROM json_each(:ids))"))
    for kind, sql in _TEMPLATES
)
ROWS_SQL = tuple((kind, sql.replace("{only}", "")) for kind, sql in _TEMPLATES)


# The lane's rows among some rowids (written since a lane state, from the change log); the
# rowids drive the join (CROSS JOIN: else SQLite walks the lane's index, every row of it:
# 22 ms at 100k rows against 0.06 ms). With their vector text for the numpy-free search
# (zkr.store.lanedelta), their targets alone for numpy's patch (zkr.store.dense.patching).
_WRITTEN_FROM = (
    f" FROM json_each(:rows) j CROSS JOIN embeddings em ON em.rowid = j.value WHERE {LANE_WHERE}"
)
WRITTEN_ROWS_SQL = "SELECT em.rowid, em.target_kind, em.target_id, em.vector" + _WRITTEN_FROM
WRITTEN_TARGETS_SQL = "SELECT em.target_id" + _WRITTEN_FROM

# Every row of the lane, now, of the given captures (source ids): the source's own row and its
# evidence's rows (zkr.store.lanedelta: a row written since a lane state is applied over it
# only when it is alone in its capture; §14 #12 folding looks at whole captures)
CAPTURE_ROWS_SQL = f"""
WITH caps(id) AS (SELECT value FROM json_each(:caps))
SELECT em.rowid FROM caps CROSS JOIN embeddings em
  ON {LANE_WHERE} AND em.target_kind = 'source' AND em.target_id = caps.id
UNION ALL
SELECT em.rowid FROM caps CROSS JOIN evidence e
  ON e.tenant_id = :t AND e.person_id = :p AND e.source_id = caps.id
  CROSS JOIN embeddings em ON {LANE_WHERE} AND em.target_kind = 'evidence' AND em.target_id = e.id
"""
