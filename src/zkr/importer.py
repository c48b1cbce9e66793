"""``zkr import``: bring chat history in (a ChatGPT or Claude export, OpenAI-style chat
messages, or a JSONL of turns).

    zkr import --db PATH --tenant T --person P [--format auto|chatgpt|claude|openai|jsonl]
               [--time WHEN] FILE

FILE ``-`` reads standard input. The export's ZIP archive, as ChatGPT and Claude hand it out,
may be given as it is: its one ``conversations.json`` is read; a gzip file is decompressed.

Every turn becomes one ``remember`` (kind ``conversation``, text ``ROLE: TEXT``) with an
ingestion key derived from the export's own ids (see Keys), and ``captured_at = recorded_at`` =
the turn's time, so a second import of the same file replays every key and changes nothing: the
database is the same. Turns are stored in batches through ``remember_many(outcomes=True)``: a
turn whose memory was deleted since is skipped and counted (``deleted``), never re-ingested; a
bad turn (in JSONL, a bad line) fails alone (``failed``, with the first ten messages, in file
order, in ``errors``, each with the turn's ``key`` when it has one and, in JSONL, its
``line``). On a terminal a progress bar (tqdm) runs on stderr. The summary is one JSON
object on stdout; a bad command line, a missing, unreadable or non-UTF-8 file, a device
(``/dev/zero``; a terminal on ``-`` is read), or a file without the shape of the chosen format
is one ``{"error"}`` line on stderr and exit status 1, as for any CLI call, and nothing is
stored (a file too large for memory: ``out of memory: FILE is too large ...``). A missing
directory of the database is created (``mkdir -p``, mode 0700) once FILE was read.

Times: a message's own time is used when it has one (``0`` included); a message without one
(missing or ``null``) takes its conversation's (chat exports only); a turn with neither is
skipped and counted ``undated``, unless ``--time WHEN`` is given (whole Unix seconds or ISO 8601,
UTC without an offset): then it is stored at WHEN. A file none of whose turns has a time is
refused without ``--time`` (``no turn of FILE has a time: pass --time WHEN ...``; OpenAI-style
messages usually carry none). WHEN is no part of any key: pass the same WHEN on a re-import
(another one fails those turns as conflicts). The file's modification time is never used (a copy
changes it, and a re-import must send the same time). A time that is there but unreadable
(``"soon"``, ``""``, ``true``, ``Infinity``, past 64 bits) fails that turn alone, never falls
back; in a chat export an unreadable conversation time fails only the messages without a time
of their own.

Formats (``auto``, the default, looks at the file: a JSON array with ``mapping`` is chatgpt, with
``chat_messages`` claude, with ``role`` openai; an object whose first line (or whole text) holds
``messages`` and no ``text``/``content`` openai; anything else not starting with ``[`` (or whose
first line is a whole JSON value with more lines after it) jsonl):

* ``chatgpt`` — ``conversations.json`` of a ChatGPT data export: a list of conversations with a
  ``mapping`` of message nodes; the thread ending at ``current_node`` is imported (edited-away
  branches are not; without a ``current_node`` in the mapping, the thread ending at the newest
  leaf), user and assistant text parts and voice transcripts only. Times are float Unix seconds
  (``create_time``), truncated to whole seconds.
* ``claude`` — ``conversations.json`` of a Claude export: a list of conversations with
  ``chat_messages`` (``sender`` human/assistant, ``text`` or text ``content`` blocks, ISO 8601
  ``created_at``, fractions of a second truncated).
* ``openai`` — OpenAI-style chat messages: a JSON array of ``{"role", "content"}`` objects, an
  object with ``messages`` (optional ``id``/``conversation_id``), an array of such objects, or
  one per line (a fine-tuning file; a line that is no such object fails alone). User and
  assistant messages only (system, developer, tool and function messages are left out);
  ``content`` a string or a list of ``text``/``input_text``/``output_text`` parts (joined by
  newlines; images and other parts add no line), ``null`` empty; optional ``id`` and a time as
  ``created_at``/``timestamp`` on the message or its conversation (Unix seconds or ISO 8601).
* ``jsonl`` — one JSON object per line: ``text`` (or ``content``, a string), optional ``role``
  (a string), ``conversation_id``, ``id``, and a time as ``created_at``/``timestamp`` (whole
  Unix seconds or an ISO 8601 string, UTC when it has no offset; ``1.7`` fails that line). A
  line that is not such an object fails alone; a file with no JSON object line at all is
  refused.

A chatgpt or claude file must be a JSON array of conversations (or one conversation) of which at
least one has the format's ``mapping`` / ``chat_messages``; otherwise (say ``--format claude`` on
a ChatGPT export) the import is refused, naming the format expected.

Keys (FMT is chatgpt, claude, openai or jsonl; CONV the conversation's id, ID the message's:
ChatGPT's ``conversation_id``/``id`` and message ``id``, Claude's ``uuid``s, OpenAI-style and
JSONL's ``conversation_id``/``id``; a ``null`` or missing one is none, as is ``""`` in a chat
export):

* ``FMT:CONV:ID`` when CONV is none or a string without ``:`` and ID is a string (no CONV:
  ``FMT::ID``) — the common case, and the key of every release;
* else ``FMT`` + the compact JSON array ``[CONV, ID]``, so no two distinct turns share a key:
  ``jsonl["a:b","c"]`` is not ``jsonl:a:b:c`` (conversation ``a``, id ``b:c``), ``jsonl["s",1]``
  (an integer id) is not ``jsonl:s:1``, ``jsonl["","x"]`` (conversation ``""``) is not
  ``jsonl::x``;
* a chat message without an id: ``FMT[CONV,null,DIGEST,N]``, DIGEST of its role, text and time,
  N the number of such messages of the conversation with the same DIGEST before it (two
  identical messages are two turns; openai: of every conversation without an id, counted
  together, CONV ``null``);
* a JSONL line without an ``id``: ``jsonl:`` + 32 hex digits of the SHA-256 of its
  conversation, role, text and time (and, for the second and later of identical lines, its
  count: each line is a turn).

A lone surrogate in an id (``\\ud83d``: a string cut inside a surrogate pair) is written in the
key as that escape, so the turn is stored and replays; in a turn's text it fails that turn alone.

Imports before these keys gave the turns of the second and third cases ``FMT:CONV:ID``
(``FMT:CONV:`` without an id), shared by distinct turns. Such a turn is sent under that old key when
nothing is stored under its own key and the database holds its very text and time there and no other
turn of the file owns it, or holds a deleted memory there and the turn is the file's first with that
key (it stays deleted), so files imported before replay instead of being stored twice; the turns
those imports lost to a shared key are stored now, under their own keys.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from zkr.codec import (
    cli_dumps,
    escape_surrogates,
    require_utf8,
)
from zkr.dbpath import prepare_own, refuse_throwaway
from zkr.errors import RequestError, ZkrError
from zkr.importfile import display_name, read_text
from zkr.importkeys import choose_keys
from zkr.importopenai import openai_turns
from zkr.importturns import (
    Turn,
    chatgpt_turns,
    claude_turns,
    jsonl_turns,
    load_json,
    read_time,
    whole_json,
)
from zkr.output import respond

if TYPE_CHECKING:
    from zkr.model import RememberRequest

FORMATS = ("auto", "chatgpt", "claude", "openai", "jsonl")
BATCH = 500
MAX_REPORTED_ERRORS = 10
USAGE = "usage: zkr import --db PATH --tenant T --person P [--format FORMAT] [--time WHEN] FILE"


# --------------------------------------------------------------------------- formats


SHAPES = {
    "chatgpt": ("mapping", "a ChatGPT export: a JSON array of conversations with a `mapping`"),
    "claude": (
        "chat_messages",
        "a Claude export: a JSON array of conversations with `chat_messages`",
    ),
}


def _check_shape(fmt: str, data: Any) -> None:
    """Refuse a chatgpt/claude file none of whose conversations has that format's shape."""
    field, expected = SHAPES[fmt]
    conversations = [data] if isinstance(data, dict) else data
    if isinstance(conversations, list) and (
        not conversations or any(isinstance(c, dict) and field in c for c in conversations)
    ):
        return
    raise RequestError(f"not a {fmt} file: expected {expected} (or pass the right --format)")


def detect_text(text: str) -> str:
    """Guess the format of a file's text from its first 64 KiB (see the module doc); an object
    split over several lines is parsed whole to see whether it holds ``messages``."""
    head = text[:65536].lstrip()
    first, _, rest = head.partition("\n")
    if head.startswith("{"):
        try:
            item = json.loads(first if whole_json(first) else text)
        except (ValueError, RecursionError):
            return "jsonl"  # (its lines fail alone, as before)
        is_conversation = isinstance(item, dict) and isinstance(item.get("messages"), list)
        if is_conversation and item.get("text") is None and item.get("content") is None:
            return "openai"
        return "jsonl"
    if not head.startswith("["):
        return "jsonl"
    if '"mapping"' in head:
        return "chatgpt"
    if '"chat_messages"' in head:
        return "claude"
    if rest.strip() and whole_json(first):  # a JSON first line with more lines: JSONL
        return "jsonl"
    if '"role"' in head:
        return "openai"
    raise RequestError(
        "cannot tell the file's format; pass --format chatgpt, claude, openai or jsonl"
    )


def read_turns(file: str, fmt: str) -> tuple[str, list[Turn]]:
    """The format (``auto`` resolved) and every turn of ``file``, in file order.

    Raises ``RequestError`` for an unreadable file or one without the shape of the format.
    """
    text = read_text(file)
    if fmt == "auto":
        fmt = detect_text(text)
    if fmt == "jsonl":
        turns = list(jsonl_turns(text.split("\n")))  # not splitlines: U+2028 is JSON text
        if turns and all(t.error for t in turns):
            raise RequestError(
                "not a jsonl file: expected one JSON object per line with a `text`"
                f" (line {turns[0].line}: {turns[0].error}; or pass the right --format)"
            )
        return fmt, turns
    name = display_name(file)
    if fmt == "openai":
        return fmt, openai_turns(text, name)
    data = load_json(text, name, SHAPES[fmt][1])
    _check_shape(fmt, data)
    return fmt, list(chatgpt_turns(data) if fmt == "chatgpt" else claude_turns(data))


# --------------------------------------------------------------------------- storing


def import_turns(
    db: Any,
    tenant_id: str,
    person_id: str,
    turns: list[Turn],
    progress: Any = None,
    default_at: int | None = None,
) -> dict[str, Any]:
    """Store ``turns`` into the (tenant, person) scope of ``db``; returns the summary counts.

    ``progress``, when given, is called with the number of turns just handled. The key of each
    turn: :func:`choose_keys`. ``default_at`` (``--time``, Unix seconds) is the time of a turn
    without one; it is not part of any key.
    """
    from zkr.model import RememberRequest, SourceKind

    counts = {"stored": 0, "replayed": 0, "deleted": 0, "failed": 0, "empty": 0, "undated": 0}
    errors: list[tuple[int, dict[str, Any]]] = []  # (turn index, error)
    requests: dict[int, RememberRequest] = {}  # the turns sent to remember, by index
    for index, turn in enumerate(turns):
        at = turn.at if turn.at is not None else default_at
        if turn.error is None and turn.text and at is not None:
            text = f"{turn.role}: {turn.text}"
            requests[index] = RememberRequest(
                tenant_id, person_id, SourceKind.CONVERSATION, text, at, at, turn.key
            )
    # an id cut inside a surrogate pair (a JavaScript exporter) still gives a storable, stable
    # key: the surrogate as its \uXXXX escape (no release stored such a key: no alias needed)
    named = {i: (escape_surrogates(turns[i].key), turns[i].alias) for i in requests}
    keys = choose_keys(db, requests, named)
    batch: list[tuple[int, RememberRequest]] = []

    def fail(index: int, message: str, key: str) -> None:
        counts["failed"] += 1
        # a lone surrogate from the file (a time, an id) must not make the summary unprintable
        error: dict[str, Any] = {"error": escape_surrogates(message)}
        if key:
            error["key"] = escape_surrogates(key)
        line = turns[index].line
        if line is not None:
            error["line"] = line
        errors.append((index, error))

    def flush() -> None:
        outcomes = db.remember_many([req for _, req in batch], outcomes=True)
        for (index, req), outcome in zip(batch, outcomes, strict=True):
            if outcome.status == "failed":
                fail(index, outcome.error or "", req.ingestion_key or "")
            else:
                counts[outcome.status] += 1
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for index, turn in enumerate(turns):
        if index in requests:
            batch.append((index, requests[index]._replace(ingestion_key=keys[index])))
            if len(batch) >= BATCH:
                flush()
            continue
        if turn.error is not None:
            fail(index, turn.error, turn.key)
        else:
            counts["empty" if not turn.text else "undated"] += 1
        if progress is not None:
            progress(1)
    if batch:
        flush()
    errors.sort(key=lambda e: e[0])  # file order: a batch's failures come after later turns'
    return {
        "turns": len(turns),
        **counts,
        "errors": [error for _, error in errors[:MAX_REPORTED_ERRORS]],
    }


class Args(NamedTuple):
    """``zkr import``'s command line: ``--time`` (``default_at``) as Unix seconds or ``None``."""

    db: str
    tenant: str
    person: str
    fmt: str
    file: str
    default_at: int | None


def _parse_args(argv: list[str]) -> Args:
    options: dict[str, str] = {"--format": "auto"}
    files: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--db", "--tenant", "--person", "--format", "--time"):
            if not rest:
                raise RequestError(USAGE)
            options[arg] = rest.pop(0)
        elif arg.startswith("--"):
            raise RequestError(USAGE)
        else:
            files.append(arg)
    if len(files) != 1 or not all(k in options for k in ("--db", "--tenant", "--person")):
        raise RequestError(USAGE)
    if options["--format"] not in FORMATS:
        raise RequestError(f"--format must be one of {', '.join(FORMATS)}")
    default_at = None if "--time" not in options else _cli_time(options["--time"])
    return Args(
        options["--db"],
        options["--tenant"],
        options["--person"],
        options["--format"],
        files[0],
        default_at,
    )


def _cli_time(value: str) -> int:
    """``--time WHEN``: whole Unix seconds (digits, optional sign) or an ISO 8601 time (UTC
    without an offset); ``RequestError`` for anything else."""
    text = value.strip()
    number = text.lstrip("+-")
    try:
        at = read_time(
            "--time", int(text) if number.isascii() and number.isdigit() else value, whole=True
        )
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    if at is None:  # (never: a string is no null)
        raise RequestError("--time must not be empty")
    return at


def require_a_time(turns: list[Turn], default_at: int | None, file: str) -> None:
    """Refuse, before anything is stored, a file none of whose turns has a time when ``--time``
    is not given (OpenAI-style messages usually carry none): every turn would be skipped as
    ``undated``. A file with some dated turns imports those and counts the others."""
    if default_at is not None:
        return
    candidates = [t for t in turns if t.error is None and t.text]
    if candidates and all(t.at is None for t in candidates):
        raise RequestError(
            f"no turn of {display_name(file)} has a time: pass --time WHEN (Unix seconds or"
            " ISO 8601), the time to store them at (the same WHEN again on a re-import)"
        )


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``zkr import ...`` (see the module doc); returns the exit status."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    if argv in (["--help"], ["-h"], ["help"]):
        from zkr.clihelp import plain_text

        return respond(out, err, plain_text(__doc__ or ""))  # the text of `zkr help import`
    from zkr.memory import MemoryDb
    from zkr.text import require_scope

    file = ""
    try:
        path, tenant, person, fmt, file, default_at = _parse_args(argv)
        refuse_throwaway(path)
        require_scope(tenant, person)
        require_utf8(tenant, "--tenant")
        require_utf8(person, "--person")
        fmt, turns = read_turns(file, fmt)
        require_a_time(turns, default_at, file)
        prepare_own(path)  # its directory is made only once the file was read
        with MemoryDb.open(path) as db:
            bar = None
            if err.isatty():
                from tqdm import tqdm

                bar = tqdm(total=len(turns), unit="turn", file=err, dynamic_ncols=True)
            try:
                summary = import_turns(
                    db, tenant, person, turns, None if bar is None else bar.update, default_at
                )
            finally:
                if bar is not None:
                    bar.close()
    except ZkrError as exc:
        err.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    except MemoryError:  # a file (or pipe) larger than memory: say so, not `internal error`
        message = (
            f"out of memory: {display_name(file)} is too large to import at once"
            " (split it; turns already stored stay, and a second import replays them)"
        )
        err.write(cli_dumps({"error": message}) + "\n")
        return 1
    # the turns are stored: a stdout that fails is reported as such (zkr.output), and importing
    # the file again replays them
    return respond(out, err, cli_dumps({"format": fmt, **summary}) + "\n")
