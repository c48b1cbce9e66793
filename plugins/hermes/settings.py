"""Configuration: environment variables, then Hermes' ``config.yaml``, then defaults.

| setting | env var | config.yaml key | default |
| --- | --- | --- | --- |
| executable | ``ZKR_BIN`` | ``memory.zkr.bin`` | ``zkr`` (looked up on PATH) |
| database | ``ZKR_DB`` | ``memory.zkr.db`` | ``<hermes_home>/zkr.db`` |
| tenant | ``ZKR_TENANT_ID`` | ``memory.zkr.tenant_id`` | ``agent_workspace``, else ``hermes`` |
| person | ``ZKR_PERSON_ID`` | ``memory.zkr.person_id`` | see :func:`derive_scope` |
| call timeout | ``ZKR_TIMEOUT_SECONDS`` | ``memory.zkr.timeout_seconds`` | ``30`` |
| transport | ``ZKR_TRANSPORT`` | ``memory.zkr.transport`` | ``auto`` (library, else CLI) |
| prefetch floor | ``ZKR_PREFETCH_MIN_RELEVANCE`` | ``memory.zkr.prefetch_min_relevance`` | 2500 |

Blank values count as unset. A relative database path is resolved against the Hermes home
(never the working directory); ``~`` and ``$HERMES_HOME`` are expanded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_BIN = "zkr"
DEFAULT_DB_NAME = "zkr.db"
DEFAULT_TENANT = "hermes"
DEFAULT_PERSON = "default"
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 600.0
QUEUE_SUFFIX = ".queue"
#: Prefetch's default relevance floor in basis points (``relevance_basis_points``): items
#: below it are not recalled. One place: the retrieval work owns its value.
DEFAULT_PREFETCH_MIN_RELEVANCE = 2500
TRANSPORTS = ("auto", "library", "cli")

ENV_BIN = "ZKR_BIN"
ENV_DB = "ZKR_DB"
ENV_TENANT = "ZKR_TENANT_ID"
ENV_PERSON = "ZKR_PERSON_ID"
ENV_TIMEOUT = "ZKR_TIMEOUT_SECONDS"
ENV_TRANSPORT = "ZKR_TRANSPORT"
ENV_PREFETCH_MIN = "ZKR_PREFETCH_MIN_RELEVANCE"


@dataclass(frozen=True)
class Settings:
    hermes_home: str
    binary: str
    db_path: str
    queue_path: str
    #: Explicitly configured scope (env or config.yaml); ``None`` lets ``initialize`` derive it.
    tenant_id: str | None
    person_id: str | None
    timeout: float
    #: ``auto`` (the zkr library in-process when importable, else the CLI), ``library`` or ``cli``.
    transport: str = "auto"
    #: Prefetch recalls only items with at least this ``relevance_basis_points`` (0..10000).
    prefetch_min_relevance: int = DEFAULT_PREFETCH_MIN_RELEVANCE


def default_hermes_home(environ: Mapping[str, str] | None = None) -> str:
    """The host's idea of HERMES_HOME, without requiring ``initialize`` to have run."""
    env = os.environ if environ is None else environ
    try:
        from hermes_constants import get_hermes_home

        return str(get_hermes_home())
    except Exception:
        pass
    configured = env.get("HERMES_HOME", "").strip()
    return configured or str(Path.home() / ".hermes")


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def read_hermes_config(hermes_home: str) -> dict[str, Any]:
    """The ``memory.zkr`` section of ``<hermes_home>/config.yaml`` (empty when absent).

    YAML parsing uses the host's own PyYAML (a Hermes dependency); the plugin adds none.
    """
    path = Path(hermes_home) / "config.yaml"
    if not path.is_file():
        return {}
    try:
        import yaml

        with path.open(encoding="utf-8-sig") as handle:
            document = yaml.safe_load(handle) or {}
    except Exception:
        logger.debug("zkr: could not read %s", path, exc_info=True)
        return {}
    memory = document.get("memory") if isinstance(document, dict) else None
    section = memory.get("zkr") if isinstance(memory, dict) else None
    return dict(section) if isinstance(section, dict) else {}


def resolve_db_path(raw: str, hermes_home: str) -> str:
    expanded = raw.replace("${HERMES_HOME}", hermes_home).replace("$HERMES_HOME", hermes_home)
    path = Path(expanded).expanduser()
    if not path.is_absolute():
        path = Path(hermes_home) / path
    return os.path.abspath(path)


def _timeout(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_TIMEOUT_SECONDS:
        logger.warning("zkr: ignoring invalid timeout %r; using %s s", raw, DEFAULT_TIMEOUT_SECONDS)
        return DEFAULT_TIMEOUT_SECONDS
    return value


def _transport(raw: str | None) -> str:
    if raw is None:
        return "auto"
    value = raw.strip().lower()
    if value not in TRANSPORTS:
        logger.warning("zkr: ignoring unknown transport %r; using auto", raw)
        return "auto"
    return value


def _basis_points(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_PREFETCH_MIN_RELEVANCE
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 10_000:
        logger.warning(
            "zkr: ignoring invalid prefetch floor %r; using %s",
            raw,
            DEFAULT_PREFETCH_MIN_RELEVANCE,
        )
        return DEFAULT_PREFETCH_MIN_RELEVANCE
    return value


def load_settings(
    hermes_home: str | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if environ is None else environ
    home = os.path.abspath(os.path.expanduser(hermes_home or default_hermes_home(env)))
    config = read_hermes_config(home)

    def pick(env_name: str, key: str) -> str | None:
        return _text(env.get(env_name)) or _text(config.get(key))

    db_path = resolve_db_path(pick(ENV_DB, "db") or DEFAULT_DB_NAME, home)
    return Settings(
        hermes_home=home,
        binary=pick(ENV_BIN, "bin") or DEFAULT_BIN,
        db_path=db_path,
        queue_path=db_path + QUEUE_SUFFIX,
        tenant_id=pick(ENV_TENANT, "tenant_id"),
        person_id=pick(ENV_PERSON, "person_id"),
        timeout=_timeout(pick(ENV_TIMEOUT, "timeout_seconds")),
        transport=_transport(pick(ENV_TRANSPORT, "transport")),
        prefetch_min_relevance=_basis_points(pick(ENV_PREFETCH_MIN, "prefetch_min_relevance")),
    )


def derive_scope(settings: Settings, init_kwargs: Mapping[str, Any]) -> tuple[str, str]:
    """Tenant and person for a session: configured values win over Hermes' identity kwargs.

    Person falls back to the first non-blank of ``user_id``, ``user_id_alt`` and
    ``agent_identity`` (the Hermes profile), else ``default``.
    """
    tenant = settings.tenant_id or _text(init_kwargs.get("agent_workspace")) or DEFAULT_TENANT
    person = settings.person_id
    if person is None:
        for key in ("user_id", "user_id_alt", "agent_identity"):
            person = _text(init_kwargs.get(key))
            if person:
                break
    return tenant, person or DEFAULT_PERSON
