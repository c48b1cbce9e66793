"""The Hermes Agent plugin (plugins/hermes) inside the real ``hermes-agent==0.19.0`` package.

Every test loads the provider through Hermes' own memory-plugin discovery from a
``$HERMES_HOME/plugins/zkr`` directory (a symlink to ``plugins/hermes``). By default the provider
calls the zkr library in-process (zkr is installed in the test venv); tests of the CLI transport
set ``ZKR_TRANSPORT=cli`` and talk to the real zkr CLI through a small ``ZKR_BIN`` wrapper script.
Either way each request is logged (``home.logged()``). Results are checked through zkr's CLI
(``export``, ``search``, ``reviews``); the plugin's own queue file is inspected with sqlite3.

Run with ``bash plugins/hermes/scripts/ci.sh`` (it builds a venv with hermes-agent). The
module is skipped only when hermes-agent is not importable.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

try:
    importlib.metadata.version("hermes-agent")
except importlib.metadata.PackageNotFoundError:
    # The only reason to skip. An installed but broken hermes-agent fails the imports below.
    pytest.skip("hermes-agent is not installed", allow_module_level=True)

import plugins.memory as hermes_memory
from agent.memory_manager import MemoryManager, inject_memory_provider_tools
from agent.memory_provider import MemoryProvider

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "plugins" / "hermes"
PLUGIN_MODULE = "_hermes_user_memory.zkr"
TOOL_NAMES = {"zkr_store", "zkr_search", "zkr_correct", "zkr_delete", "zkr_reflect"}
FAILED = {"error": "zkr operation failed"}


# -- helpers ---------------------------------------------------------------------------


def write_script(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return str(path)


def real_zkr_wrapper(path: Path) -> str:
    """``ZKR_BIN`` for tests: the repository's zkr CLI under this interpreter.

    When ``ZKR_TEST_LOG`` is set, each call first appends ``COMMAND REQUEST`` to that file.
    """
    py = sys.executable
    return write_script(
        path,
        f"""
        if [ -n "$ZKR_TEST_LOG" ]; then
          request=$(cat)
          printf '%s %s\\n' "$3" "$request" >> "$ZKR_TEST_LOG"
          printf '%s' "$request" | "{py}" -m zkr "$@"
          exit $?
        fi
        exec "{py}" -m zkr "$@"
        """,
    )


@dataclass
class Zkr:
    """zkr's own CLI, used to check what the plugin left in the database."""

    db: Path

    def __call__(self, command: str, request: dict[str, Any], *, tenant: str, person: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", "--db", str(self.db), command],
            input=json.dumps({**request, "tenant_id": tenant, "person_id": person}).encode(),
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        return json.loads(proc.stdout)

    def records(self, *, tenant: str, person: str) -> list[dict[str, Any]]:
        """Every record of the scoped commit feed, in order (all export pages)."""
        if not self.db.exists():
            return []
        request: dict[str, Any] = {"export_format": 1, "after_commit": 0, "after_event_index": -1}
        out: list[dict[str, Any]] = []
        for _ in range(1000):
            page = self("export", {**request, "limit": 100}, tenant=tenant, person=person)
            for commit in page["commits"]:
                out.extend(commit["records"])
            if page["complete"]:
                return out
            request = {
                "export_format": 1,
                "after_commit": page["next_after_commit"],
                "after_event_index": page["next_after_event_index"],
                "high_water_mark": page["high_water_mark"],
            }
        raise AssertionError("export did not complete")

    def sources(self, *, tenant: str, person: str) -> list[dict[str, Any]]:
        """Latest state of each source, with its ingestion key, in first-seen order."""
        latest: dict[str, dict[str, Any]] = {}
        for record in self.records(tenant=tenant, person=person):
            if record["kind"] == "source":
                body = record["record"]
                latest[body["source"]["id"]] = {
                    **body["source"],
                    "ingestion_key": body["ingestion_key"],
                }
        return list(latest.values())

    def turn_sources(self, *, tenant: str, person: str) -> list[dict[str, Any]]:
        return [
            s
            for s in self.sources(tenant=tenant, person=person)
            if (s["ingestion_key"] or "").startswith("hermes-turn:")
        ]

    def search(self, query: str, *, tenant: str, person: str, limit: int = 10) -> Any:
        return self("search", {"query": query, "limit": limit}, tenant=tenant, person=person)


@dataclass
class Home:
    path: Path
    bin: str
    log: Path
    created: list[MemoryProvider] = field(default_factory=list)

    @property
    def db(self) -> Path:
        return self.path / "zkr.db"

    @property
    def queue(self) -> Path:
        return self.path / "zkr.db.queue"

    @property
    def zkr(self) -> Zkr:
        return Zkr(self.db)

    def load(self) -> Any:
        """The provider, the way Hermes loads ``memory.provider: zkr``."""
        provider = hermes_memory.load_memory_provider("zkr")
        assert provider is not None, "Hermes did not load the zkr provider"
        self._log_library_calls()
        self.created.append(provider)
        return provider

    def _log_library_calls(self) -> None:
        """Record in-process calls in the same log as the CLI wrapper (a spy, not a stand-in:
        the real library call still runs)."""
        runner_class = sys.modules[f"{PLUGIN_MODULE}.library"].LibraryRunner
        if getattr(runner_class.run, "_zkr_test_spy", False):
            return
        real_run = runner_class.run
        log = self.log

        def run(runner: Any, command: str, payload: Any, **kwargs: Any) -> Any:
            with log.open("a") as handle:
                handle.write(f"{command} {json.dumps(payload, separators=(',', ':'))}\n")
            return real_run(runner, command, payload, **kwargs)

        run._zkr_test_spy = True  # type: ignore[attr-defined]
        runner_class.run = run

    def start(self, context: str = "primary", **kwargs: Any) -> Any:
        provider = self.load()
        session_id = kwargs.pop("session_id", "session-1")
        init = {
            "platform": "cli",
            "hermes_home": str(self.path),
            "agent_context": context,
            "agent_identity": "default",
            "agent_workspace": "hermes",
            **kwargs,
        }
        provider.initialize(session_id, **init)
        return provider

    def logged(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.log.exists():
            return []
        calls = []
        for line in self.log.read_text().splitlines():
            command, _, request = line.partition(" ")
            calls.append((command, json.loads(request)))
        return calls


def module(name: str) -> Any:
    """A submodule of the plugin as Hermes loaded it."""
    return sys.modules[f"{PLUGIN_MODULE}.{name}"]


def module_queue(home: Home) -> Any:
    """Create the queue file with the plugin's schema (through the loaded plugin module)."""
    home.load()
    queue = module("turn_queue").TurnQueue(str(home.queue))
    queue.ensure_schema()
    return queue


def queue_rows(path: Path, table: str = "pending_turns") -> list[dict[str, Any]]:
    if not path.exists():
        return []
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY id")]
    finally:
        conn.close()


def insert_raw_row(path: Path, payload: str) -> None:
    """Insert an unlabelled row the way an older plugin (or another writer) would."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO pending_turns (payload) VALUES (?)", (payload,))
        conn.commit()
    finally:
        conn.close()


def turn_payload(text: str, *, tenant: str = "hermes", person: str = "default", key: str) -> str:
    return json.dumps(
        {
            "kind": "conversation",
            "text": text,
            "captured_at": 1_700_000_000,
            "recorded_at": 1_700_000_000,
            "ingestion_key": f"hermes-turn:{key}",
            "claim": None,
            "tenant_id": tenant,
            "person_id": person,
        }
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "zkr-hermes-store"]


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    hermes_home = tmp_path / "hermes"
    (hermes_home / "plugins").mkdir(parents=True)
    (hermes_home / "plugins" / "zkr").symlink_to(PLUGIN_DIR, target_is_directory=True)
    (hermes_home / "config.yaml").write_text("memory:\n  provider: zkr\n")
    wrapper = real_zkr_wrapper(tmp_path / "bin" / "zkr")
    log = tmp_path / "zkr-calls.log"
    monkeypatch.setenv("HERMES_HOME", str(hermes_home))
    monkeypatch.setenv("ZKR_BIN", wrapper)
    monkeypatch.setenv("ZKR_TEST_LOG", str(log))
    for name in (
        "ZKR_DB",
        "ZKR_TENANT_ID",
        "ZKR_PERSON_ID",
        "ZKR_TIMEOUT_SECONDS",
        "ZKR_TRANSPORT",
        "ZKR_PREFETCH_MIN_RELEVANCE",
    ):
        monkeypatch.delenv(name, raising=False)
    # Each test imports the plugin afresh through Hermes' loader.
    for name in [n for n in sys.modules if n == PLUGIN_MODULE or n.startswith(PLUGIN_MODULE + ".")]:
        del sys.modules[name]
    state = Home(hermes_home, wrapper, log)
    yield state
    for provider in state.created:
        with contextlib.suppress(Exception):
            provider.shutdown()


# -- packaging and discovery -----------------------------------------------------------


def test_runs_against_hermes_agent_0_19_0() -> None:
    assert importlib.metadata.version("hermes-agent") == "0.19.0"


def test_manifest() -> None:
    import yaml

    manifest = yaml.safe_load((PLUGIN_DIR / "plugin.yaml").read_text())
    assert manifest["name"] == "zkr"
    assert manifest["version"] == "0.1.0"
    assert "zkr" in manifest["description"]
    assert manifest["kind"] == "exclusive"  # Hermes routes it to memory-provider discovery


def test_registers_through_hermes_plugin_discovery(home: Home) -> None:
    assert hermes_memory.find_provider_dir("zkr") == home.path / "plugins" / "zkr"
    assert "zkr" in hermes_memory.list_memory_provider_names()
    found = {
        name: (desc, available)
        for name, desc, available in hermes_memory.discover_memory_providers()
    }
    assert found["zkr"][1] is True
    assert "zkr library" in found["zkr"][0]

    provider = home.load()
    assert isinstance(provider, MemoryProvider)
    assert provider.name == "zkr"
    assert type(provider).__module__ == f"{PLUGIN_MODULE}.provider"
    assert provider.is_available()

    # The module exposes register(ctx) → ctx.register_memory_provider(<provider>).
    collected: list[Any] = []

    class Ctx:
        def register_memory_provider(self, p: Any) -> None:
            collected.append(p)

    sys.modules[PLUGIN_MODULE].register(Ctx())
    assert len(collected) == 1 and collected[0].name == "zkr" and collected[0] is not provider


def test_hermes_cli_reports_the_provider(home: Home) -> None:
    """`hermes memory status`, Hermes' own command, finds and activates the plugin."""
    hermes = Path(sys.executable).with_name("hermes")
    proc = subprocess.run(
        [str(hermes), "memory", "status"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HERMES_HOME": str(home.path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Provider:  zkr" in proc.stdout
    assert "available ✓" in proc.stdout
    assert "zkr  (local) ← active" in proc.stdout


def test_unavailable_when_binary_is_missing(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZKR_BIN", str(home.path / "no-such-zkr"))
    assert home.load().is_available() is True  # the library is importable: no binary needed
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    assert home.load().is_available() is False
    found = {name: available for name, _, available in hermes_memory.discover_memory_providers()}
    assert found["zkr"] is False
    monkeypatch.setenv("ZKR_BIN", "definitely-not-a-zkr-binary-on-path")
    assert home.load().is_available() is False


# -- the scripted session ----------------------------------------------------------------


def test_scripted_session_through_hermes_memory_manager(home: Home) -> None:
    """initialize → sync_turn ×3 → prefetch → store/search/correct/reflect/delete → shutdown."""
    provider = home.load()
    manager = MemoryManager()
    manager.add_provider(provider)
    # The kwargs Hermes' agent_init passes for a CLI session, plus a gateway user id.
    manager.initialize_all(
        session_id="session-1",
        platform="cli",
        hermes_home=str(home.path),
        agent_context="primary",
        agent_identity="default",
        agent_workspace="hermes",
        user_id="alice",
    )
    scope = {"tenant": "hermes", "person": "alice"}
    assert "# zkr Memory" in manager.build_system_prompt()

    # The agent attributes Hermes' tool injection reads (no LLM-backed AIAgent needed).
    agent = SimpleNamespace(_memory_manager=manager, tools=[], enabled_toolsets=None)
    assert inject_memory_provider_tools(agent) == 5
    assert {t["function"]["name"] for t in agent.tools} == TOOL_NAMES

    turns = [
        ("I drink oolong tea every morning", "Noted, oolong in the morning."),
        ("My sister Maya lives in Lisbon", "Got it, Maya is in Lisbon."),
        ("I am training for the Berlin marathon", "Good luck with the marathon!"),
    ]
    for user, assistant in turns:
        manager.sync_all(user, assistant, session_id="session-1")
    assert manager.flush_pending(timeout=30)
    assert provider.worker.flush(60), "queued turns were not delivered"

    stored_turns = home.zkr.turn_sources(**scope)
    assert sorted(s["content"] for s in stored_turns) == sorted(
        f"User: {u}\nAssistant: {a}" for u, a in turns
    )
    for source in stored_turns:
        assert source["kind"] == "conversation"
        assert source["captured_at"] == source["recorded_at"]  # a turn: captured = recorded

    recall = manager.prefetch_all("what tea do I drink?")
    assert "[zkr cited memory]" in recall
    assert "oolong" in recall and "[evidence: " in recall

    now = int(time.time())
    stored = json.loads(
        manager.handle_tool_call(
            "zkr_store",
            {
                "content": "Sam said he works at Acme",
                "subject": "Sam",
                "predicate": "employer",
                "value": "Acme",
                "captured_at": now - 3600,
                "valid_from": now - 86400,
                "recorded_at": now - 60,
                "tenant_id": "intruder",  # never honoured
                "person_id": "mallory",
            },
        )
    )
    assert set(stored) == {"claim_id", "evidence_id", "source_id"}, stored

    found = json.loads(manager.handle_tool_call("zkr_search", {"query": "Acme", "limit": 5}))
    assert stored["claim_id"] in {item["memory"]["id"] for item in found["items"]}

    corrected = json.loads(
        manager.handle_tool_call(
            "zkr_correct",
            {
                "claim_id": stored["claim_id"],
                "content": "Sam corrected himself with a detailed note: he now works at Globex",
                "value": "Globex",
                "valid_at": now + 5,
                "recorded_at": now + 5,
            },
        )
    )
    assert corrected["superseded_claim_id"] == stored["claim_id"]

    turn_evidence = next(
        item["evidence_ids"][0] for item in home.zkr.search("oolong", **scope)["items"]
    )
    kept_review = json.loads(
        manager.handle_tool_call(
            "zkr_reflect",
            {
                "day": "2026-07-21",
                "summary": "Talked about tea habits",
                "evidence_ids": [turn_evidence],
            },
        )
    )
    dropped_review = json.loads(
        manager.handle_tool_call(
            "zkr_reflect",
            {
                "day": "2026-07-21",
                "summary": "Sam changed jobs",
                "evidence_ids": [corrected["evidence_id"]],
            },
        )
    )
    assert set(kept_review) == {"id"} and set(dropped_review) == {"id"}

    deleted = json.loads(
        manager.handle_tool_call(
            "zkr_delete", {"source_id": corrected["source_id"], "deleted_at": now + 10}
        )
    )
    assert deleted["source_id"] == corrected["source_id"]
    assert deleted["claim_count"] == 1
    assert json.loads(manager.handle_tool_call("zkr_search", {"query": "detailed"}))["items"] == []

    manager.on_session_end([])
    manager.shutdown_all()
    assert not provider.worker.alive

    # --- what zkr itself now holds (through its CLI) -----------------------------------
    records = home.zkr.records(**scope)
    sources = {s["id"]: s for s in home.zkr.sources(**scope)}
    assert len(sources) == 5  # three turns, the stored fact, the correction
    fact = sources[stored["source_id"]]
    assert (fact["captured_at"], fact["recorded_at"]) == (now - 3600, now - 60)
    assert fact["deleted_at"] is None
    assert sources[corrected["source_id"]]["deleted_at"] == now + 10

    claims: dict[str, dict[str, Any]] = {}
    for record in records:
        if record["kind"] == "claim":
            claims[record["record"]["id"]] = record["record"]
    old, new = claims[stored["claim_id"]], claims[corrected["claim_id"]]
    # Three distinct clocks: valid_from (now-86400) ≠ captured_at (now-3600) ≠ recorded_at (now-60).
    assert old["valid_time"]["from"] == now - 86400
    assert old["recorded_time"]["from"] == now - 60
    assert (old["subject"], old["predicate"], old["value"]) == ("Sam", "employer", "Acme")
    assert old["status"] == "superseded"
    assert new["value"] == "Globex" and new["status"] == "retracted"
    assert any(r["kind"] == "correction" for r in records)

    reviews = home.zkr("reviews", {"limit": 10}, **scope)
    assert [(r["id"], r["evidence_ids"]) for r in reviews] == [(kept_review["id"], [turn_evidence])]

    # Nothing leaked into the scope the model tried to use.
    assert home.zkr.records(tenant="intruder", person="mallory") == []

    # Every CLI request carried the configured scope.
    calls = home.logged()
    assert calls and all((r["tenant_id"], r["person_id"]) == ("hermes", "alice") for _, r in calls)


# -- tools and schemas -------------------------------------------------------------------


def test_tool_schemas(home: Home) -> None:
    schemas = {s["name"]: s for s in home.load().get_tool_schemas()}
    assert set(schemas) == TOOL_NAMES
    for schema in schemas.values():
        params = schema["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        assert not {"tenant_id", "person_id", "occurred_at"} & set(params["properties"])
    store = schemas["zkr_store"]["parameters"]["properties"]
    assert {"captured_at", "valid_from", "recorded_at"} <= set(store) and "valid_at" not in store
    correct = schemas["zkr_correct"]["parameters"]["properties"]
    assert {"valid_at", "recorded_at"} <= set(correct) and "occurred_at" not in correct
    assert schemas["zkr_search"]["parameters"]["properties"]["limit"]["maximum"] == 50
    assert schemas["zkr_reflect"]["parameters"]["required"] == ["day", "summary", "evidence_ids"]


def test_store_sends_distinct_times_and_defaults(home: Home) -> None:
    provider = home.start()
    result = json.loads(
        provider.handle_tool_call(
            "zkr_store",
            {
                "content": "Prefers window seats",
                "captured_at": 1000,
                "valid_from": 900,
                "recorded_at": 1100,
            },
        )
    )
    assert set(result) == {"claim_id", "evidence_id", "source_id"}
    [(command, request)] = home.logged()
    assert command == "remember"
    assert request == {
        "kind": "conversation",
        "text": "Prefers window seats",
        "captured_at": 1000,
        "recorded_at": 1100,
        "claim": {
            "subject": "user",
            "predicate": "remembers",
            "value": "Prefers window seats",
            "kind": "fact",
            "valid_from": 900,
        },
        "tenant_id": "hermes",
        "person_id": "default",
    }


def test_time_defaults_and_explicit_null(home: Home) -> None:
    provider = home.start()
    before = int(time.time())
    # valid_from follows captured_at (never recorded_at); explicit null means "default".
    provider.handle_tool_call(
        "zkr_store",
        {"content": "Moved to Porto", "captured_at": 5000, "valid_from": None, "recorded_at": None},
    )
    provider.handle_tool_call("zkr_store", {"content": "Likes jazz", "claim_kind": None})
    provider.handle_tool_call(
        "zkr_store", {"content": "Birthday party", "captured_at": "2026-07-21T09:30:00Z"}
    )
    after = int(time.time())
    (_, first), (_, second), (_, third) = home.logged()
    assert first["captured_at"] == 5000 and first["claim"]["valid_from"] == 5000
    assert before <= first["recorded_at"] <= after
    assert second["claim"]["kind"] == "fact"
    assert second["captured_at"] == second["claim"]["valid_from"] == second["recorded_at"]
    assert third["captured_at"] == third["claim"]["valid_from"] == 1784626200


def test_store_then_correct_and_delete_within_one_second(home: Home) -> None:
    """Default times advance past the previous default: a correction or deletion issued in the
    same second as the write it amends must still succeed (zkr requires later intervals)."""
    provider = home.start()
    provider._clock = lambda: 1_800_000_000.0  # a frozen wall clock: every call in one second
    stored = json.loads(
        provider.handle_tool_call(
            "zkr_store", {"content": "User drinks oat milk", "predicate": "drinks", "value": "oat"}
        )
    )
    corrected = json.loads(
        provider.handle_tool_call(
            "zkr_correct",
            {"claim_id": stored["claim_id"], "content": "Switched to soy milk", "value": "soy"},
        )
    )
    assert corrected["superseded_claim_id"] == stored["claim_id"]
    deleted = json.loads(
        provider.handle_tool_call("zkr_delete", {"source_id": corrected["source_id"]})
    )
    assert deleted["claim_count"] == 1
    times = [request.get("recorded_at", request.get("deleted_at")) for _, request in home.logged()]
    assert times == [1_800_000_000, 1_800_000_001, 1_800_000_002]


def test_correcting_a_superseded_claim_names_the_current_one(home: Home) -> None:
    """zkr's message naming the successor reaches the model, so it can correct the right claim."""
    provider = home.start()
    provider._clock = lambda: 1_800_000_000.0
    stored = json.loads(
        provider.handle_tool_call(
            "zkr_store",
            {"content": "User lives in Berlin", "predicate": "lives_in", "value": "Berlin"},
        )
    )
    first = json.loads(
        provider.handle_tool_call(
            "zkr_correct",
            {"claim_id": stored["claim_id"], "content": "Moved to Rome", "value": "Rome"},
        )
    )
    again = json.loads(
        provider.handle_tool_call(
            "zkr_correct",
            {"claim_id": stored["claim_id"], "content": "Moved to Oslo", "value": "Oslo"},
        )
    )
    assert again["detail"] == (
        f"claim {stored['claim_id']} was superseded by claim {first['claim_id']}"
        f"; the current claim is {first['claim_id']} (correct the current claim)"
    )


def test_a_failed_initialize_is_reported_for_each_turn(
    home: Home, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = home.path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("ZKR_DB", str(blocker / "zkr.db"))
    provider = home.load()
    with pytest.raises(OSError):  # Hermes catches this and only logs it
        provider.initialize("session-1", hermes_home=str(home.path), agent_context="primary")
    with caplog.at_level(logging.WARNING):
        provider.sync_turn("remember this", "ok")
    assert provider.dropped_turns == 1
    assert "turn not stored" in caplog.text


def test_an_unavailable_review_evidence_id_reaches_the_model(home: Home) -> None:
    provider = home.start()
    result = json.loads(
        provider.handle_tool_call(
            "zkr_reflect", {"day": "2026-11-30", "summary": "s", "evidence_ids": ["nope"]}
        )
    )
    assert result == {"error": "zkr operation failed", "detail": "evidence nope is unavailable"}


@pytest.mark.parametrize(
    ("tool", "args", "detail"),
    [
        ("zkr_search", {"query": "x", "limit": 0}, "limit must be an integer from 1 to 50"),
        ("zkr_search", {"query": "x", "limit": 51}, "limit must be an integer from 1 to 50"),
        ("zkr_search", {"query": "x", "limit": True}, "limit must be an integer from 1 to 50"),
        ("zkr_search", {"query": "   "}, "query must not be empty"),
        ("zkr_search", {}, "query is required"),
        ("zkr_search", {"query": "x", "as_of": {"valid_at": 1}}, "as_of.recorded_at is required"),
        ("zkr_store", {"content": "x", "claim_kind": "rumour"}, "claim_kind must be one of"),
        ("zkr_store", {"content": "x", "source_kind": "email"}, "source_kind must be one of"),
        (
            "zkr_store",
            {"content": "x", "captured_at": 1.5},
            "captured_at must be integer Unix seconds",
        ),
        (
            "zkr_store",
            {"content": "x", "captured_at": "2026-07-21T09:30"},
            "captured_at needs a UTC offset",
        ),
        ("zkr_store", {"content": 42}, "content must be a string"),
        ("zkr_correct", {"claim_id": "c", "content": "x"}, "value is required"),
        ("zkr_delete", {"source_id": ""}, "source_id must not be empty"),
        (
            "zkr_reflect",
            {"day": "21/07/2026", "summary": "s", "evidence_ids": ["e"]},
            "day must be an ISO date",
        ),
        (
            "zkr_reflect",
            {"day": "2026-07-21", "summary": "s", "evidence_ids": []},
            "evidence_ids must be a non-empty array",
        ),
        (
            "zkr_reflect",
            {"day": "2026-07-21", "summary": "s", "evidence_ids": ["e", ""]},
            "evidence_ids must hold non-empty strings",
        ),
    ],
)
def test_invalid_arguments_never_reach_the_cli(
    home: Home, tool: str, args: dict[str, Any], detail: str
) -> None:
    provider = home.start()
    error = json.loads(provider.handle_tool_call(tool, args))
    assert error["error"] == "zkr operation failed"
    assert error["detail"].startswith(detail)
    assert home.logged() == []


def test_unknown_tool_and_bad_json(home: Home) -> None:
    provider = home.start()
    assert json.loads(provider.handle_tool_call("zkr_nope", {})) == {
        "error": "Unknown tool: zkr_nope"
    }
    bad = json.loads(provider.handle_tool_call("zkr_search", "{not json"))
    assert bad == {"error": "zkr operation failed", "detail": "arguments must be a JSON object"}
    ok = json.loads(provider.handle_tool_call("zkr_search", '{"query": "anything"}'))
    assert ok["items"] == [] and ok["gaps"] == ["no cited memory matched"]


def test_scope_overrides_model_supplied_scope(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZKR_TENANT_ID", "acme")
    monkeypatch.setenv("ZKR_PERSON_ID", "pat")
    provider = home.start(user_id="someone-else")
    provider.handle_tool_call("zkr_search", {"query": "coffee", "tenant_id": "x", "person_id": "y"})
    [(command, request)] = home.logged()
    assert command == "search"
    assert request == {"query": "coffee", "limit": 10, "tenant_id": "acme", "person_id": "pat"}


def test_reflect_maps_to_review_and_prefetch_cites_evidence(home: Home) -> None:
    provider = home.start()
    stored = json.loads(provider.handle_tool_call("zkr_store", {"content": "Allergic to peanuts"}))
    review = json.loads(
        provider.handle_tool_call(
            "zkr_reflect",
            {
                "day": "2026-07-21",
                "summary": "Health notes",
                "evidence_ids": [stored["evidence_id"]],
            },
        )
    )
    assert set(review) == {"id"}
    assert home.logged()[-1][0] == "review"
    recall = provider.prefetch("peanuts")
    assert recall.splitlines()[0] == "[zkr cited memory]"
    assert f"[evidence: {stored['evidence_id']}]" in recall
    assert provider.prefetch("   ") == ""


def test_prefetch_leaves_out_weak_partial_matches(home: Home) -> None:
    """Relevance is absolute: an item holding a small share of the query is not recalled."""
    provider = home.start()
    provider.handle_tool_call("zkr_store", {"content": "Allergic to peanuts"})
    assert "peanuts" in provider.prefetch("peanuts")
    weak = "peanuts zanzibar quokka marmalade harpsichord trombone xylophone"
    assert provider.prefetch(weak) == ""


# -- the CLI runner ----------------------------------------------------------------------


def run_tool_with_bin(home: Home, monkeypatch: pytest.MonkeyPatch, script: str) -> dict[str, Any]:
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    monkeypatch.setenv("ZKR_BIN", script)
    provider = home.start("subagent")  # read-only context: no queue noise
    return json.loads(provider.handle_tool_call("zkr_search", {"query": "anything"}))


def test_missing_binary_is_a_redacted_tool_error(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.db.touch()
    missing = str(home.path / "secret-dir" / "zkr")
    result = run_tool_with_bin(home, monkeypatch, missing)
    assert result == FAILED
    assert "secret-dir" not in json.dumps(result)


@pytest.mark.parametrize(
    "body",
    [
        'echo "not json"',
        'echo "[1, 2]"',  # valid JSON but not an object
        'echo \'{"error":"Traceback (most recent call last): /home/me/.ssh/id_rsa"}\' >&2; exit 1',
        'echo "Traceback: secret-token-123" >&2; exit 3',
        "kill -9 $$",
    ],
)
def test_runner_failures_are_redacted(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str
) -> None:
    home.db.touch()
    script = write_script(tmp_path / "fake" / "zkr", f"cat >/dev/null\n{body}\n")
    assert run_tool_with_bin(home, monkeypatch, script) == FAILED


def test_known_zkr_messages_are_passed_on(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home.db.touch()
    script = write_script(
        tmp_path / "fake" / "zkr",
        'cat >/dev/null\necho \'{"error":"record not found"}\' >&2\nexit 1\n',
    )
    assert run_tool_with_bin(home, monkeypatch, script) == {
        "error": "zkr operation failed",
        "detail": "record not found",
    }


@pytest.mark.parametrize("stream", ["", ">&2"])
def test_output_cap_kills_a_flooding_child(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stream: str
) -> None:
    home.db.touch()
    script = write_script(
        tmp_path / "fake" / "zkr",
        f"cat >/dev/null\nhead -c 3000000 /dev/zero | tr '\\0' M {stream}\nsleep 60\n",
    )
    started = time.monotonic()
    result = run_tool_with_bin(home, monkeypatch, script)
    assert result == FAILED and "MMMM" not in json.dumps(result)
    assert time.monotonic() - started < 20  # killed at the cap, not at the timeout


def test_timeout_kills_the_child_process_group(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home.db.touch()
    pid_file = tmp_path / "sleeper.pid"
    script = write_script(
        tmp_path / "fake" / "zkr",
        f"cat >/dev/null\nsleep 300 &\necho $! > {pid_file}\nwait\n",
    )
    monkeypatch.setenv("ZKR_TIMEOUT_SECONDS", "1")
    started = time.monotonic()
    assert run_tool_with_bin(home, monkeypatch, script) == FAILED
    assert time.monotonic() - started < 10
    sleeper = int(pid_file.read_text())
    assert wait_for(lambda: not _alive(sleeper), 5), "the wrapper's child survived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def test_argv_only_no_shell(home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home.db.touch()
    argv_file = tmp_path / "argv.txt"
    odd_dir = tmp_path / "a b;touch pwned;$(id)"
    script = write_script(
        odd_dir / "zkr",
        f"""
        for a in "$@"; do printf '%s\\n' "$a" >> "{argv_file}"; done
        cat >/dev/null
        echo '{{"gaps":[],"items":[],"query":"q"}}'
        """,
    )
    result = run_tool_with_bin(home, monkeypatch, script)
    assert result == {"gaps": [], "items": [], "query": "q"}
    assert argv_file.read_text().splitlines() == ["--db", str(home.db), "search"]
    assert not (Path.cwd() / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_prefetch_swallows_every_runner_failure(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home.db.touch()
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    for i, body in enumerate(['echo "not json"', 'echo "[]"', 'echo "{\\"items\\": 7}"', "exit 1"]):
        monkeypatch.setenv(
            "ZKR_BIN", write_script(tmp_path / f"fake{i}" / "zkr", f"cat >/dev/null\n{body}\n")
        )
        assert home.start("subagent").prefetch("anything") == ""
    monkeypatch.setenv("ZKR_BIN", str(tmp_path / "missing"))
    assert home.start("subagent").prefetch("anything") == ""


# -- configuration -----------------------------------------------------------------------


def test_default_configuration(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZKR_BIN")
    provider = home.load()
    settings = provider.settings
    # Before initialize the database already lives in HERMES_HOME, never in the cwd.
    assert settings.db_path == str(home.db) and settings.queue_path == str(home.queue)
    assert settings.binary == "zkr" and settings.timeout == 30.0
    assert settings.transport == "auto"
    assert settings.prefetch_min_relevance == module("settings").DEFAULT_PREFETCH_MIN_RELEVANCE
    assert provider.transport == "library"

    provider.initialize("s", hermes_home=str(home.path), platform="cli", agent_context="subagent")
    assert (provider.scope.tenant_id, provider.scope.person_id) == ("hermes", "default")
    provider.initialize(
        "s",
        hermes_home=str(home.path),
        agent_context="subagent",
        agent_workspace="team",
        user_id="",
        user_id_alt="alt-7",
        agent_identity="coder",
    )
    assert (provider.scope.tenant_id, provider.scope.person_id) == ("team", "alt-7")
    provider.initialize(
        "s", hermes_home=str(home.path), agent_context="subagent", agent_identity="coder"
    )
    assert provider.scope.person_id == "coder"


def test_config_yaml_and_env_precedence(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (home.path / "config.yaml").write_text(
        "memory:\n  provider: zkr\n  zkr:\n    db: data/memory.db\n    tenant_id: cfg-tenant\n"
        "    person_id: cfg-person\n    timeout_seconds: 12\n"
    )
    provider = home.load()
    provider.initialize("s", hermes_home=str(home.path), agent_context="subagent", user_id="u1")
    assert provider.settings.db_path == str(home.path / "data" / "memory.db")
    assert provider.settings.queue_path == str(home.path / "data" / "memory.db.queue")
    assert provider.settings.timeout == 12.0
    assert (provider.scope.tenant_id, provider.scope.person_id) == ("cfg-tenant", "cfg-person")

    elsewhere = tmp_path / "elsewhere" / "z.db"
    monkeypatch.setenv("ZKR_DB", str(elsewhere))
    monkeypatch.setenv("ZKR_TENANT_ID", "env-tenant")
    monkeypatch.setenv("ZKR_PERSON_ID", "  ")  # blank = unset
    provider.initialize("s", hermes_home=str(home.path), agent_context="primary", user_id="u1")
    assert provider.settings.db_path == str(elsewhere)
    assert (provider.scope.tenant_id, provider.scope.person_id) == ("env-tenant", "cfg-person")
    assert elsewhere.parent.is_dir()  # primary initialize creates the database directory
    assert provider.backup_paths() == [str(elsewhere), str(elsewhere) + ".queue"]
    monkeypatch.delenv("ZKR_DB")
    assert provider.backup_paths() == []  # inside HERMES_HOME: Hermes backs it up itself


# -- write-behind queue ------------------------------------------------------------------


def test_sync_turn_is_durable_before_it_returns(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    monkeypatch.setenv("ZKR_BIN", str(home.path / "missing-zkr"))
    provider = home.start(user_id="alice")
    before = int(time.time())
    provider.sync_turn("  My cat is called Miso  ", " Cute name! ", session_id="session-1")
    [row] = queue_rows(home.queue)  # on disk as soon as sync_turn returned
    payload = json.loads(row["payload"])
    assert payload["text"] == "User: My cat is called Miso\nAssistant: Cute name!"
    assert payload["kind"] == "conversation" and payload["claim"] is None
    assert payload["ingestion_key"].startswith("hermes-turn:")
    assert payload["captured_at"] == payload["recorded_at"] >= before
    assert (payload["tenant_id"], payload["person_id"]) == ("hermes", "alice")
    assert (row["tenant_id"], row["person_id"]) == ("hermes", "alice")
    provider.sync_turn("   ", "ignored")  # blank user text: nothing queued
    assert len(queue_rows(home.queue)) == 1


def test_missing_binary_keeps_turns_pending_then_recovers(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    monkeypatch.setenv("ZKR_BIN", str(home.path / "missing-zkr"))
    first = home.start()
    first.sync_turn("Remember the blue umbrella", "Sure.")
    first.shutdown()
    [row] = queue_rows(home.queue)
    # An unavailable binary is not the payload's fault: no attempt is burnt on it.
    assert row["attempts"] == 0 and row["last_error"] == "zkr unavailable"
    assert queue_rows(home.queue, "failed_turns") == []

    monkeypatch.delenv("ZKR_TRANSPORT")  # the library in-process now
    second = home.start()  # initialize recovers the leftover turn
    assert second.transport == "library"
    second.shutdown()  # and shutdown flushes whatever is left
    assert queue_rows(home.queue) == []
    assert "blue umbrella" in second.prefetch("umbrella")
    assert len(home.zkr.turn_sources(tenant="hermes", person="default")) == 1


KILL_CHILD = """
import os, sys, time
import plugins.memory as hermes_memory
provider = hermes_memory.load_memory_provider("zkr")
provider.initialize("kill-test", hermes_home=os.environ["HERMES_HOME"], platform="cli",
                    agent_context="primary")
for i in range(3):
    provider.sync_turn(f"turn number {i} token{i}x", f"ack {i}")
print("queued", flush=True)
time.sleep(600)
"""


def test_killed_mid_flush_then_restart_loses_and_duplicates_nothing(
    home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    counter, marker = tmp_path / "calls", tmp_path / "hung.pid"
    # Call 2 commits to zkr for real, then hangs before the plugin sees the result.
    hanging = write_script(
        tmp_path / "hang" / "zkr",
        f"""
        n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{counter}"
        if [ "$n" = 2 ]; then
          "{sys.executable}" -m zkr "$@" > /dev/null
          echo $$ > "{marker}.tmp"; mv "{marker}.tmp" "{marker}"
          exec sleep 300
        fi
        exec "{sys.executable}" -m zkr "$@"
        """,
    )
    script = tmp_path / "child.py"
    script.write_text(KILL_CHILD)
    env = {**os.environ, "ZKR_BIN": hanging, "ZKR_TIMEOUT_SECONDS": "300", "ZKR_TRANSPORT": "cli"}
    env.pop("ZKR_TEST_LOG", None)
    child = subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    hung_pid = None
    try:
        assert wait_for(marker.exists, 90), "the worker never reached the second turn"
        hung_pid = int(marker.read_text())
        child.kill()  # SIGKILL the Hermes process mid-flush
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        if hung_pid is not None:
            os.killpg(hung_pid, signal.SIGKILL)

    scope = {"tenant": "hermes", "person": "default"}
    # Turn 0 landed and left the queue; turn 1 landed but is still queued; turn 2 never ran.
    assert len(queue_rows(home.queue)) == 2
    assert len(home.zkr.turn_sources(**scope)) == 2

    provider = home.start()  # restart: recovery replays the two rows
    provider.shutdown()
    assert queue_rows(home.queue) == []
    assert queue_rows(home.queue, "failed_turns") == []
    turns = home.zkr.turn_sources(**scope)
    assert sorted(s["content"] for s in turns) == [
        f"User: turn number {i} token{i}x\nAssistant: ack {i}" for i in range(3)
    ]
    assert len({s["ingestion_key"] for s in turns}) == 3


def test_out_of_scope_rows_are_quarantined(home: Home) -> None:
    module_queue(home)
    insert_raw_row(
        home.queue, turn_payload("foreign secret turn", tenant="other", person="mallory", key="f1")
    )
    insert_raw_row(home.queue, turn_payload("legacy local turn", key="l1"))
    provider = home.start()
    provider.sync_turn("local fresh turn", "ok")
    provider.shutdown()

    assert queue_rows(home.queue) == []
    [failed] = queue_rows(home.queue, "failed_turns")
    assert failed["last_error"] == "queued payload outside provider scope"
    assert failed["attempts"] == 1 and "foreign secret" in failed["payload"]
    recall = provider.prefetch("local turn")
    assert "legacy local turn" in recall and "local fresh turn" in recall
    assert "foreign" not in provider.prefetch("foreign secret")
    assert home.zkr.records(tenant="other", person="mallory") == []


def test_other_scopes_rows_wait_for_their_owner(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway serves several users from one queue: nobody quarantines another's turns."""
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    monkeypatch.setenv("ZKR_BIN", str(home.path / "missing-zkr"))
    bob = home.start(user_id="bob")
    bob.sync_turn("Bob likes sailing", "Nice.")
    bob.shutdown()

    monkeypatch.delenv("ZKR_TRANSPORT")
    alice = home.start(user_id="alice")
    alice.sync_turn("Alice likes chess", "Nice.")
    alice.shutdown()
    [row] = queue_rows(home.queue)
    assert row["person_id"] == "bob" and queue_rows(home.queue, "failed_turns") == []
    assert [s["content"] for s in home.zkr.turn_sources(tenant="hermes", person="alice")] == [
        "User: Alice likes chess\nAssistant: Nice."
    ]

    bob = home.start(user_id="bob")
    bob.shutdown()
    assert queue_rows(home.queue) == []
    assert [s["content"] for s in home.zkr.turn_sources(tenant="hermes", person="bob")] == [
        "User: Bob likes sailing\nAssistant: Nice."
    ]


@pytest.mark.parametrize("context", ["cron", "subagent", "flush"])
def test_non_primary_context_writes_nothing(home: Home, context: str) -> None:
    before = set(worker_threads())
    provider = home.start(context)
    provider.sync_turn("Cron prompt: summarise the news", "Here is the news")
    stored = json.loads(provider.handle_tool_call("zkr_store", {"content": "x"}))
    assert stored == {
        "error": "zkr operation failed",
        "detail": f"zkr writes are disabled in the {context} agent context",
    }
    for tool in ("zkr_correct", "zkr_delete", "zkr_reflect"):
        assert "error" in json.loads(provider.handle_tool_call(tool, {}))
    assert [s["name"] for s in provider.get_tool_schemas()] == ["zkr_search"]
    assert "read-only" in provider.system_prompt_block()
    assert provider.prefetch("news") == ""
    assert json.loads(provider.handle_tool_call("zkr_search", {"query": "news"}))["items"] == []
    provider.on_session_end([])
    provider.shutdown()

    assert provider.worker is None and set(worker_threads()) == before
    assert not home.db.exists()
    assert not home.queue.exists() and not Path(str(home.queue) + ".lock").exists()
    assert home.logged() == []  # zkr was never even started


def test_non_primary_context_leaves_the_primary_queue_alone(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZKR_TRANSPORT", "cli")
    monkeypatch.setenv("ZKR_BIN", str(home.path / "missing-zkr"))
    primary = home.start(user_id="alice")
    primary.sync_turn("Alice turn waiting in the queue", "ok")
    primary.shutdown()
    rows_before = queue_rows(home.queue)
    stat_before = home.queue.stat()

    monkeypatch.delenv("ZKR_TRANSPORT")
    home.zkr(
        "remember",
        {
            "kind": "document",
            "text": "Shared handbook about kites",
            "captured_at": 1,
            "recorded_at": 2,
        },
        tenant="hermes",
        person="default",
    )
    for context in ("cron", "subagent", "flush"):
        reader = home.start(context)  # different scope (person "default") and a working binary
        assert "kites" in reader.prefetch("kites")  # reads still work
        reader.sync_turn("Cron output", "done")
        reader.shutdown()
    assert queue_rows(home.queue) == rows_before
    assert home.queue.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert queue_rows(home.queue, "failed_turns") == []


def test_duplicate_and_invalid_rows_drained_by_two_providers(home: Home) -> None:
    module_queue(home)
    valid = turn_payload("shared duplicate turn", key="dup-1")
    insert_raw_row(home.queue, "{this is not json")
    insert_raw_row(home.queue, valid)
    insert_raw_row(home.queue, valid)
    one, two = home.start(), home.start()
    one.shutdown()
    two.shutdown()

    assert queue_rows(home.queue) == []
    [failed] = queue_rows(home.queue, "failed_turns")
    assert failed["last_error"] == "invalid queued payload" and failed["attempts"] == 1
    [source] = home.zkr.turn_sources(tenant="hermes", person="default")
    assert source["ingestion_key"] == "hermes-turn:dup-1"

    cron = home.start("cron")
    cron.sync_turn("cron turn", "never stored")
    cron.shutdown()
    assert queue_rows(home.queue) == []


def test_poison_row_is_quarantined_after_three_attempts(home: Home) -> None:
    module_queue(home)
    insert_raw_row(home.queue, turn_payload("", key="poison"))  # zkr rejects empty text
    provider = home.start()
    provider.sync_turn("a later valid turn about kayaks", "ok")
    assert wait_for(lambda: queue_rows(home.queue) == [], 60)
    provider.shutdown()

    [failed] = queue_rows(home.queue, "failed_turns")
    assert failed["last_error"] == "zkr command failed" and failed["attempts"] == 3
    assert json.loads(failed["payload"])["ingestion_key"] == "hermes-turn:poison"
    assert "kayaks" in provider.prefetch("kayaks")


def test_oversized_turn_is_not_queued(home: Home) -> None:
    provider = home.start()
    provider.sync_turn("x" * 1_048_576, "too big")
    assert queue_rows(home.queue) == []
    [marker] = queue_rows(home.queue, "failed_turns")
    assert marker["last_error"] == "turn payload exceeds 1048576 bytes"
    assert len(marker["payload"]) < 1000  # a trace of the drop, not the content
    assert provider.dropped_turns == 1
    provider.shutdown()
    assert home.zkr.turn_sources(tenant="hermes", person="default") == []


def test_legacy_queue_table_is_upgraded_in_place(home: Home) -> None:
    conn = sqlite3.connect(home.queue)
    conn.execute(
        "CREATE TABLE pending_turns (id INTEGER PRIMARY KEY AUTOINCREMENT, payload TEXT NOT NULL)"
    )
    conn.execute(
        "INSERT INTO pending_turns (payload) VALUES (?)",
        (turn_payload("legacy turn about owls", key="old"),),
    )
    conn.commit()
    conn.close()

    module_queue(home)  # schema setup only
    [row] = queue_rows(home.queue)
    assert row["attempts"] == 0 and row["last_error"] is None
    assert row["tenant_id"] is None and "legacy turn" in row["payload"]
    assert queue_rows(home.queue, "failed_turns") == []  # the table exists and is empty

    provider = home.start()
    provider.shutdown()
    assert queue_rows(home.queue) == []
    assert "owls" in provider.prefetch("owls")


def test_session_end_flushes_queued_turns(home: Home) -> None:
    provider = home.start()
    provider.sync_turn("I keep bees on the roof", "How lovely.")
    provider.on_session_end([{"role": "user", "content": "I keep bees on the roof"}])
    assert queue_rows(home.queue) == []
    assert provider.worker.alive  # a session boundary is not a shutdown
    provider.shutdown()
    assert not provider.worker.alive


def test_a_failing_row_does_not_block_later_turns(home: Home) -> None:
    """One pass tries every row once: the poison row fails, the turn behind it lands."""
    queue = module_queue(home)
    reader = home.start("subagent")  # no worker of its own; we drive one pass at a time
    worker = module("turn_queue").QueueWorker(queue, reader.scope, reader._deliver_queued)
    insert_raw_row(home.queue, turn_payload("", key="poison"))
    insert_raw_row(home.queue, turn_payload("turn about herons", key="ok"))
    results = []
    for expected_attempts in (1, 2):
        results.append(worker.drain_once().value)
        [row] = queue_rows(home.queue)
        assert row["attempts"] == expected_attempts and "poison" in row["payload"]
    results.append(worker.drain_once().value)
    assert results == ["retry", "retry", "idle"]
    assert queue_rows(home.queue) == []
    assert [f["attempts"] for f in queue_rows(home.queue, "failed_turns")] == [3]
    assert [
        s["ingestion_key"] for s in home.zkr.turn_sources(tenant="hermes", person="default")
    ] == ["hermes-turn:ok"]
    assert not worker.alive  # drain_once never started a thread


def test_replay_of_a_deleted_turn_is_not_resurrected(home: Home) -> None:
    module_queue(home)
    payload = turn_payload("turn about a secret plan", key="gone")
    insert_raw_row(home.queue, payload)
    first = home.start()
    first.shutdown()
    scope = {"tenant": "hermes", "person": "default"}
    [source] = home.zkr.turn_sources(**scope)
    home.zkr("delete", {"source_id": source["id"], "deleted_at": 1_700_000_100}, **scope)
    # The same row again, as after a crash between zkr's commit and the row's removal.
    insert_raw_row(home.queue, payload)
    second = home.start()
    second.shutdown()
    assert queue_rows(home.queue) == [] and queue_rows(home.queue, "failed_turns") == []
    [after] = home.zkr.turn_sources(**scope)
    assert after["id"] == source["id"] and after["deleted_at"] == 1_700_000_100
    assert home.zkr.search("secret plan", **scope)["items"] == []


# -- the in-process library transport -----------------------------------------------------


def test_library_transport_needs_no_binary(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """With zkr importable, no zkr process is ever started: ZKR_BIN may not even exist."""
    monkeypatch.setenv("ZKR_BIN", str(home.path / "no-such-zkr"))
    provider = home.start(user_id="alice")
    assert provider.transport == "library" and provider.is_available()
    stored = json.loads(provider.handle_tool_call("zkr_store", {"content": "Plays the cello"}))
    assert set(stored) == {"claim_id", "evidence_id", "source_id"}
    provider.sync_turn("I repair old bicycles on weekends", "Nice hobby.")
    assert provider.worker.flush(30)
    assert "bicycles" in provider.prefetch("bicycles weekends")
    assert "cello" in provider.prefetch("cello")
    provider.shutdown()
    # What the library wrote is what the CLI reads.
    scope = {"tenant": "hermes", "person": "alice"}
    assert [s["content"] for s in home.zkr.turn_sources(**scope)] == [
        "User: I repair old bicycles on weekends\nAssistant: Nice hobby."
    ]
    assert [command for command, _ in home.logged()] == ["remember", "remember", "search", "search"]


def test_library_transport_sees_other_writers(home: Home) -> None:
    provider = home.start()
    assert provider.prefetch("lighthouse") == ""  # opens the database and warms its caches
    home.zkr(
        "remember",
        {
            "kind": "document",
            "text": "The lighthouse keeper is Ada",
            "captured_at": 1,
            "recorded_at": 2,
        },
        tenant="hermes",
        person="default",
    )
    assert "lighthouse keeper is Ada" in provider.prefetch("lighthouse keeper")


def test_library_call_is_bounded_in_time_and_writes_nothing_half(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZKR_TIMEOUT_SECONDS", "0.001")
    provider = home.start()
    text = " ".join(f"word{i}" for i in range(30_000))  # far more than a millisecond of indexing
    assert json.loads(provider.handle_tool_call("zkr_store", {"content": text})) == FAILED
    request = {"kind": "document", "text": text, "captured_at": 1, "recorded_at": 2}
    with pytest.raises(module("runner").ZkrTimeout):
        provider._runner.run("remember", {**request, "tenant_id": "hermes", "person_id": "default"})
    assert home.zkr.sources(tenant="hermes", person="default") == []
    provider.shutdown()
    monkeypatch.delenv("ZKR_TIMEOUT_SECONDS")
    again = home.start()  # a fresh provider on the same file: nothing is stuck or locked
    assert "claim_id" in json.loads(again.handle_tool_call("zkr_store", {"content": "small"}))


def test_library_errors_are_the_clis(home: Home) -> None:
    provider = home.start()
    missing = json.loads(
        provider.handle_tool_call("zkr_correct", {"claim_id": "nope", "content": "x", "value": "y"})
    )
    assert missing == {"error": "zkr operation failed", "detail": "record not found"}
    runner = provider._runner
    with pytest.raises(module("runner").ZkrRequestTooLarge):
        runner.run("remember", {"text": "x" * 1_048_577})
    with pytest.raises(module("runner").ZkrRejected) as rejected:
        runner.run("remember", {"tenant_id": "t", "person_id": "p"})
    assert rejected.value.zkr_message is not None and str(rejected.value) == "zkr command failed"


def test_prefetch_drops_items_below_the_relevance_floor(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = home.start()
    provider.handle_tool_call("zkr_store", {"content": "Kayak trip to the Norway fjords in June"})
    provider.handle_tool_call("zkr_store", {"content": "Bought a kayak paddle"})
    found = json.loads(provider.handle_tool_call("zkr_search", {"query": "kayak Norway fjords"}))

    def best(word: str) -> int:
        return max(i["relevance_basis_points"] for i in found["items"] if word in i["excerpt"])

    strong, weak = best("Norway"), best("paddle")
    assert strong > weak  # the precondition this test relies on
    monkeypatch.setenv("ZKR_PREFETCH_MIN_RELEVANCE", "0")
    provider.initialize("s", hermes_home=str(home.path), agent_context="primary")
    everything = provider.prefetch("kayak Norway fjords")
    assert "Norway fjords" in everything and "paddle" in everything
    monkeypatch.setenv("ZKR_PREFETCH_MIN_RELEVANCE", str(strong))
    provider.initialize("s", hermes_home=str(home.path), agent_context="primary")
    recall = provider.prefetch("kayak Norway fjords")
    assert "Norway fjords" in recall and "paddle" not in recall
