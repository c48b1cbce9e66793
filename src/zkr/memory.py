"""The library API: :class:`MemoryDb`, one method per CLI command.

``MemoryDb.open(path)`` opens (and creates/migrates) a zkr database; each method takes the typed
request of :mod:`zkr.model` (checked with :func:`zkr.model.validate`, so a float timestamp or a
negative limit fails as the CLI would) and returns a typed result or plain JSON-ready value.
Failures raise :class:`zkr.errors.ZkrError` whose message is the CLI's error text. Every
mutation runs in one ``BEGIN IMMEDIATE`` transaction inside the store module that implements it.

The CLI (:mod:`zkr.cli`) is framing over this class; plugins and benchmarks call it in-process.
"""

from __future__ import annotations

import os
import sqlite3
from _thread import allocate_lock
from collections.abc import Iterable
from typing import Any

from zkr import model
from zkr.store import db


class MemoryDb:
    """An open zkr database file (schema version 10).

    One SQLite connection. Threads may share a ``MemoryDb``: its calls run one at a time (a
    lock), so open one per thread for parallel reads. Several processes may share one file
    (WAL mode, 5 s busy timeout).
    """

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        self._lock = allocate_lock()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> MemoryDb:
        """Open ``path``, creating and migrating it to schema version 10 (spec/storage.md §1)."""
        name = os.fspath(path)
        return cls(db.connect(name), name)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> MemoryDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- write path (spec/lifecycle.md §3.1-3.2)
    def remember(self, req: model.RememberRequest) -> model.RememberResult:
        model.validate(req)
        from zkr.store import write

        with self._lock:
            return write.remember(self.conn, req)

    def remember_many(self, reqs: Iterable[model.RememberRequest]) -> list[model.RememberResult]:
        """Several ``remember`` requests in one transaction, all stored or none (library only;
        each still appends its own feed commit). See :func:`zkr.store.write.remember_many`."""
        from zkr.store import write

        batch = list(reqs)  # an iterator would be used up by the checks
        for index, req in enumerate(batch):
            with write.at_request(index):
                model.validate(req)
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

    def locator(self, req: model.LocatorRequest) -> model.Locator | None:
        model.validate(req)
        from zkr.store import write

        with self._lock:
            return write.locator(self.conn, req)

    # -- retrieval (spec/retrieval.md)
    def search(self, req: model.SearchRequest) -> model.RetrievalPack:
        model.validate(req)
        from zkr.store import retrieval

        with self._lock:
            return retrieval.search(self.conn, req)

    def get(self, req: model.GetRequest) -> model.RetrievalItem:
        model.validate(req)
        from zkr.store import retrieval

        with self._lock:
            return retrieval.get(self.conn, req)

    # -- lifecycle (spec/lifecycle.md §3.3-3.11)
    def correct(self, req: model.CorrectRequest) -> model.CorrectResult:
        model.validate(req)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.correct(self.conn, req)

    def link(self, req: model.LinkRequest) -> None:
        model.validate(req)
        from zkr.store import lifecycle

        with self._lock:
            lifecycle.link(self.conn, req)

    def promote(self, req: model.ClaimTierRequest) -> str:
        model.validate(req)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.promote(self.conn, req)

    def archive(self, req: model.ClaimTierRequest) -> str:
        model.validate(req)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.archive(self.conn, req)

    def delete(self, req: model.DeleteRequest) -> model.DeleteResult:
        model.validate(req)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.delete(self.conn, req)

    def profile(self, req: model.ProfileRequest) -> model.ProfileEntry:
        model.validate(req)
        from zkr.store import profiles

        with self._lock:
            return profiles.profile(self.conn, req)

    def profiles(self, req: model.LimitRequest) -> list[model.ProfileEntry]:
        model.validate(req)
        from zkr.store import profiles

        with self._lock:
            return profiles.profiles(self.conn, req)

    def review(self, req: model.ReviewRequest) -> str:
        model.validate(req)
        from zkr.store import profiles

        with self._lock:
            return profiles.review(self.conn, req)

    def reviews(self, req: model.LimitRequest) -> list[model.DailyReview]:
        model.validate(req)
        from zkr.store import profiles

        with self._lock:
            return profiles.reviews(self.conn, req)

    def repair(self, req: model.LimitRequest) -> int:
        model.validate(req)
        from zkr.store import repair

        with self._lock:
            return repair.repair(self.conn, req)

    # -- embeddings (spec/retrieval.md §9-11)
    def projections(self, req: model.ProjectionsRequest) -> list[dict[str, Any]]:
        model.validate(req)
        from zkr.store import embeddings

        with self._lock:
            return embeddings.projections(self.conn, req)

    def embed(self, req: model.EmbedRequest) -> dict[str, Any]:
        model.validate(req)
        from zkr.store import embeddings

        with self._lock:
            return embeddings.embed(self.conn, req)

    # -- sync (spec/sync.md)
    def export(self, req: model.ExportRequest) -> dict[str, Any]:
        model.validate(req)
        from zkr.store import feed

        with self._lock:
            return feed.export(self.conn, req)

    def apply(self, req: model.ApplyRequest) -> dict[str, int]:
        model.validate(req)
        from zkr.store import apply

        with self._lock:
            return apply.apply(self.conn, req)
