"""The write path of :class:`zkr.MemoryDb` (spec/lifecycle.md §3.1): ``remember``,
``remember_many``, and the floors a caller that defaults times to now asks first.
"""

from __future__ import annotations

from collections.abc import Iterable

from zkr import model
from zkr.errors import RequestError, ZkrError
from zkr.memory.handle import Handle
from zkr.typelite import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from typing import Literal


class WriteCommands(Handle):
    """``remember`` and ``remember_many``, and the times a caller that defaults them needs."""

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
