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

from zkr.memory.lanes import LaneCommands
from zkr.memory.lifecycle import LifecycleCommands
from zkr.memory.reads import ReadCommands
from zkr.memory.writes import WriteCommands
from zkr.typelite import TYPE_CHECKING

if TYPE_CHECKING:
    from zkr.scoped import ScopedMemory


class MemoryDb(WriteCommands, ReadCommands, LifecycleCommands, LaneCommands):
    """An open zkr database file (schema version 10).

    One SQLite connection. Threads may share a ``MemoryDb``: its calls run one at a time (a
    lock), so open one per thread for parallel reads. Several processes may share one file
    (WAL mode, 5 s busy timeout).

    The methods come in groups, one module each: the handle (:mod:`zkr.memory.handle`:
    ``open``, ``deferred``, ``close``, ``checkpoint``), the write path
    (:mod:`zkr.memory.writes`), the reads (:mod:`zkr.memory.reads`), the lifecycle
    (:mod:`zkr.memory.lifecycle`), and the embedding lanes and sync
    (:mod:`zkr.memory.lanes`).
    """

    def scope(self, tenant_id: str, person_id: str) -> ScopedMemory:
        """A handle on one (tenant, person) scope whose calls default timestamps to now and
        take enum values as plain strings (:class:`zkr.scoped.ScopedMemory`)."""
        from zkr.scoped import ScopedMemory

        return ScopedMemory(self, tenant_id, person_id)
