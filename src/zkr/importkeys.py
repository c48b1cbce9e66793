"""Ingestion keys of ``zkr import`` (:mod:`zkr.importer`): how a turn is named, and which name
a turn is sent under when an earlier import stored it under the ambiguous key of the first
releases (the rules are told in :mod:`zkr.importer`'s doc, section Keys).

Shapes: a key is a ``str``; ``(key, alias)`` pairs a turn's own key with the old key it may
have been stored under (``None`` when its own key is that key).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zkr.model import RememberRequest


def canonical(value: Any) -> str:
    """Compact JSON with sorted object keys: one spelling per JSON value (``1`` ≠ ``"1"``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def digest(value: Any) -> str:
    """The first 32 hex digits of the SHA-256 of ``value`` as JSON (the id-less JSONL key's
    spelling since the first release: ``json.dumps`` defaults, not :func:`canonical`)."""
    # surrogatepass: a lone surrogate still gets a key (and then fails alone in remember)
    data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:32]


def id_key(fmt: str, conv: Any, ident: Any, legacy: str) -> tuple[str, str | None]:
    """``(key, alias)`` of a turn with its own id ``ident`` (a JSON value, not ``null``) in
    conversation ``conv`` (``None``: the turn names none).

    ``legacy`` is ``FMT:CONV:ID`` as the first releases wrote it (``str`` of each part). It is
    unambiguous, and stays the key, when ``conv`` is ``None`` or a non-empty string without
    ``:`` and ``ident`` is a string: the first ``:`` after ``FMT:`` then splits it back. Any other
    turn gets ``FMT`` + the canonical JSON array ``[conv, ident]`` (``jsonl["a:b","c"]``,
    ``jsonl["s1",1]``, ``jsonl["",1]``), which never starts with ``FMT:``, so it can equal no
    other turn's key, old or new; its ``legacy`` is returned as the alias.
    """
    plain = conv is None or (isinstance(conv, str) and conv != "" and ":" not in conv)
    if plain and isinstance(ident, str):
        return legacy, None
    return fmt + canonical([conv, ident]), legacy


def spare_key(key: str) -> str:
    """The JSON-array spelling of a plain ``FMT:CONV:ID`` key (see :func:`id_key`): the key of
    its turn when another turn of the same import replays under ``FMT:CONV:ID`` as its alias
    (an earlier import, before keys were unambiguous, stored that turn there)."""
    fmt, conv, ident = key.split(":", 2)
    return fmt + canonical([conv or None, ident])


class Unnamed:
    """Keys of one conversation's messages without an id of their own.

    Such a message is known by its content and how many messages of the conversation with the
    same content (role, text, time) came before it: ``FMT[CONV,null,DIGEST,N]``, the same on every
    import of the same file, and different for two such messages (even identical ones). The
    alias is the key of the first releases (``FMT:CONV:``, shared by all of them).
    """

    def __init__(self, fmt: str, conv: Any) -> None:
        self.fmt = fmt
        self.conv = conv
        self.seen: dict[str, int] = {}

    def key(self, role: str, text: str, at: int | None) -> str:
        content = digest([role, text, at])
        count = self.seen.get(content, 0)
        self.seen[content] = count + 1
        return self.fmt + canonical([self.conv, None, content, count])


def choose_keys(
    db: Any, requests: dict[int, RememberRequest], named: dict[int, tuple[str, str | None]]
) -> dict[int, str]:
    """The key each turn sent to ``remember`` is sent under, by the turn's index: ``requests``
    holds its request (under its own key), ``named`` its ``(key, alias)``.

    A turn with an ``alias`` (the ambiguous key the first releases gave it) is sent under the
    alias, when no earlier turn of the file took it and the scope has nothing under the turn's
    own key (else this release stored it there: the alias may be another turn's own key, and
    that turn's deletion is not this one's), in two cases, being a turn an earlier import
    stored so (it then replays, or stays deleted, instead of being stored twice):

    * the scope holds the turn's very payload there, and no turn of the file whose own key is
      the alias has that payload too;
    * the scope holds a deleted memory there and the turn is the first of the file with that
      key or alias (the one an earlier import of the file stored: it stays deleted).

    A turn whose own key another turn took as its alias (the turn that lost the shared key back
    then) is sent under :func:`spare_key`. Every other turn: its ``key``. All is decided on
    the database as it was before this import, so batches do not matter.
    """
    with_alias = [i for i in requests if named[i][1] is not None]
    asked = [requests[i]._replace(ingestion_key=named[i][1]) for i in with_alias]
    asked += [requests[i]._replace(ingestion_key=named[i][0]) for i in with_alias]
    answers = db.replay_statuses(asked)  # (one read snapshot: the aliases, then the own keys)
    statuses = dict(zip(with_alias, answers[: len(with_alias)], strict=True))
    own = dict(zip(with_alias, answers[len(with_alias) :], strict=True))
    owners: dict[str, set[tuple[str, int]]] = {}  # key -> (text, time) of its own turns
    first: dict[str, int] = {}  # key or alias -> the first turn of the file with it
    for i, req in requests.items():
        if named[i][1] is None:
            owners.setdefault(named[i][0], set()).add((req.text, req.captured_at))
        for key in named[i]:
            if key is not None:
                first.setdefault(key, i)
    keys = {i: named[i][0] for i in requests}
    taken: set[str] = set()
    for i in with_alias:
        alias = named[i][1]
        assert alias is not None
        payload = (requests[i].text, requests[i].captured_at)
        replays = statuses[i] == "replayed" and payload not in owners.get(alias, ())
        stays_deleted = statuses[i] == "deleted" and first[alias] == i
        if alias not in taken and own[i] is None and (replays or stays_deleted):
            keys[i] = alias
            taken.add(alias)
    for i in requests:
        if named[i][1] is None and keys[i] in taken:
            keys[i] = spare_key(keys[i])
    return keys
