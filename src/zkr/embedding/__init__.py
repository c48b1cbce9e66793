"""zkr's optional local embedder (``pip install 'zkr[embed]'``).

A sentence-embedding model run in-process with ONNX Runtime and a Hugging Face ``tokenizers``
tokenizer, so the caller no longer needs a model of its own: ``embed-pending`` fills the
database's vector lane and ``search`` embeds a plain ``query``. Nothing here is imported by the
core install or by lexical search; :mod:`zkr.embedding.local` imports ``onnxruntime`` and
``tokenizers`` only when a model is loaded.

Which model (the *setting*): the ``model`` argument of the library calls, else the
``ZKR_EMBED_MODEL`` environment variable, else :data:`DEFAULT_MODEL`. A setting is a built-in
model name (:data:`zkr.embedding.local.BUILT_IN`) or a directory holding ``model.onnx`` and
``tokenizer.json`` (a Hugging Face / Optimum / fastembed export), optionally with a
``zkr-embed.json`` describing pooling, prefixes and calibration.
"""

from __future__ import annotations

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The built-in model used when nothing else is configured (see docs in the README)."""

SETTING = "ZKR_EMBED_MODEL"
"""Environment variable naming the local model: a built-in name or a model directory."""

SWITCH = "ZKR_EMBED"
"""Environment variable: ``off`` (or ``0``, ``false``, ``no``) makes ``search`` ignore the
database's local model (:func:`zkr.store.embedconfig.switched_on`)."""
