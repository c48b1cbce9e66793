"""zkr memory provider for Hermes Agent.

Install by linking or copying this directory to ``$HERMES_HOME/plugins/zkr`` and setting
``memory: {provider: zkr}`` in ``config.yaml``. Hermes' memory-plugin loader imports this
package and calls :func:`register`, which hands it one ``ZkrMemoryProvider`` (a
``MemoryProvider``) through ``ctx.register_memory_provider``. Standard library only; the host
provides ``agent.memory_provider`` and ``tools.registry``.
"""

from __future__ import annotations

from typing import Any

from .provider import ZkrMemoryProvider

__all__ = ["ZkrMemoryProvider", "register"]


def register(ctx: Any) -> None:
    """Hermes plugin entry point."""
    ctx.register_memory_provider(ZkrMemoryProvider())
