"""Per-person change marks on PostgreSQL: the one mechanism behind the dense lane's mark
(``zkr_lane_marks``, :data:`zkr.store.pg.schema.LANE_MARK_DDL`) and the lexical index's
(``zkr_search_marks``, :data:`zkr.store.pg.search.SEARCH_MARK_DDL`).

Every transaction writing a row of a watched table sets its scope's mark to a new value of one
sequence (never reused, so "the mark is what it was" means "nobody wrote this person's rows
since"). Row triggers, so every writer fires them (zkr, another process, a hand edit); a
transaction marks a scope once (a transaction-local setting remembers which it did last), and
``TRUNCATE`` marks every scope. A long-lived connection keeps what it derived from the rows
while the mark is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

_T = 'TEXT COLLATE "C" NOT NULL'


def scope_mark_ddl(name: str, tables: Iterable[str]) -> tuple[str, ...]:
    """The DDL of the ``name`` mark (``lane``, ``search``): sequence ``zkr_NAME_marks_seq``,
    table ``zkr_NAME_marks (tenant_id, person_id, mark)``, functions ``zkr_NAME_mark_scope``
    and ``zkr_NAME_mark``, setting ``zkr.NAME_marked``, and on each of ``tables`` (each with
    ``tenant_id``/``person_id`` columns) the row trigger ``zkr_NAME_mark`` and the
    statement trigger ``zkr_NAME_mark_truncate``. Idempotent (``IF NOT EXISTS``, ``OR
    REPLACE``, triggers dropped first)."""
    table, setting = f"zkr_{name}_marks", f"zkr.{name}_marked"
    function, sequence = f"zkr_{name}_mark", f"zkr_{name}_marks_seq"
    return (
        f"CREATE SEQUENCE IF NOT EXISTS {sequence}",
        f"""CREATE TABLE IF NOT EXISTS {table} (
    tenant_id {_T}, person_id {_T}, mark BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, person_id))""",
        f"""CREATE OR REPLACE FUNCTION {function}_scope(t text, p text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    key text := t || chr(31) || p;
BEGIN
    IF current_setting('{setting}', true) IS DISTINCT FROM key THEN
        INSERT INTO {table} (tenant_id, person_id, mark)
        VALUES (t, p, nextval('{sequence}'))
        ON CONFLICT (tenant_id, person_id) DO UPDATE SET mark = excluded.mark;
        PERFORM set_config('{setting}', key, true);
    END IF;
END $$""",
        f"""CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE {table} SET mark = nextval('{sequence}');
        PERFORM set_config('{setting}', '', true);
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        PERFORM {function}_scope(OLD.tenant_id, OLD.person_id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM {function}_scope(NEW.tenant_id, NEW.person_id);
    END IF;
    RETURN NULL;
END $$""",
        *(
            sql
            for watched in tables
            for sql in (
                f"DROP TRIGGER IF EXISTS {function} ON {watched}",
                f"CREATE TRIGGER {function} AFTER INSERT OR UPDATE OR DELETE ON {watched}"
                f" FOR EACH ROW EXECUTE FUNCTION {function}()",
                f"DROP TRIGGER IF EXISTS {function}_truncate ON {watched}",
                f"CREATE TRIGGER {function}_truncate AFTER TRUNCATE ON {watched}"
                f" FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
            )
        ),
    )
