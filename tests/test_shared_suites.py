"""The shared black-box suites, run against this checkout's CLI.

* ../shared/conformance/run — recorded request/response scenarios of the reference CLI;
* ../shared/fixtures/migrations/check — historical database files and their upgrades;
* ../shared/fixtures/sync/check — pages exported by the reference, applied here.

They live beside the repository. Without ../shared they are skipped with a clear reason (a
public clone); in CI (``CI`` set) a missing ../shared fails the run (tests/conftest.py).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import SHARED

ZKR = f"{sys.executable} -m zkr"

pytestmark = pytest.mark.shared


@pytest.mark.parametrize(
    "script",
    ["conformance/run", "fixtures/migrations/check", "fixtures/sync/check"],
)
def test_shared_suite_passes(script: str) -> None:
    path = SHARED / script
    assert path.exists(), f"{path} is missing: clone the project next to its shared/ folder"
    proc = subprocess.run(
        [sys.executable, str(path), "--zkr", ZKR],
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
