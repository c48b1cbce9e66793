"""Which local model a database's semantic lane was filled with (zkr-owned, never exported).

``zkr_embedder`` holds at most one row: the lane ``model``/``version`` that ``embed-pending``
last wrote with the local embedder (:mod:`zkr.embedding.local`), its dimension and the model
setting used. The reference ignores the table (spec/README.md allows extra ``zkr_*`` tables);
the embedding rows themselves are ordinary ``embeddings`` rows (spec/retrieval.md §11.3).

The row is what makes a plain ``search`` (a ``query`` without ``query_embedding``) hybrid:
with it, search loads the model that ``ZKR_EMBED_MODEL`` (or the default) names on this
machine, checks that its model/version are exactly the recorded ones and embeds the query.
A database copied to a machine whose model differs (or is not installed) fails with a message
naming the setting instead of silently searching another model's space; ``ZKR_EMBED=off``
searches lexically. A database without the row never loads or imports anything.
"""

import os
import sqlite3
import sys

from zkr.errors import InvalidInput
from zkr.model import QueryEmbedding
from zkr.store.driver import Connection, change_mark
from zkr.text import env_switch
from zkr.typelite import NamedTuple


class EmbedderConfig(NamedTuple):
    """The recorded lane identity of the local embedder."""

    model: str
    version: str
    dimension: int
    setting: str


_CREATE_SQL = """
CREATE TABLE IF NOT EXISTS zkr_embedder (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    model TEXT NOT NULL,
    version TEXT NOT NULL,
    dimension INTEGER NOT NULL,
    setting TEXT NOT NULL,
    updated_at INTEGER NOT NULL
)"""
_READ_SQL = "SELECT model, version, dimension, setting FROM zkr_embedder WHERE id = 1"
_WRITE_SQL = """
INSERT INTO zkr_embedder (id, model, version, dimension, setting, updated_at)
VALUES (1, ?, ?, ?, ?, unixepoch())
ON CONFLICT (id) DO UPDATE SET model = excluded.model, version = excluded.version,
    dimension = excluded.dimension, setting = excluded.setting, updated_at = excluded.updated_at
"""


def configured(conn: sqlite3.Connection) -> EmbedderConfig | None:
    """The recorded configuration, or ``None`` (no table, or no row). One indexed read.

    Outside a transaction on zkr's connection the answer is kept until the file's change mark
    (:func:`zkr.store.driver.change_mark`, read first) moves: a long-lived process's search
    then reads one ``PRAGMA`` instead (a file without the table fails to prepare the read,
    every time)."""
    mark = None
    if isinstance(conn, Connection) and not conn.in_transaction:
        mark = change_mark(conn)
        kept: tuple[object, EmbedderConfig | None] | None = getattr(conn, "embedder_kept", None)
        if kept is not None and kept[0] == mark:
            return kept[1]
    try:
        row = conn.execute(_READ_SQL).fetchone()
    except sqlite3.OperationalError as exc:  # no such table: a file never filled locally
        if "no such table" not in str(exc):
            return None  # (not kept)
        row = None
    config = None if row is None else EmbedderConfig(*row)
    if mark is not None:
        conn.embedder_kept = (mark, config)  # type: ignore[attr-defined]
    return config


def none_at(conn: sqlite3.Connection, mark: tuple[int, int]) -> bool:
    """Whether :func:`configured` already found no recorded configuration at change mark
    ``mark`` on this connection (then, read inside a transaction, there is none in its
    snapshot: :func:`query_embedding` would answer ``None``)."""
    kept: tuple[object, EmbedderConfig | None] | None = getattr(conn, "embedder_kept", None)
    return kept is not None and kept[0] == mark and kept[1] is None


def record(conn: sqlite3.Connection, config: EmbedderConfig) -> None:
    """Record ``config`` (inside the caller's write transaction)."""
    conn.execute(_CREATE_SQL)
    conn.execute(_WRITE_SQL, (config.model, config.version, config.dimension, config.setting))


def forget(conn: sqlite3.Connection) -> bool:
    """Remove the record (inside the caller's write transaction): plain ``search`` is lexical
    again; the stored vectors stay. Returns whether there was one."""
    try:
        return conn.execute("DELETE FROM zkr_embedder").rowcount > 0
    except sqlite3.OperationalError:
        return False


def switched_on() -> bool:
    """``ZKR_EMBED``: ``off``/``0``/``false``/``no`` make ``search`` lexical on purpose;
    unset, ``on``/``1``/``true``/``yes`` leave the recorded local model in use (any case).

    Raises ``InvalidInput`` naming the setting for any other value (a typo must not silently
    mean either)."""
    switch = env_switch("ZKR_EMBED")
    if switch is None:
        value = os.environ.get("ZKR_EMBED", "").strip().lower()
        raise InvalidInput(f"ZKR_EMBED must be on or off, not {value!r}")
    return switch


def query_embedding(conn: sqlite3.Connection, query: str) -> QueryEmbedding | None:
    """The local embedding of ``query`` when this database has a recorded local model and
    ``ZKR_EMBED`` does not switch it off (:func:`switched_on`); ``None`` otherwise (no import,
    no model load).

    Raises ``EmbedderUnavailable`` (runtime or model missing here) or ``InvalidInput`` (the
    model found here writes another lane than the recorded one), both naming the setting.
    """
    config = configured(conn)
    if config is None or not switched_on():
        return None
    from zkr.embedding import SETTING
    from zkr.embedding.local import load

    embedder = load()
    if (embedder.model, embedder.version) != (config.model, config.version):
        raise InvalidInput(
            f"this database's semantic lane was embedded with {config.model} ({config.version});"
            f" the local model here ({SETTING}) is {embedder.model} ({embedder.version}): set"
            f" {SETTING} to the same model, pass query_embedding, or set ZKR_EMBED=off"
        )
    vector = embedder.embed([query], query=True)[0]
    return QueryEmbedding([float(x) for x in vector], config.model, config.version)


def calibration(conn: sqlite3.Connection, query: QueryEmbedding) -> tuple[float, float] | None:
    """``(floor, full)`` cosine calibration when ``query`` is in the recorded local lane and
    the model is loaded in this process; ``None`` for caller-supplied lanes. Asked only for a
    query the search embedded itself (:func:`query_embedding`): a caller's ``query_embedding``
    is never calibrated, even in the local lane (:func:`zkr.store.retrieval.search`)."""
    config = configured(conn)
    if config is None or (query.model, query.version) != (config.model, config.version):
        return None
    # a model loaded in this process was loaded through that module: when it is not imported,
    # none is (importing it would load onnxruntime and numpy for nothing, 0.2 s a CLI call,
    # and keep a query_embedding search off the numpy-free path)
    local = sys.modules.get("zkr.embedding.local")
    if local is None:
        return None
    for embedder in local._LOADED.values():
        if (embedder.model, embedder.version) == (config.model, config.version):
            return embedder.spec.floor, embedder.spec.full
    return None
