"""Requests and results of ``projections`` and ``embed`` (spec/retrieval.md §9-11)."""

from zkr.codec import Fields
from zkr.model.base import Target, scope_fields
from zkr.model.kinds import Distance, Normalization
from zkr.typelite import Any, NamedTuple


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


class ProjectionInput(NamedTuple):
    """The current embedding input of a live target (spec/retrieval.md §9.1): its text, the
    target revision it was read at and ``input_hash`` (``sha256:`` + hex of the UTF-8 text)."""

    target: Target
    text: str
    revision: int
    input_hash: str

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.to_json(),
            "text": self.text,
            "target_revision": self.revision,
            "input_hash": self.input_hash,
        }


class ProjectionIssue(NamedTuple):
    """One item of ``projections`` (spec/retrieval.md §10.3): ``state`` is ``"missing"`` or
    ``"stale"``; the ``stored_*`` fields are the stored row's columns as SQLite holds them
    (normally ``int``, ``str``, ``int`` Unix seconds), all ``None`` when the row is missing."""

    state: str
    input: ProjectionInput
    stored_target_revision: object
    stored_input_hash: object
    stored_created_at: object

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "input": self.input.to_json(),
            "stored_target_revision": self.stored_target_revision,
            "stored_input_hash": self.stored_input_hash,
            "stored_created_at": self.stored_created_at,
        }


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


class EmbedResult(NamedTuple):
    """Result of ``embed`` (spec/retrieval.md §11.4); ``created_at`` is SQLite's ``unixepoch()``
    at the write, in Unix seconds."""

    target: Target
    dimension: int
    target_revision: int
    input_hash: str
    created_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.to_json(),
            "dimension": self.dimension,
            "target_revision": self.target_revision,
            "input_hash": self.input_hash,
            "created_at": self.created_at,
        }


class EmbedPendingRequest(NamedTuple):
    """``embed-pending`` (zkr's own command): every field is optional.

    ``tenant_id``/``person_id`` (both or neither) restrict the drain to one scope; ``model`` is
    the local model setting (built-in name or model directory; default ``$ZKR_EMBED_MODEL``,
    else the built-in model); ``batch`` texts per transaction (default 64, 1..10000);
    ``limit`` caps the targets embedded in this call (default: all).
    """

    tenant_id: str | None = None
    person_id: str | None = None
    model: str | None = None
    batch: int = 64
    limit: int | None = None

    @classmethod
    def from_json(cls, value: Any) -> "EmbedPendingRequest":
        f = Fields(value, "struct EmbedPendingRequest")
        limit = f.u32_default("limit", 0)
        return cls(
            tenant_id=f.opt_string("tenant_id"),
            person_id=f.opt_string("person_id"),
            model=f.opt_string("model"),
            batch=f.u32_default("batch", 64),
            limit=limit or None,
        )


class EmbedPendingResult(NamedTuple):
    """Result of ``embed-pending``: the lane written (``model``, ``version``), the scopes
    visited, the targets found missing or stale (``pending``), those stored (``embedded``) and
    those skipped because they changed meanwhile, the distinct texts run through the model and
    the wall-clock ``seconds`` of the drain."""

    model: str
    version: str
    scopes: int
    pending: int
    embedded: int
    skipped: int
    texts: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return self._asdict()
