"""The agent plugins' own suites, run by the project's single test command.

Each plugin needs a host that does not belong in the zkr test environment: Hermes Agent 0.19.0
pins ~65 packages (its own virtualenv), the OpenClaw plugin is TypeScript tested with Bun. Their
scripts install what they need from the package registries and run the plugin tests against
this checkout's real CLI; a failing install or test fails here (nothing is skipped).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("script", ["plugins/hermes/scripts/ci.sh"])
def test_plugin_suite(script: str) -> None:
    proc = subprocess.run(
        ["bash", str(REPO / script)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        cwd=REPO,
    )
    tail = (proc.stdout + proc.stderr)[-5000:]
    assert proc.returncode == 0, tail
