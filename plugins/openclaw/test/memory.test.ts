import { describe, expect, test } from "bun:test";

import {
  INVALID_PATH_MESSAGE,
  POSITIVE_INTEGERS_MESSAGE,
  ZkrMemoryManager,
  toSearchResult,
  type ZkrItem,
} from "../memory.ts";
import { ZKR_COMMAND_FAILED, ZkrCommandError } from "../runner.ts";
import { fakeRunner, rejection } from "./helpers.ts";

const SCOPE = { tenant: "openclaw", person: "agent-a" };

function item(kind: string, id: string, points: number, excerpt: string, evidence: string[] = [`e-${id}`]) {
  return {
    evidence_ids: evidence,
    excerpt,
    memory: { id, kind: kind as ZkrItem["memory"]["kind"] },
    relevance_basis_points: points,
  };
}

function managerWith(handler: Parameters<typeof fakeRunner>[0]) {
  const { runner, calls } = fakeRunner(handler);
  return { manager: new ZkrMemoryManager(runner, SCOPE, "/tmp/unused.db"), calls };
}

describe("search mapping", () => {
  test("minScore 0.5 over a 9000-point claim yields zkr://claim/c-1, score 0.9, citation e-1; reading returns the excerpt", async () => {
    const { manager, calls } = managerWith((operation) =>
      operation === "search"
        ? { gaps: [], items: [item("claim", "c-1", 9000, "Sam employer Acme", ["e-1"])], query: "Acme" }
        : item("claim", "c-1", 10_000, "Sam employer Acme", ["e-1"]),
    );
    const hits = await manager.search("Acme", { minScore: 0.5 });
    expect(hits).toEqual([
      {
        path: "zkr://claim/c-1",
        startLine: 1,
        endLine: 1,
        score: 0.9,
        snippet: "Sam employer Acme",
        source: "memory",
        citation: "e-1",
      },
    ]);
    const read = await manager.readFile({ relPath: hits[0]!.path });
    expect(read).toEqual({
      status: "ok",
      text: "Sam employer Acme",
      path: "zkr://claim/c-1",
      from: 1,
      lines: 1,
      truncated: false,
    });
    expect(calls[1]).toEqual({
      operation: "get",
      input: { tenant_id: "openclaw", person_id: "agent-a", target: { kind: "claim", id: "c-1" } },
      signal: undefined,
    });
  });

  test("search sends the scope, the query and maxResults (default 10) as limit", async () => {
    const { manager, calls } = managerWith(() => ({
      gaps: ["no cited memory matched"],
      items: [],
      query: "x",
    }));
    expect(await manager.search("x")).toEqual([]);
    await manager.search("x", { maxResults: 3 });
    await manager.search("x", { maxResults: 500 });
    expect(calls.map((call) => call.input)).toEqual([
      { tenant_id: "openclaw", person_id: "agent-a", query: "x", limit: 10 },
      { tenant_id: "openclaw", person_id: "agent-a", query: "x", limit: 3 },
      { tenant_id: "openclaw", person_id: "agent-a", query: "x", limit: 100 },
    ]);
  });

  test("citations join evidence ids with ', ' and endLine counts excerpt lines", () => {
    expect(toSearchResult(item("source", "s-1", 1234, "a\r\nb\nc", ["e-1", "e-2"]))).toEqual({
      path: "zkr://source/s-1",
      startLine: 1,
      endLine: 3,
      score: 0.1234,
      snippet: "a\r\nb\nc",
      source: "memory",
      citation: "e-1, e-2",
    });
  });

  test("minScore filters before the cut to maxResults", async () => {
    const items = [
      item("claim", "a", 9500, "a"),
      item("claim", "b", 3000, "b"),
      item("claim", "c", 2000, "c"),
      item("claim", "d", 8000, "d"),
      item("claim", "e", 7000, "e"),
      item("claim", "f", 6000, "f"),
    ];
    const { manager, calls } = managerWith((_op, input) => ({
      items: items.slice(0, input.limit as number),
    }));
    const hits = await manager.search("q", { maxResults: 3, minScore: 0.5 });
    expect(hits.map((hit) => hit.path)).toEqual(["zkr://claim/a", "zkr://claim/d", "zkr://claim/e"]);
    expect(calls[0]!.input.limit).toBe(100);
  });

  test("without minScore, hits under the default floor (0.15) are dropped; minScore 0 keeps them", async () => {
    const items = [
      item("claim", "a", 9500, "a"),
      item("claim", "b", 1499, "b"),
      item("claim", "c", 1500, "c"),
    ];
    const { manager, calls } = managerWith(() => ({ items }));
    expect((await manager.search("q")).map((hit) => hit.path)).toEqual(["zkr://claim/a", "zkr://claim/c"]);
    expect(calls[0]!.input.limit).toBe(10);
    expect(await manager.search("q", { minScore: 0 })).toHaveLength(3);
  });

  test("blank queries and non-memory sources return nothing without running the CLI", async () => {
    const { manager, calls } = managerWith(() => ({ items: [] }));
    expect(await manager.search("   ")).toEqual([]);
    expect(await manager.search("x", { sources: ["sessions"] })).toEqual([]);
    expect(calls).toHaveLength(0);
  });

  test("an already aborted signal throws at once; a live one is passed to the runner", async () => {
    const { manager, calls } = managerWith(() => ({ items: [] }));
    const aborted = new AbortController();
    aborted.abort();
    const error = await rejection(manager.search("x", { signal: aborted.signal }));
    expect(error.message).toBe(ZKR_COMMAND_FAILED);
    expect(calls).toHaveLength(0);
    const live = new AbortController();
    await manager.search("x", { signal: live.signal });
    expect(calls[0]!.signal).toBe(live.signal);
  });

  test("output that breaks the CLI contract is a redacted failure", async () => {
    for (const output of [
      null,
      [],
      { items: "nope" },
      { items: [{ excerpt: 1 }] },
      { items: [item("profile", "x", 1, "e")] },
      { items: [item("claim", "x", 10_001, "e")] },
    ]) {
      const { manager } = managerWith(() => output);
      const error = await rejection(manager.search("x"));
      expect(error).toBeInstanceOf(ZkrCommandError);
      expect(error.message).toBe(ZKR_COMMAND_FAILED);
    }
  });
});

describe("readFile", () => {
  const excerpt = ["one", "two", "three", "four", "five"].join("\r\n");

  test("from: 0 rejects with a positive-integers error before anything runs", async () => {
    const { manager, calls } = managerWith(() => item("source", "s", 10_000, excerpt));
    for (const params of [{ from: 0 }, { lines: 0 }, { from: 1.5 }, { lines: -2 }]) {
      const error = await rejection(manager.readFile({ relPath: "not a path", ...params }));
      expect(error.message).toBe(POSITIVE_INTEGERS_MESSAGE);
    }
    expect(calls).toHaveLength(0);
  });

  test("only zkr://source|evidence|claim/<id> paths are accepted", async () => {
    const { manager, calls } = managerWith(() => item("source", "s", 10_000, excerpt));
    for (const relPath of [
      "zkr://profile/x",
      "zkr://claim/",
      "zkr://claim/a/b",
      "file:///etc/passwd",
      "memory/2026-01-01.md",
      "zkr://claim/a b",
    ]) {
      const error = await rejection(manager.readFile({ relPath }));
      expect(error.message).toBe(INVALID_PATH_MESSAGE);
    }
    expect(calls).toHaveLength(0);
    for (const kind of ["source", "evidence", "claim"]) {
      await manager.readFile({ relPath: `zkr://${kind}/id-1` });
    }
    expect(calls.map((call) => call.input.target)).toEqual([
      { kind: "source", id: "id-1" },
      { kind: "evidence", id: "id-1" },
      { kind: "claim", id: "id-1" },
    ]);
  });

  test("slices the excerpt's lines and reports truncation", async () => {
    const { manager } = managerWith(() => item("source", "s", 10_000, excerpt));
    const path = "zkr://source/s";
    expect(await manager.readFile({ relPath: path })).toEqual({
      status: "ok",
      text: "one\ntwo\nthree\nfour\nfive",
      path,
      from: 1,
      lines: 5,
      truncated: false,
    });
    expect(await manager.readFile({ relPath: path, from: 2, lines: 2 })).toEqual({
      status: "ok",
      text: "two\nthree",
      path,
      from: 2,
      lines: 2,
      truncated: true,
      nextFrom: 4,
    });
    expect(await manager.readFile({ relPath: path, from: 4, lines: 10 })).toEqual({
      status: "ok",
      text: "four\nfive",
      path,
      from: 4,
      lines: 2,
      truncated: false,
    });
    expect(await manager.readFile({ relPath: path, from: 9 })).toEqual({
      status: "ok",
      text: "",
      path,
      from: 9,
      lines: 0,
      truncated: false,
    });
  });

  test("a record the CLI does not find reads as not_found; other failures reject", async () => {
    const { manager } = managerWith(() => {
      throw new ZkrCommandError("not_found");
    });
    expect(await manager.readFile({ relPath: "zkr://claim/gone" })).toEqual({
      status: "not_found",
      text: "",
      path: "zkr://claim/gone",
    });
    const failing = managerWith(() => {
      throw new ZkrCommandError("exit");
    }).manager;
    expect((await rejection(failing.readFile({ relPath: "zkr://claim/x" }))).message).toBe(
      ZKR_COMMAND_FAILED,
    );
  });
});
