"""examples/trip_story.py, the product story end to end (zkr mcp over stdio with the official
SDK, correct, delete, sync to a second file and back, zkr serve and the CLI), run as a user
runs it; then its two files are checked here independently of the script's own checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from zkr import MemoryDb

pytest.importorskip("mcp", reason="the story talks to zkr mcp: the optional extra zkr[mcp]")

ZKR = Path(sys.executable).with_name("zkr")
QUESTION = "what did I decide about the trip?"


@pytest.mark.skipif(not ZKR.exists(), reason="needs the zkr command installed beside Python")
def test_the_trip_story_runs_green_and_leaves_two_files_that_answer_alike(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "trip_story.py"),
            str(tmp_path),
            "--zkr",
            str(ZKR),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    summary = json.loads(lines[-1])
    assert summary["ok"] is True and summary["failures"] == [], summary
    assert {"mcp search", "serve search", "cli search"} <= set(summary["timings_ms"])
    assert sum(line.startswith("  ok ") for line in lines) >= 20
    assert not any(line.startswith("  FAIL") for line in lines)

    answers = []
    for name in ("laptop.db", "phone.db"):
        with MemoryDb.open(str(tmp_path / name)) as db:
            me = db.scope("local", "me")
            pack = me.search(QUESTION)
            (current,) = me.lookup("trip", "destination")
            answers.append((pack.to_json(), current.to_json()))
            # the corrected decision answers first, citing the correcting turn
            assert pack.items[0].memory.id == current.claim["id"]
            assert pack.items[0].evidence_ids == current.evidence_ids
            assert "Porto" in pack.items[0].excerpt
            # the hotel turn's claim was deleted: nothing answers it on either file
            assert me.lookup("trip", "hotel") == []
    assert answers[0] == answers[1]


def test_bad_arguments_are_usage_errors_not_tracebacks(tmp_path: Path) -> None:
    """``trip_story.py FILE`` (a file where its directory goes) ended in a
    ``FileExistsError`` traceback, ``--zkr /missing`` in a ``FileNotFoundError`` one, after
    the story had started."""
    taken = tmp_path / "taken"
    taken.write_text("a file\n", encoding="utf-8")
    script = str(REPO / "examples" / "trip_story.py")
    for args, message in (
        ([str(taken)], f"cannot use {taken} as the story's directory"),
        (["--zkr", str(tmp_path / "missing")], "no such executable"),
    ):
        run = subprocess.run(
            [sys.executable, script, *args], capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 2 and run.stdout == ""
        assert "Traceback" not in run.stderr and message in run.stderr, run.stderr
