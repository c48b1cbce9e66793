"""The README's quick start runs ``examples/demo.py`` (the main job); it is run here as a user
runs it: fresh, twice on one database, and with a path that is no database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO), *args], capture_output=True, text=True, timeout=300
    )


def test_the_demo_runs_and_reruns_on_one_database(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    first = run_demo(path)
    assert first.returncode == 0, first.stderr
    assert "deleted source" in first.stdout and "Traceback" not in first.stderr
    second = run_demo(path)
    assert second.returncode == 0, second.stderr
    assert "a second run" in second.stdout


def test_a_path_that_is_no_database_is_one_error_not_a_traceback(tmp_path: Path) -> None:
    """``demo.py DIRECTORY`` (or a text file) ended in a ``StorageError`` traceback."""
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n", encoding="utf-8")
    for path, message in (
        (str(tmp_path), f"unable to open database file: {tmp_path}"),
        (str(text), "file is not a database"),
    ):
        proc = run_demo(path)
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr
        assert json.loads(proc.stderr) == {"error": message}
