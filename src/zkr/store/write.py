"""``remember`` and ``locator`` (spec/lifecycle.md §3.1-3.2).

``remember`` stores one source with its FTS row, one evidence row quoting the whole text, an
optional transcript locator, and optionally one accepted claim supported by that evidence
(confidence 10000), then appends one commit: source, evidence[, claim, claim_evidence]. A
non-null ``ingestion_key`` makes the call idempotent per scope: a replay with the same payload
returns the original ids and writes nothing.
"""

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from zkr.errors import InvalidInput, NotFound, StorageError, ZkrError
from zkr.model import (
    ClaimInput,
    Locator,
    LocatorRequest,
    Relation,
    RememberOutcome,
    RememberRequest,
    RememberResult,
    SourceKind,
    Status,
    is_legal_state,
    quoted,
)
from zkr.store import feed
from zkr.store.db import read_tx, write_tx
from zkr.store.derived import add_fts
from zkr.store.eligibility import live_evidence
from zkr.text import new_id, require_scope, require_text
from zkr.typelite import NamedTuple

I64_MAX = 2**63 - 1
FULL_CONFIDENCE = 10_000


def validate_locator(locator: Locator) -> None:
    """Locator rules shared by remember and apply (spec/lifecycle.md §3.1 step 3)."""
    require_text(locator.device_id, "locator.device_id")
    require_text(locator.provider, "locator.provider")
    require_text(locator.stream_id, "locator.stream_id")
    require_text(locator.segment_id, "locator.segment_id")
    if locator.start_ms > locator.end_ms:
        raise InvalidInput("locator end_ms must not precede start_ms")
    if locator.end_ms > I64_MAX:
        raise InvalidInput("locator end_ms exceeds the storage range")


def validate_claim(claim: ClaimInput) -> None:
    """Claim text and legal-state checks (spec/lifecycle.md §3.1 step 6, §2.1)."""
    require_text(claim.subject, "claim subject")
    require_text(claim.predicate, "claim predicate")
    require_text(claim.value, "claim value")
    if not is_legal_state(claim.tier, Status.ACCEPTED, claim.processing_state):
        raise InvalidInput(
            f"illegal memory state combination: tier={claim.tier.value}, status=accepted, "
            f"processing_state={claim.processing_state.value}"
        )


def remember(conn: sqlite3.Connection, req: RememberRequest) -> RememberResult:
    """Store a memory (or replay its ingestion key); one ``BEGIN IMMEDIATE`` transaction.

    Raises ``InvalidInput`` for the validation messages of spec/lifecycle.md §3.1,
    ``NotFound`` when a replayed key's memory was deleted, and ``StorageError`` for
    ``export record exceeds 1048576 bytes``.
    """
    check_request(req)
    with write_tx(conn, (req.tenant_id, req.person_id)):
        return remember_in_tx(conn, req)


def _scopes(reqs: Sequence[RememberRequest]) -> list[tuple[str, str]]:
    return [(req.tenant_id, req.person_id) for req in reqs]


def remember_many(
    conn: sqlite3.Connection, reqs: Sequence[RememberRequest]
) -> list[RememberResult]:
    """Several ``remember`` requests in one transaction: all of them are stored, or none.

    Each request is exactly one :func:`remember` (its own commit in the feed, its own
    ingestion-key replay, a key repeated later in the batch replays the earlier one), so a
    peer importing the feed cannot tell the difference; only the transaction is shared, which
    saves the commit that dominates a single ``remember``. Library only: the CLI contract has
    one request per call (spec/cli.md). Errors are those of :func:`remember`, their message
    prefixed with the failing request's index (``requests[3]: text must not be empty``).
    """
    for index, req in enumerate(reqs):
        with at_request(index):
            check_request(req)
    results: list[RememberResult] = []
    with write_tx(conn, *_scopes(reqs)):
        for index, req in enumerate(reqs):
            with at_request(index):
                results.append(remember_in_tx(conn, req))
    return results


def remember_each(
    conn: sqlite3.Connection, reqs: Sequence[RememberRequest]
) -> list[RememberOutcome]:
    """``remember_many`` with one outcome per request instead of all-or-nothing.

    Each request runs in its own savepoint of one shared transaction: a request that fails
    (a bad field, a key whose memory was deleted, a payload conflict) is rolled back alone and
    reported, and the others are stored. Outcomes (:class:`~zkr.model.RememberOutcome`):
    ``stored``; ``replayed`` (the key was stored before with this payload: the original ids);
    ``deleted`` (the key's memory was deleted: skipped, never re-ingested, spec/lifecycle.md
    §3.1); ``failed`` (``error`` holds the CLI's message for that request).
    """
    outcomes: list[RememberOutcome] = []
    with write_tx(conn, *_scopes(reqs)):
        for req in reqs:
            replay = keyed_source(conn, req) is not None
            conn.execute("SAVEPOINT zkr_item")
            try:
                check_request(req)
                result = remember_in_tx(conn, req)
            except (ZkrError, sqlite3.Error) as exc:
                conn.execute("ROLLBACK TO zkr_item")
                conn.execute("RELEASE zkr_item")
                if replay and isinstance(exc, NotFound):
                    outcomes.append(RememberOutcome("deleted", None, str(exc)))
                else:
                    message = exc.message if isinstance(exc, ZkrError) else str(exc)
                    outcomes.append(RememberOutcome("failed", None, message))
                continue
            conn.execute("RELEASE zkr_item")
            outcomes.append(RememberOutcome("replayed" if replay else "stored", result, None))
    return outcomes


@contextmanager
def at_request(index: int) -> Iterator[None]:
    """Prefix a :class:`ZkrError` raised inside with ``requests[INDEX]: ``."""
    try:
        yield
    except ZkrError as exc:
        exc.message = f"requests[{index}]: {exc.message}"
        exc.args = (exc.message,)
        raise
    except sqlite3.Error as exc:  # a trigger's abort message, as write_tx would report it
        raise StorageError(f"requests[{index}]: {exc}") from None


def check_request(req: RememberRequest) -> None:
    """The checks of spec/lifecycle.md §3.1 that need no database (run before the transaction)."""
    require_scope(req.tenant_id, req.person_id)
    require_text(req.text, "text")
    if req.locator is not None:
        validate_locator(req.locator)
    if req.ingestion_key is not None:
        require_text(req.ingestion_key, "ingestion_key")
    elif req.claim is not None:
        # Without a key no replay can skip the claim's checks (§3.1 step 5), so they need no
        # database either: a bad claim fails before the file is created or migrated.
        validate_claim(req.claim)


def remember_in_tx(conn: sqlite3.Connection, req: RememberRequest) -> RememberResult:
    """The database part of ``remember``, inside the caller's write transaction."""
    source_id = keyed_source(conn, req)
    if source_id is not None:
        return _replay(conn, req, source_id)
    return _insert(conn, req)


def keyed_source(conn: sqlite3.Connection, req: RememberRequest) -> str | None:
    """The id of the source (live or deleted) stored under ``req``'s ingestion key in its
    scope, ``None`` without one (spec/lifecycle.md §3.1: a key is unique per scope)."""
    if req.ingestion_key is None:
        return None
    row = conn.execute(
        "SELECT id FROM sources WHERE tenant_id = ? AND person_id = ? AND ingestion_key = ?",
        (req.tenant_id, req.person_id, req.ingestion_key),
    ).fetchone()
    return None if row is None else str(row[0])


class Capture(NamedTuple):
    """A new source with its one evidence row, as ``remember`` and ``correct`` write them."""

    source_id: str
    evidence_id: str
    tenant_id: str
    person_id: str
    kind: SourceKind
    text: str
    captured_at: int
    recorded_at: int
    ingestion_key: str | None = None
    locator: Locator | None = None


def insert_capture(conn: sqlite3.Connection, capture: Capture) -> None:
    """Insert a capture's source (revision 1, origins still NULL), its FTS row, its evidence
    (quoting the whole text) and its optional locator (spec/lifecycle.md §3.1 "Writes").

    Origins are set by :func:`set_origins` once the evidence and claim exist: the
    ``source_origin_scope_*`` triggers require them to resolve in scope.
    """
    c = capture
    t, p = c.tenant_id, c.person_id
    conn.execute(
        "INSERT INTO sources (id, tenant_id, person_id, revision, kind, content, captured_at,"
        " recorded_at, deleted_at, ingestion_key) VALUES (?, ?, ?, 1, ?, ?, ?, ?, NULL, ?)",
        (
            c.source_id,
            t,
            p,
            quoted(c.kind.value),
            c.text,
            c.captured_at,
            c.recorded_at,
            c.ingestion_key,
        ),
    )
    add_fts(conn, t, p, c.source_id, c.text)
    conn.execute(
        "INSERT INTO evidence (id, tenant_id, person_id, source_id, source_revision, quote,"
        " recorded_at, deleted_at) VALUES (?, ?, ?, ?, 1, ?, ?, NULL)",
        (c.evidence_id, t, p, c.source_id, c.text, c.recorded_at),
    )
    loc = c.locator
    if loc is not None:
        conn.execute(
            "INSERT INTO evidence_locators (tenant_id, person_id, evidence_id, device_id,"
            " provider, stream_id, segment_id, start_ms, end_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                t,
                p,
                c.evidence_id,
                loc.device_id,
                loc.provider,
                loc.stream_id,
                loc.segment_id,
                loc.start_ms,
                loc.end_ms,
            ),
        )


def insert_supported_claim(
    conn: sqlite3.Connection,
    capture: Capture,
    claim_id: str,
    claim: ClaimInput,
) -> list[feed.Record]:
    """Insert an accepted claim recorded at the capture's time, supported by its evidence at
    10000 basis points; returns the claim and claim_evidence records (spec/lifecycle.md §3.1,
    §3.3 write 7)."""
    t, p, recorded_at = capture.tenant_id, capture.person_id, capture.recorded_at
    conn.execute(
        "INSERT INTO claims (id, tenant_id, person_id, subject, predicate, value, valid_from,"
        " valid_until, recorded_from, recorded_until, status, tier, processing_state, kind)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, NULL, 'accepted', ?, ?, ?)",
        (
            claim_id,
            t,
            p,
            claim.subject,
            claim.predicate,
            claim.value,
            claim.valid_from,
            recorded_at,
            claim.tier.value,
            claim.processing_state.value,
            claim.kind.value,
        ),
    )
    conn.execute(
        "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
        " confidence_basis_points) VALUES (?, ?, ?, ?, ?, ?)",
        (t, p, claim_id, capture.evidence_id, quoted(Relation.SUPPORTS.value), FULL_CONFIDENCE),
    )
    return [
        feed.claim_body(
            id=claim_id,
            tenant_id=t,
            person_id=p,
            subject=claim.subject,
            predicate=claim.predicate,
            value=claim.value,
            kind=claim.kind.value,
            valid_from=claim.valid_from,
            valid_until=None,
            recorded_from=recorded_at,
            recorded_until=None,
            status=Status.ACCEPTED.value,
            tier=claim.tier.value,
            processing_state=claim.processing_state.value,
        ),
        feed.claim_evidence_body(
            t, p, claim_id, capture.evidence_id, Relation.SUPPORTS.value, FULL_CONFIDENCE
        ),
    ]


def set_origins(
    conn: sqlite3.Connection, capture: Capture, claim_id: str | None
) -> list[feed.Record]:
    """Point the capture's source at its evidence (and claim); returns the source and
    evidence records as they now stand (the feed's post-state)."""
    conn.execute(
        "UPDATE sources SET origin_evidence_id = ?, origin_claim_id = ?"
        " WHERE tenant_id = ? AND person_id = ? AND id = ?",
        (capture.evidence_id, claim_id, capture.tenant_id, capture.person_id, capture.source_id),
    )
    c = capture
    return [
        feed.source_body(
            id=c.source_id,
            tenant_id=c.tenant_id,
            person_id=c.person_id,
            revision=1,
            kind=c.kind.value,
            content=c.text,
            captured_at=c.captured_at,
            recorded_at=c.recorded_at,
            deleted_at=None,
            ingestion_key=c.ingestion_key,
            origin_evidence_id=c.evidence_id,
            origin_claim_id=claim_id,
        ),
        feed.evidence_body(
            id=c.evidence_id,
            tenant_id=c.tenant_id,
            person_id=c.person_id,
            source_id=c.source_id,
            source_revision=1,
            quote=c.text,
            recorded_at=c.recorded_at,
            locator=c.locator,
            deleted_at=None,
        ),
    ]


def _insert(conn: sqlite3.Connection, req: RememberRequest) -> RememberResult:
    capture = Capture(
        new_id(),
        new_id(),
        req.tenant_id,
        req.person_id,
        req.kind,
        req.text,
        req.captured_at,
        req.recorded_at,
        req.ingestion_key,
        req.locator,
    )
    insert_capture(conn, capture)
    claim_id: str | None = None
    claim_records: list[feed.Record] = []
    if req.claim is not None:
        validate_claim(req.claim)
        claim_id = new_id()
        claim_records = insert_supported_claim(conn, capture, claim_id, req.claim)
    # Feed (spec/lifecycle.md §3.1 "Feed"): source, evidence, then claim + claim_evidence.
    records = set_origins(conn, capture, claim_id) + claim_records
    feed.append_commit(conn, req.tenant_id, req.person_id, req.recorded_at, records)
    return RememberResult(capture.source_id, capture.evidence_id, claim_id)


def _replay(conn: sqlite3.Connection, req: RememberRequest, source_id: str) -> RememberResult:
    """The replay path of spec/lifecycle.md §3.1: compare, never write."""
    t, p = req.tenant_id, req.person_id
    row = conn.execute(
        "SELECT s.kind, s.content, s.captured_at, s.recorded_at, s.deleted_at,"
        " e.id, e.deleted_at, s.origin_claim_id"
        " FROM sources s JOIN evidence e ON e.id = s.origin_evidence_id"
        "  AND e.tenant_id = s.tenant_id AND e.person_id = s.person_id"
        " WHERE s.id = ? AND s.tenant_id = ? AND s.person_id = ?",
        (source_id, t, p),
    ).fetchone()
    if row is None or row[4] is not None or row[6] is not None:
        raise NotFound()
    kind, content, captured_at, recorded_at, _, evidence_id, _, origin_claim_id = row
    conflict = InvalidInput("ingestion_key conflicts with different memory payload")
    if (kind, content, captured_at, recorded_at) != (
        quoted(req.kind.value),
        req.text,
        req.captured_at,
        req.recorded_at,
    ):
        raise conflict
    claim_id: str | None = None
    if origin_claim_id is not None:
        claim_row = conn.execute(
            "SELECT id, subject, predicate, value, valid_from, kind FROM claims"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (origin_claim_id, t, p),
        ).fetchone()
        if claim_row is None:
            raise NotFound()
        claim_id = claim_row[0]
        stored_claim: tuple[object, ...] | None = tuple(claim_row[1:])
    else:
        stored_claim = None
    wanted_claim = (
        None
        if req.claim is None
        else (
            req.claim.subject,
            req.claim.predicate,
            req.claim.value,
            req.claim.valid_from,
            req.claim.kind.value,
        )
    )
    if stored_claim != wanted_claim:
        raise conflict
    if feed.read_locator(conn, t, p, evidence_id) != req.locator:
        raise conflict
    return RememberResult(source_id, evidence_id, claim_id)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def replay_statuses(conn: sqlite3.Connection, reqs: Sequence[RememberRequest]) -> list[str | None]:
    """What ``remember`` would do with each request's ingestion key now, writing nothing (one
    read snapshot): ``None`` (no source has the key in scope: it would store), ``"replayed"``
    (the same payload, spec/lifecycle.md §3.1), ``"deleted"`` (the key's memory was deleted) or
    ``"conflict"`` (another payload). A request without a key, or with one that is not
    UTF-8 (a lone surrogate: ``remember`` refuses it, so no source has it), is ``None``."""
    statuses: list[str | None] = []
    with read_tx(conn):
        for req in reqs:
            key = req.ingestion_key
            source_id = None if key is None or not _utf8(key) else keyed_source(conn, req)
            if source_id is None:
                statuses.append(None)
                continue
            try:
                _replay(conn, req, source_id)  # compares, never writes
                statuses.append("replayed")
            except NotFound:
                statuses.append("deleted")
            except InvalidInput:
                statuses.append("conflict")
    return statuses


def ingested_times(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, ingestion_key: str
) -> tuple[int, int] | None:
    """``(captured_at, recorded_at)`` of the source stored under ``ingestion_key`` in scope, or
    ``None``. A caller that defaults times to "now" replays a key with the stored times, so a
    retry in a later second returns the original ids instead of conflicting (spec/lifecycle.md
    §3.1 compares the times)."""
    row = conn.execute(
        "SELECT captured_at, recorded_at FROM sources"
        " WHERE tenant_id = ? AND person_id = ? AND ingestion_key = ?",
        (tenant_id, person_id, ingestion_key),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def locator(conn: sqlite3.Connection, req: LocatorRequest) -> Locator | None:
    """The locator of live evidence in scope, or ``None`` (never ``record not found``)."""
    require_scope(req.tenant_id, req.person_id)
    with read_tx(conn):
        live = conn.execute(
            "SELECT 1 FROM evidence WHERE id = ? AND tenant_id = ? AND person_id = ?"
            f" AND {live_evidence('')}",
            (req.evidence_id, req.tenant_id, req.person_id),
        ).fetchone()
        if live is None:
            return None
        return feed.read_locator(conn, req.tenant_id, req.person_id, req.evidence_id)
