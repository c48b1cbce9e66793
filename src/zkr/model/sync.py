"""Requests and results of ``export`` and ``apply`` (spec/sync.md §3-4)."""

from collections.abc import Sequence

from zkr.codec import Fields
from zkr.model.base import scope_fields
from zkr.typelite import Any, NamedTuple


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


class ExportPage(NamedTuple):
    """One page of the scoped commit feed (spec/sync.md §3.4).

    ``commits`` are JSON-ready objects (``sequence``, ``recorded_at``, ``event_count``,
    ``first_event_index``, ``records``) that another database's ``apply`` takes unchanged;
    ``next_after_commit``/``next_after_event_index`` are the cursor of the next page.
    """

    export_format: int
    database_schema_version: int
    high_water_mark: int
    next_after_commit: int
    next_after_event_index: int
    complete: bool
    commits: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """The keys of §3.4 in canonical order."""
        return {
            "export_format": self.export_format,
            "database_schema_version": self.database_schema_version,
            "high_water_mark": self.high_water_mark,
            "next_after_commit": self.next_after_commit,
            "next_after_event_index": self.next_after_event_index,
            "complete": self.complete,
            "commits": self.commits,
        }


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


class ApplyResult(NamedTuple):
    """The four counters of ``apply`` (spec/sync.md §4.6): ``records_skipped`` counts ledger
    hits only; a commit counts as applied when at least one of its records was accepted."""

    commits_applied: int = 0
    commits_skipped: int = 0
    records_applied: int = 0
    records_skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "commits_applied": self.commits_applied,
            "commits_skipped": self.commits_skipped,
            "records_applied": self.records_applied,
            "records_skipped": self.records_skipped,
        }
