"""The library API checks typed requests like the CLI decoder does (nothing half-written)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import P, T, dump, remember
from zkr import MemoryDb, RequestError, StorageError
from zkr.model import (
    ClaimInput,
    ClaimKind,
    CorrectRequest,
    DeleteRequest,
    EraseRequest,
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
        # Python values no JSON decoder makes are named by their type, not called a map
        (base(text=b"hello"), "field `text`: invalid type: Python bytes, expected a string"),
        (base(text=("a",)), "field `text`: invalid type: sequence, expected a string"),
        (base(text={"a": 1}), "field `text`: invalid type: map, expected a string"),
        (base(claim=ClaimInput("s", "p", "v", ClaimKind.FACT, 1.5)), "field `claim.valid_from`"),
        (base(claim=("s", "p", "v", "fact", 1)), "field `claim`: expected ClaimInput"),
        (base(locator=Locator("d", "p", "s", "g", -1, 2)), "field `locator.start_ms`: invalid"),
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


@pytest.mark.parametrize("request_", [{"tenant_id": T, "person_id": P, "text": "x"}, None, "x"])
def test_a_request_that_is_no_model_type_is_a_request_error(
    db: MemoryDb, db_path: str, request_: Any
) -> None:
    """A dict (the CLI's JSON) passed where a request belongs failed inside the store and was
    reported as a damaged file: ``database content is not what zkr expects: AttributeError``."""
    remember(db, "already here")
    before = dump(db_path)
    name = type(request_).__name__
    message = f"invalid type: {name}, expected a zkr.model request"
    with pytest.raises(RequestError, match=message):
        db.remember(request_)
    with pytest.raises(RequestError, match=message):
        db.search(request_)
    outcome = db.remember_many([request_], outcomes=True)[0]
    assert outcome.status == "failed" and outcome.error == message
    assert dump(db_path) == before


def test_another_commands_request_is_a_request_error_not_a_damaged_file(
    db: MemoryDb, db_path: str
) -> None:
    """``db.search(RememberRequest(...))`` (or ``db.delete(CorrectRequest(...))``) failed inside
    the store on a missing attribute and was reported as a damaged file: ``database content is
    not what zkr expects: AttributeError: 'RememberRequest' object has no attribute 'query'``."""
    stored = remember(db, "already here")
    before = dump(db_path)
    a_remember = RememberRequest(T, P, SourceKind.CONVERSATION, "x", 1, 1)
    with pytest.raises(RequestError, match=r"^invalid type: RememberRequest, expected Search"):
        db.search(a_remember)  # type: ignore[arg-type]
    correction = CorrectRequest(T, P, "no-such-claim", "t", "v", 30, 30)
    with pytest.raises(RequestError, match=r"^invalid type: CorrectRequest, expected Delete"):
        db.delete(correction)  # type: ignore[arg-type]
    with pytest.raises(
        RequestError, match=r"^requests\[1\]: invalid type: SearchRequest, expected Remember"
    ):
        db.remember_many([a_remember, SearchRequest(T, P, "q")])  # type: ignore[list-item]
    outcomes = db.remember_many([SearchRequest(T, P, "q")], outcomes=True)  # type: ignore[list-item]
    assert outcomes[0].error == "invalid type: SearchRequest, expected RememberRequest"
    assert dump(db_path) == before
    assert db.delete(DeleteRequest(T, P, stored.source_id, 20)).source_id == stored.source_id


def test_limits_are_unsigned(db: MemoryDb) -> None:
    with pytest.raises(RequestError, match="field `limit`"):
        db.search(SearchRequest(T, P, "q", -1))
    with pytest.raises(RequestError, match="field `limit`"):
        db.export(ExportRequest(T, P, 1, limit=-5))


@pytest.mark.parametrize("flag", [0, None, "", "false", 1.0])
def test_a_flag_that_is_no_bool_erases_nothing(db: MemoryDb, db_path: str, flag: Any) -> None:
    """``erase(dry_run=0)`` (or ``None``) erased for real: a bool field took any truthiness
    (found hunting the newcomer findings' class); the CLI refuses ``"dry_run": 0`` too."""
    gone = remember(db, "the secret to forget")
    db.delete(DeleteRequest(T, P, gone.source_id, 20))
    before = dump(db_path)
    for request in (
        EraseRequest(T, P, dry_run=flag),
        EraseRequest(T, P, dry_run=False, propagate=flag),
    ):
        with pytest.raises(
            RequestError, match=r"^field `\w+`: invalid type: .*, expected a boolean$"
        ):
            db.erase(request)
    with pytest.raises(RequestError, match=r"^field `profile_follows`: invalid type"):
        db.correct(CorrectRequest(T, P, "c" * 32, "t", "v", 30, 30, profile_follows=flag))
    assert dump(db_path) == before


def test_well_typed_requests_pass() -> None:
    validate(
        base(
            claim=ClaimInput("s", "p", "v", ClaimKind.FACT, 1),
            locator=Locator("d", "p", "s", "g", 0, 2**64 - 1),
        )
    )
    validate(SearchRequest(T, P, "q", 2**32 - 1))


def test_every_model_name_resolves_from_its_submodule() -> None:
    """``zkr.model`` loads submodules lazily; every advertised name must still resolve."""
    import zkr.model as model

    for name in model.__all__:
        value = getattr(model, name)
        assert value is getattr(sys.modules[f"zkr.model.{model._HOME[name]}"], name)
    assert set(model.__all__) <= set(dir(model))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = model.Nope


def test_a_cli_search_builds_only_the_types_it_needs(tmp_path: Path) -> None:
    """CLI start-up: a search must not build the sync, embedding or lifecycle types."""
    path = str(tmp_path / "m.db")
    MemoryDb.open(path).close()  # created (and migrated) beforehand, as an agent's file is
    probe = (
        "import io, sys\n"
        "from zkr.cli import run\n"
        "out = io.StringIO()\n"
        "run(['--db', sys.argv[1], 'search'], "
        'io.BytesIO(b\'{"tenant_id":"t","person_id":"p","query":"tea"}\'), out, out)\n'
        "print(sorted(m for m in sys.modules if m.startswith('zkr.model.')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, path],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = proc.stdout.strip().splitlines()[-1]
    assert loaded == "['zkr.model.base', 'zkr.model.checks', 'zkr.model.retrieval']"


def test_every_command_is_decode_call_encode() -> None:
    """Each CLI command names a request type of zkr.model, a MemoryDb method of its own name
    whose annotated result is a typed model value, and that method names its spec section."""
    import typing

    from zkr import model
    from zkr.cli import COMMANDS

    for name, command in COMMANDS.items():
        request = getattr(model, command.request)
        assert callable(request.from_json), name
        method = getattr(MemoryDb, name.replace("-", "_"))  # embed-pending
        doc = method.__doc__ or ""
        assert "spec/" in doc or "docs/" in doc, name  # where the rule comes from
        hints = typing.get_type_hints(method)
        assert hints["req"] is request, name
        result = hints["return"]
        for part in typing.get_args(result) or (result,):
            part = (typing.get_args(part) or (part,))[0]  # list[X] -> X
            assert part is type(None) or callable(getattr(part, "to_json", None)), (name, part)


def test_every_public_memorydb_method_is_documented() -> None:
    for name in dir(MemoryDb):
        if not name.startswith("_"):
            assert getattr(MemoryDb, name).__doc__, name


def test_schema_too_new_is_exported() -> None:
    import zkr

    assert "SchemaTooNew" in zkr.__all__ and zkr.SchemaTooNew.__module__ == "zkr.errors"


def test_a_closed_deferred_handle_does_not_reopen_its_file(tmp_path: Path) -> None:
    """A deferred handle closed before its first call opened (created) the file on the next
    call and kept that connection; it now fails like a closed opened handle."""
    path = tmp_path / "memory.db"
    for handle in (MemoryDb.deferred(path), MemoryDb.open(tmp_path / "other.db")):
        handle.close()
        with pytest.raises(StorageError, match=r"^Cannot operate on a closed database\.$"):
            handle.search(SearchRequest(T, P, "q"))
    assert not path.exists()
