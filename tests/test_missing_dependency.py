"""A broken install (a dependency that does not import) is named as such, not blamed on the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
sys.modules["Stemmer"] = None  # import Stemmer now raises ImportError, as on a broken install
from zkr import MemoryDb, MissingDependency
from zkr.model import SearchRequest
db = MemoryDb.open(sys.argv[1])
try:
    db.search(SearchRequest("t", "p", "plans"))
except MissingDependency as err:
    print(str(err))
"""


def test_a_missing_dependency_is_named(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "zkr is missing a dependency" in out
    assert "Stemmer" in out
    assert "database content" not in json.dumps(out)
