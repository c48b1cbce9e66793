"""``zkr serve``: the CLI's commands over JSON lines, in one real long-lived process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from tests.conftest import LogWatch, P, T, cli, dump, sam_acme
from zkr import MemoryDb, servefile
from zkr.cli import REQUEST_LIMIT
from zkr.serve import LINE_LIMIT, answer
from zkr.servefile import BACKSTOP_FRAMES, IDLE_CHECKPOINT_FRAMES, FileWatch, IdleCheckpoint


class Server:
    """A running ``python -m zkr serve --db PATH`` with line-level helpers."""

    def __init__(self, db_path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zkr", "serve", "--db", db_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.next_id = 0

    @property
    def stdin(self) -> IO[bytes]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def send_line(self, line: bytes) -> None:
        self.stdin.write(line + b"\n")
        self.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), (line, self.proc.stderr.read() if self.proc.stderr else "")
        value = json.loads(line)
        # compact, sorted keys: byte-identical to re-encoding it that way
        assert (
            line.decode()
            == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
        )
        assert isinstance(value, dict)
        return value

    def call(self, command: str, request: Any) -> dict[str, Any]:
        self.next_id += 1
        line = {"id": self.next_id, "command": command, "request": request}
        self.send_line(json.dumps(line, ensure_ascii=False).encode())
        response = self.read()
        assert response["id"] == self.next_id
        return response

    def ok(self, command: str, request: Any) -> Any:
        response = self.call(command, request)
        assert set(response) == {"id", "ok"}, response
        return response["ok"]

    def close(self) -> int:
        self.stdin.close()
        return self.proc.wait(timeout=60)


@pytest.fixture
def server(db_path: str) -> Any:
    srv = Server(db_path)
    yield srv
    if srv.proc.poll() is None:
        srv.proc.kill()
        srv.proc.wait()
    for stream in (srv.proc.stdout, srv.proc.stderr):
        if stream is not None:
            stream.close()


def _scope(**fields: Any) -> dict[str, Any]:
    return {"tenant_id": "t1", "person_id": "p1", **fields}


def test_answers_match_the_cli_byte_for_byte(server: Server, db_path: str) -> None:
    """Reads and failures through serve and through one-shot CLI calls on the same file give
    the same answers (the JSON value, or the error message)."""
    stored = server.ok("remember", sam_acme())
    requests: list[tuple[str, Any]] = [
        ("search", _scope(query="where does Sam work", limit=5)),
        ("get", _scope(target={"kind": "claim", "id": stored["claim_id"]})),
        ("profiles", _scope(limit=3)),
        ("reviews", _scope()),
        ("export", _scope(export_format=1, high_water_mark=1, limit=5)),
        ("get", _scope(target={"kind": "source", "id": "nope"})),
        ("remember", _scope(kind="conversation", text="   ", captured_at=1, recorded_at=1)),
        ("search", _scope(query="x", limit=-1)),
        ("search", {"tenant_id": "t1"}),
        ("nope", {}),
    ]
    before = dump(db_path)
    for command, request in requests:
        response = server.call(command, request)
        result = cli(db_path, command, request)
        if result.code == 0:
            assert response == {"id": server.next_id, "ok": result.json()}
        else:
            assert response == {"id": server.next_id, "error": result.error()}
    assert dump(db_path) == before
    assert server.close() == 0


@pytest.mark.parametrize(
    ("line", "message", "echoed"),
    [
        (b"not json", "expected ident at line 1 column 2", None),
        (b"[1, 2]", "invalid type: sequence, expected struct ServeRequest", None),
        (b'{"id": 1, "command": "get"', "EOF while parsing an object at line 1 column 26", None),
        (b'{"command": "get", "request": {}}', "missing field `id`", None),
        (
            b'{"id": true, "command": "get", "request": {}}',
            "field `id`: invalid type: boolean `true`, expected a string or integer",
            None,
        ),
        (
            b'{"id": null, "command": "get", "request": {}}',
            "field `id`: invalid type: null, expected a string or integer",
            None,
        ),
        (
            b'{"id": 1.0, "command": "get", "request": {}}',
            "field `id`: invalid type: floating point `1.0`, expected a string or integer",
            None,
        ),
        (
            b'{"id": -0, "command": "get", "request": {}}',
            "field `id`: invalid type: floating point `-0.0`, expected a string or integer",
            None,
        ),
        (
            b'{"id": [1], "command": "get", "request": {}}',
            "field `id`: invalid type: sequence, expected a string or integer",
            None,
        ),
        (
            b'{"id": 9223372036854775808, "command": "get", "request": {}}',
            "field `id`: invalid value: integer `9223372036854775808`, expected a string or an"
            " integer from -9223372036854775808 to 9223372036854775807",
            None,
        ),
        (b'{"id": "a", "request": {}}', "missing field `command`", "a"),
        (b'{"id": 7, "command": "get"}', "missing field `request`", 7),
        (
            b'{"id": 7, "command": 3, "request": {}}',
            "invalid type: integer `3`, expected a string",
            7,
        ),
        (
            b'{"id": 8, "command": "get", "request": []}',
            "invalid type: sequence, expected struct GetRequest",
            8,
        ),
        (b'{"id": 9, "id": 9, "command": "get", "request": {}}', "duplicate field `id`", None),
        (b'\xff{"id": 1}', "invalid UTF-8 in request at byte 0", None),
    ],
)
def test_malformed_lines_get_an_error_line_and_the_server_goes_on(
    server: Server, line: bytes, message: str, echoed: Any
) -> None:
    server.send_line(line)
    response = server.read()
    assert response == {"error": response["error"], "id": echoed}
    assert response["error"].startswith(message.split(" at line")[0]), response
    assert server.ok("remember", sam_acme())["source_id"]
    assert server.close() == 0


@pytest.mark.parametrize(
    "request_id",
    ["", "0", "null", "id", "ok", "error", " ", "é\u2028\u0000😀", 0, -1, 2**63 - 1, -(2**63)],
)
def test_ids_round_trip_exactly(server: Server, request_id: str | int) -> None:
    """Every string (the empty one and the server's own key names included) and every i64 comes
    back as the same JSON value, on an answer and on an error alike."""
    for command, request in (("profiles", {"tenant_id": "t1", "person_id": "p1"}), ("nope", {})):
        line = {"id": request_id, "command": command, "request": request}
        server.send_line(json.dumps(line).encode())  # \u escapes on the way in
        response = server.read()
        assert response["id"] == request_id and type(response["id"]) is type(request_id)
        assert set(response) == ({"id", "ok"} if command == "profiles" else {"error", "id"})
    assert server.close() == 0


def test_blank_lines_are_skipped_and_crlf_is_accepted(server: Server) -> None:
    server.send_line(b"")
    server.send_line(b"   \r")
    server.send_line(
        b'{"id":"w","command":"remember","request":' + json.dumps(sam_acme()).encode() + b"}\r"
    )
    assert set(server.read()) == {"id", "ok"}
    assert server.close() == 0


def test_oversized_lines_are_skipped_without_harm(server: Server, db_path: str) -> None:
    assert server.ok("profiles", _scope()) == []  # the file exists and is migrated
    before = dump(db_path)
    huge = b'{"id": 1, "command": "remember", "request": {"text": "' + b"x" * (2 * LINE_LIMIT)
    server.send_line(huge + b'"}}')
    assert server.read() == {"error": f"request line exceeds {LINE_LIMIT} bytes", "id": None}
    # a line within the line bound whose request is over the CLI's 1 MiB limit
    text = "y" * (REQUEST_LIMIT + 10)
    too_big = _scope(kind="conversation", text=text, captured_at=1, recorded_at=1)
    assert server.call("remember", too_big)["error"] == f"request exceeds {REQUEST_LIMIT} bytes"
    assert dump(db_path) == before
    # the stream is still in step: the next request is answered normally
    assert server.ok("search", _scope(query="anything")) == {
        "gaps": ["no cited memory matched"],
        "items": [],
        "query": "anything",
    }
    # an over-long last line without a newline at end of input is answered too
    server.stdin.write(b"z" * (LINE_LIMIT + 1))
    server.stdin.close()
    assert server.read()["error"] == f"request line exceeds {LINE_LIMIT} bytes"
    assert server.proc.wait(timeout=60) == 0


def test_a_last_line_without_newline_is_answered_at_eof(server: Server) -> None:
    server.stdin.write(
        b'{"id":"last","command":"profiles","request":{"tenant_id":"t","person_id":"p"}}'
    )
    server.stdin.close()
    assert server.read() == {"id": "last", "ok": []}
    assert server.proc.wait(timeout=60) == 0


def test_a_concurrent_cli_writer_is_seen(server: Server, db_path: str) -> None:
    """Writes by other processes on the same file reach the server's next request (lexical and
    dense lanes), while the server keeps writing itself."""
    assert server.ok("remember", sam_acme())
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "zkr", "--db", db_path, "remember"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    for i, proc in enumerate(writers):  # the CLI writers run while the server writes too
        request = _scope(
            kind="conversation", text=f"cli note number{i}", captured_at=i, recorded_at=i
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        server.ok(
            "remember",
            _scope(kind="conversation", text=f"served note {i}", captured_at=i, recorded_at=i),
        )
    for proc in writers:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    for i in range(4):
        items = server.ok("search", _scope(query=f"number{i}"))["items"]
        assert [item["excerpt"] for item in items] == [f"cli note number{i}"]
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 9
    # the dense lane: a vector embedded by a CLI call is scored by the server's next search
    lane = {"model": "m", "version": "1"}
    query = _scope(query="qqq", query_embedding={"vector": [1.0, 0.0], **lane})
    assert server.ok("search", query)["items"] == []  # no word matches, no vector yet
    todo = cli(db_path, "projections", _scope(limit=1, **lane)).json()
    embed = _scope(
        target=todo[0]["input"]["target"],
        embedding={
            "vector": [1.0, 0.0],
            "input_hash": todo[0]["input"]["input_hash"],
            "normalization": "none",
            "distance": "cosine",
            **lane,
        },
    )
    cli(db_path, "embed", embed).json()
    assert len(server.ok("search", query)["items"]) == 1  # found through the new vector
    assert server.close() == 0


def test_eof_answers_everything_sent_and_exits_zero(server: Server, db_path: str) -> None:
    lines = b"".join(
        json.dumps(
            {
                "id": i,
                "command": "remember",
                "request": _scope(
                    kind="conversation", text=f"note {i}", captured_at=i, recorded_at=i
                ),
            }
        ).encode()
        + b"\n"
        for i in range(50)
    )
    out, err = server.proc.communicate(lines, timeout=120)
    assert server.proc.returncode == 0, err
    responses = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in responses] == list(range(50))
    assert sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 50


def test_sigterm_mid_stream_finishes_the_request_in_flight(server: Server, db_path: str) -> None:
    """Every answered request is stored, nothing unanswered is, the file is intact, exit 0."""
    total = 3000

    def feed() -> None:
        try:
            for i in range(total):
                request = _scope(
                    kind="conversation",
                    text=f"stream note {i}",
                    captured_at=i,
                    recorded_at=i,
                    ingestion_key=f"k{i}",
                )
                server.send_line(
                    json.dumps({"id": i, "command": "remember", "request": request}).encode()
                )
        except (BrokenPipeError, ValueError):
            pass  # the server stopped reading: expected after SIGTERM

    writer = threading.Thread(target=feed)
    writer.start()
    answered: dict[int, str] = {}
    while len(answered) < 100:
        response = server.read()
        answered[response["id"]] = response["ok"]["source_id"]
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.stdout is not None
    rest = server.proc.stdout.read()  # until the server closes stdout
    assert rest == b"" or rest.endswith(b"\n")  # no half-written line
    for line in rest.splitlines():
        response = json.loads(line)
        answered[response["id"]] = response["ok"]["source_id"]
    assert server.proc.wait(timeout=60) == 0
    writer.join(timeout=60)
    assert len(answered) < total
    assert sorted(answered) == list(range(len(answered)))  # in order, none skipped
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = dict(conn.execute("SELECT ingestion_key, id FROM sources").fetchall())
    assert stored == {f"k{i}": source_id for i, source_id in answered.items()}
    commits = conn.execute("SELECT COUNT(*) FROM memory_commits").fetchone()[0]
    assert commits == len(answered)


def test_sigterm_while_idle_exits_zero(server: Server) -> None:
    assert server.ok("profiles", _scope()) == []
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("argv", [[], ["--db"], ["--db", "a", "b"], ["--nope", "x"]])
def test_bad_command_lines_are_usage_errors(argv: list[str]) -> None:
    result = cli(None, argv=["serve", *argv])
    assert result.error() == "usage: zkr serve --db PATH"


def test_an_unopenable_file_is_one_error(tmp_path: Path) -> None:
    # a missing directory is created (tests/test_db_directory.py); a directory is no file
    result = cli(None, argv=["serve", "--db", str(tmp_path)])
    assert result.error() == f"unable to open database file: {tmp_path}"


def test_help_lists_the_servers() -> None:
    result = cli(None, argv=["--help"])
    assert result.code == 0
    assert "zkr serve --db PATH" in result.stdout
    assert "zkr mcp --db PATH" in result.stdout


def test_serve_help_states_the_framing() -> None:
    result = cli(None, argv=["serve", "--help"])
    assert result.code == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: zkr serve --db PATH\n")
    assert f"a line at most {LINE_LIMIT}" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_file_deleted_or_replaced_under_the_server_is_refused(
    server: Server, db_path: str, tmp_path: Path, how: str
) -> None:
    """SQLite would go on writing to the old, unlinked inode: the server answers the next
    request with an error instead (never an acknowledged write that went nowhere), says so on
    stderr and exits 1; the file now at the path is untouched."""
    assert server.ok("remember", sam_acme())["source_id"]
    for suffix in ("", "-wal", "-shm"):  # a whole SQLite file goes (the old WAL with it)
        Path(db_path + suffix).unlink(missing_ok=True)
    if how == "replaced":
        other = str(tmp_path / "other.db")
        assert cli(other, "remember", {**sam_acme(), "text": "Kim lives in Porto"}).json()
        before = dump(other)
        Path(other).replace(db_path)
    write = {**sam_acme(), "text": "Sam moved to Lisbon", "ingestion_key": "late"}
    response = server.call("remember", write)
    message = (
        f"database file {Path(db_path).resolve()} was {how} while zkr serve had it open; nothing"
        " more is read or written through the old file: restart zkr serve"
    )
    assert response == {"error": message, "id": server.next_id}
    assert server.proc.wait(timeout=30) == 1
    assert server.proc.stderr is not None
    assert json.loads(server.proc.stderr.read()) == {"error": message}
    if how == "deleted":
        assert not Path(db_path).exists()
    else:
        assert dump(db_path) == before  # the file now at the path never saw the write


def test_a_write_ahead_log_deleted_under_the_server_is_refused(
    server: Server, db_path: str
) -> None:
    """``rm PATH-wal`` alone: the server would commit to the unlinked log (acknowledged, unseen
    by other processes, gone when the server is killed). It refuses the next request instead
    and exits 1, and the late write is nowhere (newcomer finding)."""
    assert server.ok("remember", sam_acme())["source_id"]
    Path(db_path + "-wal").unlink()
    write = {**sam_acme(), "text": "Sam moved to Lisbon", "ingestion_key": "late"}
    response = server.call("remember", write)
    message = (
        f"write-ahead log {Path(db_path).resolve()}-wal was deleted while zkr serve had it"
        " open; nothing more is read or written through the old file: restart zkr serve"
    )
    assert response == {"error": message, "id": server.next_id}
    assert server.proc.wait(timeout=30) == 1
    found = cli(db_path, "search", {"tenant_id": T, "person_id": P, "query": "Lisbon"}).json()
    assert found["items"] == []


def test_a_shared_memory_index_deleted_under_the_server_is_refused(
    server: Server, db_path: str
) -> None:
    """``rm PATH-shm``: a new process builds a second index of the same log, and the server's
    writes (or its closing checkpoint through the old index) overwrote that process's commits.
    The server refuses its next request and exits 1 without closing the connection, and both
    the server's earlier write and the other process's write stand (newcomer finding)."""
    assert server.ok("remember", sam_acme())["source_id"]
    Path(db_path + "-shm").unlink()
    other = {**sam_acme(), "text": "Kim lives in Porto", "claim": None}
    assert cli(db_path, "remember", other).json()["source_id"]
    response = server.call("remember", {**sam_acme(), "text": "Sam moved to Lisbon"})
    assert "shared-memory index" in response["error"] and response["id"] == server.next_id
    assert server.proc.wait(timeout=30) == 1
    for query, found in (("Porto", 1), ("Acme", 1), ("Lisbon", 0)):
        pack = cli(db_path, "search", {"tenant_id": T, "person_id": P, "query": query}).json()
        assert len(pack["items"]) == found, query


def test_the_file_watch_checks_before_and_after_a_request(db_path: str) -> None:
    """In process: :class:`FileWatch` refuses a request once the file is gone, reads included,
    and keeps refusing (a new file at the path does not bring the old connection back)."""
    with MemoryDb.open(db_path) as database:
        watch = FileWatch(db_path)
        line = json.dumps({"id": "r", "command": "remember", "request": sam_acme()}).encode()
        assert json.loads(answer(database, line, watch))["ok"]["source_id"]
        Path(db_path).unlink()
        lost = json.loads(answer(database, line, watch))
        assert lost["id"] == "r" and "was deleted while zkr serve had it open" in lost["error"]
        sqlite3.connect(db_path).close()  # something recreates the path: still refused
        search = {"tenant_id": "t1", "person_id": "p1", "query": "Sam"}
        again = json.loads(
            answer(
                database,
                json.dumps({"id": 2, "command": "search", "request": search}).encode(),
                watch,
            )
        )
        assert again == {"error": lost["error"], "id": 2}
    assert FileWatch("postgresql://zkr@127.0.0.1/x").problem() is None  # not a file: unwatched


@pytest.mark.parametrize("how", ["shm deleted", "wal replaced", "file replaced", "dir renamed"])
def test_the_file_watch_trusts_a_settled_directory_and_sees_every_change_in_it(
    tmp_path: Path, how: str
) -> None:
    """Once the directory holding the file has not changed for ``SETTLED_NS`` (50 ms here as in
    the server), a check is one ``stat`` of the directory, not a full check of the three files;
    any deletion or replacement in it (or a rename of the directory) moves its stamp, so the
    next check is a full one and reports the change."""
    assert servefile.SETTLED_NS == 50_000_000
    folder = tmp_path / "store"
    folder.mkdir()
    db_path = str(folder / "m.db")
    with MemoryDb.open(db_path) as database:
        line = json.dumps({"id": "r", "command": "remember", "request": sam_acme()}).encode()
        assert json.loads(answer(database, line))["ok"]["source_id"]  # -wal and -shm exist
        watch = FileWatch(db_path)
        time.sleep(0.2)
        assert watch.problem() is None and watch.full_checks == 1  # settled: the stamp is kept
        for _ in range(3):
            assert json.loads(answer(database, line, watch))["ok"]["source_id"]
        assert watch.full_checks == 1  # six checks, each one stat of the directory
        if how == "shm deleted":
            os.unlink(db_path + "-shm")
        elif how == "wal replaced":
            shutil.copyfile(db_path + "-wal", db_path + "-wal.new")
            os.replace(db_path + "-wal.new", db_path + "-wal")
        elif how == "file replaced":
            sqlite3.connect(str(folder / "other.db")).close()
            os.replace(folder / "other.db", db_path)
        else:
            folder.rename(tmp_path / "moved")
        lost = json.loads(answer(database, line, watch))
        assert watch.full_checks == 2 and lost["id"] == "r"
        what = {"shm deleted": "deleted", "dir renamed": "deleted"}.get(how, "replaced")
        assert f"was {what} while zkr serve had it open" in lost["error"]
        if how == "dir renamed":
            folder = tmp_path / "moved"
        # the connection of a lost file is left open by the server; here the test ends it
    symlink = tmp_path / "link.db"
    symlink.symlink_to(folder / "m.db")
    linked = FileWatch(str(symlink))
    time.sleep(0.1)
    for _ in range(3):
        linked.problem()
    assert linked.full_checks == 3  # a symbolic link's target may move without its directory


def test_a_directory_with_whole_second_times_must_settle_for_three_seconds() -> None:
    """The file watch's wait before it trusts a directory's change time is 50 ms for fine
    timestamps and three timestamp units for coarse ones (1 s or 2 s: whole seconds)."""
    assert servefile.settle_time(1_733_000_000_123_456_789) == 50_000_000
    assert servefile.settle_time(1_733_000_000_120_000_000) == 50_000_000
    assert servefile.settle_time(1_733_000_001_000_000_000) == 3_000_000_000
    assert servefile.settle_time(1_733_000_002_000_000_000) == 3_000_000_000


@pytest.mark.parametrize("server_command", ["serve", "mcp"])
@pytest.mark.parametrize("path", ["", ":memory:", "file::memory:", "file:x?mode=memory"])
def test_a_database_that_vanishes_at_exit_is_refused_by_the_servers(
    server_command: str, path: str
) -> None:
    """``zkr serve|mcp --db ""`` (or ``:memory:``) would acknowledge every write and keep none
    once the host restarts it: refused as the one-shot CLI refuses it."""
    result = cli(None, argv=[server_command, "--db", path])
    assert result.code == 1 and result.stdout == ""
    assert result.error() == (
        f"--db {json.dumps(path)} is a database that vanishes when this process ends;"
        " give a file path or a postgresql:// URL"
    )


@pytest.mark.parametrize("server_command", ["serve", "mcp"])
@pytest.mark.parametrize("path", [" ", "\t\n", "file:%20"])
def test_a_blank_db_path_is_refused_by_the_servers(
    server_command: str, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``zkr serve|mcp --db ' '`` would create a file named by whitespace: refused as the
    one-shot CLI refuses it (zkr.dbpath.refuse_throwaway), nothing created."""
    monkeypatch.chdir(tmp_path)
    result = cli(None, argv=[server_command, "--db", path])
    assert result.code == 1 and result.stdout == ""
    assert result.error() == (
        f"--db {json.dumps(path)} is blank; give a file path or a postgresql:// URL"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_server_imports_numpy_at_start_not_on_a_search(server: Server) -> None:
    """numpy (the in-memory lexical index from a connection's second search on) is loaded
    before the first request is answered, so no search pays its import (0.2–0.4 s)."""
    server.send_line(b"not json")
    assert "error" in server.read()
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text().splitlines()
    assert any("/numpy/" in line.split()[-1] for line in maps if len(line.split()) > 5)
    assert server.close() == 0


def test_the_log_size_read_from_the_index_is_sqlites(db_path: str) -> None:
    """:meth:`IdleCheckpoint.pending_frames` (the wal-index header) counts the frames SQLite
    itself reports as not yet checkpointed, and 0 once they are; the server connection's
    own checkpoint moves to :data:`zkr.serve.BACKSTOP_FRAMES`."""
    database = MemoryDb.open(db_path)
    checkpoints = IdleCheckpoint.start(database, FileWatch(db_path))
    assert checkpoints is not None
    try:
        assert database.conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (BACKSTOP_FRAMES,)
        for i in range(3):
            line = {"id": i, "command": "remember", "request": {**sam_acme(), "text": f"{i}"}}
            assert "ok" in json.loads(answer(database, json.dumps(line).encode()))
        pending = checkpoints.pending_frames()
        busy, log, done = database.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, done) == (0, log) and pending == log > 0
        assert checkpoints.pending_frames() == 0
        assert "ok" in json.loads(answer(database, json.dumps(line).encode()))
        assert checkpoints.pending_frames() > 0
        database.checkpoint()  # what the servers run between requests
        assert checkpoints.pending_frames() == 0
    finally:
        database.close()
        checkpoints.close()
    assert IdleCheckpoint.start(database, FileWatch("postgresql://zkr@127.0.0.1/x")) is None


def test_the_server_checkpoints_after_the_response_that_filled_the_log(
    server: Server, db_path: str
) -> None:
    """SQLite's own checkpoint ran inside the commit that took the log past 1000 frames; the
    server takes it after that request's response (the next request, here a ``locator``, is
    answered once it is done), so the log never holds 1000 frames between requests although
    SQLite's backstop is at 2000, and every write is in the file afterwards."""
    server.ok("remember", sam_acme())  # the server has the file (and PATH-shm) open
    written, log = 1, LogWatch(db_path)
    try:
        while log.checkpoints < 2:
            assert written < 1000, "the log was never checkpointed"
            server.ok("remember", {**sam_acme(), "text": f"Sam met Kim on day {written}"})
            written += 1
            server.ok("locator", {"tenant_id": T, "person_id": P, "evidence_id": "none"})
            log.see()
    finally:
        log.close()
    assert 0 < log.largest < IDLE_CHECKPOINT_FRAMES
    assert server.close() == 0
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT count(*) FROM sources").fetchone() == (written,)
    finally:
        conn.close()
