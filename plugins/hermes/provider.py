"""``ZkrMemoryProvider``: zkr as a Hermes Agent memory provider.

zkr is reached in-process through the zkr library when it is importable in Hermes' Python
(:class:`~.library.LibraryRunner`), else through the CLI, one process per operation
(:class:`~.runner.ZkrRunner`); ``ZKR_TRANSPORT`` / ``memory.zkr.transport`` can force either.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agent.memory_provider import MemoryProvider
from tools.registry import tool_error as _host_tool_error

from .library import LibraryRunner, library_available
from .runner import ZkrError, ZkrRequestTooLarge, ZkrRunner, resolve_binary
from .settings import (
    DEFAULT_PREFETCH_MIN_RELEVANCE,
    ENV_BIN,
    ENV_DB,
    ENV_PERSON,
    ENV_PREFETCH_MIN,
    ENV_TENANT,
    ENV_TIMEOUT,
    ENV_TRANSPORT,
    Settings,
    derive_scope,
    load_settings,
)
from .tool_schemas import (
    ALL_SCHEMAS,
    BUILDERS,
    SEARCH_SCHEMA,
    WRITE_TOOLS,
    ArgumentError,
)
from .turn_queue import ERROR_OVERSIZED, MAX_PAYLOAD_BYTES, QueueWorker, Scope, TurnQueue

logger = logging.getLogger(__name__)

PROVIDER_NAME = "zkr"
PRIMARY_CONTEXT = "primary"
TOOL_FAILED = "zkr operation failed"
PREFETCH_LIMIT = 5
# Prefetch asks for this many items, drops those under the relevance floor, keeps PREFETCH_LIMIT.
PREFETCH_SEARCH_LIMIT = 20
PREFETCH_TIMEOUT_SECONDS = 8.0  # Hermes abandons a provider's prefetch after 8 s anyway
PREFETCH_QUERY_MAX_CHARS = 2000
PREFETCH_EXCERPT_MAX_CHARS = 600
SESSION_END_FLUSH_SECONDS = 5.0
SHUTDOWN_FLUSH_SECONDS = 10.0

# zkr's own fixed error messages (CLI contract), safe to hand back to the model so it can fix
# its input. Anything else a failing CLI prints is withheld.
_SAFE_ZKR_MESSAGES = frozenset(
    {
        "record not found",
        "correction timestamps must advance the original valid and recorded intervals",
        "deleted_at cannot predate source recording",
        "deleted_at must advance affected claims' recorded intervals",
        "review needs evidence_ids",
        "ingestion_key conflicts with different memory payload",
        "request exceeds 1048576 bytes",
    }
)
_SAFE_ZKR_PATTERN = re.compile(
    r"[a-z_. ]{1,40} must not be empty"
    r"|evidence [^\s]{1,200} is unavailable"  # review: "evidence <id> is unavailable"
    # correct of a superseded claim names its successor (zkr.store.lifecycle)
    r"|claim [0-9a-f]{32} was superseded by claim [0-9a-f]{32}"
    r"(?:; the current claim is [0-9a-f]{32}|; no claim of that chain is current)?"
    r" \(correct the current claim\)"
)

SYSTEM_PROMPT = (
    "# zkr Memory\n"
    "You have zkr, a local evidence-backed temporal memory. Search it (zkr_search) before "
    "answering anything about the user, their history or earlier conversations. Store only "
    "durable facts, preferences, decisions and events (zkr_store), not chit-chat. When you "
    "use a memory, cite the evidence ids zkr returned. When something has changed, correct "
    "the old claim with zkr_correct instead of storing a conflicting fact; zkr_delete removes "
    "a source and zkr_reflect stores a cited daily review."
)
SYSTEM_PROMPT_READ_ONLY = (
    "# zkr Memory\n"
    "You have read-only access to zkr, a local evidence-backed temporal memory. Search it "
    "(zkr_search) before answering anything about the user or earlier conversations, and "
    "cite the evidence ids zkr returned. This agent context does not write to memory."
)


def tool_error(message: str, **extra: Any) -> str:
    """Hermes' JSON error string for tool results (``{"error": message, ...}``)."""
    return str(_host_tool_error(message, **extra))


def _safe_detail(error: ZkrError) -> dict[str, str]:
    if isinstance(error, ZkrRequestTooLarge):
        return {"detail": "request exceeds 1048576 bytes"}
    message = error.zkr_message
    if message and (message in _SAFE_ZKR_MESSAGES or _SAFE_ZKR_PATTERN.fullmatch(message)):
        return {"detail": message}
    return {}


def _as_text(content: Any) -> str:
    """Turn text, or a list of OpenAI-style content parts, into plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return "" if content is None else str(content)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


class ZkrMemoryProvider(MemoryProvider):  # type: ignore[misc]  # untyped host base
    """Local, evidence-backed temporal memory; zkr stays the only memory authority."""

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._environ = environ
        self._clock = clock
        self._clock_lock = threading.Lock()
        self._last_default_time = 0
        self._settings: Settings = load_settings(None, environ)
        self._runner = self._make_runner(self._settings)
        self._tenant, self._person = derive_scope(self._settings, {})
        self._context: str | None = None  # None until initialize()
        self._queue: TurnQueue | None = None
        self._worker: QueueWorker | None = None
        self._shut_down = False
        self.dropped_turns = 0

    def _default_time(self) -> int:
        """Unix seconds for the times a tool call leaves out: now, but always after the previous
        default. zkr requires a correction or deletion to advance the intervals of what it
        amends (spec/lifecycle.md §3.3, §3.7), so ``zkr_store`` then ``zkr_correct`` within the
        same second would otherwise fail; a burst of calls runs a few seconds ahead at most."""
        with self._clock_lock:
            now = max(int(self._clock()), self._last_default_time + 1)
            self._last_default_time = now
            return now

    @staticmethod
    def _make_runner(settings: Settings) -> ZkrRunner | LibraryRunner:
        """The library in-process when allowed and importable, else the CLI runner."""
        if settings.transport == "library" or (
            settings.transport == "auto" and library_available()
        ):
            return LibraryRunner(settings.db_path, timeout=settings.timeout)
        return ZkrRunner(settings.binary, settings.db_path, timeout=settings.timeout)

    @property
    def transport(self) -> str:
        """``library`` (zkr in-process) or ``cli`` (one zkr process per operation)."""
        return self._runner.transport

    # -- identity ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return PROVIDER_NAME

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def scope(self) -> Scope:
        return Scope(self._tenant, self._person)

    @property
    def writes_enabled(self) -> bool:
        return self._context == PRIMARY_CONTEXT

    @property
    def worker(self) -> QueueWorker | None:
        return self._worker

    def is_available(self) -> bool:
        """True when zkr can be reached: the library imports (unless the transport is ``cli``)
        or the configured executable exists (unless it is ``library``). No process is started."""
        transport = self._settings.transport
        if transport != "cli" and library_available():
            return True
        return transport != "library" and resolve_binary(self._settings.binary) is not None

    # -- lifecycle -----------------------------------------------------------------

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        if self._worker is not None:
            # A re-initialised provider: the old worker finishes with the old runner and scope.
            self._worker.stop(SHUTDOWN_FLUSH_SECONDS)
            self._worker = None
        hermes_home = kwargs.get("hermes_home")
        self._settings = load_settings(
            hermes_home if isinstance(hermes_home, str) and hermes_home.strip() else None,
            self._environ,
        )
        self._runner.close()
        self._runner = self._make_runner(self._settings)
        self._tenant, self._person = derive_scope(self._settings, kwargs)
        context = kwargs.get("agent_context") or PRIMARY_CONTEXT
        self._context = context if isinstance(context, str) else str(context)
        self._shut_down = False
        self._queue = None
        if not self.writes_enabled:
            # cron / subagent / flush contexts: read-only. No queue file, no worker, no
            # directories: they must never touch the primary agent's pending turns.
            logger.debug("zkr: %s context, memory writes disabled", self._context)
            return
        os.makedirs(os.path.dirname(self._settings.db_path), exist_ok=True)
        self._queue = TurnQueue(self._settings.queue_path)
        self._queue.ensure_schema()
        self._worker = QueueWorker(self._queue, self.scope, self._deliver_queued)
        self._worker.start()  # its first pass recovers turns left by an earlier process

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        """Session boundary: give queued turns a bounded chance to land; writes nothing new."""
        if self._worker is not None and not self._shut_down:
            self._worker.flush(min(SESSION_END_FLUSH_SECONDS, self._settings.timeout))

    def shutdown(self) -> None:
        """Deliver what can be delivered (bounded), then stop the worker."""
        self._shut_down = True
        worker = self._worker
        if worker is not None and not worker.stop(SHUTDOWN_FLUSH_SECONDS):
            logger.warning("zkr: shutdown timed out; undelivered turns stay queued for next start")
            return  # the worker may still be using the runner
        self._runner.close()

    def backup_paths(self) -> list[str]:
        settings = load_settings(None, self._environ)
        home = os.path.realpath(settings.hermes_home)
        paths = []
        for path in (settings.db_path, settings.queue_path):
            real = os.path.realpath(path)
            if os.path.commonpath([home, real]) != home:
                paths.append(path)
        return paths

    def get_config_schema(self) -> list[dict[str, Any]]:
        return [
            {
                "key": "bin",
                "description": "zkr executable (path or name on PATH)",
                "default": "zkr",
                "env_var": ENV_BIN,
            },
            {
                "key": "db",
                "description": "zkr database file (relative to HERMES_HOME)",
                "default": "zkr.db",
                "env_var": ENV_DB,
            },
            {
                "key": "tenant_id",
                "description": "zkr tenant (default: workspace, else hermes)",
                "env_var": ENV_TENANT,
            },
            {
                "key": "person_id",
                "description": "zkr person (default: user id or profile)",
                "env_var": ENV_PERSON,
            },
            {
                "key": "timeout_seconds",
                "description": "zkr call timeout in seconds",
                "default": "30",
                "env_var": ENV_TIMEOUT,
            },
            {
                "key": "transport",
                "description": "auto (zkr library in-process if importable, else CLI), "
                "library or cli",
                "default": "auto",
                "env_var": ENV_TRANSPORT,
            },
            {
                "key": "prefetch_min_relevance",
                "description": "prefetch relevance floor in basis points (0-10000)",
                "default": str(DEFAULT_PREFETCH_MIN_RELEVANCE),
                "env_var": ENV_PREFETCH_MIN,
            },
        ]

    # -- context -------------------------------------------------------------------

    def system_prompt_block(self) -> str:
        if self._context is not None and not self.writes_enabled:
            return SYSTEM_PROMPT_READ_ONLY
        return SYSTEM_PROMPT

    def _scoped(self, request: Mapping[str, Any]) -> dict[str, Any]:
        # Scope is forced, never merged: model-supplied tenant_id/person_id are overwritten.
        return {**request, "tenant_id": self._tenant, "person_id": self._person}

    def _read_only_without_db(self) -> bool:
        # A read-only context must not create the database just by searching it.
        return not self.writes_enabled and not os.path.exists(self._settings.db_path)

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        text = _as_text(query).strip()
        if not text or self._read_only_without_db():
            return ""
        request = {"query": text[:PREFETCH_QUERY_MAX_CHARS], "limit": PREFETCH_SEARCH_LIMIT}
        floor = self._settings.prefetch_min_relevance
        try:
            result = self._runner.run_object(
                "search",
                self._scoped(request),
                timeout=min(PREFETCH_TIMEOUT_SECONDS, self._settings.timeout),
            )
            items = result.get("items")
            if not isinstance(items, list):
                return ""
            lines = []
            for item in items:
                if not isinstance(item, Mapping) or not isinstance(item.get("excerpt"), str):
                    continue
                relevance = item.get("relevance_basis_points")
                if not isinstance(relevance, int) or relevance < floor:
                    continue  # below the relevance floor: not worth the prompt space
                if len(lines) == PREFETCH_LIMIT:
                    break
                ids = item.get("evidence_ids")
                cited = ", ".join(str(i) for i in ids) if isinstance(ids, list) else ""
                excerpt = _one_line(item["excerpt"], PREFETCH_EXCERPT_MAX_CHARS)
                lines.append(f"- {excerpt} [evidence: {cited}]")
        except Exception:  # any failure means "no recall this turn", never a crashed turn
            logger.debug("zkr: prefetch failed", exc_info=True)
            return ""
        return "\n".join(["[zkr cited memory]", *lines]) if lines else ""

    # -- turn capture --------------------------------------------------------------

    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        """Queue the turn durably (fsynced) and return; the worker stores it in zkr."""
        if not self.writes_enabled:
            return
        if self._queue is None:  # initialize() failed (Hermes only logged it): say so per turn
            self.dropped_turns += 1
            logger.warning("zkr: turn not stored: the memory queue could not be set up")
            return
        user = _as_text(user_content).strip()
        if not user:
            return
        assistant = _as_text(assistant_content).strip()
        now = int(self._clock())
        payload = self._scoped(
            {
                "kind": "conversation",
                "text": f"User: {user}\nAssistant: {assistant}",
                # A captured turn: observed and recorded at the same moment, no claim.
                "captured_at": now,
                "recorded_at": now,
                "ingestion_key": f"hermes-turn:{uuid.uuid4()}",
                "claim": None,
            }
        )
        encoded = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        size = len(encoded.encode("utf-8"))
        if size > MAX_PAYLOAD_BYTES:
            self.dropped_turns += 1
            logger.warning("zkr: turn of %d bytes exceeds the 1 MiB cap; not stored", size)
            marker = json.dumps(
                {
                    "dropped": True,
                    "ingestion_key": payload["ingestion_key"],
                    "bytes": size,
                    "captured_at": now,
                    "tenant_id": self._tenant,
                    "person_id": self._person,
                }
            )
            self._queue.record_dropped(marker, ERROR_OVERSIZED)
            return
        self._queue.enqueue(encoded, self.scope)
        if self._worker is not None and not self._shut_down:
            self._worker.wake()

    def _deliver_queued(self, payload: dict[str, Any]) -> object:
        # Stored payloads are already scoped (and checked against our scope by the worker);
        # they are sent as they are so a replay matches the original ingestion exactly.
        return self._runner.run_object("remember", payload)

    # -- tools ---------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        if self._context is not None and not self.writes_enabled:
            return [copy.deepcopy(SEARCH_SCHEMA)]
        return [copy.deepcopy(schema) for schema in ALL_SCHEMAS]

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        builder = BUILDERS.get(tool_name)
        if builder is None:
            return tool_error(f"Unknown tool: {tool_name}")
        if tool_name in WRITE_TOOLS and not self.writes_enabled:
            reason = (
                "zkr is not initialized"
                if self._context is None
                else f"zkr writes are disabled in the {self._context} agent context"
            )
            return tool_error(TOOL_FAILED, detail=reason)
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return tool_error(TOOL_FAILED, detail="arguments must be a JSON object")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            return tool_error(TOOL_FAILED, detail="arguments must be a JSON object")
        try:
            call = builder(args, self._default_time())
        except ArgumentError as error:
            return tool_error(TOOL_FAILED, detail=str(error))
        if call.command == "search" and self._read_only_without_db():
            empty = {
                "gaps": ["no cited memory matched"],
                "items": [],
                "query": call.request["query"],
            }
            return json.dumps(empty)
        try:
            result = self._runner.run_object(call.command, self._scoped(call.request))
        except ZkrError as error:
            logger.debug("zkr: %s failed (%s)", tool_name, error.reason)
            return tool_error(TOOL_FAILED, **_safe_detail(error))
        except Exception:
            logger.debug("zkr: %s raised", tool_name, exc_info=True)
            return tool_error(TOOL_FAILED)
        return json.dumps(result)
