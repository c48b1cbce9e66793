/**
 * End-to-end tests against the REAL zkr CLI of this repository (no mock):
 * $ZKR_TEST_COMMAND, else test/fixtures/zkr-python.sh, which runs
 * `python -m zkr` from ../../src with the repository's .venv (or $ZKR_PYTHON).
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

import { RECALL_OPEN } from "../hooks.ts";
import { registerZkr, type ZkrRegistration } from "../index.ts";
import { ZKR_COMMAND_FAILED } from "../runner.ts";
import {
  callTool,
  cleanupTempDirs,
  fakeApi,
  REAL_ZKR_COMMAND,
  rejection,
  runHook,
  tempDir,
  tool,
  toolsFor,
} from "./helpers.ts";

const registrations: ZkrRegistration[] = [];
afterEach(async () => {
  for (const registration of registrations.splice(0)) await registration.close();
});
afterAll(cleanupTempDirs);

/**
 * How the plugin must reach this zkr: `serve` when it has `zkr serve`, else
 * `cli` (the fallback). Asked once, the way the runner asks: an older zkr
 * answers `serve --db DB` with its usage error.
 */
function expectedTransport(): "serve" | "cli" {
  const dir = tempDir("zkr-openclaw-probe-");
  const probe = spawnSync(REAL_ZKR_COMMAND, ["serve", "--db", join(dir, "probe.db")], {
    input: "",
    encoding: "utf8",
    timeout: 60_000,
  });
  return probe.status === 0 && !probe.stderr.includes("usage:") ? "serve" : "cli";
}
const EXPECTED_TRANSPORT = expectedTransport();

const TIMEOUT = 60_000;
const T0 = 1_767_225_600; // 2026-01-01T00:00:00Z

function plugin(extraConfig: Record<string, unknown> = {}) {
  const home = tempDir("zkr-openclaw-home-");
  const database = join(home, "data", "memory.db");
  const { api, capabilities, tools, hooks } = fakeApi({
    command: REAL_ZKR_COMMAND,
    database,
    ...extraConfig,
  });
  const registration = registerZkr(api, { home });
  registrations.push(registration);
  const runtime = capabilities[0]!.runtime!;
  const managerFor = async (agentId: string) =>
    (await runtime.getMemorySearchManager({ cfg: {} as never, agentId })).manager!;
  return { database, tools, hooks, registration, managerFor, home };
}

interface RememberResult {
  claim_id: string | null;
  evidence_id: string;
  source_id: string;
}

const storeAcme = {
  kind: "conversation",
  text: "Sam said he works at Acme as an engineer.",
  captured_at: T0,
  recorded_at: T0 + 10,
  claim: { subject: "Sam", predicate: "employer", value: "Acme", kind: "fact", valid_from: T0 },
};

describe("real zkr CLI", () => {
  test(
    "store, then memory search maps the claim and memory_get reads it",
    async () => {
      const { tools, managerFor, database } = plugin();
      const built = toolsFor(tools, "agent-a");
      const stored = (await callTool(built, "zkr_store", storeAcme)) as RememberResult;
      expect(existsSync(database)).toBe(true);
      expect(stored.claim_id).toMatch(/^[0-9a-f]{32}$/);
      expect(stored.evidence_id).toMatch(/^[0-9a-f]{32}$/);

      const manager = await managerFor("agent-a");
      const hits = await manager.search("Acme", { minScore: 0.01 });
      const claimHit = hits.find((hit) => hit.path === `zkr://claim/${stored.claim_id}`);
      expect(claimHit).toBeDefined();
      expect(claimHit!.snippet).toBe("Sam employer Acme");
      expect(claimHit!.citation).toBe(stored.evidence_id);
      expect(claimHit!.source).toBe("memory");
      expect(claimHit!.score).toBeGreaterThan(0);
      expect(claimHit!.score).toBeLessThanOrEqual(1);
      expect(Number.isInteger(claimHit!.score * 10_000)).toBe(true);

      const read = await callTool(built, "memory_get", { path: claimHit!.path });
      expect(read).toEqual({
        status: "ok",
        text: "Sam employer Acme",
        path: claimHit!.path,
        from: 1,
        lines: 1,
        truncated: false,
      });

      const viaTool = (await callTool(built, "memory_search", { query: "Acme", maxResults: 5 })) as unknown[];
      expect(viaTool).toContainEqual(claimHit);

      const evidence = await manager.readFile({ relPath: `zkr://evidence/${stored.evidence_id}` });
      expect(evidence).toMatchObject({ status: "ok", text: storeAcme.text });
    },
    TIMEOUT,
  );

  test(
    "zkr_search returns the CLI's cited pack",
    async () => {
      const { tools } = plugin({ tenant: "acme-corp" });
      const built = toolsFor(tools, "agent-a");
      const stored = (await callTool(built, "zkr_store", storeAcme)) as RememberResult;
      const pack = (await callTool(built, "zkr_search", { query: "Acme", limit: 5 })) as {
        items: Array<{ evidence_ids: string[]; memory: { id: string; kind: string } }>;
        gaps: string[];
        query: string;
      };
      expect(pack.query).toBe("Acme");
      expect(pack.gaps).toEqual([]);
      expect(pack.items.length).toBeGreaterThan(0);
      expect(pack.items.some((entry) => entry.evidence_ids.includes(stored.evidence_id))).toBe(true);
      const empty = (await callTool(built, "zkr_search", { query: "zebra" })) as {
        items: unknown[];
        gaps: string[];
        query: string;
      };
      expect(empty).toEqual({ gaps: ["no cited memory matched"], items: [], query: "zebra" });
    },
    TIMEOUT,
  );

  test(
    "memory_get slices a multi-line source and reports unknown records as not_found",
    async () => {
      const { tools, managerFor } = plugin();
      const built = toolsFor(tools, "agent-a");
      const lines = ["Meeting notes", "Alice owns the launch", "Bob owns the budget", "Carol owns hiring"];
      const stored = (await callTool(built, "zkr_store", {
        kind: "document",
        text: lines.join("\n"),
        captured_at: T0,
        recorded_at: T0 + 1,
      })) as RememberResult;
      expect(stored.claim_id).toBeNull();
      const manager = await managerFor("agent-a");
      const path = `zkr://source/${stored.source_id}`;
      expect(await manager.readFile({ relPath: path, from: 2, lines: 2 })).toEqual({
        status: "ok",
        text: "Alice owns the launch\nBob owns the budget",
        path,
        from: 2,
        lines: 2,
        truncated: true,
        nextFrom: 4,
      });
      const hits = await manager.search("budget");
      const sourceHit = hits.find((hit) => hit.path === path);
      expect(sourceHit).toBeDefined();
      expect(sourceHit!.endLine).toBe(4);
      expect(await manager.readFile({ relPath: "zkr://claim/00000000000000000000000000000000" })).toEqual({
        status: "not_found",
        text: "",
        path: "zkr://claim/00000000000000000000000000000000",
      });
    },
    TIMEOUT,
  );

  test(
    "agents are isolated by person scope",
    async () => {
      const { tools, managerFor } = plugin();
      const stored = (await callTool(toolsFor(tools, "agent-a"), "zkr_store", storeAcme)) as RememberResult;
      expect(await (await managerFor("agent-a")).search("Acme")).not.toEqual([]);
      expect(await (await managerFor("agent-b")).search("Acme")).toEqual([]);
      expect(
        await (await managerFor("agent-b")).readFile({ relPath: `zkr://claim/${stored.claim_id}` }),
      ).toEqual({
        status: "not_found",
        text: "",
        path: `zkr://claim/${stored.claim_id}`,
      });
    },
    TIMEOUT,
  );

  test(
    "a retried identical zkr_store returns the original ids",
    async () => {
      const { tools } = plugin();
      const built = toolsFor(tools, "agent-a");
      const first = await callTool(built, "zkr_store", storeAcme);
      const second = await callTool(built, "zkr_store", storeAcme);
      expect(second).toEqual(first);
      const other = await callTool(built, "zkr_store", {
        ...storeAcme,
        recorded_at: storeAcme.recorded_at + 1,
      });
      expect((other as RememberResult).source_id).not.toBe((first as RememberResult).source_id);
    },
    TIMEOUT,
  );

  test(
    "a CLI validation failure is one redacted error",
    async () => {
      const { tools } = plugin();
      const built = toolsFor(tools, "agent-a");
      const error = await rejection(tool(built, "zkr_search").execute("id", { query: "   " }));
      expect(String(error)).toBe("Error: zkr command failed");
      expect(error.message).toBe(ZKR_COMMAND_FAILED);
      const storeError = await rejection(
        tool(built, "zkr_store").execute("id", { ...storeAcme, text: " ", claim: undefined }),
      );
      expect(storeError.message).toBe(ZKR_COMMAND_FAILED);
    },
    TIMEOUT,
  );

  test(
    "correct, reflect citing the correction, then delete the correction source",
    async () => {
      const { tools, managerFor } = plugin();
      const built = toolsFor(tools, "agent-a");
      const stored = (await callTool(built, "zkr_store", storeAcme)) as RememberResult;
      const corrected = (await callTool(built, "zkr_correct", {
        claim_id: stored.claim_id,
        text: "Correction: Sam now works at Globex, detailed in the offer letter.",
        value: "Globex",
        valid_at: T0 + 100,
        recorded_at: T0 + 110,
      })) as { claim_id: string; evidence_id: string; source_id: string; superseded_claim_id: string };
      expect(corrected.superseded_claim_id).toBe(stored.claim_id!);

      const manager = await managerFor("agent-a");
      const hits = await manager.search("Globex");
      expect(hits.map((hit) => hit.path)).toContain(`zkr://claim/${corrected.claim_id}`);

      const review = (await callTool(built, "zkr_reflect", {
        day: "2026-01-01",
        summary: "Sam changed employer to Globex.",
        evidence_ids: [corrected.evidence_id],
        recorded_at: T0 + 120,
      })) as { id: string };
      expect(typeof review.id).toBe("string");

      const deleted = (await callTool(built, "zkr_delete", {
        source_id: corrected.source_id,
        deleted_at: T0 + 130,
      })) as { claim_count: number; evidence_count: number; source_id: string };
      expect(deleted.source_id).toBe(corrected.source_id);
      expect(deleted.claim_count).toBe(1);
      expect(await manager.search("detailed")).toEqual([]);
      expect(await manager.readFile({ relPath: `zkr://claim/${corrected.claim_id}` })).toMatchObject({
        status: "not_found",
      });
    },
    TIMEOUT,
  );

  test(
    `reaches zkr through ${EXPECTED_TRANSPORT === "serve" ? "one zkr serve child" : "the CLI fallback (this zkr has no serve)"}`,
    async () => {
      const { tools, registration } = plugin();
      const built = toolsFor(tools, "agent-a");
      await callTool(built, "zkr_store", storeAcme);
      await callTool(built, "zkr_search", { query: "Acme" });
      await callTool(built, "memory_search", { query: "Acme" });
      const handle = registration.runner as unknown as { transport(): string; serverStarts(): number };
      expect(handle.transport()).toBe(EXPECTED_TRANSPORT);
      // With serve, one child answered every operation.
      if (EXPECTED_TRANSPORT === "serve") expect(handle.serverStarts()).toBe(1);
    },
    TIMEOUT,
  );

  test(
    "tools default their times to now: store then correct then delete in one go",
    async () => {
      const { tools } = plugin();
      const built = toolsFor(tools, "agent-a");
      const stored = (await callTool(built, "zkr_store", {
        kind: "conversation",
        text: "Robin drinks oat milk.",
        claim: { subject: "Robin", predicate: "drinks", value: "oat milk", kind: "preference" },
      })) as RememberResult;
      const corrected = (await callTool(built, "zkr_correct", {
        claim_id: stored.claim_id,
        text: "Robin switched to soy milk.",
        value: "soy milk",
      })) as { claim_id: string; source_id: string; superseded_claim_id: string };
      expect(corrected.superseded_claim_id).toBe(stored.claim_id!);
      const deleted = (await callTool(built, "zkr_delete", { source_id: corrected.source_id })) as {
        claim_count: number;
      };
      expect(deleted.claim_count).toBe(1);
      const again = (await callTool(built, "zkr_store", {
        kind: "conversation",
        text: "Robin drinks oat milk.",
        claim: { subject: "Robin", predicate: "drinks", value: "oat milk", kind: "preference" },
      })) as RememberResult;
      expect(again).toEqual(stored); // a retried identical store: the same ids, no duplicate
    },
    TIMEOUT,
  );

  test(
    "auto-capture stores each completed turn once; auto-recall injects it for a later question",
    async () => {
      const { hooks, tools } = plugin({ person: "pat" });
      const now = Date.now();
      const messages = [
        {
          role: "user",
          content: "My sister Maya lives in Lisbon and teaches violin.",
          timestamp: now - 5_000,
        },
        {
          role: "assistant",
          content: [{ type: "text", text: "Noted: Maya, Lisbon, violin." }],
          timestamp: now - 4_000,
        },
      ];
      const ctx = { agentId: "main", sessionKey: "agent:main:main", sessionId: "s-1", runId: "r-1" };
      await runHook(hooks, "agent_end", { runId: "r-1", messages, success: true }, ctx);
      await runHook(hooks, "agent_end", { runId: "r-1", messages, success: true }, ctx); // re-fired
      await runHook(hooks, "agent_end", { runId: "r-2", messages, success: true }, { ...ctx, runId: "r-2" });

      const built = toolsFor(tools, "main");
      const found = (await callTool(built, "zkr_search", { query: "Maya violin Lisbon" })) as {
        items: Array<{ excerpt: string; memory: { kind: string; id: string } }>;
      };
      const turns = found.items.filter((item) => item.memory.kind === "source");
      expect(turns).toHaveLength(1);
      expect(turns[0]!.excerpt).toBe(
        "User: My sister Maya lives in Lisbon and teaches violin.\nAssistant: Noted: Maya, Lisbon, violin.",
      );

      const recall = (await runHook(
        hooks,
        "before_prompt_build",
        { prompt: "Where does Maya live?", currentUserMessage: "Where does Maya live?", messages: [] },
        { agentId: "main" },
      )) as { prependContext: string } | undefined;
      expect(recall?.prependContext.startsWith(RECALL_OPEN)).toBe(true);
      expect(recall!.prependContext).toContain("Maya lives in Lisbon");
      expect(recall!.prependContext).toMatch(/\[evidence: [0-9a-f]{32}\]/);

      // The recalled block is not captured back: the next turn stores only what the user said.
      const next = [
        ...messages,
        {
          role: "user",
          content: `${recall!.prependContext}\n\nWhere does Maya live?`,
          timestamp: now - 1_000,
        },
        { role: "assistant", content: [{ type: "text", text: "In Lisbon." }], timestamp: now },
      ];
      await runHook(hooks, "agent_end", { messages: next, success: true }, { ...ctx, runId: "r-3" });
      const second = (await callTool(built, "zkr_search", { query: "Where does Maya live" })) as {
        items: Array<{ excerpt: string; memory: { kind: string } }>;
      };
      const excerpts = second.items
        .filter((item) => item.memory.kind === "source")
        .map((item) => item.excerpt);
      expect(excerpts).toContain("User: Where does Maya live?\nAssistant: In Lisbon.");
      expect(excerpts.join("\n")).not.toContain(RECALL_OPEN);
    },
    TIMEOUT,
  );

  test(
    "after a change of plan, auto-recall puts the turn with the current decision first",
    async () => {
      // The week of benchmarks/decisions.py's trip (day, minute of the day, said, answered) as
      // auto-capture stores it: turns only, no claims, no embedder. The trip is decided
      // (Lisbon), then changed (Porto); then the question of the product story.
      const { hooks } = plugin({ person: "pat" });
      const week: Array<[number, number, string, string]> = [
        [
          0,
          492,
          "Remind me to send the quarterly report to Priya before Friday.",
          "Noted: the quarterly report goes to Priya before Friday.",
        ],
        [
          0,
          1180,
          "Ana and I want to take a trip in March, somewhere warm in Europe. Lisbon or Porto maybe?",
          "Both are lovely in March. Lisbon is a bit warmer; Porto is quieter and cheaper.",
        ],
        [1, 475, "My dentist appointment moved to Thursday at 3pm.", "Got it, dentist on Thursday at 3pm."],
        [
          1,
          1265,
          "I looked at flights for the trip: TAP to Lisbon is 180 euros return, Porto is 210.",
          "So Lisbon is cheaper by 30 euros per person.",
        ],
        [
          1,
          1270,
          "Ana prefers the beach, I prefer museums. Lisbon has both, right?",
          "Yes: Cascais beaches are 40 minutes by train, and the Gulbenkian is in town.",
        ],
        [
          2,
          750,
          "Lunch with Marco was great, he recommends the pasteis de nata at Manteigaria.",
          "Noted, Manteigaria for pasteis de nata.",
        ],
        [
          2,
          1215,
          "OK I decided: the trip is to Lisbon, March 12 to 19, just Ana and me.",
          "Great choice. Lisbon, March 12 to 19, for two. Want me to look at hotels?",
        ],
        [
          2,
          1220,
          "Yes, something in Alfama with a view, under 150 euros a night.",
          "I'll look for Alfama hotels under 150 euros.",
        ],
        [
          3,
          542,
          "I'm going to cook from the new cookbook tonight, I decided on the mushroom risotto.",
          "Sounds delicious, enjoy the risotto.",
        ],
        [3, 945, "At the dentist now, running late.", ""],
        [4, 510, "Report sent to Priya, done.", "Great, I'll drop the reminder."],
        [
          4,
          1080,
          "Ana's sister says Lisbon is packed in March, lots of tourists.",
          "March is busier than February but still manageable.",
        ],
        [
          4,
          1290,
          "Actually, change of plan: we're going to Porto instead, same dates. Ana wants the quieter city.",
          "Got it: Porto, March 12 to 19, instead of Lisbon.",
        ],
        [5, 600, "Weekend plan: run 10k on Saturday morning, groceries after.", "Good luck with the run!"],
        [
          5,
          980,
          "What's a good book for the flight?",
          "Try 'The Book of Disquiet' by Pessoa, it fits the trip.",
        ],
        [
          6,
          555,
          "Are we going to the cinema with Marco on Sunday?",
          "You said you'd decide with Marco on Saturday.",
        ],
      ];
      const monday = Date.now() - 8 * 86_400_000;
      for (const [index, [day, minute, said, answered]] of week.entries()) {
        const at = monday + day * 86_400_000 + minute * 60_000;
        const messages = [{ role: "user", content: said, timestamp: at }];
        if (answered) messages.push({ role: "assistant", content: answered, timestamp: at + 1_000 });
        const runId = `r-${index}`;
        const ctx = { agentId: "main", sessionKey: "agent:main:main", sessionId: "s-1", runId };
        await runHook(hooks, "agent_end", { runId, messages, success: true }, ctx);
      }
      const question = "what did I decide about the trip?";
      const recall = (await runHook(
        hooks,
        "before_prompt_build",
        { prompt: question, currentUserMessage: question, messages: [] },
        { agentId: "main" },
      )) as { prependContext: string } | undefined;
      const lines = recall!.prependContext.split("\n").filter((line) => line.startsWith("- "));
      expect(lines[0]).toContain("we're going to Porto instead");
      expect(lines[0]).toMatch(/\[evidence: [0-9a-f]{32}\]$/);
      const decided = lines.findIndex((line) => line.includes("OK I decided: the trip is to Lisbon"));
      expect(decided === -1 || decided > 0).toBe(true);
    },
    TIMEOUT,
  );
});
