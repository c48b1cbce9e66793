"""Lexical ``search`` latency on a generated corpus (issue 2). Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/bench_search.py [--sizes 10000 100000] [--queries 300]

The corpus is one scope (``bench``/``me``) of short conversational notes: about 40 % English
function words, a few person names, and content words drawn from a Zipf distribution over 5,000
generated lemmas with English inflections (``-s``, ``-ed``, ``-ing``), so the most frequent
content words occur in a third of all sources and most occur in a handful. Every third source
carries an accepted claim (so search has to replace those sources by their claims).

Queries are questions that always contain common words ("what did … say about the …") plus one
to three content words, sometimes a name. With ``--mix questions`` (the default, the figures of
issue 2) the content words come from another generated vocabulary (seed 23), so they rarely
occur in the corpus and most searches match little; with ``--mix corpus`` they are drawn from
the corpus's own vocabulary, like its text (frequent words included), so every search ranks a
full window of real matches (issue 14's lexical figure)::

    .venv/bin/python benchmarks/bench_search.py --sizes 10000 --mix corpus --queries 500
Each search runs in-process through :class:`zkr.MemoryDb` with ``--limit`` (default 10); the
script prints wall-clock p50/p95/mean per corpus size, and the search thread's CPU time (which
other processes on a busy machine do not inflate).

The corpus is built through the library API in one process and cached as
``<cache-dir>/zkr-bench-search-v<VERSION>-<size>.db`` (default cache dir ``/tmp``); delete the
file (or pass ``--rebuild``) to regenerate it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import time
from bisect import bisect
from pathlib import Path

from zkr import MemoryDb
from zkr.model import ClaimInput, ClaimKind, RememberRequest, SearchRequest, SourceKind

VERSION = 1
TENANT, PERSON = "bench", "me"
FUNCTION_WORDS = (
    "the I to and a of you it in that is was my for on with we have be at this me but so "
    "what about do did just not they he she are there when how where can would will her his "
    "our from up out if all had an them some been then"
).split()
NAMES = (
    "Alice Bruno Carmen Dmitri Elena Farah Gustav Hana Ivan Julia Kenji Lena Marco Nadia Oscar "
    "Priya Quentin Rosa Samir Tess Umar Vera Wendell Ximena Yusuf Zoe"
).split()
QUESTIONS = (
    "what did {name} say about the {a}",
    "when is the {a} with {name}",
    "where did I put my {a} and the {b}",
    "did we talk about {a} {b} at all",
    "what is the plan for the {a} {b} {c}",
    "how was the {a} last time",
    "who was at the {a} and what about the {b}",
    "tell me about my {a}",
)


def _lemmas(rng: random.Random, count: int) -> list[str]:
    onsets = "b c d f g h j k l m n p r s t v w z br ch cl cr dr fl gr pl pr sh st th tr".split()
    vowels = "a e i o u ai ea ee oo ou".split()
    codas = ["", "", "n", "r", "l", "m", "s", "t", "nd", "st", "rk"]
    seen: set[str] = set(FUNCTION_WORDS)
    lemmas: list[str] = []
    while len(lemmas) < count:
        word = "".join(
            rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.choice((1, 2, 2, 3)))
        ) + rng.choice(codas)
        if len(word) >= 3 and word not in seen:
            seen.add(word)
            lemmas.append(word)
    return lemmas


class Vocabulary:
    """Zipf-distributed content words with inflections, Zipf-ish function words."""

    def __init__(self, seed: int = 11, size: int = 5000) -> None:
        self.rng = random.Random(seed)
        self.lemmas = _lemmas(self.rng, size)
        self._content = list(itertools.accumulate(1.0 / (k + 1) ** 1.05 for k in range(size)))
        self._function = list(
            itertools.accumulate(1.0 / (k + 1) ** 0.8 for k in range(len(FUNCTION_WORDS)))
        )

    def content(self) -> str:
        index = bisect(self._content, self.rng.random() * self._content[-1])
        lemma = self.lemmas[min(index, len(self.lemmas) - 1)]
        roll = self.rng.random()
        if roll < 0.6:
            return lemma
        return lemma + ("s" if roll < 0.8 else "ed" if roll < 0.9 else "ing")

    def function(self) -> str:
        index = bisect(self._function, self.rng.random() * self._function[-1])
        return FUNCTION_WORDS[min(index, len(FUNCTION_WORDS) - 1)]

    def sentence(self) -> str:
        words = []
        for _ in range(self.rng.randint(10, 24)):
            roll = self.rng.random()
            if roll < 0.4:
                words.append(self.function())
            elif roll < 0.45:
                words.append(self.rng.choice(NAMES))
            else:
                words.append(self.content())
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."

    def question(self) -> str:
        template = self.rng.choice(QUESTIONS)
        return template.format(
            name=self.rng.choice(NAMES), a=self.content(), b=self.content(), c=self.content()
        )


def build(path: Path, count: int) -> float:
    """Write ``count`` sources (claim on every third) to ``path``; returns the seconds taken."""
    vocab = Vocabulary()
    partial = path.with_name(path.name + ".partial")
    for suffix in ("", "-wal", "-shm"):
        Path(str(partial) + suffix).unlink(missing_ok=True)
    start = time.perf_counter()
    with MemoryDb.open(str(partial)) as db:
        for i in range(count):
            claim = None
            if i % 3 == 0:
                claim = ClaimInput(
                    vocab.rng.choice(NAMES),
                    vocab.content(),
                    f"{vocab.content()} {vocab.content()}",
                    ClaimKind.FACT,
                    i,
                )
            db.remember(
                RememberRequest(
                    TENANT,
                    PERSON,
                    SourceKind.CONVERSATION,
                    vocab.sentence(),
                    1_700_000_000 + 60 * i,
                    1_700_000_000 + 60 * i,
                    f"note-{i}",
                    claim,
                )
            )
    os.replace(partial, path)
    return time.perf_counter() - start


def corpus(cache_dir: Path, count: int, rebuild: bool) -> Path:
    path = cache_dir / f"zkr-bench-search-v{VERSION}-{count}.db"
    if rebuild or not path.exists():
        seconds = build(path, count)
        print(f"built {count:,} sources in {seconds:.1f} s ({count / seconds:,.0f}/s): {path}")
    return path


def query_vocabulary(mix: str) -> Vocabulary:
    """``questions``: another vocabulary (seed 23); ``corpus``: the corpus's own words
    (seed 11, as :func:`build` uses) drawn with a separate random sequence (seed 23)."""
    if mix == "questions":
        return Vocabulary(seed=23)
    vocab = Vocabulary()
    vocab.rng = random.Random(23)
    return vocab


def measure(
    path: Path, queries: int, limit: int, mix: str = "questions"
) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (thread) milliseconds of each search."""
    vocab = query_vocabulary(mix)
    questions = [vocab.question() for _ in range(queries)]
    wall: list[float] = []
    cpu: list[float] = []
    with MemoryDb.open(str(path)) as db:
        for question in questions[:10]:  # warm the page cache
            db.search(SearchRequest(TENANT, PERSON, question, limit))
        for question in questions:
            start, start_cpu = time.perf_counter(), time.thread_time()
            db.search(SearchRequest(TENANT, PERSON, question, limit))
            cpu.append((time.thread_time() - start_cpu) * 1000)
            wall.append((time.perf_counter() - start) * 1000)
    return wall, cpu


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument(
        "--mix",
        choices=("questions", "corpus"),
        default="questions",
        help="query words from another vocabulary (default) or the corpus's own",
    )
    args = parser.parse_args()
    for count in args.sizes:
        path = corpus(args.cache_dir, count, args.rebuild)
        wall, cpu = measure(path, args.queries, args.limit, args.mix)
        print(
            f"lexical search, {count:>7,} sources (claim on every 3rd), {args.mix} mix, "
            f"limit {args.limit}, "
            f"{len(wall)} queries: p50 {percentile(wall, 0.5):.2f} ms, "
            f"p95 {percentile(wall, 0.95):.2f} ms, mean {statistics.fmean(wall):.2f} ms "
            f"(CPU p50 {percentile(cpu, 0.5):.2f} ms, p95 {percentile(cpu, 0.95):.2f} ms)"
        )


if __name__ == "__main__":
    main()
