"""``zkr help COMMAND``, ``zkr --version``, the scoped library handle, remember_many's outcome
mode, and the test suite's behaviour without ../shared (issue 15 item 8)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import zkr
from tests.conftest import REPO, P, T, cli, remember
from tests.sync_support import staged
from zkr import MemoryDb
from zkr.cli import COMMANDS
from zkr.clihelp import HELP
from zkr.errors import InvalidInput, NotFound, RequestError
from zkr.model import ContextRequest, ExportRequest, RememberRequest, SourceKind, Status, TargetKind
from zkr.scoped import ScopedMemory

# --------------------------------------------------------------------------- CLI help, version


def test_every_command_has_help_with_an_example() -> None:
    assert set(HELP) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_command_shows_fields_and_an_example_that_decodes(name: str, tmp_path: Path) -> None:
    result = cli(None, argv=["help", name])
    assert result.code == 0, result.stderr
    text = result.stdout
    assert text.startswith(f"zkr --db PATH {name}: {COMMANDS[name][0][:20]}")
    assert "Request:" in text and "Example:" in text and "Response:" in text
    assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith("  echo"))
    example = text.split("echo '", 1)[1].split("' \\", 1)[0]
    # The example is a well-formed request: running it fails, if at all, on a missing record
    # or a placeholder, never on its shape.
    run = cli(str(tmp_path / "x.db"), name, stdin=example.encode())
    if run.code:
        message = run.error()
        assert "missing field" not in message and "unknown field" not in message, message
        assert "invalid type" not in message and "unknown variant" not in message, message


def test_help_response_names_every_key_the_command_answers(tmp_path: Path) -> None:
    """The Response line of ``zkr help COMMAND`` lists every key of the answer: ``zkr help
    context`` left out ``left_out``, which the command has answered since it counted what did
    not fit. Checked on every command whose help example answers an object on a fresh file
    (the others need a record that the placeholder ids do not name)."""
    db = str(tmp_path / "keys.db")
    checked = []
    for name in sorted(COMMANDS):
        if name == "help":
            continue
        run = cli(db, name, stdin=json.dumps(HELP[name].example).encode())
        if run.code:
            continue
        answer = json.loads(run.stdout)
        if not isinstance(answer, dict):
            continue
        checked.append(name)
        help_text = " ".join(cli(None, argv=["help", name]).stdout.split())
        response = help_text.split("Response: ", 1)[1].split(" Example:", 1)[0]
        missing = [key for key in answer if f'"{key}"' not in response]
        assert not missing, f"zkr help {name} does not name {missing}: {response}"
    assert {"context", "search", "remember", "export", "apply"} <= set(checked), checked


def test_export_help_says_the_cursor_names_the_last_event_read(tmp_path: Path) -> None:
    """``after_commit: N`` reads like "after commit N", but with ``after_event_index: -1`` the
    page starts at commit N: a host that resumed that way sent a replica's last commit back
    (an echo, which can fail for good once a deletion is in it). ``zkr help export`` says how
    the cursor works; checked here against what export does."""
    db = str(tmp_path / "feed.db")
    with MemoryDb.open(db) as memory:
        remember(memory, "first", at=10)
        remember(memory, "second", at=20)

    def sequences(after_commit: int, after_event_index: int) -> list[int]:
        request = {"tenant_id": T, "person_id": P, "export_format": 1, "limit": 100}
        request |= {"after_commit": after_commit, "after_event_index": after_event_index}
        page = json.loads(cli(db, "export", request).stdout)
        return [commit["sequence"] for commit in page["commits"]]

    first = json.loads(
        cli(db, "export", {"tenant_id": T, "person_id": P, "export_format": 1}).stdout
    )["commits"][0]
    assert sequences(1, -1) == [1, 2]  # (N, -1) starts AT commit N
    assert sequences(1, first["event_count"] - 1) == [2]  # after commit N: its last event
    help_text = " ".join(cli(None, argv=["help", "export"]).stdout.split())
    assert "(N, -1) starts AT commit N" in help_text
    assert "next_after_commit and next_after_event_index (N and its event_count - 1)" in help_text


def test_help_of_an_unknown_command_is_the_unknown_command_error() -> None:
    assert cli(None, argv=["help", "serch"]).error() == 'unknown command "serch"'


def test_help_help_is_the_help_screen_that_lists_it() -> None:
    """``help`` is a row of the help screen's command list, but ``zkr help help`` answered
    ``unknown command "help"``."""
    screen = cli(None, argv=["--help"]).stdout
    assert "  help " in screen
    for argv in (["help", "help"], ["--db", "x.db", "help", "help"]):
        result = cli(None, argv=argv)
        assert result.code == 0 and result.stdout == screen, result.stderr


def test_help_command_after_db_does_not_open_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    result = cli(None, argv=["--db", str(path), "help", "remember"])
    assert result.code == 0, result.stderr
    assert result.stdout == cli(None, argv=["help", "remember"]).stdout
    assert not path.exists()
    assert cli(None, argv=["--db", str(path), "help", "serch"]).error() == 'unknown command "serch"'
    assert cli(None, argv=["--db", str(path), "help", "x", "y"]).error().startswith("usage:")


def test_command_table_keeps_a_gap_after_the_longest_name() -> None:
    text = cli(None, argv=["help"]).stdout
    rows = [line for line in text.splitlines() if line.startswith("  ") and line[2] != " "]
    for name in COMMANDS:
        row = next(line for line in rows if line.split()[0] == name)
        assert row.startswith(f"  {name}  "), row


@pytest.mark.parametrize("name", ["import", "serve", "mcp"])
def test_mode_help_is_plain_text_without_rst_markup(name: str) -> None:
    result = cli(None, argv=["help", name])
    assert result.code == 0, result.stderr
    assert f"zkr {name} --db PATH" in result.stdout
    assert "``" not in result.stdout and ":mod:" not in result.stdout
    assert ":data:" not in result.stdout and "**" not in result.stdout


def test_import_help_flag_is_the_plain_text_of_help_import() -> None:
    """``zkr import --help`` printed the module doc with its ``rst`` markup."""
    expected = cli(None, argv=["help", "import"]).stdout
    for flag in ("--help", "-h", "help"):
        result = cli(None, argv=["import", flag])
        assert result.code == 0 and result.stdout == expected, result.stderr


def test_version() -> None:
    result = cli(None, argv=["--version"])
    assert (
        result.code == 0
        and result.stdout == f"zkr {zkr.__version__} (schema 10, zkr 0.3.1 compatible)\n"
    )


def test_general_help_mentions_help_command_and_version() -> None:
    text = cli(None, argv=["--help"]).stdout
    assert "zkr help COMMAND" in text and "zkr --version" in text
    assert all(len(line) <= 80 for line in text.splitlines())


# --------------------------------------------------------------------------- scoped handle


def test_scope_defaults_times_to_now_and_takes_plain_strings(db: MemoryDb) -> None:
    sam = db.scope("acme", "sam")
    before = int(time.time())
    stored = sam.remember(
        "Sam works at Acme",
        kind="screen",
        claim={"subject": "Sam", "predicate": "employer", "value": "Acme"},
    )
    row = db.conn.execute(
        "SELECT kind, captured_at, recorded_at FROM sources WHERE id = ?", (stored.source_id,)
    ).fetchone()
    assert row[0] == '"screen"' and before <= row[1] == row[2] <= int(time.time())
    claim = db.conn.execute(
        "SELECT kind, valid_from, tier FROM claims WHERE id = ?", (stored.claim_id,)
    ).fetchone()
    assert claim == ("fact", row[1], "long_term")
    # correct right away (same second): the handle's clock advances past the claim
    fixed = sam.correct(stored.claim_id or "", "Globex", text="Sam moved to Globex")
    assert [i.excerpt for i in sam.search("Globex").items] == ["Sam employer Globex"]
    assert sam.get("claim", fixed.claim_id).memory.kind is TargetKind.CLAIM
    deleted = sam.delete(fixed.source_id)
    assert deleted.claim_count == 1
    # the scope is the handle's: another person sees nothing
    assert db.scope("acme", "ana").search("Acme").items == []


def test_a_future_explicit_time_does_not_drag_the_handles_clock(db: MemoryDb) -> None:
    """remember(recorded_at=year 2100) then remember(): the second is stamped now, not 2100;
    an explicit 2**63 - 1 does not make every later default overflow."""
    sam = db.scope("acme", "sam")
    planned = sam.remember("dentist on 1 Jan 2100", recorded_at=4_102_444_800)
    for far in (4_102_444_800, 2**63 - 1):
        sam.remember("far", captured_at=far, recorded_at=far)
        plain = sam.remember("said just now")
        (recorded,) = db.conn.execute(
            "SELECT recorded_at FROM sources WHERE id = ?", (plain.source_id,)
        ).fetchone()
        assert recorded <= int(time.time())
    # deleting it "now" would predate its recording: a clear error, an explicit time works
    with pytest.raises(InvalidInput, match="deleted_at cannot predate source recording"):
        sam.delete(planned.source_id)
    assert sam.delete(planned.source_id, deleted_at=4_102_444_801).claim_count == 0


def test_scope_rejects_unknown_enum_strings_naming_the_field(db: MemoryDb) -> None:
    sam = db.scope("acme", "sam")
    with pytest.raises(RequestError, match="field `kind`: unknown variant `chat`"):
        sam.remember("x", kind="chat")
    with pytest.raises(RequestError, match=r"field `claim\.tier`"):
        sam.remember("x", claim={"subject": "a", "predicate": "b", "value": "c", "tier": "x"})
    with pytest.raises(RequestError, match="missing field `value`"):
        sam.remember("x", claim={"subject": "a", "predicate": "b"})
    assert db.conn.execute("SELECT COUNT(*) FROM sources").fetchone() == (0,)


def test_scope_rejects_a_malformed_claim_or_locator_as_a_request_error(db: MemoryDb) -> None:
    """A partial or non-mapping locator raised a bare ``TypeError`` from ``Locator(**loc)``, and
    a claim given as a list or string was reported as unknown fields named by its items."""
    sam = db.scope("acme", "sam")
    locator = {"device_id": "d", "provider": "p", "stream_id": "s", "segment_id": "g"}
    with pytest.raises(RequestError, match=r"^field `locator`: missing field `start_ms`$"):
        sam.remember("x", locator={"device_id": "d"} | locator)
    with pytest.raises(RequestError, match=r"^field `locator`: unknown field `offset`$"):
        sam.remember("x", locator={**locator, "start_ms": 1, "end_ms": 2, "offset": 0})
    with pytest.raises(RequestError, match=r"^field `locator`: invalid type: list, expected a"):
        sam.remember("x", locator=["d", "p", "s", "g", 1, 2])  # type: ignore[arg-type]
    with pytest.raises(RequestError, match=r"^field `claim`: invalid type: str, expected a"):
        sam.remember("x", claim="Sam employer Acme")  # type: ignore[arg-type]
    with pytest.raises(RequestError, match=r"^field `claim`: invalid type: list, expected a"):
        sam.remember("x", claim=[1])  # type: ignore[arg-type]
    assert db.conn.execute("SELECT COUNT(*) FROM sources").fetchone() == (0,)
    stored = sam.remember("x", locator={**locator, "start_ms": 1, "end_ms": 2})
    assert sam.locator(stored.evidence_id) == ("d", "p", "s", "g", 1, 2)


def test_scope_as_of_cursor_and_query_embedding_take_their_json_form(db: MemoryDb) -> None:
    """``as_of`` was spread with ``AsOf(*as_of)``: a mapping (the CLI's JSON shape) became
    ``AsOf("valid_at", "recorded_at")`` and failed as ``invalid type: string "valid_at"``, and an
    ``int`` or a triple raised a bare ``TypeError``; ``before`` and ``query_embedding`` refused
    the JSON form a host keeps (``page.next`` as JSON, a vector request)."""
    sam = db.scope("acme", "sam")
    old = sam.remember(
        "Sam works at Acme",
        captured_at=10,
        recorded_at=10,
        claim={"subject": "Sam", "predicate": "employer", "value": "Acme"},
    )
    sam.correct(old.claim_id, "Globex", valid_at=20, recorded_at=20)
    then = {"valid_at": 15, "recorded_at": 15}
    for as_of in (then, (15, 15), [15, 15], zkr.model.AsOf(15, 15)):
        assert [i.excerpt for i in sam.search("Acme", as_of=as_of).items] == ["Sam employer Acme"]
        assert [c.claim["value"] for c in sam.lookup("Sam", "employer", as_of)] == ["Acme"]
    bad: list[tuple[object, str]] = [
        ({"valid_at": 15}, r"^field `as_of`: missing field `recorded_at`$"),
        ({**then, "at": 1}, r"^field `as_of`: unknown field `at`$"),
        (5, r"^field `as_of`: invalid type: int, expected \(valid_at, recorded_at\) or a"),
        ((1, 2, 3), r"^field `as_of`: expected \(valid_at, recorded_at\), got 3 values$"),
        ({"valid_at": 1.5, "recorded_at": 1}, r"^field `as_of\.valid_at`: invalid type: float"),
    ]
    for as_of, message in bad:
        with pytest.raises(RequestError, match=message):
            sam.search("Acme", as_of=as_of)  # type: ignore[arg-type]
        with pytest.raises(RequestError, match=message):
            sam.lookup("Sam", "employer", as_of)  # type: ignore[arg-type]
    first = sam.browse(limit=1)
    assert first.next is not None
    as_json = json.loads(json.dumps(zkr.model.encode(first)))["next"]
    assert sam.browse(limit=1, before=as_json) == sam.browse(limit=1, before=first.next)
    with pytest.raises(RequestError, match=r"^field `before`: missing field `id`$"):
        sam.browse(before={"recorded_at": 1, "type": "claim"})
    vector = {"vector": [1.0, 0.0], "model": "m", "version": "1"}
    assert sam.search("Globex", query_embedding=vector).items  # no lane yet: lexical only
    with pytest.raises(RequestError, match=r"^field `query_embedding`: missing field `model`$"):
        sam.search("Globex", query_embedding={"vector": [1.0]})


def test_scope_explicit_times_are_used_as_given(db: MemoryDb) -> None:
    sam = db.scope("acme", "sam")
    stored = sam.remember(
        "Sam likes tea",
        captured_at=5,
        recorded_at=10,
        claim={"subject": "Sam", "predicate": "drink", "value": "tea", "kind": "preference"},
    )
    row = db.conn.execute(
        "SELECT valid_from, recorded_from, kind FROM claims WHERE id = ?", (stored.claim_id,)
    ).fetchone()
    assert row == (5, 10, "preference")
    entry = sam.profile
    assert callable(entry)


def test_scope_context_is_memorydbs_block_for_the_handles_scope(db: MemoryDb) -> None:
    """``sam.context(query, ...)`` is ``MemoryDb.context`` with the scope filled in: every
    optional field reaches the one implementation, with the request's own defaults."""
    sam = db.scope("acme", "sam")
    work = sam.remember(
        "Sam works at Acme in Berlin",
        claim={"subject": "Sam", "predicate": "employer", "value": "Acme"},
    )
    home = sam.remember(
        "Sam lives in Lisbon",
        claim={
            "subject": "Sam",
            "predicate": "lives_in",
            "value": "Lisbon",
            "kind": "profile_fact",
        },
    )
    sam.profile(home.claim_id or "")
    sam.review("2026-12-01", "Sam talked about his job", [work.evidence_id])
    db.scope("acme", "ana").remember("Ana works at Acme in Berlin too")

    query = "where does Sam work at Acme"
    block = sam.context(query)
    assert block == db.context(ContextRequest("acme", "sam", query))
    assert "- Sam employer Acme [" in block.text and " UTC; claim " in block.text
    assert "lives_in: Lisbon" in block.text and "Sam talked about his job" in block.text
    assert "Ana" not in block.text  # another person's memories never show
    options = {
        "max_bytes": 300,
        "limit": 1,
        "profile_limit": 1,
        "review_limit": 0,
        "min_relevance_basis_points": 1,
    }
    small = sam.context(query, **options)
    assert small == db.context(ContextRequest("acme", "sam", query, **options))
    assert len(small.text.encode("utf-8")) <= 300 and small.reviews == []
    assert len(small.items) == 1 and small.profiles
    strongest = max(item.relevance_basis_points for item in block.items)
    floored = sam.context(query, min_relevance_basis_points=strongest)
    assert floored.items and len(floored.items) < len(block.items)
    assert sam.context("", review_limit=0).items == []  # a blank query skips the search
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(ScopedMemory.context).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    assert defaults == ContextRequest._field_defaults
    with pytest.raises(RequestError, match="max_bytes"):
        sam.context(query, max_bytes=-1)


# MemoryDb methods a scoped handle has no counterpart for, each for a reason: opening and closing
# are the database's; the floors and ingested_times are helpers for callers that follow a clock
# ahead of their own (zkr mcp), while the handle keeps the spec's error for that (see
# test_a_future_explicit_time_does_not_drag_the_handles_clock).
NOT_ON_THE_HANDLE = {
    "open",
    "deferred",
    "scope",
    "close",
    "checkpoint",
    "conn",
    "ingested_times",
    "replay_statuses",
    "correction_floor",
    "deletion_floor",
    "profile_floor",
}


def test_the_scoped_handle_has_every_memorydb_method_that_acts_on_one_scope() -> None:
    public = {name for name in dir(MemoryDb) if not name.startswith("_")}
    scoped = {name for name in dir(ScopedMemory) if not name.startswith("_")}
    assert public - scoped == NOT_ON_THE_HANDLE


def test_scope_projections_and_embed_fill_this_persons_vectors(db: MemoryDb) -> None:
    sam, ana = db.scope("acme", "sam"), db.scope("acme", "ana")
    sam.remember(
        "Sam works at Acme", claim={"subject": "Sam", "predicate": "employer", "value": "Acme"}
    )
    ana.remember("Ana works at Acme")
    issues = sam.projections("test-model", "1", limit=100)
    assert {issue.input.target.kind for issue in issues} == set(TargetKind)
    assert {issue.state for issue in issues} == {"missing"}
    with pytest.raises(RequestError, match=r"field `embedding\.distance`: unknown variant"):
        sam.embed(
            issues[0].input.target.kind,
            issues[0].input.target.id,
            [1.0, 0.0],
            model_name="test-model",
            version="1",
            input_hash=issues[0].input.input_hash,
            normalization="l2",
            distance="manhattan",
        )
    for issue in issues:
        stored = sam.embed(
            issue.input.target.kind.value,
            issue.input.target.id,
            [0.6, 0.8],
            model_name="test-model",
            version="1",
            input_hash=issue.input.input_hash,
            normalization="l2",
            distance="cosine",
        )
        assert stored.dimension == 2 and stored.target == issue.input.target
    assert sam.projections("test-model", "1") == []
    assert len(ana.projections("test-model", "1", limit=100)) == 2  # her source and evidence


def test_scope_export_and_apply_carry_one_persons_feed(db: MemoryDb, tmp_path: Path) -> None:
    sam = db.scope("acme", "sam")
    stored = sam.remember(
        "Sam works at Acme", claim={"subject": "Sam", "predicate": "employer", "value": "Acme"}
    )
    sam.correct(stored.claim_id or "", "Globex", text="Sam moved to Globex")
    db.scope("acme", "ana").remember("Ana works at Acme")
    pages = [sam.export(limit=2)]
    while not pages[-1].complete:
        last = pages[-1]
        pages.append(
            sam.export(
                after_commit=last.next_after_commit,
                after_event_index=last.next_after_event_index,
                high_water_mark=pages[0].high_water_mark,
                limit=2,
            )
        )
    assert len(pages) > 2 and pages[0] == db.export(ExportRequest("acme", "sam", 1, limit=2))
    commits = staged([page.to_json() for page in pages])
    with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
        copy = replica.scope("acme", "sam")
        with pytest.raises(InvalidInput):  # another person's scope: nothing written
            replica.scope("acme", "ana").apply(commits)
        applied = copy.apply(commits, database_schema_version=pages[0].database_schema_version)
        assert applied.commits_applied == len(commits) == 2
        assert copy.apply(commits).commits_skipped == 2  # a replay changes nothing
        assert [i.excerpt for i in copy.search("Globex").items] == ["Sam employer Globex"]
        assert replica.scope("acme", "ana").search("Acme").items == []


def test_a_handles_remember_many_stays_in_its_scope(db: MemoryDb) -> None:
    """``sam.remember_many([ana.remember_request(...)])`` stored Ana's memory through Sam's
    handle: the one method of the handle that could write outside its scope."""
    sam, ana = db.scope("acme", "sam"), db.scope("acme", "ana")
    mine, theirs = sam.remember_request("Sam likes tea"), ana.remember_request("Ana's secret")
    message = "scope (acme, ana) is not this handle's (acme, sam)"
    with pytest.raises(RequestError, match=rf"^requests\[1\]: {re.escape(message)}$"):
        sam.remember_many([mine, theirs])
    assert db.conn.execute("SELECT COUNT(*) FROM sources").fetchone() == (0,)
    outcomes = sam.remember_many([theirs, mine, theirs], outcomes=True)
    assert [(o.status, o.error) for o in outcomes] == [
        ("failed", message),
        ("stored", None),
        ("failed", message),
    ]
    assert [i.excerpt for i in sam.search("tea").items] == ["Sam likes tea"]
    assert ana.search("secret").items == []
    assert [r.claim_id for r in sam.remember_many([sam.remember_request("x")])] == [None]


# --------------------------------------------------------------------------- remember_many outcomes


def _req(text: str, key: str | None, at: int = 10) -> RememberRequest:
    return RememberRequest("t", "p", SourceKind.CONVERSATION, text, at, at, key)


def test_remember_many_outcomes_skip_deleted_keys_and_keep_the_rest(db: MemoryDb) -> None:
    first = db.remember(_req("one", "k1"))
    db.remember(_req("two", "k2"))
    db.delete(zkr.model.DeleteRequest("t", "p", first.source_id, 20))
    outcomes = db.remember_many(
        [
            _req("one", "k1"),  # deleted earlier
            _req("two", "k2"),  # replay
            _req("three", "k3"),  # new
            _req("two changed", "k2"),  # conflict
            _req("   ", "k4"),  # blank text
        ],
        outcomes=True,
    )
    assert [o.status for o in outcomes] == ["deleted", "replayed", "stored", "failed", "failed"]
    assert outcomes[0].error == "record not found" and outcomes[0].result is None
    assert outcomes[3].error == "ingestion_key conflicts with different memory payload"
    assert outcomes[4].error == "text must not be empty"
    assert outcomes[2].result is not None
    assert db.conn.execute("SELECT COUNT(*) FROM sources").fetchone() == (3,)
    # the all-or-nothing mode still fails the whole batch
    with pytest.raises(NotFound, match=r"requests\[0\]: record not found"):
        db.remember_many([_req("one", "k1"), _req("five", "k5")])
    assert db.conn.execute("SELECT COUNT(*) FROM sources").fetchone() == (3,)


def test_remember_many_outcomes_type_errors_are_per_item(db: MemoryDb) -> None:
    bad = _req("float", "kf")._replace(captured_at=1.5)  # type: ignore[arg-type]
    outcomes = db.remember_many([bad, _req("fine", "ok")], outcomes=True)
    assert [o.status for o in outcomes] == ["failed", "stored"]
    assert "captured_at" in (outcomes[0].error or "")
    assert outcomes[1].to_json()["status"] == "stored"


def test_a_retracted_claim_status_is_unchanged_by_outcome_mode(db: MemoryDb) -> None:
    stored = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    outcomes = db.remember_many([_req("Sam works at Acme", None)], outcomes=True)
    assert outcomes[0].status == "stored"
    status = db.conn.execute("SELECT status FROM claims WHERE id = ?", (stored.claim_id,))
    assert status.fetchone() == (Status.ACCEPTED.value,)


# ------------------------------------------------------------------------ tests without ../shared


def _pytest_without_shared(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["ZKR_SHARED"] = str(tmp_path / "no-shared")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_shared_suites.py",
            "tests/test_migrations.py::test_golden_fixture_set_is_present",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_shared_the_shared_suites_are_skipped_with_a_reason(tmp_path: Path) -> None:
    proc = _pytest_without_shared(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ssss ") and "SKIPPED [3]" in proc.stdout, proc.stdout
    assert "../shared is missing" in proc.stdout and "always run in CI" in proc.stdout


def test_in_ci_a_missing_shared_fails_the_run(tmp_path: Path) -> None:
    proc = _pytest_without_shared(tmp_path, "true")
    assert proc.returncode != 0
    assert "CI run without ../shared" in proc.stdout + proc.stderr


def test_json_help_examples_are_json() -> None:
    for entry in HELP.values():
        assert json.loads(json.dumps(entry.example)) == entry.example


def test_scope_profile_twice_in_one_second_replaces_the_entry(db: MemoryDb) -> None:
    """profile(Berlin) then, in the same second, profile(Paris) of the same key: the second
    default time steps past the first (the rule wants a later recorded_at), as correct does."""
    me = db.scope("local", "me")
    time.sleep(1 - time.time() % 1)  # start of a second: every call below lands in it
    claim = {"subject": "me", "predicate": "city", "kind": "profile_fact"}
    berlin = me.remember("I live in Berlin", claim={**claim, "value": "Berlin"})
    first = me.profile(berlin.claim_id or "")
    paris = me.remember("I live in Paris now", claim={**claim, "value": "Paris"})
    second = me.profile(paris.claim_id or "")
    assert second.recorded_at > first.recorded_at
    assert [(p.key, p.value) for p in me.profiles()] == [("city", "Paris")]


def test_the_handles_argument_types_are_importable_from_zkr_scoped() -> None:
    """``zkr.scoped`` was one module whose argument types (``ClaimLike``, ``AsOfLike``, …)
    a typed host could import; the split into ``zkr/scoped/`` moved them to ``forms`` only. The
    names of the handle's signatures stay importable from the package."""
    import zkr.scoped
    import zkr.scoped.forms

    for name in ["AsOfLike", "ClaimLike", "CursorLike", "LocatorLike", "QueryEmbeddingLike"]:
        assert name in zkr.scoped.__all__
        assert getattr(zkr.scoped, name) is getattr(zkr.scoped.forms, name)
