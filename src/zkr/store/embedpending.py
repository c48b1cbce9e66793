"""``embed-pending``: drain ``projections`` through the local model, in batches.

For each scope (or the one given), every missing or stale projection input of the local
model's lane (:func:`zkr.store.embeddings.pending_inputs`, spec/retrieval.md §10.1) is embedded
and stored as an ordinary ``embeddings`` row (§11.3: ``l2``/``cosine``, the current revision
and hash, ``created_at = unixepoch()``), exactly what ``embed`` would store for the same
vector. Identical texts (a raw capture's source and evidence) are embedded once.

Each batch (``batch`` distinct texts) is one ``BEGIN IMMEDIATE`` transaction that re-reads
every target's projection input first: a target changed or deleted since it was listed is
skipped (the next run picks the new text up), so a concurrent writer never gets a vector for
text it replaced. The model runs outside any transaction. Stale rows are overwritten; rows of
tombstoned targets are left as they are (projections never list them, search ignores them).
The first batch also records the lane in ``zkr_embedder`` (:mod:`zkr.store.embedconfig`),
which turns on query embedding for plain ``search``.

Writes never embed synchronously (``remember``, ``correct``, ``apply`` stay model-free): a CLI
call has a 40 ms budget and the model alone takes longer to load, and ``serve`` answers writes
in about a millisecond. New text is found lexically at once and semantically after the next
drain; hosts run ``embed-pending`` after writes, on a timer, or (long-lived processes) call
:meth:`zkr.MemoryDb.embed_pending` when idle.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from zkr.errors import InvalidInput
from zkr.model import Distance, EmbedPendingResult, Normalization, ProjectionInput, quoted
from zkr.store import changes, priming
from zkr.store.db import read_tx, write_tx
from zkr.store.embedconfig import EmbedderConfig, record
from zkr.store.embeddings import UPSERT_RETURNING_SQL, lane, pending_inputs, projection_input
from zkr.store.vectors import (
    LaneConfig,
    encode_vector,
    has_unit_magnitude,
    to_float32,
    vector_bytes,
)

if TYPE_CHECKING:
    from zkr.embedding.local import LocalEmbedder

DEFAULT_BATCH = 64
Progress = Callable[[int, int], None]
"""Called after each batch with (targets done, targets pending in all)."""


# The scopes holding anything projectable: sources (every evidence and claim rests on one).
_SCOPES_SQL = "SELECT DISTINCT tenant_id, person_id FROM sources ORDER BY tenant_id, person_id"


def embed_pending(
    conn: sqlite3.Connection,
    embedder: LocalEmbedder,
    scope: tuple[str, str] | None = None,
    batch: int = DEFAULT_BATCH,
    limit: int | None = None,
    progress: Progress | None = None,
    guard: AbstractContextManager[object] | None = None,
) -> EmbedPendingResult:
    """Embed every pending input of ``embedder``'s lane (in ``scope``, else in every scope),
    at most ``limit`` targets. ``guard`` (the connection's lock) is held around each database
    step only, never while the model runs, so a server keeps answering meanwhile. Raises
    ``InvalidInput`` when the lane already holds another configuration for this model/version
    (§11.1 step 9)."""
    started = time.perf_counter()
    model, version = embedder.model, embedder.version
    lock = guard if guard is not None else nullcontext()
    with lock:
        changes.ensure(conn)  # the log and zkr_vectors, where each row's float32 copy is kept
    with lock, read_tx(conn):
        scopes = [scope] if scope is not None else [(r[0], r[1]) for r in conn.execute(_SCOPES_SQL)]
        work: list[tuple[str, str, ProjectionInput]] = []
        for tenant, person in scopes:
            for item in pending_inputs(conn, tenant, person, model, version):
                work.append((tenant, person, item))
                if limit is not None and len(work) >= limit:
                    break
            if limit is not None and len(work) >= limit:
                break
    config = LaneConfig(embedder.dimension, Normalization.L2, Distance.COSINE)
    # one model call per distinct text: a raw capture's source and evidence share their text
    by_text: dict[str, list[tuple[str, str, ProjectionInput]]] = {}
    for entry in work:
        by_text.setdefault(entry[2].text, []).append(entry)
    unique = list(by_text)
    embedded = skipped = done = 0
    touched: dict[tuple[str, str], int] = {}  # rows written per scope
    written_at = 0  # the latest created_at written
    recorded = False
    step = max(1, batch)
    if progress is not None:
        progress(0, len(work))
    for start in range(0, len(unique), step):
        chunk = unique[start : start + step]
        vectors = dict(zip(chunk, embedder.embed(chunk), strict=True))
        with lock, write_tx(conn):
            if not recorded:
                record(conn, EmbedderConfig(model, version, embedder.dimension, embedder.setting))
                recorded = True
            checked: set[tuple[str, str]] = set()
            copies = changes.keeps_copies(conn)
            for text in chunk:
                for tenant, person, item in by_text[text]:
                    done += 1
                    if (tenant, person) not in checked:
                        existing = lane(conn, tenant, person, model, version)
                        if existing is not None and existing != config:
                            raise InvalidInput(
                                "embedding configuration conflicts with the existing"
                                " model/version lane"
                            )
                        checked.add((tenant, person))
                    current = projection_input(conn, tenant, person, item.target)
                    if current != item:
                        skipped += 1  # changed or deleted since listed: the next drain sees it
                        continue
                    vector = to_float32(vectors[text].tolist())
                    if vector is None:  # a model cannot return non-finite unit vectors
                        skipped += 1
                        continue
                    written = conn.execute(
                        UPSERT_RETURNING_SQL,
                        (
                            tenant,
                            person,
                            item.target.kind.value,
                            item.target.id,
                            model,
                            version,
                            len(vector),
                            current.input_hash,
                            quoted(Normalization.L2.value),
                            quoted(Distance.COSINE.value),
                            encode_vector(vector),
                            current.revision,
                        ),
                    ).fetchone()
                    if copies and has_unit_magnitude(vector):  # well-formed for an l2 row
                        changes.keep_copy(
                            conn,
                            written[0],
                            (tenant, person, model, version),
                            item.target.kind.value,
                            item.target.id,
                            written[1],
                            vector_bytes(vector),
                        )
                    embedded += 1
                    written_at = max(written_at, int(written[1]))
                    touched[(tenant, person)] = touched.get((tenant, person), 0) + 1
        if progress is not None:
            progress(done, len(work))
    if not recorded and work == []:
        with lock, write_tx(conn):  # nothing pending: still record the lane (search turns hybrid)
            record(conn, EmbedderConfig(model, version, embedder.dimension, embedder.setting))
    # a large drain leaves the lane ready for the next search (priming.prime)
    priming.prime(
        conn,
        [
            (t, p, model, version)
            for (t, p), count in touched.items()
            if count >= priming.PRIME_AFTER
        ],
        written_at,
        lock,
    )
    return EmbedPendingResult(
        model,
        version,
        len(scopes),
        len(work),
        embedded,
        skipped,
        len(unique),
        round(time.perf_counter() - started, 3),
    )
