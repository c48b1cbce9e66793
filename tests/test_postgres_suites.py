"""The shared black-box suites against the PostgreSQL backend (issue 16, "Must show").

The same runners as tests/test_shared_suites.py, the same waivers files and no other, with
``python tests/pg_zkr.py`` as the zkr command: every ``--db PATH`` the runners pass becomes a
fresh store of its own (a schema) in this test's database on the session's server
(tests/pg_server.py), and zkr runs with ``--db postgresql://…``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED
from tests.pg_zkr import ENV_DSN
from tests.test_shared_suites import WAIVERS

WRAPPER = f"{sys.executable} {Path(__file__).parent / 'pg_zkr.py'}"

pytestmark = [pytest.mark.shared, pytest.mark.postgres]


@pytest.mark.parametrize("script", ["conformance/run", "fixtures/sync/check"])
def test_shared_suite_passes_on_postgres(script: str, pg_dsn: str) -> None:
    path = SHARED / script
    assert path.exists(), f"{path} is missing: clone the project next to its shared/ folder"
    proc = subprocess.run(
        [sys.executable, str(path), "--zkr", WRAPPER, "--waivers", str(WAIVERS[script])],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, ENV_DSN: pg_dsn},
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert proc.returncode == 0, (
        f"{script} on PostgreSQL: {summary}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    assert " 0 failed" in summary, summary
    assert "UNUSED WAIVER" not in proc.stdout, proc.stdout[-3000:]
