"""Requests of ``projections`` and ``embed`` (spec/retrieval.md §9-11)."""

from typing import Any, NamedTuple

from zkr.codec import Fields
from zkr.model.base import Target, scope_fields
from zkr.model.kinds import Distance, Normalization


class ProjectionsRequest(NamedTuple):
    tenant_id: str
    person_id: str
    model: str
    version: str
    limit: int = 10

    @classmethod
    def from_json(cls, value: Any) -> "ProjectionsRequest":
        f = Fields(value, "struct ProjectionsRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            model=f.string("model"),
            version=f.string("version"),
            limit=f.u32_default("limit", 10),
        )


class EmbeddingInput(NamedTuple):
    vector: list[float]
    model: str
    version: str
    input_hash: str
    normalization: Normalization
    distance: Distance

    @classmethod
    def from_json(cls, f: Fields) -> "EmbeddingInput":
        return cls(
            vector=f.number_list("vector"),
            model=f.string("model"),
            version=f.string("version"),
            input_hash=f.string("input_hash"),
            normalization=f.enum("normalization", Normalization),
            distance=f.enum("distance", Distance),
        )


class EmbedRequest(NamedTuple):
    tenant_id: str
    person_id: str
    target: Target
    embedding: EmbeddingInput

    @classmethod
    def from_json(cls, value: Any) -> "EmbedRequest":
        f = Fields(value, "struct EmbedRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            target=Target.from_json(f.required("target")),
            embedding=EmbeddingInput.from_json(f.obj("embedding", "struct EmbeddingInput")),
        )
