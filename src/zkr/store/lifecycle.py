"""Placeholder: implemented by its own issue."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    raise NotImplementedError(f"zkr.store.lifecycle.{name} is not implemented yet")
