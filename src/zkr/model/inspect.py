"""Requests and results of the commands that let a host or a person see and steer memory:
``trace``, ``lookup``, ``browse`` and ``settle`` (zkr's own commands, not the reference's;
docs/inspect.md).
"""

from zkr.codec import Fields
from zkr.model.base import Target, scope_fields
from zkr.model.kinds import ProcessingState
from zkr.model.retrieval import AsOf
from zkr.typelite import Any, NamedTuple


class TraceRequest(NamedTuple):
    """``trace``: one source, evidence or claim in scope and its neighbourhood."""

    tenant_id: str
    person_id: str
    target: Target

    @classmethod
    def from_json(cls, value: Any) -> "TraceRequest":
        f = Fields(value, "struct TraceRequest")
        tenant, person = scope_fields(f)
        return cls(tenant, person, Target.from_json(f.required("target")))


class Trace(NamedTuple):
    """The neighbourhood of a record, as plain JSON objects (shapes in docs/inspect.md).

    ``sources``/``evidence``/``claims`` are the records (text of deleted ones is ``null``),
    ``links`` the claim-evidence links between them, ``corrections`` the correction chain,
    ``profile_entries`` and ``reviews`` what cites them. Lists are in id order except
    ``corrections`` (oldest first).
    """

    target: Target
    sources: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    links: list[dict[str, Any]]
    corrections: list[dict[str, Any]]
    profile_entries: list[dict[str, Any]]
    reviews: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        sections = {name: getattr(self, name) for name in self._fields[1:]}
        return {"target": self.target.to_json(), **sections}


class LookupRequest(NamedTuple):
    """``lookup``: the current (or ``as_of``) claims for a subject and predicate."""

    tenant_id: str
    person_id: str
    subject: str
    predicate: str
    as_of: AsOf | None = None

    @classmethod
    def from_json(cls, value: Any) -> "LookupRequest":
        f = Fields(value, "struct LookupRequest")
        tenant, person = scope_fields(f)
        as_of = f.opt_obj("as_of", "struct AsOf")
        return cls(
            tenant,
            person,
            subject=f.string("subject"),
            predicate=f.string("predicate"),
            as_of=None if as_of is None else AsOf.from_json(as_of),
        )


class BrowseCursor(NamedTuple):
    """Where a ``browse`` page ended: the last item's recorded time, type and id."""

    recorded_at: int
    type: str
    id: str

    @classmethod
    def from_json(cls, f: Fields) -> "BrowseCursor":
        return cls(f.i64("recorded_at"), f.string("type"), f.string("id"))

    def to_json(self) -> dict[str, Any]:
        return {"recorded_at": self.recorded_at, "type": self.type, "id": self.id}


class BrowseRequest(NamedTuple):
    """``browse``: one page of the timeline of sources and claims, newest recorded first.

    ``records`` is ``all``, ``sources`` or ``claims``; ``kind`` a source or claim kind;
    ``tier``/``status``/``processing_state`` filter claims (and so list only claims);
    ``before`` is the ``next`` cursor of the previous page.
    """

    tenant_id: str
    person_id: str
    limit: int = 20
    records: str = "all"
    kind: str | None = None
    tier: str | None = None
    status: str | None = None
    processing_state: str | None = None
    before: BrowseCursor | None = None

    @classmethod
    def from_json(cls, value: Any) -> "BrowseRequest":
        f = Fields(value, "struct BrowseRequest")
        tenant, person = scope_fields(f)
        before = f.opt_obj("before", "struct BrowseCursor")
        return cls(
            tenant,
            person,
            limit=f.u32_default("limit", 20),
            records=f.opt_string("records") or "all",
            kind=f.opt_string("kind"),
            tier=f.opt_string("tier"),
            status=f.opt_string("status"),
            processing_state=f.opt_string("processing_state"),
            before=None if before is None else BrowseCursor.from_json(before),
        )


class SettleRequest(NamedTuple):
    """``settle``: move a pending or blocked claim to ``processed`` (or pending to
    ``blocked``); ``recorded_at`` stamps the commit."""

    tenant_id: str
    person_id: str
    claim_id: str
    processing_state: ProcessingState
    recorded_at: int

    @classmethod
    def from_json(cls, value: Any) -> "SettleRequest":
        f = Fields(value, "struct SettleRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            claim_id=f.string("claim_id"),
            processing_state=f.enum("processing_state", ProcessingState),
            recorded_at=f.i64("recorded_at"),
        )


class EraseRequest(NamedTuple):
    """``erase``: blank the text of tombstoned sources for good (docs/erase.md).

    ``source_ids`` names deleted sources (default: every deleted source in scope);
    ``dry_run`` (default true) only reports what would be erased; ``propagate`` (default true)
    appends a commit of the blanked source records so replicas erase too (docs/erase.md).
    """

    tenant_id: str
    person_id: str
    source_ids: list[str] | None = None
    dry_run: bool = True
    propagate: bool = True

    @classmethod
    def from_json(cls, value: Any) -> "EraseRequest":
        f = Fields(value, "struct EraseRequest")
        tenant, person = scope_fields(f)
        ids = f.str_list("source_ids") if f.has("source_ids") else None
        return cls(
            tenant,
            person,
            ids,
            f.bool_default("dry_run", True),
            f.bool_default("propagate", True),
        )


class LookupClaim(NamedTuple):
    """One item of ``lookup``: a claim as ``trace`` shows it (``claim``, shapes in
    docs/inspect.md) and its live (or then-visible) supporting evidence ids, smallest first."""

    claim: dict[str, Any]
    evidence_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return {**self.claim, "evidence_ids": list(self.evidence_ids)}


class BrowsePage(NamedTuple):
    """One page of ``browse``: ``items`` (sources and claims as plain JSON objects, newest
    recorded first) and ``next``, the cursor of the following page or ``None`` on the last."""

    items: list[dict[str, Any]]
    next: BrowseCursor | None

    def to_json(self) -> dict[str, Any]:
        return {"items": self.items, "next": None if self.next is None else self.next.to_json()}


class SettleResult(NamedTuple):
    """Result of ``settle``: the claim and its processing state after the call."""

    claim_id: str
    processing_state: str

    def to_json(self) -> dict[str, Any]:
        return {"claim_id": self.claim_id, "processing_state": self.processing_state}


class EraseReport(NamedTuple):
    """Result of ``erase`` (docs/erase.md): what was (or, with ``dry_run``, would be) erased.

    ``source_ids`` the erased sources; ``evidence``, ``claims``, ``feed_records`` counts of
    rows and stored feed payloads blanked; ``text_bytes`` the UTF-8 bytes of text removed;
    ``wal_truncated`` (only after a real erase, ``None`` on a dry run) whether the WAL file
    could be truncated so no old page keeps the text.
    """

    dry_run: bool
    source_ids: list[str]
    evidence: int
    claims: int
    feed_records: int
    text_bytes: int
    wal_truncated: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "source_ids": list(self.source_ids),
            "evidence": self.evidence,
            "claims": self.claims,
            "feed_records": self.feed_records,
            "text_bytes": self.text_bytes,
        }
        if self.wal_truncated is not None:
            out["wal_truncated"] = self.wal_truncated
        return out
