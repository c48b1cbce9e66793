"""The library API: :class:`MemoryDb`, one method per CLI command.

``MemoryDb.open(path)`` opens (and creates/migrates) a zkr database; each method takes the typed
request of :mod:`zkr.model` (checked with :func:`zkr.model.validate`, so a float timestamp or a
negative limit fails as the CLI would) and returns the command's typed result from the same
:mod:`zkr.model` family (``result.to_json()`` is what the CLI prints; see
:func:`zkr.model.encode`). Failures raise :class:`zkr.errors.ZkrError` whose message is the CLI's
error text: :class:`~zkr.errors.RequestError` for a request the CLI could not have decoded,
:class:`~zkr.errors.InvalidInput` for a rule's message, :class:`~zkr.errors.NotFound`
(``record not found``) for a missing or not-live target, :class:`~zkr.errors.StorageError` for
a refusal by SQLite. Every mutation runs in one ``BEGIN IMMEDIATE`` transaction inside the store
module that implements it, so a failed call writes nothing.

The CLI (:mod:`zkr.cli`) is framing over this class; plugins and benchmarks call it in-process.
"""

from __future__ import annotations

import os
import sqlite3
from _thread import allocate_lock
from collections.abc import Callable, Iterable
from contextlib import suppress
from types import TracebackType

from zkr import model
from zkr.errors import MissingDependency, RequestError, StorageError, ZkrError
from zkr.store import db
from zkr.store.driver import unexpected_content
from zkr.typelite import TYPE_CHECKING, Any, cast, overload

if TYPE_CHECKING:
    from typing import Literal

    from zkr.scoped import ScopedMemory


class _CallGuard:
    """Runs the library's calls one at a time, and lets nothing but a ``ZkrError`` out.

    ``with guard:`` holds the lock for one call; a driver failure escaping it (a full disk, an
    I/O error, a corrupted file, even outside a transaction) becomes a
    :class:`~zkr.errors.StorageError` with SQLite's own words (:func:`zkr.store.db.storage_error`).
    The request was validated before the call, so any other exception raised inside comes from
    what the file holds (a BLOB where zkr wrote an integer) and becomes a ``StorageError`` too
    (:func:`zkr.store.driver.unexpected_content`); only ``RecursionError`` and ``MemoryError``
    pass unchanged.
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = allocate_lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()
        if exc is None or isinstance(exc, ZkrError):
            return
        if isinstance(exc, db.DRIVER_ERRORS):
            raise db.storage_error(exc) from None
        if isinstance(exc, ImportError):  # the install is broken, not the file
            raise MissingDependency(
                f"zkr is missing a dependency ({exc}): reinstall zkr with pip"
            ) from None
        if isinstance(exc, Exception) and not isinstance(exc, RecursionError | MemoryError):
            raise unexpected_content(exc) from None


def _file_name(path: object) -> str:
    """``path`` (``str``, ``bytes`` or ``os.PathLike``) as the ``str`` SQLite opens.

    Raises :class:`~zkr.errors.RequestError` naming the argument for anything else, and for a
    name no file system can hold (a NUL, a lone surrogate that does not encode).
    """
    try:
        name = os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        raise RequestError(
            "path must be a file path (str or os.PathLike) or a postgresql:// URL,"
            f" not {type(path).__name__}"
        ) from None
    if "\x00" in name:
        raise RequestError("path must not contain a NUL character")
    try:
        os.fsencode(name)
    except UnicodeEncodeError as exc:
        raise RequestError(f"path is not a valid file name: {exc.reason}") from None
    return name


class _OpenOnUse:
    """The connection of a deferred :class:`MemoryDb` before its file is open."""

    __slots__ = ("_owner",)

    def __init__(self, owner: MemoryDb) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner._connect(), name)


class MemoryDb:
    """An open zkr database file (schema version 10).

    One SQLite connection. Threads may share a ``MemoryDb``: its calls run one at a time (a
    lock), so open one per thread for parallel reads. Several processes may share one file
    (WAL mode, 5 s busy timeout).
    """

    def __init__(self, conn: sqlite3.Connection | None, path: str) -> None:
        self._conn = conn
        self.path = path
        self._lock = _CallGuard()
        # rows stored by embed per lane (tenant, person, model, version) and the latest
        # created_at, for close (zkr.store.priming.prime)
        self._embedded: dict[tuple[str, str, str, str], int] = {}
        self._embedded_at = 0
        self._closed = False

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> MemoryDb:
        """Open ``path``, creating and migrating it to schema version 10 (spec/storage.md §1).

        Raises :class:`~zkr.errors.RequestError` when ``path`` is no file name (``None``, a
        number, a NUL or an unencodable character: :func:`_file_name`),
        :class:`~zkr.errors.SchemaTooNew` for a file whose ``user_version`` is outside
        0..10 (nothing written) and :class:`~zkr.errors.StorageError` when SQLite cannot open
        or migrate the file.
        """
        name = _file_name(path)
        return cls(db.connect(name), name)

    @classmethod
    def deferred(cls, path: str | os.PathLike[str]) -> MemoryDb:
        """A handle that opens ``path`` on its first call, once that call's request is checked.

        The CLI uses it so that a request that fails to decode or validate never creates,
        migrates or switches a file (docs/decisions-core.md). Opening errors are then raised
        by that first call.
        """
        return cls(None, _file_name(path))

    @property
    def conn(self) -> sqlite3.Connection:
        """The SQLite connection.

        Until a :meth:`deferred` handle has opened its file this is a stand-in that opens it on
        the first attribute the store touches, so a command's checks that need no database
        (blank scope, empty text, a malformed apply batch) fail before the file is created.
        """
        if self._conn is None:
            return cast(sqlite3.Connection, _OpenOnUse(self))
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._closed:  # a deferred handle closed before its first call: do not reopen
                raise StorageError("Cannot operate on a closed database.")
            self._conn = db.connect(self.path)
        return self._conn

    def scope(self, tenant_id: str, person_id: str) -> ScopedMemory:
        """A handle on one (tenant, person) scope whose calls default timestamps to now and
        take enum values as plain strings (:class:`zkr.scoped.ScopedMemory`)."""
        from zkr.scoped import ScopedMemory

        return ScopedMemory(self, tenant_id, person_id)

    def close(self) -> None:
        """Close the connection (waits for a call running in another thread).

        A handle through which :meth:`embed` stored at least
        :data:`zkr.store.priming.PRIME_AFTER` rows of a lane first brings that lane's
        search cache and side files up to date (:func:`zkr.store.priming.prime`: about a
        second or two at 100k rows), so that the next search, every fresh CLI process
        included, starts from them instead of reading the whole lane. That step is a cache:
        when it fails (a read-only directory, a full disk) the file is closed all the same.
        """
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._prime_embedded()
                self._conn.close()

    def checkpoint(self, when: Callable[[], bool] | None = None) -> None:
        """Copy the write-ahead log's committed pages back into the file now, without waiting
        for other connections (SQLite's ``PASSIVE`` checkpoint: what its automatic checkpoint
        does inside the commit that fills the log). Nothing stored changes; the long-lived
        servers call it between requests (:class:`zkr.servefile.IdleCheckpoint`).

        Waits for a call running in another thread; ``when`` (if given) is then asked, with no
        call running, whether to go on (a server's check that its file is still there). Does
        nothing on a closed handle or a PostgreSQL store. Raises
        :class:`~zkr.errors.StorageError` when SQLite cannot do it (a full disk)."""
        with self._lock:
            if self._closed or self._conn is None or getattr(self._conn, "zkr_dialect", None):
                return
            if when is None or when():
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _prime_embedded(self) -> None:
        from zkr.store import priming

        lanes = [lane for lane, n in self._embedded.items() if n >= priming.PRIME_AFTER]
        self._embedded = {}
        if not lanes or self._conn is None:
            return
        # only a cache: when it cannot be written, the next search refreshes the lane
        with suppress(sqlite3.Error, OSError):
            priming.prime(self._conn, lanes, self._embedded_at)

    def __enter__(self) -> MemoryDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- write path (spec/lifecycle.md §3.1-3.2)
    def remember(self, req: model.RememberRequest) -> model.RememberResult:
        """Store a source, its one evidence row and optionally a claim and a locator
        (spec/lifecycle.md §3.1). A repeated ``ingestion_key`` with the same content returns
        the original ids and writes nothing. Raises ``InvalidInput`` (blank text, illegal
        claim state, bad locator, key reused with another payload) and ``NotFound`` when the
        key's original memory was deleted."""
        model.validate(req, model.RememberRequest)
        from zkr.store import write

        with self._lock:
            return write.remember(self.conn, req)

    @overload
    def remember_many(
        self, reqs: Iterable[model.RememberRequest], *, outcomes: Literal[False] = False
    ) -> list[model.RememberResult]: ...

    @overload
    def remember_many(
        self, reqs: Iterable[model.RememberRequest], *, outcomes: Literal[True]
    ) -> list[model.RememberOutcome]: ...

    @overload
    def remember_many(
        self, reqs: Iterable[model.RememberRequest], *, outcomes: bool
    ) -> list[model.RememberResult] | list[model.RememberOutcome]: ...

    def remember_many(
        self, reqs: Iterable[model.RememberRequest], *, outcomes: bool = False
    ) -> list[model.RememberResult] | list[model.RememberOutcome]:
        """Several ``remember`` requests in one transaction (library only; each still appends
        its own feed commit).

        By default all are stored or none (:func:`zkr.store.write.remember_many`): the first
        failure raises, its message prefixed with ``requests[INDEX]: ``. With
        ``outcomes=True`` each request succeeds or fails alone and one
        :class:`~zkr.model.RememberOutcome` per request says which (``stored``, ``replayed``,
        ``deleted`` for a key whose memory was deleted, ``failed`` with the error), see
        :func:`zkr.store.write.remember_each`.
        """
        from zkr.store import write

        try:
            batch = list(reqs)  # an iterator would be used up by the checks
        except TypeError:
            raise RequestError(
                f"invalid type: {type(reqs).__name__}, expected an iterable of requests"
            ) from None
        if outcomes:
            checked: list[model.RememberRequest] = []
            failed: dict[int, str] = {}
            for index, req in enumerate(batch):
                try:
                    model.validate(req, model.RememberRequest)
                    checked.append(req)
                except ZkrError as exc:
                    failed[index] = exc.message
            with self._lock:
                done = iter(write.remember_each(self.conn, checked))
            return [
                model.RememberOutcome("failed", None, failed[index])
                if index in failed
                else next(done)
                for index in range(len(batch))
            ]
        for index, req in enumerate(batch):
            with write.at_request(index):
                model.validate(req, model.RememberRequest)
        with self._lock:
            return write.remember_many(self.conn, batch)

    def ingested_times(
        self, tenant_id: str, person_id: str, ingestion_key: str
    ) -> tuple[int, int] | None:
        """``(captured_at, recorded_at)`` stored under an ingestion key in scope, or ``None``:
        lets a caller that defaults times to now replay the key (library only)."""
        from zkr.store import write

        with self._lock:
            return write.ingested_times(self.conn, tenant_id, person_id, ingestion_key)

    def replay_statuses(self, reqs: Iterable[model.RememberRequest]) -> list[str | None]:
        """For each request, what ``remember`` would do with its ingestion key now, writing
        nothing: ``None`` (store), ``"replayed"``, ``"deleted"`` or ``"conflict"`` (library
        only; :func:`zkr.store.write.replay_statuses`). ``zkr import`` asks it which key an
        earlier import stored a turn under."""
        from zkr.store import write

        with self._lock:
            return write.replay_statuses(self.conn, list(reqs))

    def correction_floor(
        self, tenant_id: str, person_id: str, claim_id: str
    ) -> tuple[int, int] | None:
        """The earliest ``(valid_at, recorded_at)`` ``correct`` accepts for ``claim_id``, or
        ``None`` when no accepted claim has that id in scope: lets a caller that defaults times
        to now correct a future-dated claim (library only)."""
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.correction_floor(self.conn, tenant_id, person_id, claim_id)

    def deletion_floor(self, tenant_id: str, person_id: str, source_id: str) -> int | None:
        """The earliest ``deleted_at`` ``delete`` accepts for ``source_id`` (its recording,
        past the claims it retracts), or ``None`` when no live source has that id in scope:
        lets a caller that defaults times to now delete what a clock ahead of it recorded
        (library only)."""
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.deletion_floor(self.conn, tenant_id, person_id, source_id)

    def profile_floor(self, tenant_id: str, person_id: str, claim_id: str) -> int | None:
        """The earliest ``recorded_at`` ``profile`` accepts for ``claim_id`` (its recording,
        past the key's current entry), or ``None`` unless the claim is profile-live in scope
        (library only; :meth:`correction_floor`'s companion)."""
        from zkr.store import profiles

        with self._lock:
            return profiles.profile_floor(self.conn, tenant_id, person_id, claim_id)

    def locator(self, req: model.LocatorRequest) -> model.Locator | None:
        """The transcript locator of live evidence in scope, or ``None`` when it has none
        (spec/lifecycle.md §3.2). Raises ``NotFound`` for unknown or tombstoned evidence."""
        model.validate(req, model.LocatorRequest)
        from zkr.store import write

        with self._lock:
            return write.locator(self.conn, req)

    def _capture_times(
        self, tenant_id: str, person_id: str, evidence_ids: list[str]
    ) -> dict[str, int]:
        """``{evidence_id: captured_at}`` of the given evidence in scope (for the context
        block's dated lines: :func:`zkr.store.inspect.capture_times`)."""
        from zkr.store import inspect

        with self._lock:
            return inspect.capture_times(self.conn, tenant_id, person_id, evidence_ids)

    # -- retrieval (spec/retrieval.md)
    def search(self, req: model.SearchRequest) -> model.RetrievalPack:
        """A bounded, cited retrieval pack for ``req.query`` (spec/retrieval.md §2-8): lexical,
        fused with the dense lane when ``query_embedding`` is given, or historical with
        ``as_of``. Read-only. Raises ``InvalidInput`` for a blank scope or query or a bad query
        embedding (its ``vector`` may be a numpy array, as for :meth:`embed`)."""
        if isinstance(req, model.SearchRequest) and isinstance(
            query := req.query_embedding, model.QueryEmbedding
        ):
            vector = model.real_vector(query.vector, "query_embedding.vector")
            if vector is not query.vector:
                req = req._replace(query_embedding=query._replace(vector=vector))
        model.validate(req, model.SearchRequest)
        from zkr.store import retrieval

        with self._lock:
            return retrieval.search(self.conn, req)

    def context(self, req: model.ContextRequest) -> model.ContextBlock:
        """The cited block a host pastes into a prompt: the best pack (spec/retrieval.md §7)
        for ``req.query``, the current profile entries and the latest daily reviews, within
        ``req.max_bytes`` UTF-8 bytes (:func:`zkr.context.build_context`; zkr's own command).
        Read-only; three reads, each on its own snapshot."""
        model.validate(req, model.ContextRequest)
        from zkr.context import build_context

        return build_context(
            self,
            req.tenant_id,
            req.person_id,
            req.query,
            max_bytes=req.max_bytes,
            limit=req.limit,
            profile_limit=req.profile_limit,
            review_limit=req.review_limit,
            min_relevance_basis_points=req.min_relevance_basis_points,
        )

    def get(self, req: model.GetRequest) -> model.RetrievalItem:
        """One live record as a cited item, relevance 10000 (spec/retrieval.md §8). Read-only.
        Raises ``NotFound`` when the target is missing, out of scope or not live."""
        model.validate(req, model.GetRequest)
        from zkr.store import retrieval

        with self._lock:
            return retrieval.get(self.conn, req)

    # -- lifecycle (spec/lifecycle.md §3.3-3.11)
    def correct(self, req: model.CorrectRequest) -> model.CorrectResult:
        """Supersede an accepted claim with a corrected value backed by new correction
        evidence (spec/lifecycle.md §3.3). Raises ``NotFound`` for an unknown claim and
        ``InvalidInput`` when the claim is not accepted or the times run backwards."""
        model.validate(req, model.CorrectRequest)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.correct(self.conn, req)

    def link(self, req: model.LinkRequest) -> model.LinkResult:
        """Attach supporting or contradicting live evidence to an accepted claim
        (spec/lifecycle.md §3.4); an identical link is a no-op. Raises ``NotFound`` for a claim
        that is not accepted or evidence that is not live, ``InvalidInput`` for a confidence
        above 10000 basis points or a conflicting existing link."""
        model.validate(req, model.LinkRequest)
        from zkr.store import lifecycle

        with self._lock:
            lifecycle.link(self.conn, req)
        return model.LinkResult()

    def promote(self, req: model.ClaimTierRequest) -> model.ClaimTierResult:
        """Move a processed ``short_term`` claim to ``long_term`` (spec/lifecycle.md §3.5).
        Raises ``StorageError('Query returned no rows')`` for an unknown claim and
        ``InvalidInput`` for a claim in another tier or state."""
        model.validate(req, model.ClaimTierRequest)
        from zkr.store import lifecycle

        with self._lock:
            return model.ClaimTierResult(lifecycle.promote(self.conn, req))

    def archive(self, req: model.ClaimTierRequest) -> model.ClaimTierResult:
        """Move a processed, non-superseded claim to the archive tier, out of live retrieval
        (spec/lifecycle.md §3.6); already archived is a no-op. Raises as :meth:`promote`."""
        model.validate(req, model.ClaimTierRequest)
        from zkr.store import lifecycle

        with self._lock:
            return model.ClaimTierResult(lifecycle.archive(self.conn, req))

    def delete(self, req: model.DeleteRequest) -> model.DeleteResult:
        """Tombstone a source and its evidence and retract the claims only it supported
        (spec/lifecycle.md §3.7). Raises ``NotFound`` for an unknown or deleted source and
        ``InvalidInput`` when ``deleted_at`` predates what it affects."""
        model.validate(req, model.DeleteRequest)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.delete(self.conn, req)

    def profile(self, req: model.ProfileRequest) -> model.ProfileEntry:
        """Project a live ``profile_fact`` claim into the current profile (spec/lifecycle.md
        §3.8); an identical entry is returned without a write. Raises ``NotFound`` for a claim
        that is not live, ``InvalidInput`` for a claim of another kind."""
        model.validate(req, model.ProfileRequest)
        from zkr.store import profiles

        with self._lock:
            return profiles.profile(self.conn, req)

    def profiles(self, req: model.LimitRequest) -> list[model.ProfileEntry]:
        """At most ``limit`` live profile entries, newest first (spec/lifecycle.md §3.9).
        Read-only. Raises ``InvalidInput`` for a blank scope or a page over 1,000,000 bytes."""
        model.validate(req, model.LimitRequest)
        from zkr.store import profiles

        with self._lock:
            return profiles.profiles(self.conn, req)

    def review(self, req: model.ReviewRequest) -> model.ReviewResult:
        """Store a daily review citing live evidence (spec/lifecycle.md §3.10); every call
        stores a new review. Raises ``InvalidInput`` for blank fields, no evidence or a cited
        id that is not live evidence in scope."""
        model.validate(req, model.ReviewRequest)
        from zkr.store import profiles

        with self._lock:
            return model.ReviewResult(profiles.review(self.conn, req))

    def reviews(self, req: model.LimitRequest) -> list[model.DailyReview]:
        """At most ``limit`` daily reviews, latest day first (spec/lifecycle.md §3.11).
        Read-only. Raises ``InvalidInput`` for a blank scope or a page over 1,000,000 bytes."""
        model.validate(req, model.LimitRequest)
        from zkr.store import profiles

        with self._lock:
            return profiles.reviews(self.conn, req)

    def repair(self, req: model.LimitRequest) -> model.RepairResult:
        """Drain at most ``limit`` rows of the projection-repair outbox, dropping stale
        projections of the targets they name (spec/lifecycle.md §3.12). Raises
        ``InvalidInput`` for a blank scope."""
        model.validate(req, model.LimitRequest)
        from zkr.store import repair

        with self._lock:
            return model.RepairResult(repair.repair(self.conn, req))

    # -- seeing and steering memory (zkr's own commands, docs/inspect.md)
    def trace(self, req: model.TraceRequest) -> model.Trace:
        """A source, evidence or claim in scope and its neighbourhood: evidence, links,
        correction chain, profile entries and reviews (:func:`zkr.store.inspect.trace`,
        docs/inspect.md)."""
        model.validate(req, model.TraceRequest)
        from zkr.store import inspect

        with self._lock:
            return inspect.trace(self.conn, req)

    def lookup(self, req: model.LookupRequest) -> list[model.LookupClaim]:
        """The live (or ``as_of``) claims for a subject and predicate, with their citations
        (:func:`zkr.store.inspect.lookup`, docs/inspect.md)."""
        model.validate(req, model.LookupRequest)
        from zkr.store import inspect

        with self._lock:
            return inspect.lookup(self.conn, req)

    def browse(self, req: model.BrowseRequest) -> model.BrowsePage:
        """One page of the scope's sources and claims, newest recorded first
        (:func:`zkr.store.inspect.browse`, docs/inspect.md)."""
        model.validate(req, model.BrowseRequest)
        from zkr.store import inspect

        with self._lock:
            return inspect.browse(self.conn, req)

    def settle(self, req: model.SettleRequest) -> model.SettleResult:
        """Move a pending or blocked claim to processed (or pending to blocked), with a feed
        commit replicas apply (:func:`zkr.store.settle.settle`, docs/inspect.md)."""
        model.validate(req, model.SettleRequest)
        from zkr.store import settle

        with self._lock:
            return settle.settle(self.conn, req)

    def erase(self, req: model.EraseRequest) -> model.EraseReport:
        """Blank the text of tombstoned sources everywhere in the file, feed included, or with
        ``dry_run`` (the default) report what would be erased (docs/erase.md,
        :func:`zkr.store.erase.erase`)."""
        model.validate(req, model.EraseRequest)
        from zkr.store import erase

        with self._lock:
            return erase.erase(self.conn, req)

    # -- embeddings (spec/retrieval.md §9-11)
    def projections(self, req: model.ProjectionsRequest) -> list[model.ProjectionIssue]:
        """Missing and stale embedding inputs of one model/version, at most ``limit`` and
        1,000,000 bytes (spec/retrieval.md §10). Read-only. Raises ``InvalidInput`` for blank
        scope/model/version or one issue larger than the page."""
        model.validate(req, model.ProjectionsRequest)
        from zkr.store import embeddings

        with self._lock:
            return embeddings.projections(self.conn, req)

    def embed(self, req: model.EmbedRequest) -> model.EmbedResult:
        """Store a caller-computed vector for a live target, bound to its current input hash
        (spec/retrieval.md §11). Raises ``InvalidInput`` (non-finite vector, l2 magnitude,
        hash mismatch, lane conflict) and ``NotFound`` for a target that is not live.
        ``req.embedding.vector`` may be any 1-d sequence of real numbers, a numpy array
        included (:func:`zkr.model.checks.real_vector`; ``RequestError`` otherwise)."""
        if isinstance(req, model.EmbedRequest) and isinstance(req.embedding, model.EmbeddingInput):
            vector = model.real_vector(req.embedding.vector, "embedding.vector")
            if vector is not req.embedding.vector:
                req = req._replace(embedding=req.embedding._replace(vector=vector))
        model.validate(req, model.EmbedRequest)
        from zkr.store import embeddings

        with self._lock:
            result = embeddings.embed(self.conn, req)
            lane = (req.tenant_id, req.person_id, req.embedding.model, req.embedding.version)
            self._embedded[lane] = self._embedded.get(lane, 0) + 1
            self._embedded_at = max(self._embedded_at, result.created_at)
            return result

    def embed_pending(
        self,
        req: model.EmbedPendingRequest,
        progress: Callable[[int, int], None] | None = None,
    ) -> model.EmbedPendingResult:
        """Embed every missing or stale projection input with the local model (``zkr[embed]``)
        and record that model as this database's semantic lane, so plain ``search`` calls embed
        their query (docs/embedding.md; the rows are spec/retrieval.md §11.3 rows). Pass
        ``model.EmbedPendingRequest()`` for every scope with the default model.

        ``progress(done, total)`` is called after each batch. Raises ``EmbedderUnavailable``
        (runtime or model missing; the message names ``ZKR_EMBED_MODEL``), ``InvalidInput``
        (scope given half, a blank ``model``, batch outside 1..10000, a conflicting lane),
        ``RequestError`` (a field of the wrong type).
        """
        from zkr.errors import InvalidInput
        from zkr.text import require_scope, require_text

        model.validate(req, model.EmbedPendingRequest)
        if req.model is not None:  # blank is not "the default": a typo must not pick a model
            require_text(req.model, "model")
        scope: tuple[str, str] | None = None
        if req.tenant_id is not None or req.person_id is not None:
            require_scope(req.tenant_id or "", req.person_id or "")
            scope = (req.tenant_id or "", req.person_id or "")
        if not 1 <= req.batch <= 10_000:
            raise InvalidInput("batch must be between 1 and 10000")
        from zkr.embedding.local import load
        from zkr.store import embedpending

        embedder = load(req.model)
        return embedpending.embed_pending(
            self.conn, embedder, scope, req.batch, req.limit, progress, guard=self._lock
        )

    # -- sync (spec/sync.md)
    def export(self, req: model.ExportRequest) -> model.ExportPage:
        """One page of the scope's commit feed (spec/sync.md §3). Read-only, one snapshot.
        Raises ``InvalidInput`` for the cursor and format rules of §3.2."""
        model.validate(req, model.ExportRequest)
        from zkr.store import export

        with self._lock:
            return export.export(self.conn, req)

    def apply(self, req: model.ApplyRequest) -> model.ApplyResult:
        """Materialise complete commits exported by another database, all in one transaction
        (spec/sync.md §4). Raises ``RequestError`` for a record that does not parse,
        ``InvalidInput`` for the rules of §4.2/§4.5 and for a record whose id another scope
        holds (one message, docs/decisions-sync.md); any error writes nothing."""
        model.validate(req, model.ApplyRequest)
        from zkr.store import apply

        with self._lock:
            return apply.apply(self.conn, req)
