"""Liveness and visibility: which stored rows retrieval may use, and what a matched row stands for.

The one home of the eligibility rules of spec/retrieval.md §1, §3.3, §4, §5.4 and §7. Every
lane (lexical, dense), ``get``/materialisation, projection inputs (and so ``embed`` and
``repair``) and the write paths that check "is this live" build their SQL from the fragments
here, and every lane turns a matched source or evidence row into targets with
:func:`stands_for`. This module is a leaf: it imports only :mod:`zkr.model`.

**SQL fragments.** Each rule is a boolean SQL expression over one table alias (the conventional
aliases ``s`` sources, ``e`` evidence, ``c`` claims, ``ce`` claim_evidence are the defaults;
``""`` gives bare column names). Historical fragments read the named parameters ``:v``
(``as_of.valid_at``) and ``:r`` (``as_of.recorded_at``); scoped queries read ``:t``/``:p``.

**What a matched row stands for** (§3.3 steps 2-4, §4, §5.4). A *capture* row (a source, or one
evidence of it) that is eligible stands for the live (or, ``as_of``, visible) claims its
eligible evidence supports; when there are none, it stands for itself, unless ``hide_linked``
is set and some eligible evidence of it has a supporting link to a claim in any state. The one
deliberate difference between modes is that flag: live search (both lanes) hides such a capture
(its claim was superseded, retracted, archived or is still pending), so a superseded value
never comes back as raw text; ``as_of`` does not, because a claim invisible at that instant says
nothing about the capture then (§4). The reference's dense lane does not hide it
(spec/retrieval.md §14 #16); zkr does (docs/decisions-retrieval-dense.md, decision 16).

**One capture, one item.** :func:`one_per_capture` keeps a raw capture that is matched as its
source and as its evidence (two vectors of the same text) from filling two places in a pack.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from zkr.model import Target, TargetKind


def _column(alias: str, name: str) -> str:
    return f"{alias}.{name}" if alias else name


class _Columns:
    """Names columns of one alias (``""``: bare names)."""

    __slots__ = ("alias",)

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def __call__(self, name: str) -> str:
        return _column(self.alias, name)


# --------------------------------------------------------------------------- §1 liveness


def live_source(alias: str = "s") -> str:
    """Live source (§1): not tombstoned."""
    return f"{_column(alias, 'deleted_at')} IS NULL"


def live_evidence(alias: str = "e") -> str:
    """Live evidence (§1): not tombstoned. Retrieval also requires its source to be live
    (join the source with :func:`live_source`); projection inputs do not (§9.1)."""
    return f"{_column(alias, 'deleted_at')} IS NULL"


def live_claim(alias: str = "c") -> str:
    """Live claim (§1): accepted, valid and recorded intervals open, a retrievable tier
    (short or long term, never archive), processed (never pending or blocked)."""
    col = _Columns(alias)
    return (
        f"{col('status')} = 'accepted' AND {col('valid_until')} IS NULL"
        f" AND {col('recorded_until')} IS NULL"
        f" AND {col('tier')} IN ('short_term', 'long_term')"
        f" AND {col('processing_state')} = 'processed'"
    )


def supporting(alias: str = "ce") -> str:
    """Supporting link (§1): relation ``supports``, stored as the JSON string literal (quotes
    included). ``contradicts`` links never count in retrieval."""
    return f"{_column(alias, 'relation')} = '\"supports\"'"


# --------------------------------------------------------------------------- §4 as_of


def source_as_of(alias: str = "s") -> str:
    """Source eligible at (:v, :r) (§4): live (deleted records never reappear, whenever they
    were deleted), captured by :v and recorded by :r."""
    col = _Columns(alias)
    return f"{live_source(alias)} AND {col('captured_at')} <= :v AND {col('recorded_at')} <= :r"


def evidence_as_of(alias: str = "e") -> str:
    """Evidence eligible at (:v, :r) (§4): live and recorded by :r."""
    return f"{live_evidence(alias)} AND {_column(alias, 'recorded_at')} <= :r"


def visible_claim(alias: str = "c") -> str:
    """Claim visible at valid time :v and recorded time :r (§4): accepted or superseded
    (never retracted), processed, both half-open intervals containing the instant; the tier
    is ignored, so archived claims are visible."""
    col = _Columns(alias)
    return (
        f"{col('status')} IN ('accepted', 'superseded') AND {col('processing_state')} = 'processed'"
        f" AND {col('valid_from')} <= :v"
        f" AND ({col('valid_until')} IS NULL OR {col('valid_until')} > :v)"
        f" AND {col('recorded_from')} <= :r"
        f" AND ({col('recorded_until')} IS NULL OR {col('recorded_until')} > :r)"
    )


LIVE_SOURCE = live_source()
LIVE_EVIDENCE = live_evidence()
LIVE_CLAIM = live_claim()
VISIBLE_CLAIM = visible_claim()
SUPPORTS = supporting()


# --------------------------------------------------------------------------- §7 citations

# The evidence a claim target cites (§7): the smallest id among its supporting links whose
# evidence is live with a live source. Correlated on ``c.id``; NULL when the claim cannot be
# cited (then it is never a target: §14 #19 is fixed in the dense lane, docs/decisions-*).
CLAIM_CITATION = f"""(SELECT MIN(e.id) FROM claim_evidence ce
   JOIN evidence e ON e.id = ce.evidence_id AND e.tenant_id = :t AND e.person_id = :p
        AND {LIVE_EVIDENCE}
   JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p
        AND {LIVE_SOURCE}
   WHERE ce.tenant_id = :t AND ce.person_id = :p AND ce.claim_id = c.id AND {SUPPORTS})"""
# The same at (:v, :r) (§4): evidence eligible at :r, its source eligible at (:v, :r).
CLAIM_CITATION_AS_OF = f"""(SELECT MIN(e.id) FROM claim_evidence ce
   JOIN evidence e ON e.id = ce.evidence_id AND e.tenant_id = :t AND e.person_id = :p
        AND {evidence_as_of()}
   JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p
        AND {source_as_of()}
   WHERE ce.tenant_id = :t AND ce.person_id = :p AND ce.claim_id = c.id AND {SUPPORTS})"""
# The evidence a source target cites (§7; also in as_of, §14 #18): its smallest live evidence
# id. Correlated on ``s.id``; NULL when the source has no live evidence.
SOURCE_CITATION = f"""(SELECT MIN(e.id) FROM evidence e WHERE e.source_id = s.id
     AND e.tenant_id = :t AND e.person_id = :p AND {LIVE_EVIDENCE})"""


# --------------------------------------------------------------------------- §3.3 / §5.4 rows

# The supporting links of a batch of matched sources (§3.3 steps 1-3), ``:ids`` a JSON array
# of source ids: one row per (eligible source, eligible evidence, supporting link or NULL)
# with whether the linked claim counts (live; visible at (:v, :r) in the historical form). A
# listed source that is not eligible, or has no eligible evidence, yields no row.
_SOURCE_LINKS_SQL = """
SELECT s.id, ce.claim_id, c.id IS NOT NULL AND {claim}
FROM json_each(:ids) AS h
CROSS JOIN sources s ON s.id = h.value AND s.tenant_id = :t AND s.person_id = :p AND {source}
CROSS JOIN evidence e ON e.tenant_id = :t AND e.person_id = :p AND e.source_id = s.id
     AND {evidence}
LEFT JOIN claim_evidence ce ON ce.evidence_id = e.id AND {supports}
     AND ce.tenant_id = :t AND ce.person_id = :p
LEFT JOIN claims c ON c.id = ce.claim_id AND c.tenant_id = :t AND c.person_id = :p
"""
SOURCE_LINKS_SQL = _SOURCE_LINKS_SQL.format(
    claim=LIVE_CLAIM, source=LIVE_SOURCE, evidence=LIVE_EVIDENCE, supports=SUPPORTS
)
SOURCE_LINKS_AS_OF_SQL = _SOURCE_LINKS_SQL.format(
    claim=VISIBLE_CLAIM, source=source_as_of(), evidence=evidence_as_of(), supports=SUPPORTS
)

# Every supporting link in scope (:t, :p) from live evidence, to a claim in any state (§5.4,
# for lanes that map many rows at once: one pass over the scope's links): the evidence's
# source, the evidence, the claim, whether the claim is live, and whether the source is live
# (a claim is citable through a link whose source is live, §7).
SCOPE_LINKS_SQL = f"""
SELECT e.source_id, e.id, ce.claim_id, c.id IS NOT NULL AND {LIVE_CLAIM}, s.id IS NOT NULL
FROM claim_evidence ce
JOIN evidence e ON e.id = ce.evidence_id AND e.tenant_id = :t AND e.person_id = :p
     AND {LIVE_EVIDENCE}
LEFT JOIN claims c ON c.id = ce.claim_id AND c.tenant_id = :t AND c.person_id = :p
LEFT JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p
     AND {LIVE_SOURCE}
WHERE ce.tenant_id = :t AND ce.person_id = :p AND {SUPPORTS}
"""

# The same links restricted to the captures and claims named in :ids (a JSON array): those
# of evidence or sources among them and those of claims among them (a dense lane patch,
# zkr.store.dense.patching, re-maps only these targets' rows).
SCOPE_LINKS_OF_SQL = (
    SCOPE_LINKS_SQL
    + """ AND ce.rowid IN (
  SELECT ce.rowid FROM json_each(:ids) j CROSS JOIN claim_evidence ce
    ON ce.tenant_id = :t AND ce.person_id = :p AND ce.claim_id = j.value
  UNION SELECT ce.rowid FROM json_each(:ids) j CROSS JOIN claim_evidence ce
    ON ce.evidence_id = j.value
  UNION SELECT ce.rowid FROM json_each(:ids) j CROSS JOIN evidence e
    ON e.tenant_id = :t AND e.person_id = :p AND e.source_id = j.value
    CROSS JOIN claim_evidence ce ON ce.evidence_id = e.id)
"""
)


class Support:
    """What the supporting links of eligible capture rows say, keyed by capture id (a source
    id or an evidence id): the claims that count for it, and whether it has any supporting
    link at all (to a claim in any state). Starts empty."""

    __slots__ = ("claims", "linked")

    def __init__(self) -> None:
        self.claims: dict[str, set[str]] = {}
        self.linked: set[str] = set()

    def add(self, capture_id: str, claim_id: str | None, counts: object) -> None:
        """Record one link row: ``claim_id`` None for evidence without supporting links;
        ``counts`` true when the linked claim is live (visible, ``as_of``)."""
        found = self.claims.setdefault(capture_id, set())
        if claim_id is None:
            return
        self.linked.add(capture_id)
        if counts:
            found.add(claim_id)

    def add_rows(self, rows: Iterable[tuple[str, str | None, object]]) -> None:
        for capture_id, claim_id, counts in rows:
            self.add(capture_id, claim_id, counts)

    def targets(self, kind: TargetKind, capture_id: str, hide_linked: bool) -> list[Target]:
        """:func:`stands_for` of an eligible capture recorded here."""
        return stands_for(
            kind,
            capture_id,
            self.claims.get(capture_id, ()),
            capture_id in self.linked,
            hide_linked,
        )


def stands_for(
    kind: TargetKind,
    target_id: str,
    claims: Iterable[str],
    linked: bool,
    hide_linked: bool,
) -> list[Target]:
    """The targets an eligible matched row stands for (§3.3 steps 4, 6; §4; §5.4).

    A claim row is its claim. A source or evidence row is the ``claims`` its eligible evidence
    supports (live, or visible ``as_of``), in ascending id; when there are none, itself —
    unless ``hide_linked`` and ``linked`` (some eligible evidence has a supporting link to a
    claim in any state), then nothing. The caller has already checked eligibility (and, for a
    claim row, that it can be cited).
    """
    if kind is TargetKind.CLAIM:
        return [Target(TargetKind.CLAIM, target_id)]
    found = sorted(claims)
    if found:
        return [Target(TargetKind.CLAIM, claim) for claim in found]
    if hide_linked and linked:
        return []
    return [Target(kind, target_id)]


def one_per_capture(
    targets: Iterable[Target], source_of: Mapping[str, str], sources: Iterable[Target] = ()
) -> dict[Target, Target]:
    """Which Evidence targets stand in as their source, so that a capture appears at most once
    in a pack (spec/retrieval.md §14 #12 fixed; docs/decisions-retrieval-dense.md).

    ``source_of`` maps an evidence id to its source id. An Evidence target is replaced by the
    Source target of its source when that Source is among ``targets`` or ``sources`` (another
    lane's targets), or when another Evidence target of the same source is among ``targets``.
    Returns the replacements (Evidence target -> Source target).
    """
    listed = set(targets)
    present = {t.id for t in (*listed, *sources) if t.kind is TargetKind.SOURCE}
    per_source: dict[str, list[Target]] = {}
    for target in listed:
        if target.kind is TargetKind.EVIDENCE and target.id in source_of:
            per_source.setdefault(source_of[target.id], []).append(target)
    return {
        evidence: Target(TargetKind.SOURCE, source_id)
        for source_id, group in per_source.items()
        if source_id in present or len(group) > 1
        for evidence in group
    }
