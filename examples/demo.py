"""The main job end to end: store a conversation, search it, correct a fact, delete a source.

    python examples/demo.py [DB_PATH]

Reads examples/conversation.json, stores every turn as a source (with its claim and, for the
voice note, its transcript locator), prints cited retrieval packs for a few questions, corrects
Maya's employer by supersession, shows the bitemporal view before the correction, deletes one
source and shows that what it alone supported is gone. Without DB_PATH a fresh database is made
in a temporary directory and removed at the end.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from zkr import MemoryDb, ZkrError
from zkr.model import (
    AsOf,
    ClaimInput,
    ClaimKind,
    CorrectRequest,
    DeleteRequest,
    Locator,
    LocatorRequest,
    ProfileRequest,
    RememberRequest,
    RetrievalPack,
    SearchRequest,
    SourceKind,
    Stability,
)

HERE = Path(__file__).resolve().parent
RECORD_DELAY = 5  # seconds between capture and recording, to keep the clocks visibly distinct


def show(title: str, pack: RetrievalPack) -> None:
    print(f"\n? {title}")
    if not pack.items:
        print(f"  (gaps: {', '.join(pack.gaps)})")
    for item in pack.items:
        cite = ", ".join(item.evidence_ids)
        print(
            f"  [{item.relevance_basis_points:>5} bp] {item.memory.kind.value:<8} "
            f"{item.excerpt}\n{'':>11}cites evidence {cite}"
        )


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"zkr demo database: {argv[1]}")
        try:
            return run(argv[1])
        except ZkrError as exc:  # a path that is no database: the CLI's envelope, no traceback
            print(json.dumps({"error": exc.message}, ensure_ascii=False), file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory(prefix="zkr-demo-") as tmp:
        path = str(Path(tmp) / "memory.db")
        print(f"zkr demo database: {path} (temporary: pass a path to keep one)")
        return run(path)


def run(path: str) -> int:
    data: dict[str, Any] = json.loads((HERE / "conversation.json").read_text(encoding="utf-8"))
    tenant, person = data["tenant_id"], data["person_id"]

    with MemoryDb.open(path) as db:
        requests = []
        for turn in data["turns"]:
            claim = turn.get("claim")
            locator = turn.get("locator")
            requests.append(
                RememberRequest(
                    tenant_id=tenant,
                    person_id=person,
                    kind=SourceKind(turn["kind"]),
                    text=turn["text"],
                    captured_at=turn["captured_at"],
                    recorded_at=turn["captured_at"] + RECORD_DELAY,
                    ingestion_key=turn["id"],
                    claim=None
                    if claim is None
                    else ClaimInput(
                        subject=claim["subject"],
                        predicate=claim["predicate"],
                        value=claim["value"],
                        kind=ClaimKind(claim["kind"]),
                        valid_from=turn["captured_at"],
                    ),
                    locator=None if locator is None else Locator(**locator),
                )
            )
        # One outcome per turn: a turn stored by an earlier run replays its key, and a turn
        # deleted by an earlier run is skipped (never re-ingested) instead of failing the batch.
        outcomes = db.remember_many(requests, outcomes=True)
        stored: dict[str, Any] = {}
        for turn, outcome in zip(data["turns"], outcomes, strict=True):
            if outcome.result is not None:
                stored[turn["id"]] = (turn, outcome.result)
        statuses = [outcome.status for outcome in outcomes]
        print(
            f"turns: {statuses.count('stored')} stored, {statuses.count('replayed')} already "
            f"there, {statuses.count('deleted')} deleted earlier (skipped); claims: "
            f"{sum(1 for _, r in stored.values() if r.claim_id)}"
        )
        if statuses.count("stored") < len(statuses):
            return rerun(db, tenant, person, data, stored)

        first_turn, first = stored["turn-1"]
        entry = db.profile(
            ProfileRequest(
                tenant,
                person,
                Stability.CURRENT,
                first.claim_id,
                first_turn["captured_at"] + RECORD_DELAY,
            )
        )
        print(f"profile: {entry.key} = {entry.value}")

        for query in data["queries"]:
            show(query, db.search(SearchRequest(tenant, person, query, limit=3)))

        _, voice = stored["turn-4"]
        loc = db.locator(LocatorRequest(tenant, person, voice.evidence_id))
        if loc is not None:
            print(
                f"\nvoice note evidence {voice.evidence_id} comes from {loc.device_id} via "
                f"{loc.provider}, {loc.start_ms}-{loc.end_ms} ms of {loc.segment_id}"
            )

        fix = data["correction"]
        corrected = db.correct(
            CorrectRequest(
                tenant,
                person,
                first.claim_id,
                fix["text"],
                fix["value"],
                valid_at=fix["captured_at"],
                recorded_at=fix["captured_at"] + RECORD_DELAY,
            )
        )
        print(
            f"\ncorrected claim {corrected.superseded_claim_id} -> {corrected.claim_id} "
            f"(evidence {corrected.evidence_id})"
        )
        show(
            "Maya's job (now)",
            db.search(SearchRequest(tenant, person, "Maya job", limit=3)),
        )
        before = AsOf(valid_at=fix["captured_at"] - 1, recorded_at=fix["captured_at"])
        show(
            "Maya's job (as of before the correction)",
            db.search(SearchRequest(tenant, person, "Maya job", limit=3, as_of=before)),
        )

        _, ana = stored["turn-6"]
        deleted = db.delete(DeleteRequest(tenant, person, ana.source_id, fix["captured_at"] + 60))
        print(
            f"\ndeleted source {deleted.source_id}: {deleted.evidence_count} evidence "
            f"tombstoned, {deleted.claim_count} claim retracted"
        )
        show(
            "Ana peanuts (after deleting that turn)",
            db.search(SearchRequest(tenant, person, "Ana peanuts", limit=3)),
        )
    return 0


def rerun(
    db: MemoryDb, tenant: str, person: str, data: dict[str, Any], stored: dict[str, Any]
) -> int:
    """A second run on the same database: the demo's changes are already there, so show them
    (searches, and the trace of Maya's employer claim with its correction) instead."""
    print("this database already holds the demo (a second run): showing what it remembers")
    for query in data["queries"]:
        show(query, db.search(SearchRequest(tenant, person, query, limit=3)))
    _, first = stored["turn-1"]
    trace = db.scope(tenant, person).trace("claim", first.claim_id)
    print("\ntrace of Maya's employer claim:")
    for claim in sorted(trace.claims, key=lambda c: c["recorded_time"]["from"]):
        until = claim["valid_time"]["until"]
        print(
            f"  {claim['status']:<10} {claim['subject']} {claim['predicate']} {claim['value']}"
            f" (valid from {claim['valid_time']['from']}"
            f"{'' if until is None else f' until {until}'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
