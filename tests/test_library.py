"""The library API checks typed requests like the CLI decoder does (nothing half-written)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import P, T, dump, remember
from zkr import MemoryDb, RequestError
from zkr.model import (
    ClaimInput,
    ClaimKind,
    ExportRequest,
    Locator,
    RememberRequest,
    SearchRequest,
    SourceKind,
    validate,
)


def base(**override: Any) -> RememberRequest:
    fields: dict[str, Any] = {
        "tenant_id": T,
        "person_id": P,
        "kind": SourceKind.CONVERSATION,
        "text": "hello",
        "captured_at": 10,
        "recorded_at": 10,
    }
    fields.update(override)
    return RememberRequest(**fields)


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (base(captured_at=time.time()), "field `captured_at`: invalid type: floating point"),
        (base(recorded_at=True), "field `recorded_at`: invalid type: boolean"),
        (base(captured_at=2**70), "field `captured_at`: invalid value"),
        (base(kind="conversation"), "field `kind`: expected a SourceKind member"),
        (base(text="bad \ud800"), "field `text`: lone surrogate"),
        (base(text=None), "field `text`: invalid type: null"),
        (base(claim=ClaimInput("s", "p", "v", ClaimKind.FACT, 1.5)), "field `valid_from`"),
        (base(claim=("s", "p", "v", "fact", 1)), "field `claim`: expected ClaimInput"),
        (base(locator=Locator("d", "p", "s", "g", -1, 2)), "field `start_ms`: invalid value"),
    ],
)
def test_remember_rejects_ill_typed_requests_before_writing(
    db: MemoryDb, db_path: str, request_: RememberRequest, fragment: str
) -> None:
    remember(db, "already here")
    before = dump(db_path)
    with pytest.raises(RequestError, match=fragment):
        db.remember(request_)
    assert dump(db_path) == before


def test_limits_are_unsigned(db: MemoryDb) -> None:
    with pytest.raises(RequestError, match="field `limit`"):
        db.search(SearchRequest(T, P, "q", -1))
    with pytest.raises(RequestError, match="field `limit`"):
        db.export(ExportRequest(T, P, 1, limit=-5))


def test_well_typed_requests_pass() -> None:
    validate(
        base(
            claim=ClaimInput("s", "p", "v", ClaimKind.FACT, 1),
            locator=Locator("d", "p", "s", "g", 0, 2**64 - 1),
        )
    )
    validate(SearchRequest(T, P, "q", 2**32 - 1))
