"""Requests and results of ``search`` and ``get`` (spec/retrieval.md §2-8)."""

from zkr.codec import Fields
from zkr.model.base import Target, scope_fields
from zkr.typelite import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the profiles family is loaded only when a context block is built
    from zkr.model.profiles import DailyReview, ProfileEntry


class QueryEmbedding(NamedTuple):
    vector: list[float]
    model: str
    version: str

    @classmethod
    def from_json(cls, f: Fields) -> "QueryEmbedding":
        return cls(
            vector=f.number_list("vector"), model=f.string("model"), version=f.string("version")
        )


class AsOf(NamedTuple):
    valid_at: int
    recorded_at: int

    @classmethod
    def from_json(cls, f: Fields) -> "AsOf":
        return cls(valid_at=f.i64("valid_at"), recorded_at=f.i64("recorded_at"))


class SearchRequest(NamedTuple):
    tenant_id: str
    person_id: str
    query: str
    limit: int = 10
    query_embedding: QueryEmbedding | None = None
    as_of: AsOf | None = None

    @classmethod
    def from_json(cls, value: Any) -> "SearchRequest":
        f = Fields(value, "struct SearchRequest")
        tenant, person = scope_fields(f)
        emb = f.opt_obj("query_embedding", "struct QueryEmbedding")
        as_of = f.opt_obj("as_of", "struct AsOf")
        return cls(
            tenant_id=tenant,
            person_id=person,
            query=f.string("query"),
            limit=f.u32_default("limit", 10),
            query_embedding=None if emb is None else QueryEmbedding.from_json(emb),
            as_of=None if as_of is None else AsOf.from_json(as_of),
        )


class RetrievalItem(NamedTuple):
    """One cited item of a retrieval pack (spec/retrieval.md §7)."""

    memory: Target
    excerpt: str
    relevance_basis_points: int
    evidence_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "memory": {"id": self.memory.id, "kind": self.memory.kind.value},
            "excerpt": self.excerpt,
            "relevance_basis_points": self.relevance_basis_points,
            "evidence_ids": list(self.evidence_ids),
        }


NO_MATCH_GAP = "no cited memory matched"


class RetrievalPack(NamedTuple):
    query: str
    items: list[RetrievalItem]
    gaps: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "items": [item.to_json() for item in self.items],
            "gaps": list(self.gaps),
        }


class GetRequest(NamedTuple):
    tenant_id: str
    person_id: str
    target: Target

    @classmethod
    def from_json(cls, value: Any) -> "GetRequest":
        f = Fields(value, "struct GetRequest")
        tenant, person = scope_fields(f)
        return cls(tenant, person, Target.from_json(f.required("target")))


class ContextRequest(NamedTuple):
    """``context`` (zkr's own command): the cited block a host pastes into a prompt, built by
    :func:`zkr.context.build_context` within ``max_bytes`` UTF-8 bytes."""

    tenant_id: str
    person_id: str
    query: str
    max_bytes: int = 4000
    limit: int = 10
    profile_limit: int = 10
    review_limit: int = 3
    min_relevance_basis_points: int = 0

    @classmethod
    def from_json(cls, value: Any) -> "ContextRequest":
        f = Fields(value, "struct ContextRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant_id=tenant,
            person_id=person,
            query=f.string("query"),
            max_bytes=f.u32_default("max_bytes", 4000),
            limit=f.u32_default("limit", 10),
            profile_limit=f.u32_default("profile_limit", 10),
            review_limit=f.u32_default("review_limit", 3),
            min_relevance_basis_points=f.u32_default("min_relevance_basis_points", 0),
        )


class ContextBlock(NamedTuple):
    """The ``context`` result: the rendered block and what it was built from (only what made
    it into ``text``)."""

    text: str
    items: list[RetrievalItem]
    # quoted inside the list, not around it: typing then keeps ``list[...]`` as it is instead
    # of compiling a string annotation, which costs a CLI call ~2 ms (docs/DEVELOPING.md)
    profiles: list["ProfileEntry"]
    reviews: list["DailyReview"]
    left_out: tuple[int, int, int] = (0, 0, 0)
    """Found but not shown for the budget: (memories, profile entries, reviews)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "bytes": len(self.text.encode("utf-8")),
            "items": [item.to_json() for item in self.items],
            "profiles": [entry.to_json() for entry in self.profiles],
            "reviews": [review.to_json() for review in self.reviews],
            "left_out": dict(zip(("items", "profiles", "reviews"), self.left_out, strict=True)),
        }
