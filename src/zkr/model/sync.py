"""Requests of ``export`` and ``apply`` (spec/sync.md §3-4)."""

from collections.abc import Sequence
from typing import Any, NamedTuple

from zkr.codec import Fields
from zkr.model.base import scope_fields


class ExportRequest(NamedTuple):
    tenant_id: str
    person_id: str
    export_format: int
    after_commit: int = 0
    after_event_index: int = -1
    high_water_mark: int | None = None
    limit: int = 10

    @classmethod
    def from_json(cls, value: Any) -> "ExportRequest":
        f = Fields(value, "struct ExportRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            export_format=f.u32("export_format"),
            after_commit=f.i64_default("after_commit", 0),
            after_event_index=f.i64_default("after_event_index", -1),
            high_water_mark=f.opt_i64("high_water_mark"),
            limit=f.u32_default("limit", 10),
        )


class ApplyRequest(NamedTuple):
    """``commits`` stays raw JSON here; :mod:`zkr.store.apply` parses each record strictly."""

    tenant_id: str
    person_id: str
    export_format: int
    database_schema_version: int | None = None
    commits: Sequence[Any] = ()

    @classmethod
    def from_json(cls, value: Any) -> "ApplyRequest":
        f = Fields(value, "struct ApplyRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            export_format=f.u32("export_format"),
            database_schema_version=f.opt_i64("database_schema_version"),
            commits=f.list_default("commits"),
        )
