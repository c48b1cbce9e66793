"""The agent plugins' own suites, run by the project's single test command.

Each plugin needs a host that does not belong in the zkr test environment: Hermes Agent 0.19.0
pins ~65 packages (its own virtualenv), the OpenClaw plugin is TypeScript tested with Bun. Their
scripts install what they need from the package registries and run the plugin tests against
this checkout's real CLI; a failing install or test fails here (nothing is skipped).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize(
    "script",
    [
        "plugins/hermes/scripts/ci.sh",
        # bun install, prettier, tsc, bun test against the real CLI, bun build, then OpenClaw's
        # real loader (`openclaw plugins inspect zkr --runtime`) under Node 24 from npm.
        "plugins/openclaw/scripts/ci.sh",
    ],
)
def test_plugin_suite(script: str) -> None:
    env = dict(os.environ, ZKR_PYTHON=sys.executable, ZKR_OPENCLAW_LOADER_CHECK="1")
    proc = subprocess.run(
        ["bash", str(REPO / script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        cwd=REPO,
    )
    tail = (proc.stdout + proc.stderr)[-5000:]
    assert proc.returncode == 0, tail
