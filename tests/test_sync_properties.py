"""Property: any history exported from A and applied to an empty B reproduces A (spec/sync.md).

Random operation sequences run on A through the library API (remember with or without claims,
locators and ingestion-key replays, correct, link, promote, archive, delete, profile, review,
plus writes in a second scope). Then A's scope is exported with a random page size, staged into
complete commits, applied to an empty B in random batch splits, and:

* B's re-export holds the same commits: recorded_at, event counts and records (ids, payloads,
  hashes) — and the same sequences when A has only written that scope;
* every authoritative row of the scope (and its full-text rows) is equal;
* B's searches equal A's for every vocabulary word;
* applying the same batches again writes nothing (all skipped, tables unchanged).
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.sync_support import A, B, export_all, scope_state, staged
from zkr import MemoryDb, ZkrError
from zkr.model import (
    ApplyRequest,
    ClaimInput,
    ClaimKind,
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    LinkRequest,
    Locator,
    ProcessingState,
    ProfileRequest,
    Relation,
    RememberRequest,
    ReviewRequest,
    SearchRequest,
    SourceKind,
    Stability,
    Tier,
)
from zkr.store.records import parse_record, payload_hash, record_identity

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
pick = st.integers(min_value=0, max_value=1_000)

remember_op = st.tuples(
    st.just("remember"),
    text,
    st.one_of(st.none(), st.tuples(st.sampled_from(WORDS), st.sampled_from(list(ClaimKind)))),
    st.sampled_from(
        [
            (Tier.LONG_TERM, ProcessingState.PROCESSED),
            (Tier.SHORT_TERM, ProcessingState.PROCESSED),
            (Tier.SHORT_TERM, ProcessingState.PENDING),
        ]
    ),
    st.booleans(),  # locator
    st.one_of(st.none(), st.sampled_from(["k1", "k2"])),  # ingestion key (replays are no-ops)
)
operation = st.one_of(
    remember_op,
    remember_op,
    st.tuples(st.just("correct"), pick, st.sampled_from(WORDS)),
    st.tuples(st.just("link"), pick, pick, st.sampled_from(list(Relation)), st.integers(0, 10_000)),
    st.tuples(st.just("promote"), pick),
    st.tuples(st.just("archive"), pick),
    st.tuples(st.just("delete"), pick),
    st.tuples(st.just("profile"), pick, st.sampled_from(list(Stability))),
    st.tuples(st.just("review"), st.lists(pick, min_size=1, max_size=3)),
    st.tuples(st.just("other_scope"), text),
)


class History:
    """Runs generated operations on A; failed operations are no-ops (they append nothing)."""

    def __init__(self, db: MemoryDb) -> None:
        self.db = db
        self.clock = 100
        self.claims: list[str] = []
        self.evidence: list[str] = []
        self.sources: list[str] = []
        self.other_scope = False

    def tick(self) -> int:
        self.clock += 10
        return self.clock

    def run(self, op: tuple[Any, ...]) -> None:
        with contextlib.suppress(ZkrError):
            self._run(op)

    def _run(self, op: tuple[Any, ...]) -> None:
        name, *args = op
        at = self.tick()
        if name == "remember":
            words, claim, (tier, state), with_locator, key = args
            made = self.db.remember(
                RememberRequest(
                    *A,
                    kind=SourceKind.CONVERSATION,
                    text=words,
                    captured_at=at if key is None else 1,
                    recorded_at=at if key is None else 1,
                    ingestion_key=key,
                    claim=None
                    if claim is None
                    else ClaimInput("Sam", claim[0], words, claim[1], at, tier, state),
                    locator=Locator("omi", "dg", "s", f"seg{at}", at, at + 5)
                    if with_locator
                    else None,
                )
            )
            self.sources.append(made.source_id)
            self.evidence.append(made.evidence_id)
            if made.claim_id is not None:
                self.claims.append(made.claim_id)
        elif name == "correct" and self.claims:
            claim = self.claims[args[0] % len(self.claims)]
            fix = self.db.correct(CorrectRequest(*A, claim, f"now {args[1]}", args[1], at, at))
            self.claims.append(fix.claim_id)
            self.sources.append(fix.source_id)
            self.evidence.append(fix.evidence_id)
        elif name == "link" and self.claims and self.evidence:
            claim = self.claims[args[0] % len(self.claims)]
            evidence = self.evidence[args[1] % len(self.evidence)]
            self.db.link(LinkRequest(*A, claim, evidence, args[2], args[3]))
        elif name in ("promote", "archive") and self.claims:
            request = ClaimTierRequest(*A, self.claims[args[0] % len(self.claims)], at)
            (self.db.promote if name == "promote" else self.db.archive)(request)
        elif name == "delete" and self.sources:
            self.db.delete(DeleteRequest(*A, self.sources[args[0] % len(self.sources)], at))
        elif name == "profile" and self.claims:
            claim = self.claims[args[0] % len(self.claims)]
            self.db.profile(ProfileRequest(*A, args[1], claim, at))
        elif name == "review" and self.evidence:
            ids = [self.evidence[i % len(self.evidence)] for i in args[0]]
            self.db.review(ReviewRequest(*A, f"day-{at}", "summary alpha", ids, at))
        elif name == "other_scope":
            self.other_scope = True
            self.db.remember(
                RememberRequest(
                    *B, kind=SourceKind.SCREEN, text=args[0], captured_at=at, recorded_at=at
                )
            )


def ledger_view(pages: list[dict[str, Any]]) -> list[tuple[int, int, list[tuple[str, str, str]]]]:
    """Commits without sequences: (recorded_at, event_count, [(kind, id, hash)...])."""
    out = []
    for commit in staged(pages):
        keys = []
        for record in commit["records"]:
            parsed = parse_record(record)
            keys.append((*record_identity(parsed), payload_hash(parsed)))
        out.append((commit["recorded_at"], commit["event_count"], keys))
    return out


def rows_without_clock(path: str) -> dict[str, list[tuple[Any, ...]]]:
    """Feed, ledger and outbox rows (the applied_at/created_at wall clock dropped)."""
    conn = sqlite3.connect(path)
    try:
        return {
            "commits": conn.execute("SELECT * FROM memory_commits ORDER BY sequence").fetchall(),
            "events": conn.execute(
                "SELECT * FROM memory_export_events ORDER BY commit_sequence, event_index"
            ).fetchall(),
            "ledger": sorted(
                conn.execute(
                    "SELECT tenant_id, person_id, record_kind, record_id, payload_hash"
                    " FROM memory_applied_records"
                ).fetchall()
            ),
            "outbox": conn.execute("SELECT COUNT(*) FROM memory_repair_outbox").fetchall(),
        }
    finally:
        conn.close()


def search_view(db: MemoryDb, query: str) -> tuple[Any, ...]:
    pack = db.search(SearchRequest(*A, query, limit=100)).to_json()
    items = sorted(
        (item["memory"]["kind"], item["memory"]["id"], item["excerpt"], tuple(item["evidence_ids"]))
        for item in pack["items"]
    )
    return pack["query"], tuple(pack["gaps"]), tuple(items)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ops=st.lists(operation, min_size=1, max_size=18),
    page_limit=st.integers(1, 12),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_export_apply_export_reproduces_the_origin(
    ops: list[tuple[Any, ...]], page_limit: int, cuts: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        origin_path, replica_path = str(Path(tmp) / "a.db"), str(Path(tmp) / "b.db")
        with MemoryDb.open(origin_path) as a, MemoryDb.open(replica_path) as b:
            history = History(a)
            for op in ops:
                history.run(op)
            pages = export_all(a, limit=page_limit)
            commits = staged(pages)
            bounds = sorted({0, len(commits), *(c % (len(commits) + 1) for c in cuts)})
            batches = [commits[lo:hi] for lo, hi in itertools.pairwise(bounds)]
            totals = {"commits_applied": 0, "records_applied": 0, "records_skipped": 0}
            for batch in batches:
                result = b.apply(ApplyRequest(*A, 1, 10, batch))
                for key in totals:
                    totals[key] += getattr(result, key)
            records = sum(len(c["records"]) for c in commits)
            assert totals == {
                "commits_applied": len(commits),
                "records_applied": records,
                "records_skipped": 0,
            }

            replica_pages = export_all(b, limit=page_limit)
            assert ledger_view(replica_pages) == ledger_view(pages)
            if not history.other_scope:
                assert replica_pages == pages  # sequences included: both are 1..N
            assert scope_state(replica_path) == scope_state(origin_path)
            for word in WORDS:
                assert search_view(b, word) == search_view(a, word)

            before = rows_without_clock(replica_path)
            state = scope_state(replica_path)
            for batch in batches:
                again = b.apply(ApplyRequest(*A, 1, 10, batch))
                assert again.records_applied == 0 and again.commits_applied == 0
                assert again.records_skipped == sum(len(c["records"]) for c in batch)
            assert rows_without_clock(replica_path) == before
            assert scope_state(replica_path) == state
