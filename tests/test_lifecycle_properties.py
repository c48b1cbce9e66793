"""Property tests: random lifecycle operation sequences on a real file (hypothesis).

A rule-based state machine drives remember / correct / link / delete / promote / archive /
profile / review with timestamps that may go backwards (so validation errors happen too) and
checks after every step:

* a failed operation leaves every table unchanged (spec/lifecycle.md §1.1 atomicity);
* no text of a deleted source is reachable through search, get, locator, profiles or reviews;
* every accepted claim is supported by live evidence of a live source, and every
  retrieval-live claim is served by ``get`` citing live evidence;
* claim intervals are half-open, and each correction lineage is contiguous and
  non-overlapping in both valid and recorded time;

and at the end of each run that exporting the whole commit feed and applying it to an empty
database reproduces every authoritative table (spec/sync.md).

Each memory's text carries a unique token (``tokN``) so that searches for deleted text are exact.
Example counts are modest to keep the suite fast; raise them locally with
``ZKR_PROPERTY_EXAMPLES``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests.conftest import P, T, dump
from tests.test_lifecycle import (
    correct_req,
    delete_req,
    limit_req,
    link_req,
    profile_req,
    review_req,
    tier_req,
)
from zkr import MemoryDb, NotFound
from zkr.errors import ZkrError
from zkr.model import (
    ApplyRequest,
    ClaimInput,
    ClaimKind,
    ExportRequest,
    GetRequest,
    Locator,
    LocatorRequest,
    ProcessingState,
    Relation,
    RememberRequest,
    SearchRequest,
    SourceKind,
    Stability,
    Target,
    TargetKind,
    Tier,
)

EXAMPLES = int(os.environ.get("ZKR_PROPERTY_EXAMPLES", "30"))
STEPS = 25

AUTHORITATIVE = (
    "sources",
    "source_fts",
    "evidence",
    "evidence_locators",
    "claims",
    "claim_evidence",
    "corrections",
    "profile_entries",
    "daily_reviews",
)

# Tier/state pairs remember accepts (spec/lifecycle.md §2.1), archive included (§5 item 31).
LEGAL_NEW = [
    (Tier.LONG_TERM, ProcessingState.PROCESSED),
    (Tier.LONG_TERM, ProcessingState.PROCESSED),
    (Tier.SHORT_TERM, ProcessingState.PROCESSED),
    (Tier.SHORT_TERM, ProcessingState.PENDING),
    (Tier.SHORT_TERM, ProcessingState.BLOCKED),
    (Tier.ARCHIVE, ProcessingState.PROCESSED),
]

ALLOWED_ERRORS = {
    "correct": {
        "record not found",
        "correction timestamps must advance the original valid and recorded intervals",
        "illegal memory state combination",
    },
    "link": {
        "record not found",
        "claim evidence link conflicts with existing payload",
        "confidence 10001 must be at most 10000 basis points",
    },
    "delete": {
        "record not found",
        "deleted_at cannot predate source recording",
        "deleted_at must advance affected claims' recorded intervals",
    },
    "promote": {
        "promotion requires an active claim",
        "promotion requires processing_state=processed",
        "promotion requires tier=short_term",
        "promotion recorded_at must not predate claim",
    },
    "archive": {
        "archive cannot be superseded",
        "archive requires processing_state=processed",
        "archive recorded_at must not predate claim",
    },
    "profile": {
        "record not found",
        "profile entry cannot predate its backing claim",
        "profile replacement must advance recorded_at",
    },
    "review": set(),  # only "evidence <id> is unavailable", checked by prefix
}

deltas = st.integers(min_value=-3, max_value=3)
picks = st.integers(min_value=0, max_value=10**6)


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="zkr-props-")
        self.path = os.path.join(self.dir, "main.db")
        self.db = MemoryDb.open(self.path)
        self.now = 10
        self.serial = 0
        # source id -> (evidence id, token); every source ever created in scope T/P.
        self.sources: dict[str, tuple[str, str]] = {}
        self.claims: list[str] = []
        self.deleted: set[str] = set()  # source ids
        self.db.remember(RememberRequest("t2", P, SourceKind.CONVERSATION, "foreigntok", 1, 1))

    def teardown(self) -> None:
        try:
            self._check_replay()
        finally:
            self.db.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ----------------------------------------------------------------- helpers

    def _at(self, delta: int) -> int:
        value = self.now + delta
        self.now = max(self.now, value)
        return value

    def _token(self) -> str:
        self.serial += 1
        return f"tok{self.serial}"

    def _attempt(self, command: str, call: Any) -> Any:
        """Run ``call``; a failure must be an expected message and change nothing."""
        before = dump(self.path)
        try:
            result = call()
        except ZkrError as exc:
            message = str(exc)
            event(f"{command} failed: {message.split(' ')[0] if command == 'review' else message}")
            allowed = ALLOWED_ERRORS[command]
            assert (
                message in allowed
                or (command == "review" and message.startswith("evidence "))
                or (command == "correct" and " was superseded by claim " in message)
            ), f"{command}: unexpected error {message!r}"
            assert dump(self.path) == before, f"{command} failed with {message!r} but wrote"
            return None
        event(f"{command} succeeded")
        return result

    def _claim(self, pick: int) -> str:
        return self.claims[pick % len(self.claims)]

    def _source(self, pick: int) -> str:
        return sorted(self.sources)[pick % len(self.sources)]

    # ----------------------------------------------------------------- rules

    @initialize(kind=st.sampled_from([ClaimKind.FACT, ClaimKind.PROFILE_FACT]))
    def seed(self, kind: ClaimKind) -> None:
        """One claim and one raw memory, so every rule is enabled from the first step."""
        for claim in (ClaimInput("Sam", "city", "Acme", kind, 9), None):
            token = self._token()
            result = self.db.remember(
                RememberRequest(T, P, SourceKind.CONVERSATION, f"note {token}", 10, 10, None, claim)
            )
            self.sources[result.source_id] = (result.evidence_id, token)
            if result.claim_id is not None:
                self.claims.append(result.claim_id)

    @rule(
        delta=deltas,
        with_claim=st.booleans(),
        predicate=st.sampled_from(["employer", "city", "pet"]),
        value=st.sampled_from(["Acme", "Beta", "Gamma"]),
        kind=st.sampled_from([ClaimKind.FACT, ClaimKind.PROFILE_FACT]),
        state=st.sampled_from(LEGAL_NEW),
        with_locator=st.booleans(),
    )
    def remember(
        self,
        delta: int,
        with_claim: bool,
        predicate: str,
        value: str,
        kind: ClaimKind,
        state: tuple[Tier, ProcessingState],
        with_locator: bool,
    ) -> None:
        token = self._token()
        at = self._at(delta)
        claim = (
            ClaimInput("Sam", predicate, value, kind, at - 1, state[0], state[1])
            if with_claim
            else None
        )
        locator = Locator("omi", "dg", "s", token, 0, 5) if with_locator else None
        result = self.db.remember(
            RememberRequest(
                T, P, SourceKind.CONVERSATION, f"note {token}", at, at, None, claim, locator
            )
        )
        self.sources[result.source_id] = (result.evidence_id, token)
        if result.claim_id is not None:
            self.claims.append(result.claim_id)

    @precondition(lambda self: self.claims)
    @rule(pick=picks, value=st.sampled_from(["Delta", "Epsilon"]), dv=deltas, dr=deltas)
    def correct(self, pick: int, value: str, dv: int, dr: int) -> None:
        token = self._token()
        result = self._attempt(
            "correct",
            lambda: self.db.correct(
                correct_req(
                    self._claim(pick),
                    text=f"fix {token}",
                    value=value,
                    valid_at=self._at(dv),
                    recorded_at=self._at(dr),
                )
            ),
        )
        if result is not None:
            self.sources[result.source_id] = (result.evidence_id, token)
            self.claims.append(result.claim_id)

    @precondition(lambda self: self.claims and self.sources)
    @rule(
        claim=picks,
        source=picks,
        relation=st.sampled_from(list(Relation)),
        points=st.sampled_from([0, 5000, 10000, 10001]),
    )
    def link(self, claim: int, source: int, relation: Relation, points: int) -> None:
        evidence_id = self.sources[self._source(source)][0]
        self._attempt(
            "link",
            lambda: self.db.link(link_req(self._claim(claim), evidence_id, relation, points)),
        )

    @precondition(lambda self: self.sources)
    @rule(pick=picks, delta=deltas)
    def delete(self, pick: int, delta: int) -> None:
        source_id = self._source(pick)
        result = self._attempt(
            "delete", lambda: self.db.delete(delete_req(source_id, self._at(delta)))
        )
        if result is not None:
            assert source_id not in self.deleted
            self.deleted.add(source_id)
            event(f"delete retracted {min(result.claim_count, 2)}+ claims")

    @precondition(lambda self: self.claims)
    @rule(pick=picks, delta=deltas, archive=st.booleans())
    def change_tier(self, pick: int, delta: int, archive: bool) -> None:
        request = tier_req(self._claim(pick), self._at(delta))
        if archive:
            self._attempt("archive", lambda: self.db.archive(request))
        else:
            self._attempt("promote", lambda: self.db.promote(request))

    @precondition(lambda self: self.claims)
    @rule(pick=picks, delta=deltas, stability=st.sampled_from(list(Stability)))
    def profile(self, pick: int, delta: int, stability: Stability) -> None:
        request = profile_req(self._claim(pick), self._at(delta), stability)
        self._attempt("profile", lambda: self.db.profile(request))

    @precondition(lambda self: self.sources)
    @rule(chosen=st.lists(picks, min_size=1, max_size=3), delta=deltas)
    def review(self, chosen: list[int], delta: int) -> None:
        cited = [self.sources[self._source(pick)] for pick in chosen]
        summary = " ".join(token for _, token in cited)
        request = review_req([evidence for evidence, _ in cited], self._at(delta), summary=summary)
        self._attempt("review", lambda: self.db.review(request))

    # ----------------------------------------------------------------- invariants

    @invariant()
    def deleted_text_is_unreachable(self) -> None:
        db = self.db
        gone_tokens = {self.sources[s][1] for s in self.deleted}
        for source_id in self.deleted:
            evidence_id, token = self.sources[source_id]
            pack = db.search(SearchRequest(T, P, token, 100))
            assert all(token not in item.excerpt for item in pack.items), token
            for target in (
                Target(TargetKind.SOURCE, source_id),
                Target(TargetKind.EVIDENCE, evidence_id),
            ):
                try:
                    db.get(GetRequest(T, P, target))
                except NotFound:
                    pass
                else:
                    raise AssertionError(f"deleted {target} is still served by get")
            assert db.locator(LocatorRequest(T, P, evidence_id)) is None
        assert db.search(SearchRequest(T, P, "foreigntok", 100)).items == []
        gone_evidence = {self.sources[s][0] for s in self.deleted}
        for review in db.reviews(limit_req(100)):
            assert not gone_evidence & set(review.evidence_ids)
            assert not gone_tokens & set(review.summary.split())
        live_profile_claims = {
            row[0]
            for row in db.conn.execute(
                "SELECT id FROM claims WHERE kind = 'profile_fact' AND status = 'accepted'"
                " AND valid_until IS NULL AND recorded_until IS NULL"
            )
        }
        for entry in db.profiles(limit_req(100)):
            assert entry.claim_id in live_profile_claims
        # Stored state, not just the read path: no entry outlives its claim's liveness and no
        # review keeps citing tombstoned evidence.
        stored_entries = {row[0] for row in db.conn.execute("SELECT claim_id FROM profile_entries")}
        assert stored_entries <= live_profile_claims
        assert not db.conn.execute(
            "SELECT 1 FROM daily_reviews r, json_each(r.evidence_ids) j"
            " JOIN evidence e ON e.id = j.value WHERE e.deleted_at IS NOT NULL"
        ).fetchall()

    @invariant()
    def accepted_claims_cite_live_evidence(self) -> None:
        unsupported = self.db.conn.execute(
            "SELECT c.id FROM claims c WHERE c.status = 'accepted' AND NOT EXISTS ("
            " SELECT 1 FROM claim_evidence ce"
            " JOIN evidence e ON e.id = ce.evidence_id AND e.deleted_at IS NULL"
            " JOIN sources s ON s.id = e.source_id AND s.deleted_at IS NULL"
            " WHERE ce.claim_id = c.id AND ce.relation = '\"supports\"')"
        ).fetchall()
        assert unsupported == []
        live = self.db.conn.execute(
            "SELECT id FROM claims WHERE tenant_id = ? AND person_id = ? AND status = 'accepted'"
            " AND valid_until IS NULL AND recorded_until IS NULL"
            " AND tier IN ('short_term', 'long_term') AND processing_state = 'processed'",
            (T, P),
        ).fetchall()
        live_evidence = {
            row[0]
            for row in self.db.conn.execute("SELECT id FROM evidence WHERE deleted_at IS NULL")
        }
        for (claim_id,) in live:
            item = self.db.get(GetRequest(T, P, Target(TargetKind.CLAIM, claim_id)))
            assert set(item.evidence_ids) <= live_evidence

    @invariant()
    def intervals_are_half_open_and_lineages_contiguous(self) -> None:
        conn = self.db.conn
        bad = conn.execute(
            "SELECT id FROM claims WHERE (valid_until IS NOT NULL AND valid_until <= valid_from)"
            " OR (recorded_until IS NOT NULL AND recorded_until <= recorded_from)"
        ).fetchall()
        assert bad == []
        rows = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT id, valid_from, valid_until, recorded_from, recorded_until, status"
                " FROM claims"
            )
        }
        successor: dict[str, str] = {}
        for old, new, valid_at, recorded_at in conn.execute(
            "SELECT superseded_claim_id, claim_id, valid_at, recorded_at FROM corrections"
        ):
            assert old not in successor, "a claim was superseded twice"
            successor[old] = new
            o, n = rows[old], rows[new]
            assert o[4] == "superseded"
            assert (o[1], o[3]) == (valid_at, recorded_at) == (n[0], n[2])
        # Walk every lineage: consecutive claims abut, so no two overlap in either time axis.
        heads = set(successor) - set(successor.values())
        for head in heads:
            chain = [head]
            while chain[-1] in successor:
                chain.append(successor[chain[-1]])
            for earlier, later in itertools.pairwise(chain):
                e, lt = rows[earlier], rows[later]
                assert e[1] is not None and e[1] <= lt[0] and e[3] is not None and e[3] <= lt[2]
            assert all(rows[c][4] == "superseded" for c in chain[:-1])

    # ----------------------------------------------------------------- replay

    def _check_replay(self) -> None:
        commits: dict[int, dict[str, Any]] = {}
        cursor = (0, -1)
        while True:
            page = self.db.export(
                ExportRequest(
                    T, P, 1, after_commit=cursor[0], after_event_index=cursor[1], limit=100
                )
            )
            for commit in page.commits:
                whole = commits.setdefault(
                    commit["sequence"],
                    {
                        "sequence": commit["sequence"],
                        "recorded_at": commit["recorded_at"],
                        "event_count": commit["event_count"],
                        "first_event_index": 0,
                        "records": [],
                    },
                )
                whole["records"].extend(commit["records"])
            cursor = (page.next_after_commit, page.next_after_event_index)
            if page.complete:
                break
        replica_path = os.path.join(self.dir, "replica.db")
        with MemoryDb.open(replica_path) as replica:
            replica.apply(ApplyRequest(T, P, 1, 10, list(commits.values())))
        ours = {t: rows for t, rows in dump(self.path).items() if t in AUTHORITATIVE}
        ours = {t: [r for r in rows if "t2" not in r] for t, rows in ours.items()}
        theirs = {t: rows for t, rows in dump(replica_path).items() if t in AUTHORITATIVE}
        assert theirs == ours


LifecycleMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLifecycleProperties = LifecycleMachine.TestCase
