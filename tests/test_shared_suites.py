"""The shared black-box suites, run against this checkout's CLI.

* ../shared/conformance/run — recorded request/response scenarios of the reference CLI;
* ../shared/fixtures/migrations/check — historical database files and their upgrades;
* ../shared/fixtures/sync/check — pages exported by the reference, applied here.

They live beside the repository. Without ../shared they are skipped with a clear reason (a
public clone); in CI (``CI`` set) a missing ../shared fails the run (tests/conftest.py).
Search steps whose item set differs only because zkr matches more (stems, claim words, Unicode
forms, n-grams) or drops meaningless matches are waived, each with its reason, in
``tests/conformance-waivers.json`` and ``tests/sync-waivers.json`` (two files: the two tools
read different entry shapes); each waiver names the test of ours that guards what the step
guarded, and docs/decisions-retrieval.md lists them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED

ZKR = f"{sys.executable} -m zkr"
HERE = Path(__file__).parent
WAIVERS = {
    "conformance/run": HERE / "conformance-waivers.json",
    "fixtures/sync/check": HERE / "sync-waivers.json",
}

pytestmark = pytest.mark.shared


@pytest.mark.parametrize(
    "script",
    ["conformance/run", "fixtures/migrations/check", "fixtures/sync/check"],
)
def test_shared_suite_passes(script: str) -> None:
    path = SHARED / script
    assert path.exists(), f"{path} is missing: clone the project next to its shared/ folder"
    waivers = ["--waivers", str(WAIVERS[script])] if script in WAIVERS else []
    proc = subprocess.run(
        [sys.executable, str(path), "--zkr", ZKR, *waivers],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert proc.returncode == 0, (
        f"{script}: {summary}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    assert " 0 failed" in summary, summary
    assert "UNUSED WAIVER" not in proc.stdout, proc.stdout[-3000:]
