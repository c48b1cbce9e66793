"""``MemoryDb.scope(tenant, person)``: the library API for one person, with defaults.

Every :class:`zkr.MemoryDb` method takes a full request: scope, every timestamp, enum members.
:class:`ScopedMemory` fills those in, so agent code reads as what it means::

    with MemoryDb.open("memory.db") as db:
        sam = db.scope("acme", "sam")
        sam.remember("Sam works at Acme",
                     claim={"subject": "Sam", "predicate": "employer", "value": "Acme"})
        hit = sam.search("where does Sam work").items[0]
        sam.correct(hit.memory.id, "Globex", text="Sam moved to Globex")
        prompt_block = sam.context("where does Sam work", max_bytes=2000).text

Each method is the :class:`~zkr.MemoryDb` method of the same name with the scope filled in
(``NOT_ON_THE_HANDLE`` in ``tests/test_ergonomics.py`` lists the few that stay on ``MemoryDb``,
with why).

Defaults:

* Timestamps (integer Unix seconds) default to now. Within one handle they never go back, and
  the operations that must *advance* past earlier records (``correct``, ``delete``,
  ``profile``: a profile entry replaces the key's current one only with a later
  ``recorded_at``) step one second past the handle's previous timestamp when called in the
  same second, so "store, then correct" or "profile, then profile the new value" right away
  works. Explicit timestamps are used as given; one in the future does
  not move the handle's clock.
* ``captured_at`` defaults to ``recorded_at``, a claim's ``valid_from`` to ``captured_at``.
* Enum values may be given as plain strings (``kind="screen"``, ``tier="short_term"``); an
  unknown value is a :class:`~zkr.errors.RequestError` naming the field.
* A claim may be a :class:`~zkr.model.ClaimInput` or a mapping with ``subject``, ``predicate``,
  ``value`` and optionally ``kind`` (default ``fact``), ``valid_from``, ``tier``,
  ``processing_state``. A locator may be a :class:`~zkr.model.Locator` or a mapping with its
  six fields; ``as_of`` an :class:`~zkr.model.AsOf`, a ``(valid_at, recorded_at)`` pair or a
  mapping with those two keys (the CLI's JSON); ``query_embedding`` a
  :class:`~zkr.model.QueryEmbedding` or a mapping with ``vector``, ``model``, ``version``;
  ``browse``'s ``before`` a :class:`~zkr.model.BrowseCursor` or the JSON form of a page's
  ``next``. Anything else is a :class:`~zkr.errors.RequestError` naming the field.

Results are the same typed values :class:`~zkr.MemoryDb` returns; errors the same exceptions.
"""

from __future__ import annotations

from zkr.scoped.forms import (
    AsOfLike,
    ClaimLike,
    CursorLike,
    LocatorLike,
    QueryEmbeddingLike,
    as_enum,
)
from zkr.scoped.lanes import ScopedLanes
from zkr.scoped.lifecycle import ScopedLifecycle
from zkr.scoped.reads import ScopedReads
from zkr.scoped.writes import ScopedWrites

# (the argument types of the handle's signatures: importable from zkr.scoped, as before the
# split into modules, for hosts that annotate what they pass)
__all__ = [
    "AsOfLike",
    "ClaimLike",
    "CursorLike",
    "LocatorLike",
    "QueryEmbeddingLike",
    "ScopedMemory",
    "as_enum",
]


class ScopedMemory(ScopedWrites, ScopedReads, ScopedLifecycle, ScopedLanes):
    """One (tenant, person) scope of an open :class:`~zkr.MemoryDb` (see the module doc).

    The clock and request building are :class:`zkr.scoped.base.ScopedBase`'s; the methods come
    in the groups of :class:`zkr.MemoryDb`, one module each (writes, reads, lifecycle, lanes).
    """
