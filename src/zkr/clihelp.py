"""Per-command help for ``zkr help COMMAND``: the request fields and one example request.

Loaded only on the help path (the CLI's start-up never imports it). Every command of
:data:`zkr.cli.COMMANDS` has an entry here (tests/test_ergonomics.py checks it, and that each
example request decodes). Field lines follow spec/cli.md §8; ``tenant_id`` and ``person_id``
are part of every request and are listed once in the header (``embed-pending``'s are optional:
they are listed as its fields).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple


class CommandHelp(NamedTuple):
    """The help of one command: field lines (``name  type, meaning``) and an example request."""

    fields: tuple[str, ...]
    example: dict[str, Any]
    returns: str


_SCOPE = {"tenant_id": "acme", "person_id": "sam"}


def _ex(**fields: Any) -> dict[str, Any]:
    return {**_SCOPE, **fields}


HELP: dict[str, CommandHelp] = {
    "remember": CommandHelp(
        (
            "kind            conversation|screen|audio|document|integration|user_correction",
            "text            string, non-blank: the captured text",
            "captured_at     int (Unix seconds): when it was said or seen",
            "recorded_at     int: when it is stored",
            "ingestion_key   string|null: idempotency key (a replay returns the same ids)",
            "claim           object|null: subject, predicate, value (strings), kind",
            "                (fact|profile_fact|preference|task|skill|recommendation),",
            "                valid_from (int), tier (default long_term),",
            "                processing_state (default processed)",
            "locator         object|null: device_id, provider, stream_id, segment_id,",
            "                start_ms, end_ms (transcript position, milliseconds)",
        ),
        _ex(
            kind="conversation",
            text="Sam works at Acme",
            captured_at=1767225600,
            recorded_at=1767225600,
            ingestion_key="chat-42/turn-7",
            claim={
                "subject": "Sam",
                "predicate": "employer",
                "value": "Acme",
                "kind": "fact",
                "valid_from": 1767225600,
            },
        ),
        '{"claim_id": string|null, "evidence_id": string, "source_id": string}',
    ),
    "locator": CommandHelp(
        ("evidence_id     string",),
        _ex(evidence_id="<evidence id>"),
        "the locator object, or null",
    ),
    "search": CommandHelp(
        (
            "query           string, non-blank",
            "limit           int, default 10 (0 means 10, at most 100)",
            "as_of           {valid_at, recorded_at}|null: what was believed then",
            "query_embedding {vector, model, version}|null: adds the dense lane",
        ),
        _ex(query="where does Sam work", limit=5),
        '{"gaps": [string], "items": [{"evidence_ids", "excerpt", "memory",'
        ' "relevance_basis_points"}], "query": string}',
    ),
    "context": CommandHelp(
        (
            "query           string (blank: profile and reviews only)",
            "max_bytes       int, default 4000: UTF-8 size bound of text",
            "limit           int, default 10: search items considered",
            "profile_limit   int, default 10; review_limit int, default 3 (each 0: none)",
            "min_relevance_basis_points  int, default 0: drop items ranked below",
        ),
        _ex(query="where does Sam work", max_bytes=2000),
        '{"bytes": int, "items": [search item], "left_out": {"items", "profiles",'
        ' "reviews"} (counts found but not fitting), "profiles": [profile entry],'
        ' "reviews": [review], "text": string} (lists hold only what fits in text)',
    ),
    "get": CommandHelp(
        ("target          {kind: source|evidence|claim, id}: a live record",),
        _ex(target={"kind": "claim", "id": "<claim id>"}),
        "one search item (relevance 10000); record not found unless live",
    ),
    "correct": CommandHelp(
        (
            "claim_id        string: an accepted claim",
            "text            string, non-blank: the correction as said",
            "value           string, non-blank: the new value",
            "valid_at        int: when the new value became true",
            "recorded_at     int: when the correction is stored",
            "profile_follows bool, default false: move the old claim's profile entry",
            "                to the new value (a second commit)",
        ),
        _ex(
            claim_id="<claim id>",
            text="Sam moved to Globex",
            value="Globex",
            valid_at=1767312000,
            recorded_at=1767312000,
        ),
        '{"claim_id", "evidence_id", "source_id", "superseded_claim_id"}',
    ),
    "promote": CommandHelp(
        ("claim_id        string: a processed short_term claim", "recorded_at     int"),
        _ex(claim_id="<claim id>", recorded_at=1767312000),
        '{"claim_id": string}',
    ),
    "archive": CommandHelp(
        ("claim_id        string: a processed claim", "recorded_at     int"),
        _ex(claim_id="<claim id>", recorded_at=1767312000),
        '{"claim_id": string}',
    ),
    "link": CommandHelp(
        (
            "claim_id        string: an accepted claim",
            "evidence_id     string: live evidence",
            "relation        supports|contradicts",
            "confidence_basis_points  int 0..10000",
        ),
        _ex(
            claim_id="<claim id>",
            evidence_id="<evidence id>",
            relation="supports",
            confidence_basis_points=8000,
        ),
        '{"ok": true}',
    ),
    "delete": CommandHelp(
        ("source_id       string: a live source", "deleted_at      int"),
        _ex(source_id="<source id>", deleted_at=1767312000),
        '{"claim_count": int, "evidence_count": int, "source_id": string}',
    ),
    "repair": CommandHelp(
        ("limit           int, default 10 (at most 100)",),
        _ex(limit=100),
        '{"processed": int}',
    ),
    "profile": CommandHelp(
        (
            "stability       stable|current",
            "claim_id        string: a live profile_fact claim (its predicate is the key)",
            "recorded_at     int",
            "(unknown fields are rejected)",
        ),
        _ex(stability="current", claim_id="<claim id>", recorded_at=1767312000),
        '{"claim_id", "id", "key", "person_id", "recorded_at", "stability", "tenant_id", "value"}',
    ),
    "profiles": CommandHelp(
        ("limit           int, default 10 (at most 100)",),
        _ex(limit=20),
        "an array of profile entries, newest first",
    ),
    "review": CommandHelp(
        (
            "day             string, non-blank (e.g. 2026-01-01)",
            "summary         string, non-blank",
            "evidence_ids    [string], non-empty: live evidence it cites",
            "recorded_at     int",
        ),
        _ex(
            day="2026-01-01",
            summary="Talked about the new job",
            evidence_ids=["<evidence id>"],
            recorded_at=1767312000,
        ),
        '{"id": string}',
    ),
    "reviews": CommandHelp(
        ("limit           int, default 10 (at most 100)",),
        _ex(limit=7),
        'an array of {"day", "evidence_ids", "id", "recorded_at", "summary"}',
    ),
    "projections": CommandHelp(
        (
            "model           string, non-blank",
            "version         string, non-blank",
            "limit           int, default 10 (at most 100)",
        ),
        _ex(model="all-MiniLM-L6-v2", version="1", limit=100),
        'an array of {"input": {"input_hash", "target", "target_revision", "text"},'
        ' "state": missing|stale, ...}',
    ),
    "embed": CommandHelp(
        (
            "target          {kind: source|evidence|claim, id}",
            "embedding       {vector: [number], model, version, input_hash,",
            "                normalization: none|l2, distance: cosine|dot|euclidean}",
        ),
        _ex(
            target={"kind": "source", "id": "<source id>"},
            embedding={
                "vector": [0.6, 0.8],
                "model": "all-MiniLM-L6-v2",
                "version": "1",
                "input_hash": "sha256:<from projections>",
                "normalization": "l2",
                "distance": "cosine",
            },
        ),
        '{"created_at", "dimension", "input_hash", "target", "target_revision"}',
    ),
    "embed-pending": CommandHelp(
        (
            "tenant_id       string, with person_id: one scope (default: every scope)",
            "person_id       string",
            "model           local model: built-in name or model directory, non-blank",
            "                (default $ZKR_EMBED_MODEL, else all-MiniLM-L6-v2)",
            "batch           int, distinct texts per transaction, default 64",
            "limit           int, most targets to embed now, default all",
        ),
        _ex(batch=64),
        '{"embedded", "model", "pending", "scopes", "seconds", "skipped", "texts", "version"}',
    ),
    "export": CommandHelp(
        (
            "export_format   1",
            "after_commit    int, default 0; after_event_index int, default -1: the",
            "                last event already read. (N, -1) starts AT commit N; to go",
            "                on after commit N send the page's next_after_commit and",
            "                next_after_event_index (N and its event_count - 1)",
            "high_water_mark int|null: keep the first page's mark for the whole run",
            "limit           int: events per page, default 10 (at most 100)",
        ),
        _ex(export_format=1, after_commit=0, after_event_index=-1, limit=100),
        '{"commits", "complete", "database_schema_version", "export_format",'
        ' "high_water_mark", "next_after_commit", "next_after_event_index"}',
    ),
    "apply": CommandHelp(
        (
            "export_format   1",
            "database_schema_version  int|null: from the export page",
            "commits         [commit]: complete commits of an export, in order",
        ),
        _ex(export_format=1, database_schema_version=10, commits=[]),
        '{"commits_applied", "commits_skipped", "records_applied", "records_skipped"}',
    ),
    "trace": CommandHelp(
        (
            "target          {kind: source|evidence|claim, id}: any record in scope,",
            "                superseded, retracted and deleted ones included",
        ),
        _ex(target={"kind": "claim", "id": "<claim id>"}),
        '{"claims", "corrections", "evidence", "links", "profile_entries", "reviews",'
        ' "sources", "target"} (deleted text is null)',
    ),
    "lookup": CommandHelp(
        (
            "subject         string, non-blank (matched after search's folding:",
            "                case, accents, NFKC: SAM = Sam, ÉLODIE = elodie)",
            "predicate       string, non-blank (folded the same way)",
            "as_of           {valid_at, recorded_at}|null: what held then",
        ),
        _ex(subject="Sam", predicate="employer"),
        "an array of claims with evidence_ids, newest valid_time first",
    ),
    "browse": CommandHelp(
        (
            "limit           int, default 20 (at most 100)",
            "records         all|sources|claims, default all",
            "kind            a source kind or a claim kind",
            "tier, status, processing_state   claim filters (list claims only)",
            "before          the previous page's next cursor",
        ),
        _ex(limit=20, records="claims", status="accepted"),
        '{"items": [...], "next": {"id", "recorded_at", "type"}|null}',
    ),
    "settle": CommandHelp(
        (
            "claim_id        string: an accepted pending or blocked claim",
            "processing_state  processed|blocked",
            "recorded_at     int",
        ),
        _ex(claim_id="<claim id>", processing_state="processed", recorded_at=1767312000),
        '{"claim_id": string, "processing_state": string}',
    ),
    "erase": CommandHelp(
        (
            "source_ids      [string]: deleted sources (default: every deleted source)",
            "dry_run         bool, default true: only report what would be erased",
            "propagate       bool, default true: a commit telling replicas to erase too",
        ),
        _ex(dry_run=True),
        '{"claims", "dry_run", "evidence", "feed_records", "source_ids", "text_bytes"'
        ', "wal_truncated" (when erasing)}',
    ),
}


def command_help(name: str, purpose: str) -> str:
    """The text of ``zkr help NAME``: purpose, fields, the response shape and an example."""
    import textwrap

    entry = HELP[name]
    scoped = name != "embed-pending"  # every field of embed-pending is optional, scope included
    lines = [
        *textwrap.wrap(f"zkr --db PATH {name}: {purpose}", 80, subsequent_indent="  "),
        "",
        "Request: one JSON object on stdin with tenant_id, person_id and"
        if scoped
        else "Request: one JSON object on stdin, every field optional (an empty stdin is {}):",
        *(f"  {line}" for line in entry.fields),
        "",
        *textwrap.wrap(f"Response: {entry.returns}", 80, subsequent_indent="  "),
        "",
        "Example:",
        f"  echo '{json.dumps(entry.example, ensure_ascii=False)}' \\",
        f"    | zkr --db memory.db {name}",
    ]
    return "\n".join(lines) + "\n"


_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_STRONG = re.compile(r"\*\*(.+?)\*\*")


def plain_text(doc: str) -> str:
    """A module docstring (reStructuredText) as the plain text ``zkr help import|serve|mcp``
    prints: ``literal`` and **strong** lose their markup, :role:`target` becomes its target
    and a paragraph's closing ``::`` (a literal block follows) becomes ``:``.
    """
    text = _RST_ROLE.sub(r"\1", doc)
    text = _RST_LITERAL.sub(r"\1", text)
    text = _RST_STRONG.sub(r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.MULTILINE)
