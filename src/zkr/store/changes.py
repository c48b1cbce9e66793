"""A change log of the rows the dense lane depends on, kept by ``zkr_`` triggers in the file.

spec/README.md lets zkr keep ``zkr_*`` tables and triggers (rebuildable, never exported). This
one lets a fresh process (every CLI call) trust the dense lane it cached on disk
(:mod:`zkr.store.vectorfile`) without re-reading every stored vector's row and re-hashing every
target text: it only needs the rows written since.

Layout:

* ``zkr_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT, nonce INTEGER)``: one row
  per written row
  of ``embeddings`` (``item`` = ``\\x1e tenant \\x1f person \\x1f model \\x1f version \\x1e
  rowid``: its lane and row, so that even a hand edit of a vector alone is seen),
  ``sources``, ``evidence``, ``claims`` (their id) and ``claim_evidence`` (its claim id and
  its evidence id), on insert, update (old and new values: a hand edit may move any key, a
  source's id included) and delete. ``AUTOINCREMENT`` never reuses
  a sequence number, so "everything after seq N" is well defined; rows older than
  :data:`KEEP` are pruned (a reader further behind rebuilds, see :func:`since`). ``nonce``
  is random: a position (:class:`Mark`) names one history, not only one count of writes (a
  backup restored over the file and written again reaches the positions of the lost writes).
* ``zkr_changes_meta (key, value)``: ``generation``, a random token chosen when the log is
  created. If a trigger or table goes missing or is not this zkr's (an old zkr's, a hand edit),
  :func:`ensure` recreates the whole log under a new generation, so a cache from before can
  never be trusted across a gap.

* ``zkr_vectors (row, lane, kind, target_id, created_at, vector)``: the float32 components of a
  stored vector, written by zkr's own ``embed`` and ``embed-pending`` in the transaction that
  writes the row (:func:`keep_copy`), so that no search has to parse that row's JSON
  ``vector`` text (spec/retrieval.md §11.3 keeps the text binding; this is a rebuildable
  copy). The ``embeddings`` triggers delete a row's copy on every insert, update or delete of
  that row, whoever the writer, so a copy exists only while its row is exactly as zkr wrote
  it; a copy is trusted only while the whole log is present (:func:`mark`), and recreating
  the log drops every copy with it.

The triggers are plain SQL, so every writer fires them: this zkr, another process, the
reference, a hand edit through ``sqlite3``. A file zkr may not write gets no log (and caches
are then verified row by row, as before).
"""

import json
import os
import sqlite3
from collections.abc import Callable

from zkr.store.driver import is_postgres, rollback
from zkr.typelite import NamedTuple

KEEP = 50_000
"""Log rows kept; a reader whose state is older than that rebuilds its lane."""

LANE_PREFIX = "\x1e"

_TABLES = {
    # table: items logged for a row R (NEW on insert/update, OLD on delete/update)
    "embeddings": (
        "char(30) || {r}.tenant_id || char(31) || {r}.person_id || char(31) || {r}.model"
        " || char(31) || {r}.version || char(30) || {r}.rowid",
    ),
    "sources": ("{r}.id",),
    "evidence": ("{r}.id",),
    "claims": ("{r}.id",),
    "claim_evidence": ("{r}.claim_id", "{r}.evidence_id"),
}


def _triggers() -> dict[str, str]:
    out: dict[str, str] = {}
    for table, items in _TABLES.items():
        # an update logs the old values too: a hand edit may move any key (a renamed id)
        both = ("OLD", "NEW")
        for event, rows in (("INSERT", ("NEW",)), ("UPDATE", both), ("DELETE", ("OLD",))):
            values = ", ".join(f"({item.format(r=r)})" for r in rows for item in items)
            name = f"zkr_changes_{table}_{event.lower()}"
            # any write to an embeddings row drops zkr's float32 copy of its vector (below)
            drop = "".join(
                f" DELETE FROM zkr_vectors WHERE row = {r}.rowid;"
                for r in (rows if table == "embeddings" else ())
            )
            out[name] = (
                f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN"
                f" INSERT INTO zkr_changes (item) VALUES {values};{drop} END"
            )
    return out


TRIGGERS = _triggers()

LANE_TABLES: tuple[str, ...] = tuple(_TABLES)
"""The tables whose writes can change a dense lane's derived state (its rows, their targets'
liveness, revision and text, the links of §5.4); PostgreSQL's per-person lane mark
(:mod:`zkr.store.pg.schema`) is bumped by writes to these same tables."""
_PRUNE = (
    "CREATE TRIGGER zkr_changes_prune AFTER INSERT ON zkr_changes WHEN NEW.seq % 4096 = 0"
    f" BEGIN DELETE FROM zkr_changes WHERE seq <= NEW.seq - {KEEP}; END"
)
_TABLES_SQL = {
    # nonce: a random number per logged row, so that a position names one history (a file
    # restored from a backup and written again reaches the same seq by other writes)
    "zkr_changes": (
        "CREATE TABLE zkr_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT,"
        " nonce INTEGER NOT NULL DEFAULT (random()))"
    ),
    "zkr_changes_meta": (
        "CREATE TABLE zkr_changes_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
    ),
    # zkr's float32 copies of stored vectors (see the module docstring): ``row`` is the
    # embeddings rowid, ``lane``/``kind``/``target_id``/``created_at`` the row it was written
    # for (a VACUUM may renumber rowids without firing a trigger), ``vector`` little-endian
    # float32 components
    "zkr_vectors": (
        "CREATE TABLE zkr_vectors (row INTEGER PRIMARY KEY, lane TEXT NOT NULL,"
        " kind TEXT NOT NULL, target_id TEXT NOT NULL, created_at INTEGER NOT NULL,"
        " vector BLOB NOT NULL)"
    ),
}
_NAMES = (*TRIGGERS, "zkr_changes_prune", *_TABLES_SQL)


class Mark(NamedTuple):
    """Where the log stands: its generation and last sequence number. ``generation`` is the
    log's generation, a dot and the nonce of the row at ``seq`` (:func:`mark`): two files that
    share a history up to some point (a backup restored, a copy) and were written differently
    since may reach the same ``seq``, never with the same nonce there."""

    generation: str
    seq: int


def same_log(a: str, b: str) -> bool:
    """Whether two marks' ``generation`` name the same log (the nonces aside)."""
    return a.partition(".")[0] == b.partition(".")[0]


def _nonce(conn: sqlite3.Connection, seq: int) -> str:
    row = conn.execute("SELECT nonce FROM zkr_changes WHERE seq = ?", (seq,)).fetchone()
    return "" if row is None else str(row[0])


def _present(conn: sqlite3.Connection) -> bool:
    if is_postgres(conn):
        return False  # a PostgreSQL store keeps no change log (its dense lane scans exactly)
    found = dict(
        conn.execute(
            "SELECT name, sql FROM sqlite_master"
            " WHERE name GLOB 'zkr_changes*' OR name = 'zkr_vectors'"
        ).fetchall()
    )
    # a trigger counts only as written here: one of an older zkr (which logged fewer values)
    # or edited by hand may miss writes
    return all(name in found for name in _NAMES) and all(
        found[name] == sql for name, sql in (*TRIGGERS.items(), *_TABLES_SQL.items())
    )


def ensure(conn: sqlite3.Connection) -> bool:
    """Create the log when it (or any of its triggers) is missing; ``False`` when the file
    cannot be written (then there is no log), and on PostgreSQL (no log there). Must run
    outside a transaction."""
    if is_postgres(conn):
        return False
    if _present(conn):
        return True
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    try:
        if _present(conn):  # another process created it meanwhile
            conn.execute("COMMIT")
            return True
        for name in _NAMES:
            kind = "TABLE" if name in _TABLES_SQL else "TRIGGER"
            conn.execute(f"DROP {kind} IF EXISTS {name}")
        for sql in _TABLES_SQL.values():
            conn.execute(sql)
        conn.execute(
            "INSERT INTO zkr_changes_meta VALUES ('generation', ?)", (os.urandom(16).hex(),)
        )
        for sql in (*TRIGGERS.values(), _PRUNE):
            conn.execute(sql)
        conn.execute("COMMIT")
    except sqlite3.Error:
        rollback(conn)  # (SQLite may have ended it itself: a full disk, an I/O error)
        return False
    return True


def mark(conn: sqlite3.Connection) -> Mark | None:
    """The log's generation and last sequence number, or ``None`` without a (complete) log."""
    if is_postgres(conn):
        return None
    try:
        row = conn.execute(
            "SELECT (SELECT value FROM zkr_changes_meta WHERE key = 'generation'),"
            " (SELECT seq FROM sqlite_sequence WHERE name = 'zkr_changes')"
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None or not isinstance(row[0], str) or not _present(conn):
        return None
    seq = int(row[1] or 0)
    return Mark(f"{row[0]}.{_nonce(conn, seq)}", seq)


def since(conn: sqlite3.Connection, seq: int, limit: int) -> list[str] | None:
    """Items logged after ``seq``, or ``None`` when some were pruned or there are more than
    ``limit`` (the caller then rebuilds instead)."""
    oldest = conn.execute("SELECT min(seq) FROM zkr_changes").fetchone()[0]
    if oldest is not None and oldest > seq + 1:
        pruned = conn.execute(
            "SELECT 1 FROM sqlite_sequence WHERE name = 'zkr_changes' AND seq > ?", (seq,)
        ).fetchone()
        if pruned is not None:
            return None
    rows = conn.execute(
        "SELECT DISTINCT item FROM (SELECT item FROM zkr_changes WHERE seq > ? LIMIT ?)",
        (seq, limit + 1),
    ).fetchall()
    count = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM zkr_changes WHERE seq > ? LIMIT ?)",
        (seq, limit + 1),
    ).fetchone()[0]
    if count > limit:
        return None
    return [row[0] for row in rows if isinstance(row[0], str)]


def lane_key(scope: tuple[str, str, str, str]) -> str:
    """The prefix of the items logged for writes to one lane's ``embeddings`` rows (the row's
    rowid follows it)."""
    return LANE_PREFIX + "\x1f".join(scope) + LANE_PREFIX


def lane_rowids(items: list[str], scope: tuple[str, str, str, str]) -> set[int]:
    """The rowids of the lane's ``embeddings`` rows among logged ``items``."""
    key = lane_key(scope)
    return {int(item[len(key) :]) for item in items if item.startswith(key)}


UNTOUCHED_CHECK_LIMIT = 5000
"""More logged changes than this since a lane's position: refresh instead of checking."""


def lane_untouched(
    conn: sqlite3.Connection,
    scope: tuple[str, str, str, str],
    known: Mark | None,
    mark: Mark,
    touches: Callable[[list[str]], bool],
) -> tuple[bool, list[str] | None, set[int]]:
    """Whether nothing logged between ``known`` (where a lane's derived state is valid) and
    ``mark`` can change that state: no write to the lane's ``embeddings`` rows, and no written
    source, evidence, claim or link related (:data:`RELATED_SQL`) to a target for which
    ``touches`` (the lane's stored rows' target ids) says yes. Also returns what was logged
    since ``known`` (``None`` when not read) and the lane rowids among it, for a patch.

    The one rule by which both the numpy lane cache (:mod:`zkr.store.dense.cache`) and the
    numpy-free warm search (:mod:`zkr.store.lanescan`) trust a lane state."""
    if known is None or not same_log(known.generation, mark.generation) or mark.seq < known.seq:
        return False, None, set()
    if mark.seq == known.seq:
        return known.generation == mark.generation, None, set()
    if known.generation.partition(".")[2] != _nonce(conn, known.seq):
        return False, None, set()  # another history reached known.seq (a restored backup)
    items = since(conn, known.seq, UNTOUCHED_CHECK_LIMIT)
    if items is None:
        return False, None, set()
    dirty = lane_rowids(items, scope)
    if dirty:
        return False, items, dirty
    return not others_touch(conn, scope, items, touches), items, dirty


def others_touch(
    conn: sqlite3.Connection,
    scope: tuple[str, str, str, str],
    items: list[str],
    touches: Callable[[list[str]], bool],
) -> bool:
    """Whether a source, evidence, claim or link among logged ``items`` (the lane's own rows'
    items aside) is related (:data:`RELATED_SQL`) to a target for which ``touches`` says yes:
    the half of :func:`lane_untouched` about rows other than the lane's."""
    ids = [item for item in items if not item.startswith(LANE_PREFIX)]
    if not ids:
        return False
    t, p = scope[:2]
    related = conn.execute(RELATED_SQL, {"ids": json.dumps(ids), "t": t, "p": p}).fetchall()
    return touches([r[0] for r in related if isinstance(r[0], str)])


# The rows whose state the given ids can change the mapping of (spec/retrieval.md §5.4, §7):
# the ids themselves, evidence of sources among them, claims and evidence linked to any of
# those, and the sources of all those evidence. Only rows of the lane's scope (:t, :p) can
# change its mapping; the logged ids drive each join (CROSS JOIN), through the scope indexes.
RELATED_SQL = """
WITH ids(id) AS (SELECT value FROM json_each(:ids)),
ev(id) AS (
  SELECT id FROM ids
  UNION SELECT e.id FROM ids CROSS JOIN evidence e
    ON e.tenant_id = :t AND e.person_id = :p AND e.source_id = ids.id
  UNION SELECT ce.evidence_id FROM ids CROSS JOIN claim_evidence ce
    ON ce.tenant_id = :t AND ce.person_id = :p AND ce.claim_id = ids.id
),
cl(id) AS (SELECT ce.claim_id FROM ev CROSS JOIN claim_evidence ce ON ce.evidence_id = ev.id)
SELECT id FROM ids
UNION SELECT id FROM ev
UNION SELECT id FROM cl
UNION SELECT e.source_id FROM ev CROSS JOIN evidence e ON e.id = ev.id
"""


# --------------------------------------------------------------------------- vector copies


def keeps_copies(conn: sqlite3.Connection) -> bool:
    """Whether this file has the log, and so the ``zkr_vectors`` table (ask once per write
    transaction, before :func:`keep_copy`); a PostgreSQL store always has the table, kept by
    its own trigger (:mod:`zkr.store.pg.schema`)."""
    return is_postgres(conn) or _present(conn)


def copies_trusted(conn: sqlite3.Connection) -> bool:
    """Whether the copies of :func:`copies` may stand for their rows' vectors: in a SQLite
    file only under a complete log (:func:`mark`: recreating the log drops every copy), on
    PostgreSQL always (the trigger dropping a row's copy on every write to the row is part of
    the layout)."""
    return is_postgres(conn) or mark(conn) is not None


def keep_copy(
    conn: sqlite3.Connection,
    rowid: int,
    scope: tuple[str, str, str, str],
    kind: str,
    target_id: str,
    created_at: int,
    vector: bytes,
) -> None:
    """Record the float32 components (little-endian bytes) of the ``embeddings`` row
    ``rowid`` just written in this transaction for ``scope`` (tenant, person, model, version),
    ``kind``/``target_id`` with ``created_at``. Only for vectors that are well-formed for
    that row (spec/retrieval.md §9.2): readers take the copy in place of the text."""
    lane = "\x1f".join(scope)
    if is_postgres(conn):  # its rows carry their scope (a person's rows stay on one shard)
        conn.execute(
            "INSERT INTO zkr_vectors"
            " (tenant_id, person_id, row, lane, kind, target_id, created_at, vector)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, person_id, row) DO UPDATE"
            " SET lane = excluded.lane, kind = excluded.kind, target_id = excluded.target_id,"
            " created_at = excluded.created_at, vector = excluded.vector",
            (scope[0], scope[1], rowid, lane, kind, target_id, created_at, vector),
        )
        return
    conn.execute(
        "INSERT OR REPLACE INTO zkr_vectors (row, lane, kind, target_id, created_at, vector)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (rowid, lane, kind, target_id, created_at, vector),
    )


def copies(
    conn: sqlite3.Connection, scope: tuple[str, str, str, str], rowids: list[int]
) -> dict[int, tuple[str, str, int, bytes]]:
    """The copies kept for ``rowids`` of ``scope``: rowid -> (kind, target id, created_at,
    float32 bytes). The caller checks them against the row it read (a rowid may have been
    renumbered by a VACUUM, which fires no trigger) and trusts them only under a complete
    log (:func:`copies_trusted`)."""
    lane = "\x1f".join(scope)
    # PostgreSQL: within the scope's rows (zkr_vectors leads with it there)
    where = "tenant_id = ? AND person_id = ? AND " if is_postgres(conn) else ""
    out: dict[int, tuple[str, str, int, bytes]] = {}
    for offset in range(0, len(rowids), 512):
        part = rowids[offset : offset + 512]
        marks = ",".join("?" * len(part))
        for row, kind, target_id, created_at, vector in conn.execute(
            "SELECT row, kind, target_id, created_at, vector FROM zkr_vectors"
            f" WHERE {where}row IN ({marks}) AND lane = ?",
            [*scope[:2], *part, lane] if where else [*part, lane],
        ):
            if type(vector) is bytes:
                out[row] = (kind, target_id, created_at, vector)
    return out
