"""Search terms: how stored text and queries are normalised and cut into index terms.

One rule for both sides (the index in :mod:`zkr.store.search_index` and the query plan in
:mod:`zkr.store.lexical`), so a query word always meets the stored word it names.
Stored text is never changed; only the index and the query see these forms.

1. **Fold** (:func:`fold`): Unicode NFKC (full-width letters, ligatures and compatibility
   forms become their plain letters; Hangul written as conjoining jamo becomes syllables, so
   NFD and NFC Hangul are one form), then case folding (``str.casefold``: ``Straße`` →
   ``strasse``), then the combining diacritics of U+0300-U+036F are removed (``café`` →
   ``cafe``). Only that block is removed: Indic vowel signs, Thai marks and the Japanese
   voicing marks are letters of their words and stay.
2. **Words** (:func:`words`): maximal runs of Unicode Alphabetic, number and mark characters;
   everything else separates. A run is then split where it changes between *unspaced*
   scripts (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar, Hangul) and the rest, so
   ``今天用OpenClaw部署`` gives ``今天用``, ``openclaw``, ``部署``.
3. **Terms.** A spaced word that is an English stop word (:data:`STOP_WORDS`) yields no term.
   Any other spaced word is stemmed with the Snowball stemmer of its script — English for
   Latin (and digits), Russian for Cyrillic, Greek for Greek, none for other scripts
   (``appointments`` → ``appoint``, ``blueberries`` → ``blueberri``, ``engineers`` →
   ``engin``). An unspaced run yields its overlapping character bigrams (``数据库`` → ``数据``,
   ``据库``); the index also stores every single character of such a run (so a one-character
   query finds it), while a query uses the bigrams of a longer run and the character of a
   one-character run.
4. **Labels** (:func:`label_terms`): a text that starts with a short label followed by a colon
   (one to three words, ``Caroline: …``, ``User: …``, ``Dr. Lee: …``: the speaker of a
   transcript turn, or a heading such as ``Note:``) also yields the label's terms a second
   time, marked with :data:`LABEL_MARK` (``\ue000carolin``): a field that says who or what the
   text is by. The lexical lane ranks a document whose label a query word names higher
   (:data:`zkr.store.lexical.LABEL_BOOST`); a query never *matches* on a marked term.
5. **Bounded documents** (:func:`index_terms`): one document gives the index at most
   :data:`MAX_DOCUMENT_TERMS` terms (plus its label's), so a 1 MiB text costs the next search
   what a long article does, not half a million index rows. A text within the bound is
   indexed term for term. A longer one keeps each distinct term of its *term sequence* (the
   bigrams of its unspaced runs, the stems of its other words, in order), and the single
   characters of its longer unspaced runs (which only a one-character query uses) when they
   fit too, each repeated as often as it occurs up to the largest common cap *k* that fits
   the bound (bm25's term frequency saturates anyway; *k* ≥ 1, so every word and bigram of it
   stays findable). Only when the sequence has more distinct terms than the bound (random
   ideographs, a dump of ids) is it sampled at every *s*-th position, *s* the smallest stride
   at which the sampled positions fit: any query phrase of at least *s* consecutive terms of
   the text (*s* + 1 characters of an unspaced run) still holds a sampled term and finds it.
   Within the CLI's 1 MiB request *s* ≤ 11 for CJK text (~350k positions); at most 16 when
   every other byte pair is a position (one ideograph, one Latin letter: ~520k positions).

Why English stemming for all Latin text: the stores this serves are written and queried by
agents that mostly speak English; Snowball English only strips English endings, which on other
Latin-script languages mostly removes plural/genitive ``s`` and leaves the rest, and a query
and a document written in the same language are always stemmed the same way, so matching stays
symmetric whatever the language. Per-document language detection would add a dependency and
split one person's memory into incomparable term spaces.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain

from zkr.typelite import Any

# English function words and question words: they carry little meaning in a memory query
# ("when did we ..."), and matching them makes nearly every source a candidate.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m re ve don didn doesn isn aren wasn weren hasn haven hadn wouldn
    couldn shouldn
    """.split()
)

# Words with which a turn says it replaces something said before ("Book Da Enzo instead",
# "switch to Porto", "cancel the Wednesday slot"): the lexical lane's revision rule
# (zkr.store.lexical, step 8) looks for them, as terms (:func:`revision_terms`). Only words
# that rarely mean anything else: "change", "move", "actually" occur in most long
# conversations for other reasons and cost LoCoMo's ranking when they counted.
REVISION_WORDS = ("instead", "switch", "cancel", "postpone", "reschedule", "replace")

MAX_QUERY_TERMS = 32
MAX_DOCUMENT_TERMS = 32_768
"""At most this many index terms per document (:func:`index_terms`, module docstring item 5)."""

LABEL_MARK = "\ue000"
"""Prefix of a label term: a private-use character, which no folded word contains (words are
letters, numbers and marks), yet FTS5's tokenizer keeps it inside the term (``Co``)."""

_ASCII_WORD = re.compile(r"[a-z0-9]+")
# A leading label: one to three words (no colon or space inside one) and a colon followed by
# a space, the end or a non-ASCII character (unspaced scripts put no space: "张三：今天…"),
# at the very start of the (folded: "：" is ":") text. "http://…" and "10:30" are not labels.
_LABEL = re.compile(r"\s*([^\W_][^\s:]*(?:[ \t][^\W_][^\s:]*){0,2})[ \t]*:(?=\s|$|[^\x00-\x7f])")
_DIACRITICS = re.compile("[\u0300-\u036f]+")
_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}\p{Hangul}\u30fc"


@functools.cache
def _unicode_patterns() -> tuple[Any, Any]:
    import regex  # lazy: only non-ASCII text needs Unicode properties (about 8 ms to import)

    runs = regex.compile(
        rf"(?P<u>[{_UNSPACED}]+)|(?P<w>[[\p{{Alphabetic}}\p{{N}}\p{{M}}]--[{_UNSPACED}]]+)",
        regex.V1,
    )
    scripts = regex.compile(r"(?P<c>\p{Cyrillic})|(?P<g>\p{Greek})|(?P<l>[\p{Latin}\p{N}])")
    return runs, scripts


@functools.cache
def _stemmer(language: str) -> Any:
    import Stemmer  # PyStemmer (Snowball, C): imported on first use

    return Stemmer.Stemmer(language)


def fold(text: str) -> str:
    """NFKC, case folding, and removal of the U+0300-U+036F diacritics (module docstring)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        return folded
    stripped = _DIACRITICS.sub("", unicodedata.normalize("NFD", folded))
    return unicodedata.normalize("NFC", stripped)


def words(folded: str) -> list[tuple[str, bool]]:
    """``(word, unspaced)`` pairs of already folded text, in order."""
    if folded.isascii():
        return [(word, False) for word in _ASCII_WORD.findall(folded)]
    runs, _ = _unicode_patterns()
    return [(u, True) if u else (w, False) for u, w in runs.findall(folded)]


def _language(word: str) -> str | None:
    if word.isascii():
        return "english"
    _, scripts = _unicode_patterns()
    found = scripts.search(word)
    if found is None:
        return None
    return {"c": "russian", "g": "greek", "l": "english"}[str(found.lastgroup)]


@functools.lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """The Snowball stem of one folded spaced word (unchanged for unstemmed scripts); the
    last 8192 words' stems are kept (a pure function of the word)."""
    language = _language(word)
    if language is None or word.isdigit():
        return word
    stemmed: str = _stemmer(language).stemWord(word)
    return stemmed or word


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run]


def document_terms(text: str) -> list[str]:
    """Every index term of a stored text, in order, repeats kept (term frequency counts),
    followed by the marked terms of its label (:func:`label_terms`), if it has one."""
    folded = fold(text)
    return _all_terms(folded, words(folded))


def _all_terms(folded: str, found: list[tuple[str, bool]]) -> list[str]:
    out: list[str] = []
    stems: dict[str, str] = {}
    for word, unspaced in found:
        if unspaced:
            out.extend(word)
            if len(word) > 1:
                out.extend(_bigrams(word))
        elif word not in STOP_WORDS:
            term = stems.get(word)
            if term is None:
                term = stems[word] = stem(word)
            out.append(term)
    return out + _label(folded, bool(out))


def _label(folded: str, searchable: bool) -> list[str]:
    colon = folded.find(":")  # a label ends at the text's first colon (its words hold none)
    label = _LABEL.match(folded, 0, colon + 2) if colon >= 0 else None
    if label is None or not searchable:
        return []
    return [LABEL_MARK + term for term in _terms(label.group(1))]


def index_terms(text: str, limit: int = MAX_DOCUMENT_TERMS) -> list[str]:
    """The terms one document contributes to the search index: :func:`document_terms`, or for
    a text of more than ``limit`` of them a multiset of at most ``limit`` terms, plus its
    label's marked terms (module docstring, item 5; the order carries nothing: matching and
    bm25 are term by term)."""
    folded = fold(text)
    found = words(folded)
    # an upper bound of the term count, without building the terms
    if sum(2 * len(word) - 1 if unspaced else 1 for word, unspaced in found) <= limit:
        return _all_terms(folded, found)
    stems: dict[str, str] = {}
    counts: Counter[str] = Counter()
    sequence = _sequence(found, stems)
    read = _CHUNK
    while read == _CHUNK and len(counts) <= limit:  # in chunks: stop once it holds too many
        before = counts.total()
        counts.update(itertools.islice(sequence, _CHUNK))
        read = counts.total() - before
    if len(counts) > limit:  # too many distinct terms: every stride-th term of the sequence
        positions = sum(max(len(w) - 1, 1) if u else w not in STOP_WORDS for w, u in found)
        counts = Counter(_sequence(found, stems, -(-positions // limit)))
    elif len(counts) < limit:  # room left: the single characters of the longer unspaced runs
        singles = Counter(chain.from_iterable(w for w, u in found if u and len(w) > 1))
        if len(counts) + len(singles) <= limit:
            counts.update(singles)
    return _capped(counts, limit) + _label(folded, bool(counts))


_CHUNK = 1 << 16


def _sequence(
    found: list[tuple[str, bool]], stems: dict[str, str], stride: int = 1
) -> Iterator[str]:
    """The document's term sequence, in order: the bigrams of its unspaced runs, the character
    of a one-character run, the stems of its other words (stop words left out); only the terms
    at positions that are multiples of ``stride``. ``stems`` caches the stems."""

    def parts() -> Iterator[Iterable[str]]:
        at = 0  # the position of the part's first term
        for word, unspaced in found:
            skip = -at % stride  # of the part's terms, before its first one taken
            if unspaced and len(word) > 1:
                at += len(word) - 1
                yield map(operator.add, word[skip::stride], word[skip + 1 :: stride])
                continue
            if not unspaced:
                if word in STOP_WORDS:
                    continue
                term = stems.get(word)
                if term is None:
                    term = stems[word] = stem(word)
                word = term
            at += 1
            if not skip:
                yield (word,)

    return chain.from_iterable(parts())


def _capped(counts: Counter[str], room: int) -> list[str]:
    """Every term of ``counts`` (at most ``room`` of them) repeated min(count, k) times, for the
    largest k that keeps the total within ``room`` (k >= 1)."""
    ordered = sorted(counts.values())
    below = list(itertools.accumulate(ordered, initial=0))  # below[i]: sum of the i smallest

    def total(k: int) -> int:  # sum(min(c, k))
        i = bisect.bisect_left(ordered, k)
        return below[i] + k * (len(ordered) - i)

    low, high = 1, ordered[-1] if ordered else 1
    while low < high:  # the largest k with total(k) <= room
        k = (low + high + 1) // 2
        if total(k) <= room:
            low = k
        else:
            high = k - 1
    return [term for term, c in counts.items() for _ in range(min(c, low))]


@functools.cache
def revision_terms() -> tuple[str, ...]:
    """The terms of :data:`REVISION_WORDS` (their stems), computed once."""
    return tuple(stem(word) for word in REVISION_WORDS)


def label_terms(terms: list[str]) -> list[str]:
    """The marked forms of query terms: a document holding one is labelled by that word
    (``Caroline: …`` for ``carolin``; module docstring, item 4)."""
    return [LABEL_MARK + term for term in terms]


def _terms(text: str) -> list[str]:
    """Distinct query-side terms of folded text (bigrams for unspaced runs, stems otherwise)."""
    found: list[str] = []
    for word, unspaced in words(text):
        if unspaced:
            found.extend(_bigrams(word))
        elif word not in STOP_WORDS:
            found.append(stem(word))
    return list(dict.fromkeys(found))


def query_terms(query: str, limit: int = MAX_QUERY_TERMS) -> tuple[list[str], int]:
    """The distinct terms a query searches for (first ``limit``, in order of appearance) and
    how many of its words were stop words (they make no term: a query of stop words only has
    no terms and matches nothing)."""
    terms: list[str] = []
    stop = 0
    for word, unspaced in words(fold(query)):
        if unspaced:
            found = _bigrams(word)
        elif word in STOP_WORDS:
            stop += 1
            continue
        else:
            found = [stem(word)]
        for term in found:
            if term not in terms:
                terms.append(term)
                if len(terms) == limit:
                    return terms, stop
    return terms, stop
