"""Index terms of one document (store/terms.py, item 5): bounded, and still findable."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings, strategies as st

from zkr.store.terms import MAX_DOCUMENT_TERMS, document_terms, index_terms, query_terms


def _random_cjk(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(n))


def test_a_text_within_the_bound_is_indexed_term_for_term() -> None:
    for text in (
        "Caroline: I went to the parade with my sister",
        "今天用OpenClaw部署了数据库",
        "x " * (MAX_DOCUMENT_TERMS - 1),
        _random_cjk(MAX_DOCUMENT_TERMS // 2, 1),
    ):
        assert index_terms(text) == document_terms(text)


def test_a_long_text_keeps_every_term_with_capped_repeats() -> None:
    sentences = ["今天早上我们讨论了数据库迁移的计划。", "Caroline went to the pottery workshop. "]
    text = "Sam: " + "".join(sentences[i % 2] for i in range(4000))
    full = Counter(document_terms(text))
    got = Counter(index_terms(text, limit=5000))
    assert set(got) == set(full)  # nothing that was findable is lost
    assert sum(got.values()) - sum(1 for t in got if t.startswith("\ue000")) <= 5000
    cap = max(got.values())
    assert all(got[t] == min(n, cap) for t, n in full.items())  # one common cap, k >= 1
    assert index_terms(text, limit=5000) == index_terms(text, limit=5000)  # deterministic


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=3000, max_value=20000))
def test_too_many_distinct_terms_sample_a_stride_any_phrase_finds(seed: int, n: int) -> None:
    """Random ideographs: more distinct bigrams than the bound, so every s-th one is kept;
    every phrase of s + 1 characters still shares a term with the document's index."""
    limit = 1000
    text = _random_cjk(n, seed)
    got = set(index_terms(text, limit))
    assert len(got) <= limit
    stride = -(-(n - 1) // limit)
    for start in range(0, n - stride, 97):
        phrase = text[start : start + stride + 1]
        assert set(query_terms(phrase)[0]) & got, (start, phrase)


def test_a_one_mebibyte_text_gives_at_most_the_bound() -> None:
    text = _random_cjk(349_000, 2)
    got = index_terms(text)
    assert len(got) <= MAX_DOCUMENT_TERMS
    assert set(query_terms(text[-12:])[0]) & set(got)  # its last twelve characters find it
