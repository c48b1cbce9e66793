"""LoCoMo retrieval benchmark for zkr's lexical search.

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, github.com/snap-research/locomo) holds long
multi-session conversations whose questions name the turns ("evidence", dia_ids) that answer them.
This script stores one zkr source per turn and measures how many of a question's evidence turns
``search`` returns:

* source text ``"<speaker>: <text>"``, plus ``" [image: <blip_caption>]"`` when the turn shares
  an image; kind ``conversation``; ``captured_at`` = the session's date (UTC) + the turn's index
  in the session (seconds, so turns stay ordered); ``recorded_at`` = ``captured_at``;
  ``ingestion_key`` = the turn's dia_id; scope ``tenant_id = "locomo"``, ``person_id`` = the
  conversation's file stem. Each conversation gets its own database file.
* every question of categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5,
  adversarial, is reported separately) is searched once with ``--limit`` (default 20);
  Recall@K = |evidence turns among the first K items| / |evidence turns|, averaged over
  questions; MRR@10 = 1 / rank of the first evidence turn within the first 10 items (0 if none);
  and the share of returned items (all categories) that share no content word (a term of
  :mod:`zkr.store.terms`: folded, stemmed, stop words dropped) with the question (target 0).
  Evidence ids are normalised (``"D8:6; D9:17"`` is two ids, ``"D:11:26"`` is ``D11:26``);
  an evidence id that names no turn still counts in the denominator; questions without any
  evidence are skipped.
* latency: per-turn ``remember`` and per-question ``search``, wall clock, in-process through
  :class:`zkr.MemoryDb` (default) or one ``python -m zkr`` process per call (``--cli``).

Usage (the 3-conversation sample; the full set is the 10 files of ``locomo10.json`` split one
conversation per file, or pass ``locomo10.json`` itself — a JSON list is read as several
conversations)::

    .venv/bin/python benchmarks/locomo.py ../shared/data/locomo/*.json
    .venv/bin/python benchmarks/locomo.py --cli ../shared/data/locomo/26.json
    .venv/bin/python benchmarks/locomo.py --embed ../shared/data/locomo/*.json   # zkr[embed]
    .venv/bin/python benchmarks/locomo.py --embed --per-conversation ../shared/data/locomo/*.json

(``--per-conversation`` adds each conversation's categories 1-4 row per lane: tune ranking on
26 + 30, check on 41, docs/embedding.md.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zkr import MemoryDb
from zkr.model import RememberRequest, SearchRequest, SourceKind
from zkr.store.terms import document_terms, query_terms

TENANT = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SCORED = (1, 2, 3, 4)
KS = (5, 10, 20)
_SESSION = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    text: str
    at: int


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[Question]


def session_time(value: str) -> int:
    """``"1:56 pm on 8 May, 2023"`` → Unix seconds (UTC)."""
    moment = datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y")
    return int(moment.replace(tzinfo=UTC).timestamp())


def evidence_ids(raw: Sequence[str]) -> frozenset[str]:
    return frozenset(f"D{a}:{b}" for item in raw for a, b in _DIA_ID.findall(item))


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [image: {caption}]"
    return text


def parse_conversation(name: str, data: dict[str, Any]) -> Conversation:
    # the released locomo10.json nests the sessions under "conversation"
    sessions: dict[str, Any] = data.get("conversation", data)
    numbers = sorted(
        int(m.group(1)) for key in sessions if (m := _SESSION.fullmatch(key)) is not None
    )
    turns: list[Turn] = []
    for n in numbers:
        start = session_time(sessions[f"session_{n}_date_time"])
        for index, turn in enumerate(sessions[f"session_{n}"]):
            turns.append(Turn(turn["dia_id"], turn_text(turn), start + index))
    questions = [
        Question(q["question"], int(q["category"]), evidence_ids(q.get("evidence", [])))
        for q in data["qa"]
    ]
    return Conversation(name, turns, [q for q in questions if q.evidence])


def load(paths: Sequence[str]) -> Iterator[Conversation]:
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(data, list):
            for index, item in enumerate(data):
                yield parse_conversation(
                    str(item.get("sample_id", f"{Path(path).stem}-{index}")), item
                )
        else:
            yield parse_conversation(Path(path).stem, data)


class Backend:
    """One conversation's database, in-process or through the CLI."""

    def __init__(self, path: str, cli: bool) -> None:
        self.path = path
        self.cli = cli
        self.db = None if cli else MemoryDb.open(path)

    def _run(self, command: str, request: dict[str, Any]) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "zkr", "--db", self.path, command],
            input=json.dumps(request, ensure_ascii=False).encode(),
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"zkr {command} failed: {done.stderr.decode()}")
        return json.loads(done.stdout)

    def remember(self, person: str, turn: Turn) -> str:
        if self.db is not None:
            request = RememberRequest(
                TENANT,
                person,
                SourceKind.CONVERSATION,
                turn.text,
                turn.at,
                turn.at,
                ingestion_key=turn.dia_id,
            )
            return self.db.remember(request).source_id
        reply = self._run(
            "remember",
            {
                "tenant_id": TENANT,
                "person_id": person,
                "kind": "conversation",
                "text": turn.text,
                "captured_at": turn.at,
                "recorded_at": turn.at,
                "ingestion_key": turn.dia_id,
            },
        )
        return str(reply["source_id"])

    def search(self, person: str, query: str, limit: int) -> list[tuple[str, str]]:
        """(id, excerpt) of the returned items, in order."""
        if self.db is not None:
            pack = self.db.search(SearchRequest(TENANT, person, query, limit))
            return [(item.memory.id, item.excerpt) for item in pack.items]
        reply = self._run(
            "search", {"tenant_id": TENANT, "person_id": person, "query": query, "limit": limit}
        )
        return [(str(item["memory"]["id"]), str(item["excerpt"])) for item in reply["items"]]

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


@dataclass
class Scores:
    recall: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in KS})
    rr: list[float] = field(default_factory=list)

    def add(self, ranked: list[str], evidence: frozenset[str]) -> None:
        for k in KS:
            self.recall[k].append(len(evidence.intersection(ranked[:k])) / len(evidence))
        first = next((i for i, turn in enumerate(ranked[:10]) if turn in evidence), None)
        self.rr.append(0.0 if first is None else 1.0 / (first + 1))

    def extend(self, other: Scores) -> None:
        for k in KS:
            self.recall[k].extend(other.recall[k])
        self.rr.extend(other.rr)

    def row(self, label: str) -> str:
        n = len(self.rr)
        if n == 0:
            return f"{label:<14}{0:>6}"
        cells = "".join(f"{statistics.fmean(self.recall[k]):>8.3f}" for k in KS)
        return f"{label:<14}{n:>6}{cells}{statistics.fmean(self.rr):>9.3f}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> int:
    per_category: dict[int, Scores] = {c: Scores() for c in CATEGORIES}
    per_conversation: list[tuple[str, Scores]] = []
    ingest_ms: list[float] = []
    search_ms: list[float] = []
    search_cpu_ms: list[float] = []
    returned = 0
    unrelated = 0
    with tempfile.TemporaryDirectory(prefix="zkr-locomo-") as scratch:
        directory = args.db_dir or scratch
        os.makedirs(directory, exist_ok=True)
        for conv in load(args.files):
            path = os.path.join(directory, f"{conv.name}.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
            backend = Backend(path, args.cli)
            try:
                turn_of: dict[str, str] = {}
                for turn in conv.turns:
                    start = time.perf_counter()
                    source_id = backend.remember(conv.name, turn)
                    ingest_ms.append((time.perf_counter() - start) * 1000)
                    turn_of[source_id] = turn.dia_id
                mine = Scores()
                for question in conv.questions:
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    hits = backend.search(conv.name, question.text, args.limit)
                    search_cpu_ms.append((time.thread_time() - start_cpu) * 1000)
                    search_ms.append((time.perf_counter() - start) * 1000)
                    ranked = [turn_of.get(i, i) for i, _ in hits]
                    words = set(query_terms(question.text)[0])
                    returned += len(hits)
                    unrelated += sum(1 for _, text in hits if not words & set(document_terms(text)))
                    per_category[question.category].add(ranked, question.evidence)
                    if question.category in SCORED:
                        mine.add(ranked, question.evidence)
                per_conversation.append((conv.name, mine))
            finally:
                backend.close()

    mode = "cli" if args.cli else "in-process"
    header = f"{'':<14}{'n':>6}" + "".join(f"{f'R@{k}':>8}" for k in KS) + f"{'MRR@10':>9}"
    print(
        f"LoCoMo lexical retrieval ({mode}, limit {args.limit}, {len(per_conversation)} "
        "conversations)"
    )
    print(header)
    overall = Scores()
    for category in SCORED:
        overall.extend(per_category[category])
        print(per_category[category].row(f"{category} {CATEGORIES[category]}"))
    print(overall.row("overall 1-4"))
    print(per_category[5].row("5 adversarial"))
    print(
        f"returned items sharing no content word with the question: {unrelated} of {returned}"
        f" ({unrelated / max(returned, 1):.3f})"
    )
    if args.per_conversation:
        for name, scores in per_conversation:
            print(scores.row(f"conv {name}"))
    print(
        f"ingest: {len(ingest_ms)} turns, mean {statistics.fmean(ingest_ms):.2f} ms, "
        f"p50 {percentile(ingest_ms, 0.5):.2f} ms, p95 {percentile(ingest_ms, 0.95):.2f} ms"
    )
    print(
        f"search: {len(search_ms)} queries, mean {statistics.fmean(search_ms):.2f} ms, "
        f"p50 {percentile(search_ms, 0.5):.2f} ms, p95 {percentile(search_ms, 0.95):.2f} ms"
        + ("" if args.cli else f" (CPU p50 {percentile(search_cpu_ms, 0.5):.2f} ms)")
    )
    return 0


def run_embed(args: argparse.Namespace) -> int:
    """``--embed``: lexical, dense and hybrid on the same databases (in-process).

    After ingest, ``embed_pending`` fills the lane with the local model (throughput: distinct
    texts embedded per second of the drain, writes included); each question is then searched
    lexically (``ZKR_EMBED=off``), densely (the dense lane's own ranking of the question's
    local embedding) and as a plain hybrid search (latency includes embedding the query).
    """
    from zkr.embedding.local import load as load_model
    from zkr.model import EmbedPendingRequest, QueryEmbedding
    from zkr.store import dense
    from zkr.store.db import read_tx

    embedder = load_model(args.model)
    lanes = ("lexical", "dense", "hybrid")
    scores = {lane: {c: Scores() for c in CATEGORIES} for lane in lanes}
    per_conversation: list[tuple[str, dict[str, Scores]]] = []
    hybrid_ms: list[float] = []
    embedded_texts, embed_seconds, embed_cpu = 0, 0.0, 0.0
    with tempfile.TemporaryDirectory(prefix="zkr-locomo-") as scratch:
        directory = args.db_dir or scratch
        os.makedirs(directory, exist_ok=True)
        for conv in load(args.files):
            path = os.path.join(directory, f"{conv.name}.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
            with MemoryDb.open(path) as db:
                turn_of: dict[str, str] = {}
                for turn in conv.turns:
                    request = RememberRequest(
                        TENANT,
                        conv.name,
                        SourceKind.CONVERSATION,
                        turn.text,
                        turn.at,
                        turn.at,
                        ingestion_key=turn.dia_id,
                    )
                    result = db.remember(request)
                    turn_of[result.source_id] = turn_of[result.evidence_id] = turn.dia_id
                cpu = time.process_time()
                summary = db.embed_pending(EmbedPendingRequest(model=args.model))
                embed_cpu += time.process_time() - cpu
                embedded_texts += summary.texts
                embed_seconds += summary.seconds
                mine = {lane: Scores() for lane in lanes}
                per_conversation.append((conv.name, mine))
                for question in conv.questions:
                    os.environ["ZKR_EMBED"] = "off"
                    pack = db.search(SearchRequest(TENANT, conv.name, question.text, args.limit))
                    del os.environ["ZKR_EMBED"]
                    lexical = [turn_of.get(i.memory.id, "") for i in pack.items]
                    vector = [float(x) for x in embedder.embed([question.text], query=True)[0]]
                    query = QueryEmbedding(vector, summary.model, summary.version)
                    with read_tx(db.conn):
                        ranked = dense.ranking(db.conn, TENANT, conv.name, query)
                    dense_ids = list(dict.fromkeys(turn_of.get(t.id, "") for t in ranked))
                    start = time.perf_counter()
                    pack = db.search(SearchRequest(TENANT, conv.name, question.text, args.limit))
                    hybrid_ms.append((time.perf_counter() - start) * 1000)
                    hybrid = [turn_of.get(i.memory.id, "") for i in pack.items]
                    found = (lexical, dense_ids[: args.limit], hybrid)
                    for lane, ids in zip(lanes, found, strict=True):
                        scores[lane][question.category].add(ids, question.evidence)
                        if question.category in SCORED:
                            mine[lane].add(ids, question.evidence)
    header = f"{'':<14}{'n':>6}" + "".join(f"{f'R@{k}':>8}" for k in KS) + f"{'MRR@10':>9}"
    print(f"LoCoMo with the local embedder ({embedder.model}; {embedder.version})")
    print(f"limit {args.limit}; dense = the dense lane alone; hybrid = plain search")
    for lane in lanes:
        print(f"-- {lane}")
        print(header)
        overall = Scores()
        for category in SCORED:
            overall.extend(scores[lane][category])
            print(scores[lane][category].row(f"{category} {CATEGORIES[category]}"))
        print(overall.row("overall 1-4"))
        print(scores[lane][5].row("5 adversarial"))
        if args.per_conversation:  # tune on some conversations, check on the others
            for name, mine in per_conversation:
                print(mine[lane].row(f"conv {name}"))
    print(
        f"embed-pending: {embedded_texts} texts in {embed_seconds:.1f} s ="
        f" {embedded_texts / max(embed_seconds, 1e-9):.1f} texts/s"
        f" ({embed_cpu:.1f} s CPU, {os.cpu_count()} cores)"
    )
    print(
        f"hybrid search (query embedding included): {len(hybrid_ms)} queries,"
        f" p50 {percentile(hybrid_ms, 0.5):.2f} ms, p95 {percentile(hybrid_ms, 0.95):.2f} ms"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="LoCoMo conversation JSON files")
    parser.add_argument("--cli", action="store_true", help="go through `python -m zkr`")
    parser.add_argument("--limit", type=int, default=20, help="search limit (default 20)")
    parser.add_argument("--db-dir", help="keep the databases in this directory")
    parser.add_argument(
        "--per-conversation", action="store_true", help="also print each conversation's scores"
    )
    parser.add_argument(
        "--embed",
        action="store_true",
        help="fill the dense lane with the local model (zkr[embed]) and compare lexical, dense"
        " and hybrid",
    )
    parser.add_argument("--model", help="local model setting (default $ZKR_EMBED_MODEL / built-in)")
    args = parser.parse_args(argv)
    return run_embed(args) if args.embed else run(args)


if __name__ == "__main__":
    raise SystemExit(main())
