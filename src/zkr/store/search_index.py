"""zkr's own search index: a rebuildable projection of source and claim text.

spec/README.md lets zkr keep ``zkr_*`` tables and triggers beside the reference's layout
(rebuildable, never exported). This index is one: dropping every ``zkr_search*``/``zkr_fts``
object loses nothing, the next search rebuilds them.

Layout (all created together, in one transaction):

* ``zkr_fts``: FTS5, one row (document) per source that is not deleted and per claim (any
  status: ``as_of`` searches see superseded claims), ``body`` = the document's index terms
  (:func:`zkr.store.terms.index_terms`: at most ``MAX_DOCUMENT_TERMS`` of them) each prefixed
  with the scope's tag, so a term's postings, document frequency and bm25 statistics belong to
  one scope; ``kind``, ``target``, ``scope`` UNINDEXED. Rowids follow write order: sources in
  ``[1, 2^40)``, claims in ``[2^40, 2^41)``, so "the sources written just before and after this
  one" is a rowid range. The lexical lane reads a known document's columns straight from FTS5's
  content table ``zkr_fts_content`` (``id`` = rowid, ``c0``..``c3`` = body, kind, target,
  scope), a plain rowid table, rather than through the FTS5 cursor.
* ``zkr_search_map``: (kind, target) → rowid, for re-indexing and removal.
* ``zkr_search_terms``: tagged term → number of the scope's documents holding it;
  ``zkr_search_scopes``: scope tag → documents and total terms (for IDF and average length).
* ``zkr_search_queue``: (kind, target) changed since the last drain, in write order.
* ``zkr_search_meta``: index format version, the next rowids and the ``epoch`` (random, new
  whenever the index is (re)built).
* ``zkr_search_log``: the rowid of every document removed or (re)inserted, in order (``seq``),
  written by two triggers on ``zkr_search_map`` (so by whichever process drains) and cut to the
  last :data:`LOG_KEEP` entries. With the epoch it tells a process that keeps the index in memory
  (:mod:`zkr.store.memindex`) exactly which documents changed since it last looked. An index
  built before the log existed gets it (and an epoch) at the next drain (``upgrade``).
* triggers ``zkr_search_*`` on ``sources`` and ``claims`` (insert, delete, and updates of the
  text, scope or ``deleted_at``) and on ``corrections`` (insert, delete: the correcting claim)
  that only append to the queue. A claim that corrects others also holds the text of the chain
  it corrects (:data:`_CHAIN_TEXT`), so a drained source re-indexes those claims too. The
  triggers are plain SQL, so the reference fires them too when it writes to a file zkr has
  indexed.

:func:`ensure_current` runs before every search: it builds the index when it is missing, of an
older format or lacks a trigger (files written or migrated by the reference), and otherwise
drains the queue (writes by ``remember``, ``correct``, ``delete``, ``apply``, ``repair``, by
this process, another one, or the reference). A file zkr may not write gets a private copy of
the index in the connection's ``temp`` schema instead, which shadows the file's own tables.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import zlib
from collections import Counter
from collections.abc import Iterable

from zkr.store.driver import Connection, change_mark, rollback
from zkr.store.eligibility import LIVE_SOURCE, live_evidence, live_source, supporting
from zkr.store.terms import index_terms

INDEX_VERSION = "5"  # 2: label terms (zkr.store.terms, item 4); 3: a correction's chain text;
# 4: the chain cut at CHAIN_DEPTH (an index of 3 may hold deeper words that a delete would miss);
# 5: at most MAX_DOCUMENT_TERMS terms per document (zkr.store.terms.index_terms, item 5)
CLAIM_BASE = 1 << 40
DRAIN_BATCH = 2000
LOG_KEEP = 20_000
CHAIN_DEPTH = 8
"""How many corrections back a claim's document holds the chain's words (:data:`_CHAIN_TEXT`):
unbounded, a claim corrected N times made N documents of up to N turns each (N = 400: a 44 MB
file, a 13 s search after deleting the first turn); bounded, each holds at most this many."""

_TRIGGER_NAMES = (
    "zkr_search_source_insert",
    "zkr_search_source_update",
    "zkr_search_source_delete",
    "zkr_search_claim_insert",
    "zkr_search_claim_update",
    "zkr_search_claim_delete",
    "zkr_search_correction_insert",
    "zkr_search_correction_delete",
)
_TABLES = (
    "zkr_fts",
    "zkr_search_map",
    "zkr_search_terms",
    "zkr_search_scopes",
    "zkr_search_queue",
    "zkr_search_meta",
)
_LOG_TRIGGER_NAMES = ("zkr_search_log_insert", "zkr_search_log_delete")


@functools.lru_cache(maxsize=64)
def scope_tag(tenant_id: str, person_id: str) -> str:
    """Ten hex digits naming a scope inside index terms: 40 bits of two CRC-32s
    of ``tenant \x1f person`` (zlib is already loaded; hashlib would cost a CLI call several
    ms). A collision would only share statistics: every match is still checked for scope."""
    data = f"{tenant_id}\x1f{person_id}".encode()
    digest = zlib.crc32(data).to_bytes(4, "big") + zlib.crc32(data[::-1]).to_bytes(4, "big")
    return digest[:5].hex()


def _schema(prefix: str) -> list[str]:
    """CREATE statements of the index tables in schema ``prefix`` ('' or 'temp.')."""
    table = "CREATE TEMP TABLE" if prefix else "CREATE TABLE"
    return [
        f"CREATE VIRTUAL TABLE {prefix}zkr_fts USING fts5(body, kind UNINDEXED,"
        " target UNINDEXED, scope UNINDEXED,"
        " tokenize = \"unicode61 categories 'L* N* Co M*' remove_diacritics 0\")",
        f"{table} zkr_search_map (kind TEXT NOT NULL, target TEXT NOT NULL,"
        " doc INTEGER NOT NULL, PRIMARY KEY (kind, target)) WITHOUT ROWID",
        f"{table} zkr_search_terms (term TEXT PRIMARY KEY, docs INTEGER NOT NULL) WITHOUT ROWID",
        f"{table} zkr_search_scopes (scope TEXT PRIMARY KEY, docs INTEGER NOT NULL,"
        " terms INTEGER NOT NULL) WITHOUT ROWID",
        f"{table} zkr_search_queue (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL,"
        " target TEXT NOT NULL)",
        f"{table} zkr_search_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
        *_log_schema(prefix),
    ]


def _log_schema(prefix: str) -> list[str]:
    """The change log of the index in schema ``prefix`` ('' or 'temp.'): the table and the two
    triggers on ``zkr_search_map`` (one row per document a drain removed or inserted)."""
    table = "CREATE TEMP TABLE" if prefix else "CREATE TABLE"
    trigger = "CREATE TEMP TRIGGER" if prefix else "CREATE TRIGGER"
    return [
        f"{table} zkr_search_log (seq INTEGER PRIMARY KEY, doc INTEGER NOT NULL)",
        f"{trigger} {_LOG_TRIGGER_NAMES[0]} AFTER INSERT ON {prefix}zkr_search_map BEGIN"
        " INSERT INTO zkr_search_log (doc) VALUES (NEW.doc); END",
        f"{trigger} {_LOG_TRIGGER_NAMES[1]} AFTER DELETE ON {prefix}zkr_search_map BEGIN"
        " INSERT INTO zkr_search_log (doc) VALUES (OLD.doc); END",
    ]


def _new_epoch(conn: sqlite3.Connection, prefix: str) -> None:
    conn.execute(
        f"INSERT OR REPLACE INTO {prefix}zkr_search_meta (key, value) VALUES ('epoch', ?)",
        (os.urandom(8).hex(),),
    )


def _trigger(name: str, event: str, table: str, kind: str, row: str, column: str = "id") -> str:
    return (
        f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN"
        f" INSERT INTO zkr_search_queue (kind, target) VALUES ('{kind}', {row}.{column}); END"
    )


TRIGGERS = (
    _trigger(_TRIGGER_NAMES[0], "INSERT", "sources", "source", "NEW"),
    _trigger(
        _TRIGGER_NAMES[1],
        "UPDATE OF content, deleted_at, tenant_id, person_id",
        "sources",
        "source",
        "NEW",
    ),
    _trigger(_TRIGGER_NAMES[2], "DELETE", "sources", "source", "OLD"),
    _trigger(_TRIGGER_NAMES[3], "INSERT", "claims", "claim", "NEW"),
    _trigger(
        _TRIGGER_NAMES[4],
        "UPDATE OF subject, predicate, value, tenant_id, person_id",
        "claims",
        "claim",
        "NEW",
    ),
    _trigger(_TRIGGER_NAMES[5], "DELETE", "claims", "claim", "OLD"),
    # a claim's document carries the text of the chain it corrects (_CHAIN_TEXT)
    _trigger(_TRIGGER_NAMES[6], "INSERT", "corrections", "claim", "NEW", "claim_id"),
    _trigger(_TRIGGER_NAMES[7], "DELETE", "corrections", "claim", "OLD", "claim_id"),
)


# --------------------------------------------------------------------------- state


def _state(conn: sqlite3.Connection) -> str:
    """'temp' (this connection's private copy is in use), 'ready', 'queued', 'upgrade' (current
    but without the change log) or 'missing'."""
    if conn.execute("SELECT 1 FROM sqlite_temp_master WHERE name = 'zkr_fts'").fetchone():
        return "temp"
    names = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'zkr\\_%' ESCAPE '\\'"
        )
    }
    if not names.issuperset(_TABLES) or not names.issuperset(_TRIGGER_NAMES):
        return "missing"
    row = conn.execute("SELECT value FROM zkr_search_meta WHERE key = 'version'").fetchone()
    if row is None or row[0] != INDEX_VERSION:
        return "missing"
    if "zkr_search_log" not in names or not names.issuperset(_LOG_TRIGGER_NAMES):
        return "upgrade"
    return "queued" if _queued(conn) else "ready"


def _queued(conn: sqlite3.Connection) -> bool:
    """Whether the file's index has records waiting to be drained."""
    return conn.execute("SELECT 1 FROM zkr_search_queue LIMIT 1").fetchone() is not None


def ensure_current(conn: sqlite3.Connection) -> None:
    """Make the index reflect every committed write before a search reads it.

    Builds it when missing/outdated, drains the queue otherwise (one ``BEGIN IMMEDIATE``
    transaction, waiting for other writers like any write). A file zkr cannot write (read-only,
    or no room left: a full disk, a file size limit) gets the connection-private ``temp`` copy
    instead, built from one snapshot of the file and dropped again at the next commit anyone
    makes, so a search answers exactly as it would from a drained index and the queue stays in
    the file for a later drain. When another writer holds the file past the busy timeout, the
    search goes on with the index as it is (missing the records still queued) rather than
    failing (a missing index still needs the lock). Raises ``sqlite3.Error`` for other failures.

    Once the index was seen current (the mark read before the tables and the queue were),
    the connection remembers the file's change mark (:func:`zkr.store.driver.change_mark`,
    kept on zkr's :class:`~zkr.store.driver.Connection`): while nothing was committed since, by
    anyone, the index is still current and the check is that one ``PRAGMA``.
    """
    mark = change_mark(conn)
    if mark == getattr(conn, "search_ready", None):
        return
    state = _state(conn)
    if state == "temp":  # a private copy of the file as it was before a commit: look again
        _drop_private(conn)
        mark = change_mark(conn)
        state = _state(conn)
    if state == "ready":
        _remember(conn, mark)  # read before the state: a commit in between moves it again
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) and state in ("queued", "upgrade"):
            return  # another writer held the file past the busy timeout: search what is indexed
        if not _cannot_write(exc):
            raise
        if state == "upgrade" and not _queued(conn):
            _remember(conn, mark)  # current, only without the log (memindex: not kept in memory)
            return
        _build_private(conn, exc)
        return
    try:
        state = _state(conn)  # another process may have done it while we waited
        if state == "missing":
            _build(conn)
        elif state in ("queued", "upgrade"):
            if state == "upgrade":
                _add_log(conn)
            drain(conn)
        conn.execute("COMMIT")  # (FTS5 writes its buffered terms here: the mark moves again)
    except sqlite3.Error as exc:
        rollback(conn)  # the queue stays in the file, for the next search that can write
        if not _cannot_write(exc):
            raise
        _build_private(conn, exc)
    except BaseException:
        rollback(conn)
        raise


# SQLite's primary result codes of a write the file cannot take: SQLITE_READONLY, SQLITE_FULL
# (no room on the disk, ``max_page_count``) and SQLITE_IOERR (a write past a full disk or the
# process's file size limit, EFBIG, fails as an I/O error when it hits the journal or WAL).
_CANNOT_WRITE = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)


def _cannot_write(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # (not raised by SQLite itself)
        return "readonly" in str(exc)
    return int(code) & 0xFF in _CANNOT_WRITE


def current_at(conn: sqlite3.Connection, mark: tuple[int, int]) -> bool:
    """Whether :func:`ensure_current` already found the index current at change mark ``mark``
    on this connection (read inside the caller's read transaction: then the index is current
    in its snapshot, and :func:`ensure_current` would do nothing)."""
    return mark == getattr(conn, "search_ready", None)


def _remember(conn: sqlite3.Connection, mark: tuple[int, int] | None) -> None:
    """Record (or, with ``None``, forget) the change mark at which the index is current; a
    connection without room for it (not opened by zkr) checks every time."""
    if isinstance(conn, Connection):
        conn.search_ready = mark


def drop(conn: sqlite3.Connection) -> None:
    """Remove the whole index inside the caller's transaction; the next search rebuilds it
    (``erase`` uses this so no index page keeps erased terms)."""
    _remember(conn, None)
    _drop_private(conn)
    _drop(conn)


def _drop(conn: sqlite3.Connection) -> None:
    """Drop the file's index (``main.``: a private copy would shadow an unqualified name)."""
    for name in _TRIGGER_NAMES:
        conn.execute(f"DROP TRIGGER IF EXISTS main.{name}")
    for name in (*_TABLES, "zkr_search_log"):  # (its triggers go with zkr_search_map)
        conn.execute(f"DROP TABLE IF EXISTS main.{name}")


def _drop_private(conn: sqlite3.Connection) -> None:
    for name in (*_TABLES, "zkr_search_log"):
        conn.execute(f"DROP TABLE IF EXISTS temp.{name}")


def _add_log(conn: sqlite3.Connection) -> None:
    """Give an index built before the change log existed its log and an epoch (caller's
    write transaction)."""
    conn.execute("DROP TABLE IF EXISTS zkr_search_log")
    for sql in _log_schema(""):
        conn.execute(sql)
    _new_epoch(conn, "")


def _enqueue_everything(conn: sqlite3.Connection) -> None:
    # write order: the rowid order of each table (insertion order unless the file was vacuumed)
    conn.execute(
        "INSERT INTO zkr_search_queue (kind, target)"
        f" SELECT 'source', id FROM main.sources WHERE {live_source('')} ORDER BY rowid"
    )
    conn.execute(
        "INSERT INTO zkr_search_queue (kind, target)"
        " SELECT 'claim', id FROM main.claims ORDER BY rowid"
    )


def _build(conn: sqlite3.Connection) -> None:
    """(Re)create the index, its triggers and its content inside the caller's transaction."""
    _drop(conn)
    for sql in (*_schema(""), *TRIGGERS):
        conn.execute(sql)
    _fill(conn, "")


def _fill(conn: sqlite3.Connection, prefix: str) -> None:
    """Index every record into the just-created tables of schema ``prefix`` ('' or 'temp.')
    under a new epoch (caller's transaction)."""
    conn.execute(
        f"INSERT INTO {prefix}zkr_search_meta (key, value) VALUES ('version', ?),"
        " ('next_source', '1'), ('next_claim', ?)",
        (INDEX_VERSION, str(CLAIM_BASE)),
    )
    _new_epoch(conn, prefix)
    _enqueue_everything(conn)
    drain(conn, follow=False)
    conn.execute(f"DELETE FROM {prefix}zkr_search_log")  # a new epoch: nothing came before


def _build_private(conn: sqlite3.Connection, reason: sqlite3.Error) -> None:
    """The fallback of a file zkr cannot write: the whole index in this connection's temp
    schema, from one read snapshot of the file; current until the next commit (the mark
    remembered is that snapshot's). Kept in memory when the disk has no room (``reason``)."""
    code = getattr(reason, "sqlite_errorcode", None)
    if code is not None and int(code) & 0xFF != sqlite3.SQLITE_READONLY:
        conn.execute("PRAGMA temp_store = MEMORY")  # temp files may sit on the full disk
    conn.execute("BEGIN")  # deferred: the first read of the file takes the snapshot
    try:
        for sql in _schema("temp."):
            conn.execute(sql)
        _fill(conn, "temp.")
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        _drop_private(conn)
        raise
    _remember(conn, (int(version), conn.total_changes))


# --------------------------------------------------------------------------- drain


# Only live sources are indexed (spec/retrieval.md §1: a deleted source is never live again).
_CURRENT_SOURCES = f"""
SELECT s.id, s.tenant_id, s.person_id, s.content FROM json_each(:ids) AS h
JOIN main.sources s ON s.id = h.value WHERE {LIVE_SOURCE}
"""
_CURRENT_CLAIMS = """
SELECT c.id, c.tenant_id, c.person_id, c.subject || ' ' || c.predicate || ' ' || c.value
FROM json_each(:ids) AS h JOIN main.claims c ON c.id = h.value
"""
# A correction stays findable by what it corrects (matching is ours, spec/README.md): the
# document of a claim that supersedes others (``corrections``, spec/lifecycle.md §3.3, followed
# transitively) also holds each superseded claim's ``subject predicate value`` and the text of
# the live sources whose live evidence supports it ("I decided: the trip is to Lisbon" keeps
# "decided" findable after "Porto instead of Lisbon"); both only while such a source stands,
# so a deleted turn takes its claim's words out of every correction ("gone after a delete").
# Only the words move: the superseded claims and their sources stay exactly as eligible as
# before (spec/retrieval.md §3.3, §4). At most :data:`CHAIN_DEPTH` corrections back (the same
# bound as _CORRECTING_CLAIMS, so a delete still reaches every document holding its words).
_CHAIN_TEXT = f"""
WITH RECURSIVE chain(head, id, depth) AS (
  SELECT k.claim_id, k.superseded_claim_id, 1 FROM main.corrections k
   WHERE k.claim_id IN (SELECT value FROM json_each(:ids))
  UNION
  SELECT chain.head, k.superseded_claim_id, chain.depth + 1 FROM chain
    JOIN main.corrections k ON k.claim_id = chain.id WHERE chain.depth < {CHAIN_DEPTH}
)
SELECT DISTINCT chain.head, chain.id, 0, c.subject || ' ' || c.predicate || ' ' || c.value
  FROM chain JOIN main.claims c ON c.id = chain.id
 WHERE EXISTS (
  SELECT 1 FROM main.claim_evidence ce
    JOIN main.evidence e ON e.id = ce.evidence_id AND {live_evidence("e")}
    JOIN main.sources s ON s.id = e.source_id AND {LIVE_SOURCE}
   WHERE ce.claim_id = chain.id AND {supporting("ce")})
UNION ALL
SELECT DISTINCT chain.head, chain.id, 1, s.content FROM chain
  JOIN main.claim_evidence ce ON ce.claim_id = chain.id AND {supporting("ce")}
  JOIN main.evidence e ON e.id = ce.evidence_id AND {live_evidence("e")}
  JOIN main.sources s ON s.id = e.source_id AND {LIVE_SOURCE}
ORDER BY 1, 2, 3, 4
"""
# The claims whose chain text holds a source's words (the claims its evidence supports,
# followed forward through ``corrections``): re-indexed with the source, so a deleted source's
# words leave the corrections' documents too.
_CORRECTING_CLAIMS = f"""
WITH RECURSIVE fwd(id, depth) AS (
  SELECT k.claim_id, 1 FROM main.corrections k
    JOIN main.claim_evidence ce ON ce.tenant_id = k.tenant_id AND ce.person_id = k.person_id
     AND ce.claim_id = k.superseded_claim_id AND {supporting("ce")}
    JOIN main.evidence e ON e.id = ce.evidence_id
   WHERE e.source_id IN (SELECT value FROM json_each(:ids))
  UNION
  SELECT k.claim_id, fwd.depth + 1 FROM fwd JOIN main.corrections k
    ON k.superseded_claim_id = fwd.id WHERE fwd.depth < {CHAIN_DEPTH}
)
SELECT DISTINCT id FROM fwd ORDER BY id
"""


def drain(conn: sqlite3.Connection, follow: bool = True) -> int:
    """Re-index every queued record (inside the caller's write transaction); returns how
    many distinct records were processed. A record keeps its rowid when re-indexed. With
    ``follow``, a queued source also re-indexes the claims whose chain text holds its words
    (:data:`_CORRECTING_CLAIMS`; a full build queues every claim anyway)."""
    import json

    follow = follow and _has_corrections(conn)

    done = 0
    while True:
        rows = conn.execute(
            "SELECT seq, kind, target FROM zkr_search_queue ORDER BY seq LIMIT ?",
            (DRAIN_BATCH,),
        ).fetchall()
        if not rows:
            # the log keeps the last LOG_KEEP entries (a reader further behind rebuilds)
            conn.execute(
                "DELETE FROM zkr_search_log WHERE seq <= (SELECT max(seq) FROM zkr_search_log) - ?",
                (LOG_KEEP,),
            )
            return done
        order: dict[tuple[str, str], None] = {}
        for _, kind, target in rows:
            order.setdefault((kind, target), None)
        sources = [target for kind, target in order if kind == "source"]
        if follow and sources:
            for (claim,) in conn.execute(_CORRECTING_CLAIMS, {"ids": json.dumps(sources)}):
                order.setdefault(("claim", claim), None)
        keys = list(order)
        done += len(keys)
        stats = _Stats()
        old = _remove(conn, keys, stats)
        texts: dict[tuple[str, str], tuple[str, str, str]] = {}
        for kind, sql in (("source", _CURRENT_SOURCES), ("claim", _CURRENT_CLAIMS)):
            ids = [target for k, target in keys if k == kind]
            if ids:
                for rid, tenant, person, text in conn.execute(sql, {"ids": json.dumps(ids)}):
                    texts[(kind, rid)] = (tenant, person, text)
        _add_chain_text(conn, [target for k, target in keys if k == "claim"], texts)
        _insert(conn, [(key, texts[key]) for key in keys if key in texts], old, stats)
        stats.write(conn)
        conn.execute("DELETE FROM zkr_search_queue WHERE seq <= ?", (rows[-1][0],))


def _has_corrections(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM main.corrections LIMIT 1").fetchone() is not None


def _add_chain_text(
    conn: sqlite3.Connection, claims: list[str], texts: dict[tuple[str, str], tuple[str, str, str]]
) -> None:
    """Append to each claim document in ``texts`` the text of the chain it corrects
    (:data:`_CHAIN_TEXT`); claims that correct nothing keep ``subject predicate value``."""
    import json

    if not claims or not _has_corrections(conn):
        return
    extra: dict[str, list[str]] = {}
    for head, _, _, text in conn.execute(_CHAIN_TEXT, {"ids": json.dumps(claims)}):
        extra.setdefault(head, []).append(text)
    for head, parts in extra.items():
        key = ("claim", head)
        if key in texts:
            tenant, person, text = texts[key]
            texts[key] = (tenant, person, " ".join((text, *parts)))


class _Stats:
    """Changes to document frequencies and scope totals, written once per batch."""

    def __init__(self) -> None:
        self.terms: Counter[str] = Counter()
        self.scopes: dict[str, list[int]] = {}

    def add(self, scope: str, body: str, sign: int) -> None:
        tagged = body.split()
        self.terms.update({term: sign for term in set(tagged)})
        totals = self.scopes.setdefault(scope, [0, 0])
        totals[0] += sign
        totals[1] += sign * len(tagged)

    def write(self, conn: sqlite3.Connection) -> None:
        changed = [(term, n) for term, n in self.terms.items() if n]
        conn.executemany(
            "INSERT INTO zkr_search_terms (term, docs) VALUES (?, ?)"
            " ON CONFLICT (term) DO UPDATE SET docs = docs + excluded.docs",
            changed,
        )
        conn.executemany(
            "DELETE FROM zkr_search_terms WHERE term = ? AND docs <= 0",
            [(term,) for term, n in changed if n < 0],
        )
        conn.executemany(
            "INSERT INTO zkr_search_scopes (scope, docs, terms) VALUES (?, ?, ?)"
            " ON CONFLICT (scope) DO UPDATE SET docs = docs + excluded.docs,"
            " terms = terms + excluded.terms",
            [(scope, d, t) for scope, (d, t) in self.scopes.items()],
        )


def _remove(
    conn: sqlite3.Connection, keys: Iterable[tuple[str, str]], stats: _Stats
) -> dict[tuple[str, str], int]:
    """Remove the indexed documents of ``keys``; returns their rowids."""
    old: dict[tuple[str, str], int] = {}
    for key in keys:
        row = conn.execute(
            "SELECT m.doc, f.body, f.scope FROM zkr_search_map m"
            " JOIN zkr_fts f ON f.rowid = m.doc WHERE m.kind = ? AND m.target = ?",
            key,
        ).fetchone()
        if row is None:
            continue
        old[key] = row[0]
        stats.add(row[2], row[1], -1)
        conn.execute("DELETE FROM zkr_fts WHERE rowid = ?", (row[0],))
        conn.execute("DELETE FROM zkr_search_map WHERE kind = ? AND target = ?", key)
    return old


def _insert(
    conn: sqlite3.Connection,
    docs: list[tuple[tuple[str, str], tuple[str, str, str]]],
    old: dict[tuple[str, str], int],
    stats: _Stats,
) -> None:
    meta = dict(conn.execute("SELECT key, value FROM zkr_search_meta").fetchall())
    next_id = {"source": int(meta["next_source"]), "claim": int(meta["next_claim"])}
    fts_rows: list[tuple[int, str, str, str, str]] = []
    map_rows: list[tuple[str, str, int]] = []
    for (kind, target), (tenant, person, text) in docs:
        terms = index_terms(text)
        if not terms:
            continue  # nothing searchable (punctuation, stop words only)
        tag = scope_tag(tenant, person)
        body = " ".join(tag + term for term in terms)
        rowid = old.get((kind, target))
        if rowid is None:
            rowid = next_id[kind]
            next_id[kind] += 1
        fts_rows.append((rowid, body, kind, target, tag))
        map_rows.append((kind, target, rowid))
        stats.add(tag, body, 1)
    conn.executemany(
        "INSERT INTO zkr_fts (rowid, body, kind, target, scope) VALUES (?, ?, ?, ?, ?)", fts_rows
    )
    conn.executemany("INSERT INTO zkr_search_map (kind, target, doc) VALUES (?, ?, ?)", map_rows)
    conn.executemany(
        "UPDATE zkr_search_meta SET value = ? WHERE key = ?",
        [(str(next_id["source"]), "next_source"), (str(next_id["claim"]), "next_claim")],
    )
