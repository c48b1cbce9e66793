"""Small text rules shared by every command.

* Blank checks trim Unicode ``White_Space`` only, as Rust's ``str::trim`` does
  (spec/lifecycle.md §1.2). Python's ``str.strip`` also strips U+001C..U+001F, which the
  reference treats as content, so it is not used.
* Excerpts are capped at 4096 UTF-8 bytes on a character boundary (spec/retrieval.md §7).
* Ids are 16 random bytes as 32 lowercase hex characters (spec/lifecycle.md §1.2).
* On/off environment switches (``ZKR_EMBED``, ``ZKR_VECTOR_CACHE``) read the same words
  (:func:`env_switch`).
"""

from __future__ import annotations

import os

from zkr.errors import InvalidInput

# Unicode White_Space (PropList.txt): the set Rust's char::is_whitespace uses.
WHITE_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

EXCERPT_LIMIT_BYTES = 4096


def is_blank(text: str) -> bool:
    """True when ``text`` is empty after trimming Unicode White_Space."""
    return not text.strip(WHITE_SPACE)


def require_text(text: str, field: str) -> None:
    """Raise ``InvalidInput('<field> must not be empty')`` when ``text`` is blank."""
    if is_blank(text):
        raise InvalidInput(f"{field} must not be empty")


def require_scope(tenant_id: str, person_id: str) -> None:
    """The scope check every command except ``link`` runs first (spec/lifecycle.md §1.2)."""
    require_text(tenant_id, "tenant_id")
    require_text(person_id, "person_id")


def cap_excerpt(text: str, limit: int = EXCERPT_LIMIT_BYTES) -> str:
    """Longest prefix of whole characters whose UTF-8 encoding is at most ``limit`` bytes."""
    if len(text) * 4 <= limit:
        return text
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", errors="ignore")


def new_id() -> str:
    """A fresh 32-lowercase-hex id (16 random bytes)."""
    return os.urandom(16).hex()


def bounded_limit(limit: int) -> int:
    """The shared ``limit`` rule: 0 means 10, values above 100 mean 100 (spec/cli.md §5)."""
    if limit == 0:
        return 10
    return min(limit, 100)


SWITCH_OFF = frozenset({"off", "0", "false", "no"})
SWITCH_ON = frozenset({"", "on", "1", "true", "yes"})


def env_switch(name: str) -> bool | None:
    """The on/off environment switch ``name``: ``False`` for ``off``/``0``/``false``/``no``,
    ``True`` when unset or ``on``/``1``/``true``/``yes`` (any case, surrounding blanks
    ignored), ``None`` for any other value — each caller says what a typo means."""
    value = os.environ.get(name, "").strip().lower()
    if value in SWITCH_OFF:
        return False
    return True if value in SWITCH_ON else None
