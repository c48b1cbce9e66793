"""Latency of the Hermes provider's zkr calls: the library in-process against the CLI.

Loads the provider through Hermes' own discovery (a temporary HERMES_HOME) and times
``zkr_store`` and ``prefetch`` N times per transport on a fresh database. Prints numbers,
asserts nothing. Needs hermes-agent and zkr in the interpreter (the venv of scripts/ci.sh):

    ${TMPDIR:-/tmp}/zkr-hermes-venv/bin/python plugins/hermes/scripts/bench.py [N]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1]


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    home = Path(tempfile.mkdtemp(prefix="zkr-hermes-bench-"))
    try:
        (home / "plugins").mkdir()
        (home / "plugins" / "zkr").symlink_to(PLUGIN, target_is_directory=True)
        (home / "config.yaml").write_text("memory:\n  provider: zkr\n")
        wrapper = home / "zkr"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m zkr "$@"\n')
        wrapper.chmod(0o755)
        os.environ.update(HERMES_HOME=str(home), ZKR_BIN=str(wrapper))
        import plugins.memory as hermes_memory

        for transport in ("library", "cli"):
            os.environ["ZKR_TRANSPORT"] = transport
            os.environ["ZKR_DB"] = str(home / f"{transport}.db")
            provider = hermes_memory.load_memory_provider("zkr")
            provider.initialize("bench", hermes_home=str(home), agent_context="primary")
            provider.prefetch("warm up")
            store: list[float] = []
            prefetch: list[float] = []
            for i in range(n):
                started = time.perf_counter()
                provider.handle_tool_call("zkr_store", {"content": f"note {i} about kayaks"})
                store.append(time.perf_counter() - started)
                started = time.perf_counter()
                provider.prefetch("kayaks")
                prefetch.append(time.perf_counter() - started)
            provider.shutdown()
            print(
                f"{provider.transport}: zkr_store p50 {percentile(store, 0.5):.2f} ms, "
                f"p95 {percentile(store, 0.95):.2f} ms; prefetch p50 "
                f"{percentile(prefetch, 0.5):.2f} ms, p95 {percentile(prefetch, 0.95):.2f} ms "
                f"(n={n})"
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
