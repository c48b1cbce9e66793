"""``embedconfig.configured`` keeps its answer per change mark on a long-lived connection
(a search reads one ``PRAGMA`` instead of failing to prepare a read of a missing table): a
record or a removal by another connection, or by this one, is seen by the next call."""

from __future__ import annotations

from pathlib import Path

from zkr.store import embedconfig
from zkr.store.db import connect, read_tx, write_tx

CONFIG = embedconfig.EmbedderConfig("m", "v1", 4, "m@v1")


def test_a_record_or_removal_by_anyone_is_seen_next(tmp_path: Path) -> None:
    path = str(tmp_path / "kept.db")
    server, other = connect(path), connect(path)
    assert embedconfig.configured(server) is None
    assert embedconfig.configured(server) is None  # (kept)
    with write_tx(other):
        embedconfig.record(other, CONFIG)
    assert embedconfig.configured(server) == CONFIG  # another connection's commit
    with write_tx(other):
        embedconfig.record(other, CONFIG._replace(version="v2"))
    assert embedconfig.configured(server) == CONFIG._replace(version="v2")
    with write_tx(server):
        assert embedconfig.forget(server)
    assert embedconfig.configured(server) is None  # this connection's own commit
    assert embedconfig.configured(other) is None
    with read_tx(server):  # inside a transaction: read, not kept
        assert embedconfig.configured(server) is None
    server.close()
    other.close()
