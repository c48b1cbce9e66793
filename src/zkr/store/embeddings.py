"""Embedding projections: inputs, stored rows, lanes, ``projections``, ``embed`` and the entry
points of the dense lane (spec/retrieval.md §5, §9-11; spec/storage.md §2.3).

zkr never runs a model. It tells the caller which targets lack a current vector for a
(model, version) (``projections``), stores caller-computed vectors bound to the exact input
they were computed from (``embed``), and searches them exactly (:mod:`zkr.store.dense`, only
imported — with numpy — when a search carries a ``query_embedding``).

Terms (spec/retrieval.md §9):

* **projection input** of a target: its text, ``target_revision`` and ``sha256:`` hash, only
  while the target is live in scope;
* **well-formed** stored row: decodable normalization/distance, a JSON array of finite numbers
  (rounded to float32 via a double) whose length is the stored dimension, unit magnitude for
  ``l2``;
* **current** row: valid kind, well-formed, target has a projection input with the stored
  revision and hash;
* **lane** of (scope, model, version): the smallest (dimension, normalization, distance) among
  current rows (none < l2; cosine < dot < euclidean).

Nothing here imports numpy: ``embed``, ``projections`` and ``repair`` only ever decode the few
stored vectors they need (the lane needs one current row, found through the
``zkr_embeddings_config`` index), so their cost does not grow with the lane.
"""

import sqlite3
from collections.abc import Iterator, Sequence

from zkr.codec import canonical, sha256_tagged
from zkr.errors import InvalidInput, NotFound, StorageError
from zkr.model import (
    EmbedRequest,
    EmbedResult,
    Normalization,
    ProjectionInput,
    ProjectionIssue,
    ProjectionsRequest,
    Target,
    TargetKind,
    quoted,
)
from zkr.store import changes
from zkr.store.db import read_tx, write_tx
from zkr.store.eligibility import LIVE_CLAIM, LIVE_EVIDENCE, LIVE_SOURCE, live_evidence, live_source
from zkr.store.vectors import (
    LaneConfig,
    decode_config,
    decode_vector,
    encode_vector,
    has_unit_magnitude,
    to_float32,
    vector_bytes,
)
from zkr.text import bounded_limit, require_scope, require_text
from zkr.typelite import NamedTuple

PAGE_LIMIT_BYTES = 1_000_000
"""Projections page cap: the compact JSON array, brackets and commas included (§10.3)."""

_KIND_BY_TEXT = {kind.value: kind for kind in TargetKind}


# --------------------------------------------------------------------------- projection inputs


# §9.1: a source while not tombstoned; evidence while not tombstoned (its source is not
# checked here); a claim while live. Revisions: source revision, the evidence's
# source_revision, the claim's recorded_from.
_INPUT_SQL = {
    TargetKind.SOURCE: "SELECT content, revision FROM sources"
    f" WHERE id = ? AND tenant_id = ? AND person_id = ? AND {live_source('')}",
    TargetKind.EVIDENCE: "SELECT quote, source_revision FROM evidence"
    f" WHERE id = ? AND tenant_id = ? AND person_id = ? AND {live_evidence('')}",
    TargetKind.CLAIM: "SELECT c.subject, c.predicate, c.value, c.recorded_from FROM claims c"
    f" WHERE c.id = ? AND c.tenant_id = ? AND c.person_id = ? AND {LIVE_CLAIM}",
}


def claim_text(subject: object, predicate: object, value: object) -> str:
    return f"{subject} {predicate} {value}"


def projection_input(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, target: Target
) -> ProjectionInput | None:
    """The target's projection input, or ``None`` when it is missing, not live or out of scope."""
    row = conn.execute(_INPUT_SQL[target.kind], (target.id, tenant_id, person_id)).fetchone()
    if row is None:
        return None
    if target.kind is TargetKind.CLAIM:
        text, revision = claim_text(row[0], row[1], row[2]), row[3]
    else:
        text, revision = row[0], row[1]
    return ProjectionInput(target, text, revision, sha256_tagged(text))


# --------------------------------------------------------------------------- stored rows


class StoredRow(NamedTuple):
    """One ``embeddings`` row as stored (cells undecoded; a named tuple: no ``dataclasses``
    import on the CLI's hybrid search path)."""

    target_kind: object
    target_id: object
    target_revision: object
    input_hash: object
    dimension: object
    normalization: object
    distance: object
    vector: object
    created_at: object = None

    @property
    def target(self) -> Target | None:
        kind = _KIND_BY_TEXT.get(self.target_kind) if isinstance(self.target_kind, str) else None
        if kind is None or not isinstance(self.target_id, str):
            return None
        return Target(kind, self.target_id)

    def config(self) -> LaneConfig | None:
        return decode_config(self.dimension, self.normalization, self.distance)

    def well_formed_config(self) -> LaneConfig | None:
        """The row's configuration when the row is well-formed (§9.2), else ``None``."""
        config = self.config()
        if config is None:
            return None
        if decode_vector(self.vector, config.dimension, config.normalization) is None:
            return None
        return config

    def matches(self, current: ProjectionInput) -> bool:
        """Stored revision and hash equal the target's current ones."""
        return self.target_revision == current.revision and self.input_hash == current.input_hash


_ROW_COLUMNS = (
    "target_kind, target_id, target_revision, input_hash, dimension, normalization, distance,"
    " vector, created_at"
)


def stored_row(row: Sequence[object]) -> StoredRow:
    return StoredRow(*row)


def lane(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    model: str,
    version: str,
    replacement: Target | None = None,
) -> LaneConfig | None:
    """The lane of (scope, model, version) (spec/retrieval.md §9.3).

    The smallest configuration among current rows; ``None`` when there is no current row, or
    when ``replacement`` names a target whose own row is the only current one (so a lone vector
    can be re-embedded with a new configuration; a row of another target keeps the lane).

    Cost: distinct configurations are enumerated by seeks on ``zkr_embeddings_config``; rows are
    then checked newest first until one current row (two with ``replacement``) is found, so a
    lane of current vectors costs a handful of lookups however large it is.
    """
    found: LaneConfig | None = None
    for config, groups in _configs(conn, tenant_id, person_id, model, version):
        for group in groups:
            for row in _group_rows(conn, tenant_id, person_id, model, version, group):
                target = row.target
                if target is None:
                    continue
                current = projection_input(conn, tenant_id, person_id, target)
                if current is None or not row.matches(current):
                    continue
                if decode_vector(row.vector, config.dimension, config.normalization) is None:
                    continue
                if found is not None:
                    return found  # a second current row: the smallest configuration stands
                found = config
                if replacement is None or target != replacement:
                    return config
    return None


# Distinct (dimension, normalization, distance) of a lane, one index seek each: the next
# triple after (d, n, x) has the same d and n and a larger x, or the same d and a larger n, or
# a larger d. (A row-value ``> (d, n, x)`` is not a seek in SQLite: it scans equal prefixes.)
_CONFIG_SQL = """
SELECT dimension, normalization, distance FROM embeddings
WHERE tenant_id = ? AND person_id = ? AND model = ? AND version = ?{after}
ORDER BY dimension, normalization, distance LIMIT 1
"""
_FIRST_CONFIG_SQL = _CONFIG_SQL.format(after="")
_NEXT_CONFIG_SQL = (
    _CONFIG_SQL.format(after=" AND dimension = ? AND normalization = ? AND distance > ?"),
    _CONFIG_SQL.format(after=" AND dimension = ? AND normalization > ?"),
    _CONFIG_SQL.format(after=" AND dimension > ?"),
)
_GROUP_ROWS_SQL = f"""
SELECT {_ROW_COLUMNS} FROM embeddings
WHERE tenant_id = ? AND person_id = ? AND model = ? AND version = ?
  AND dimension = ? AND normalization = ? AND distance = ?
ORDER BY created_at DESC, rowid DESC
LIMIT ? OFFSET ?
"""

RawConfig = tuple[object, object, object]


def _configs(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, model: str, version: str
) -> list[tuple[LaneConfig, list[RawConfig]]]:
    """Decodable configurations of the lane's rows in lane order, each with the raw cell
    triples that decode to it (``"l2"`` and ``"\\u006c2"`` are the same normalization)."""
    scope = (tenant_id, person_id, model, version)
    groups: dict[LaneConfig, list[RawConfig]] = {}
    row = conn.execute(_FIRST_CONFIG_SQL, scope).fetchone()
    while row is not None:
        raw: RawConfig = (row[0], row[1], row[2])
        config = decode_config(*raw)
        if config is not None:
            groups.setdefault(config, []).append(raw)
        for sql, keys in zip(_NEXT_CONFIG_SQL, (raw, raw[:2], raw[:1]), strict=True):
            row = conn.execute(sql, (*scope, *keys)).fetchone()
            if row is not None:
                break
    return sorted(groups.items(), key=lambda item: item[0].order_key())


def _group_rows(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    model: str,
    version: str,
    group: RawConfig,
) -> Iterator[StoredRow]:
    # pages of growing size: the first row is usually current, and a PostgreSQL cursor
    # fetches its whole result at once (zkr.store.pg.adapter), vectors included
    offset, size = 0, 16
    while True:
        scope = (tenant_id, person_id, model, version, *group, size, offset)
        batch = conn.execute(_GROUP_ROWS_SQL, scope).fetchall()
        for row in batch:
            yield stored_row(row)
        if len(batch) < size:
            return
        offset, size = offset + size, min(4 * size, 4096)


def row_issue(
    current: ProjectionInput, row: StoredRow | None, lane_config: LaneConfig | None
) -> str | None:
    """``missing``, ``stale`` or ``None`` for one target's stored row (spec/retrieval.md §10.1)."""
    if row is None:
        return "missing"
    if not row.matches(current):
        return "stale"
    config = row.well_formed_config()
    if config is None:
        return "stale"
    if lane_config is not None and config != lane_config:
        return "stale"
    return None


# --------------------------------------------------------------------------- projections


# §10.2 candidates, in kind-name order (claim < evidence < source), each by id, with the
# stored row of this model/version when there is one (em.target_kind is NULL when there is not).
_EM_COLUMNS = ", ".join(f"em.{name.strip()}" for name in _ROW_COLUMNS.split(","))
_CANDIDATE_SQL = {
    TargetKind.CLAIM: f"""
SELECT c.id, c.subject || ' ' || c.predicate || ' ' || c.value, c.recorded_from, {_EM_COLUMNS}
FROM claims c
LEFT JOIN embeddings em ON em.tenant_id = c.tenant_id AND em.person_id = c.person_id
     AND em.target_kind = 'claim' AND em.target_id = c.id AND em.model = :m AND em.version = :v
WHERE c.tenant_id = :t AND c.person_id = :p AND {LIVE_CLAIM}
ORDER BY c.id""",
    TargetKind.EVIDENCE: f"""
SELECT e.id, e.quote, e.source_revision, {_EM_COLUMNS}
FROM evidence e
JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p
     AND {LIVE_SOURCE}
LEFT JOIN embeddings em ON em.tenant_id = e.tenant_id AND em.person_id = e.person_id
     AND em.target_kind = 'evidence' AND em.target_id = e.id AND em.model = :m
     AND em.version = :v
WHERE e.tenant_id = :t AND e.person_id = :p AND {LIVE_EVIDENCE}
ORDER BY e.id""",
    TargetKind.SOURCE: f"""
SELECT s.id, s.content, s.revision, {_EM_COLUMNS}
FROM sources s
LEFT JOIN embeddings em ON em.tenant_id = s.tenant_id AND em.person_id = s.person_id
     AND em.target_kind = 'source' AND em.target_id = s.id AND em.model = :m AND em.version = :v
WHERE s.tenant_id = :t AND s.person_id = :p AND {LIVE_SOURCE}
ORDER BY s.id""",
}
_PROJECTION_ORDER = (TargetKind.CLAIM, TargetKind.EVIDENCE, TargetKind.SOURCE)


def _candidates(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, model: str, version: str
) -> Iterator[tuple[ProjectionInput, StoredRow | None]]:
    """Every projection candidate in §10.2 order with its stored row, if any."""
    params = {"t": tenant_id, "p": person_id, "m": model, "v": version}
    for kind in _PROJECTION_ORDER:
        cursor = conn.execute(_CANDIDATE_SQL[kind], params)
        while batch := cursor.fetchmany(256):
            for row in batch:
                text = row[1]
                current = ProjectionInput(Target(kind, row[0]), text, row[2], sha256_tagged(text))
                yield current, None if row[3] is None else stored_row(row[3:])


def pending_inputs(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, model: str, version: str
) -> Iterator[ProjectionInput]:
    """Every projection input whose stored row is missing or stale (the issues of
    :func:`projections`, §10.1-10.2, without paging). Read inside the caller's transaction."""
    lane_config = lane(conn, tenant_id, person_id, model, version)
    for current, row in _candidates(conn, tenant_id, person_id, model, version):
        if row_issue(current, row, lane_config) is not None:
            yield current


def projections(conn: sqlite3.Connection, req: ProjectionsRequest) -> list[ProjectionIssue]:
    """Missing and stale embedding inputs of one (model, version), earliest first
    (spec/retrieval.md §10). Read-only.

    Raises ``InvalidInput`` for blank scope/model/version and for one issue larger than the
    1,000,000-byte page (even when earlier issues were collected).
    """
    require_scope(req.tenant_id, req.person_id)
    require_text(req.model, "embedding model")
    require_text(req.version, "embedding version")
    limit = bounded_limit(req.limit)
    t, p = req.tenant_id, req.person_id
    issues: list[ProjectionIssue] = []
    total = 2  # the brackets
    with read_tx(conn):
        lane_config = lane(conn, t, p, req.model, req.version)
        for current, row in _candidates(conn, t, p, req.model, req.version):
            state = row_issue(current, row, lane_config)
            if state is None:
                continue
            issue = (
                ProjectionIssue(state, current, None, None, None)
                if row is None
                else ProjectionIssue(
                    state, current, row.target_revision, row.input_hash, row.created_at
                )
            )
            size = len(canonical(issue.to_json()).encode("utf-8"))
            if size + 2 > PAGE_LIMIT_BYTES:
                raise InvalidInput(
                    f"projection issue exceeds the {PAGE_LIMIT_BYTES}-byte page limit"
                )
            if issues and total + size + 1 > PAGE_LIMIT_BYTES:
                break
            total += size + (1 if issues else 0)
            issues.append(issue)
            if len(issues) == limit:
                break
    return issues


# --------------------------------------------------------------------------- embed


# §11.3: one row per (scope, kind, id, model, version), replaced whole; created_at from the
# database clock. ``embed`` and ``embed-pending`` both write rows with it.
UPSERT_SQL = """
INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version, dimension,
    input_hash, normalization, distance, vector, target_revision, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, unixepoch())
ON CONFLICT (tenant_id, person_id, target_kind, target_id, model, version) DO UPDATE SET
    dimension = excluded.dimension, input_hash = excluded.input_hash,
    normalization = excluded.normalization, distance = excluded.distance,
    vector = excluded.vector, target_revision = excluded.target_revision,
    created_at = excluded.created_at
"""
UPSERT_RETURNING_SQL = UPSERT_SQL + "RETURNING rowid, created_at\n"
""":data:`UPSERT_SQL` answering the written row's rowid and ``created_at`` (for its copy,
:func:`zkr.store.changes.keep_copy`)."""


def embed(conn: sqlite3.Connection, req: EmbedRequest) -> EmbedResult:
    """Store a caller-computed vector for a live target (spec/retrieval.md §11).

    Validation order: scope; blank model, version, input_hash; finite float32 vector; unit
    magnitude for ``l2``; then, inside one ``BEGIN IMMEDIATE`` transaction: the target's
    projection input (``record not found``), the hash binding, the lane. The row is upserted
    with ``created_at = unixepoch()``; no commit-feed record, no outbox row.
    """
    require_scope(req.tenant_id, req.person_id)
    emb = req.embedding
    require_text(emb.model, "embedding model")
    require_text(emb.version, "embedding version")
    require_text(emb.input_hash, "embedding input_hash")
    vec = to_float32(emb.vector)
    if vec is None:
        raise InvalidInput("embedding vector must contain finite values")
    if emb.normalization is Normalization.L2 and not has_unit_magnitude(vec):
        raise InvalidInput("l2-normalized embedding vector must have unit magnitude")
    text = encode_vector(vec)
    t, p = req.tenant_id, req.person_id
    try:
        changes.ensure(conn)  # the log and zkr_vectors: the row's float32 copy is kept there
    except sqlite3.Error as exc:
        raise StorageError(str(exc)) from None
    with write_tx(conn, (t, p)):
        current = projection_input(conn, t, p, req.target)
        if current is None:
            raise NotFound()
        if emb.input_hash != current.input_hash:
            raise InvalidInput(
                "embedding input_hash does not match current target input; expected "
                + current.input_hash
            )
        existing = lane(conn, t, p, emb.model, emb.version, replacement=req.target)
        if existing is not None and existing != LaneConfig(
            len(vec), emb.normalization, emb.distance
        ):
            raise InvalidInput(
                "embedding configuration conflicts with the existing model/version lane"
            )
        row = conn.execute(
            UPSERT_RETURNING_SQL,
            (
                t,
                p,
                req.target.kind.value,
                req.target.id,
                emb.model,
                emb.version,
                len(vec),
                current.input_hash,
                quoted(emb.normalization.value),
                quoted(emb.distance.value),
                text,
                current.revision,
            ),
        ).fetchone()
        if changes.keeps_copies(conn):
            scope = (t, p, emb.model, emb.version)
            changes.keep_copy(
                conn, row[0], scope, req.target.kind.value, req.target.id, row[1], vector_bytes(vec)
            )
    return EmbedResult(req.target, len(vec), current.revision, current.input_hash, row[1])
