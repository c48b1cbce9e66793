"""The context block: what a host pastes into a prompt before the model answers.

:func:`build_context` runs one lexical ``search`` for the user's message and reads the current
profile entries and the latest daily reviews of one scope, then renders them as a short,
cited plain-text block that fits a byte budget. It writes nothing. It is the ``context``
command (CLI, ``zkr serve``, :meth:`zkr.MemoryDb.context`) and the MCP server's ``context``
tool.

**Budget.** ``max_bytes`` bounds the UTF-8 size of the block's ``text``, headers and newlines
included. Lines are taken in a fixed priority — two memory lines for every profile line and
every review line, each list in its own order (rank, newest first) — while they fit; a line that
does not fit is skipped, so a later, shorter one may still get in. One line first gets at most a
quarter of the budget (at least 160 bytes): longer excerpts are cut between two grapheme
clusters (never inside an emoji sequence or a letter's combining marks) and end with ``…``.
Then, in the same priority, a skipped line is cut to what is left when that keeps its citation
whole and 16 bytes of text (so a small budget shows one cut line rather than nothing), and what
is still left — the share of an empty section, say — lengthens the cut lines again, up to their
full text. Sections keep their order (memories, profile, reviews).

**A small budget still carries the top line.** When the first line in that priority (the best
memory, or the first profile entry or review when no memory matched) does not fit even cut, it
is placed first in a compact form: its section's short header (``Memories (zkr, cited):``), and
if that is still too long, its citation reduced to the memory's own kind and id (``[claim 9c…]``,
enough for ``get`` or ``trace`` to reach its evidence). Only a budget too small for that and
:data:`MIN_CUT_BODY_BYTES` of text gives an empty block. ``left_out`` counts, per section, the
lines that were found but did not fit.

**Citations.** Each memory line ends with the memory's kind and id and its evidence ids, each
profile line with its claim id, each review line with its id, so a model can ``get`` them.

**Dates.** A memory line's citation starts with the time its cited evidence was captured
(``[2026-11-26 20:15 UTC; claim …; evidence …]``, the source's ``captured_at``; one indexed read
for the whole pack), so a model shown an old decision and the later turn that changed it (plain
turns with no claim to correct: an import, an auto-captured chat) can tell which came last. The
compact form's citation (the record's own kind and id) has no time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import zip_longest
from typing import TYPE_CHECKING, Any, NamedTuple

from zkr import model
from zkr.errors import RequestError

if TYPE_CHECKING:
    from zkr.memory.reads import ReadCommands

DEFAULT_MAX_BYTES = 4_000
MIN_LINE_BYTES = 160
MIN_CUT_BODY_BYTES = 16  # a line cut to fit what is left keeps at least this much text
ELLIPSIS = "…"
MAX_DATED_SECONDS = 253_402_300_799  # 9999-12-31 23:59:59 UTC: later times are shown undated


def build_context(
    db: ReadCommands,
    tenant_id: str,
    person_id: str,
    query: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limit: int = 10,
    profile_limit: int = 10,
    review_limit: int = 3,
    min_relevance_basis_points: int = 0,
) -> model.ContextBlock:
    """The best cited pack for ``query`` plus current profile entries and the latest reviews,
    within ``max_bytes`` UTF-8 bytes (see the module docstring for the budget rule).

    ``limit``, ``profile_limit`` and ``review_limit`` bound each list as the commands do (0
    means 10, above 100 means 100; a profile or review limit of 0 leaves that section out
    here). Items whose
    ``relevance_basis_points`` is below ``min_relevance_basis_points`` are left out (lexical
    relevance is the share of the query an item holds, so a floor drops weak matches; see the
    README's JSON shapes). A blank ``query`` skips the search. Raises
    :class:`zkr.ZkrError` for a bad scope or a negative bound, as the commands do.
    """
    from zkr.text import is_blank

    bounds = (max_bytes, limit, profile_limit, review_limit, min_relevance_basis_points)
    model.validate(model.ContextRequest(tenant_id, person_id, query, *bounds))  # types first
    if max_bytes < 0:
        raise RequestError("max_bytes must not be negative")
    items: list[model.RetrievalItem] = []
    if not is_blank(query):
        pack = db.search(model.SearchRequest(tenant_id, person_id, query, limit))
        items = [i for i in pack.items if i.relevance_basis_points >= min_relevance_basis_points]
    cited = [item.evidence_ids[0] for item in items if item.evidence_ids]
    captured = db._capture_times(tenant_id, person_id, cited) if cited else {}
    profiles = (
        db.profiles(model.LimitRequest(tenant_id, person_id, profile_limit))
        if profile_limit
        else []
    )
    reviews = (
        db.reviews(model.LimitRequest(tenant_id, person_id, review_limit)) if review_limit else []
    )
    line_cap = max(MIN_LINE_BYTES, max_bytes // 4)
    shown_query = _clip(repr(" ".join(query.split())), line_cap // 2)
    sections: list[_Section] = [
        _Section(
            f"Memories matching {shown_query} (zkr, cited):",
            "Memories (zkr, cited):",
            [
                _Candidate(
                    item.excerpt,
                    _item_citation(item, captured),
                    f"[{item.memory.kind.value} {item.memory.id}]",
                    item,
                )
                for item in items
            ],
        ),
        _Section(
            "Profile (current):",
            "Profile (current):",
            [
                _Candidate(
                    f"{e.key}: {e.value}",
                    f"[{e.stability.value}; claim {e.claim_id}]",
                    f"[claim {e.claim_id}]",
                    e,
                )
                for e in profiles
            ],
        ),
        _Section(
            "Latest daily reviews:",
            "Latest daily reviews:",
            [
                _Candidate(f"{r.day}: {r.summary}", f"[review {r.id}]", f"[review {r.id}]", r)
                for r in reviews
            ],
        ),
    ]
    chosen, compact = _choose(sections, max_bytes, line_cap)
    lines: list[str] = []
    taken: list[list[Any]] = [[], [], []]
    for index, section in enumerate(sections):
        picked = [
            (chosen[index, position], candidate.value)
            for position, candidate in enumerate(section.candidates)
            if (index, position) in chosen
        ]
        if picked:
            lines.append(section.short_header if index in compact else section.header)
            lines.extend(text for text, _ in picked)
            taken[index] = [value for _, value in picked]
    if not items and query.strip():
        note = "No cited memory matched the query."
        if _size(lines) + len(note.encode("utf-8")) + 1 <= max_bytes:
            lines.insert(0, note)
    text = "".join(line + "\n" for line in lines)
    memories, profile_lines, review_lines = (
        len(section.candidates) - len(taken[i]) for i, section in enumerate(sections)
    )
    left_out = (memories, profile_lines, review_lines)
    return model.ContextBlock(text, taken[0], taken[1], taken[2], left_out)


class _Candidate(NamedTuple):
    body: str
    citation: str
    short_citation: str  # the compact form's: the cited record's own kind and id
    value: Any


class _Section(NamedTuple):
    header: str
    short_header: str
    candidates: list[_Candidate]


def _choose(
    sections: list[_Section], budget: int, line_cap: int
) -> tuple[dict[tuple[int, int], str], set[int]]:
    """The line of each (section, position) taken, in the 2:1:1 priority order (module
    docstring): the top line in compact form when it cannot fit otherwise, capped lines while
    they fit, then skipped lines cut to what is left, then the rest of the budget lengthening
    cut lines. Headers count once per section taken. Also returns the sections whose short
    header is used."""
    memories, profiles, reviews = (
        [(i, p) for p in range(len(sections[i].candidates))] for i in range(3)
    )
    order: list[tuple[int, int]] = []
    pairs = [memories[k : k + 2] for k in range(0, len(memories), 2)]
    for group, profile, review in zip_longest(pairs, profiles, reviews):
        order.extend(group or [])
        order.extend(x for x in (profile, review) if x is not None)
    used = 0
    chosen: dict[tuple[int, int], str] = {}
    opened: set[int] = set()
    compact: set[int] = set()
    citations = {
        (i, p): c.citation for i, s in enumerate(sections) for p, c in enumerate(s.candidates)
    }

    def header_cost(section: int) -> int:
        if section in opened:
            return 0
        header = sections[section].short_header if section in compact else sections[section].header
        return len(header.encode("utf-8")) + 1

    if order:  # 0. the top line, compact if that is the only way it fits
        section, position = top = order[0]
        candidate = sections[section].candidates[position]
        capped = _line(candidate.body, candidate.citation, line_cap)
        if header_cost(section) + len(capped.encode("utf-8")) + 1 > budget:
            header = header_cost(section)
            short_header = len(sections[section].short_header.encode("utf-8")) + 1
            for header_bytes, citation in (
                (header, candidate.citation),
                (short_header, candidate.citation),
                (short_header, candidate.short_citation),
            ):
                if _cut_room(budget, header_bytes, citation) >= 0:
                    if header_bytes != header:
                        compact.add(section)
                    citations[top] = citation
                    line = _cut_line(candidate.body, citation, budget - header_bytes - 1)
                    used += header_bytes + len(line.encode("utf-8")) + 1
                    chosen[top] = line
                    opened.add(section)
                    break

    for section, position in order:  # 1. lines within the per-line cap, while they fit
        if (section, position) in chosen:
            continue
        body, citation = sections[section].candidates[position].body, citations[section, position]
        line = _line(body, citation, line_cap)
        cost = header_cost(section) + len(line.encode("utf-8")) + 1
        if used + cost <= budget:
            used += cost
            chosen[section, position] = line
            opened.add(section)
    for section, position in order:  # 2. a skipped line cut to what is left, citation whole
        if (section, position) in chosen:
            continue
        body, citation = sections[section].candidates[position].body, citations[section, position]
        if _cut_room(budget - used, header_cost(section), citation) < 0:
            continue
        room = budget - used - header_cost(section) - 1
        line = _cut_line(body, citation, room)
        used += header_cost(section) + len(line.encode("utf-8")) + 1
        chosen[section, position] = line
        opened.add(section)
    for key in order:  # 3. what is left lengthens cut lines, up to their full text
        if key not in chosen or used >= budget:
            continue
        body, citation = sections[key[0]].candidates[key[1]].body, citations[key]
        size = len(chosen[key].encode("utf-8"))
        cap = size + budget - used
        line = _line(body, citation, cap)
        if not line.endswith(citation):  # _line cuts a tight line's citation: keep it whole
            line = _cut_line(body, citation, cap)
        grown = len(line.encode("utf-8"))
        if size < grown <= cap:
            used += grown - size
            chosen[key] = line
    return chosen, compact


def _cut_room(budget: int, header: int, citation: str) -> int:
    """Bytes to spare when a line with ``citation`` and :data:`MIN_CUT_BODY_BYTES` of text, plus
    ``header`` bytes (0 for an open section), is placed in ``budget`` (negative: no room)."""
    line = 2 + MIN_CUT_BODY_BYTES + 1 + len(citation.encode("utf-8"))
    return budget - header - line - 1


def _size(lines: list[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def _item_citation(item: model.RetrievalItem, captured: dict[str, int]) -> str:
    """``[TIME; KIND ID; evidence IDS]``: TIME (``YYYY-MM-DD HH:MM UTC``) is when the cited
    evidence was captured (when it was said or seen; for a correction, when the correction
    was), so a model can tell an old turn from a newer one that changed it. Left out when
    unknown or not a calendar date (a millisecond timestamp, past year 9999)."""
    evidence = ", ".join(item.evidence_ids)
    cited = f"{item.memory.kind.value} {item.memory.id}; evidence {evidence}"
    at = captured.get(item.evidence_ids[0]) if item.evidence_ids else None
    if at is None or not 0 <= at <= MAX_DATED_SECONDS:
        return f"[{cited}]"
    return f"[{datetime.fromtimestamp(at, UTC).strftime('%Y-%m-%d %H:%M')} UTC; {cited}]"


def _line(body: str, citation: str, cap: int) -> str:
    """``- body [citation]`` in at most ``cap`` UTF-8 bytes: whitespace runs become one space
    and a long body is cut (the citation is kept whole unless it alone is too long)."""
    body = " ".join(body.split())
    room = cap - len(citation.encode("utf-8")) - 3
    if room < MIN_LINE_BYTES // 4:
        return _clip(f"- {body} {citation}", cap)
    return f"- {_clip(body, room)} {citation}"


def _cut_line(body: str, citation: str, cap: int) -> str:
    """``- body [citation]`` in at most ``cap`` UTF-8 bytes, the citation whole (the caller
    leaves room for it and :data:`MIN_CUT_BODY_BYTES` of text)."""
    body = " ".join(body.split())
    return f"- {_clip(body, cap - len(citation.encode('utf-8')) - 3)} {citation}"


def _clip(text: str, cap: int) -> str:
    """``text`` cut to at most ``cap`` UTF-8 bytes, marked with …, at a grapheme cluster
    boundary (Unicode's extended grapheme clusters, ``regex``'s ``\\X``): never inside a code
    point, nor inside what a reader sees as one character (an emoji joined by zero-width
    joiners, a flag, a letter and its combining marks)."""
    if len(text.encode("utf-8")) <= cap:
        return text
    import regex  # only a cut needs it (CLI start-up budget)

    room = max(0, cap - len(ELLIPSIS.encode("utf-8")))
    end = 0
    for cluster in regex.finditer(r"\X", text):
        room -= len(cluster.group().encode("utf-8"))
        if room < 0:
            break
        end = cluster.end()
    return text[:end] + ELLIPSIS
