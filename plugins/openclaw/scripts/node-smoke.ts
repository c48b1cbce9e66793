/**
 * Node.js smoke test: runs the plugin's TypeScript sources directly under the
 * Node.js that OpenClaw itself requires (type stripping, no Bun), so the CLI
 * runner's process handling is checked on the host runtime too.
 *
 * Usage: node scripts/node-smoke.ts ZKR_COMMAND
 * (ZKR_COMMAND is the real zkr CLI, e.g. test/fixtures/zkr-python.sh).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { createZkrRunner } from "../client.ts";
import { registerZkr, runZkr, ZKR_COMMAND_FAILED } from "../index.ts";
import type { AnyAgentTool, MemoryPluginCapability } from "../sdk-types.ts";

const zkrCommand = process.argv[2];
if (!zkrCommand) {
  console.error("usage: node scripts/node-smoke.ts ZKR_COMMAND");
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), "zkr-openclaw-node-smoke-"));
const pluginDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const fakeServe = join(pluginDir, "test", "fixtures", "fake-serve.py");
let passed = 0;
let failed = 0;

async function check(name: string, body: () => Promise<void>): Promise<void> {
  try {
    await body();
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}`);
    console.log(error);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function script(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

async function expectRedacted(promise: Promise<unknown>, kind: string): Promise<void> {
  await assert.rejects(promise, (error: Error & { kind?: string }) => {
    assert.equal(String(error), `Error: ${ZKR_COMMAND_FAILED}`);
    assert.equal(error.kind, kind);
    return true;
  });
}

try {
  const capabilities: MemoryPluginCapability[] = [];
  const factories: Array<(ctx: { agentId?: string }) => AnyAgentTool[]> = [];
  const hooks = new Map<string, (event: unknown, ctx: unknown) => unknown>();
  const api = {
    pluginConfig: { command: zkrCommand, database: join(dir, "db", "memory.db"), tenant: "smoke" },
    registerMemoryCapability: (capability: MemoryPluginCapability) => capabilities.push(capability),
    registerTool: (factory: (ctx: { agentId?: string }) => AnyAgentTool[]) => factories.push(factory),
    on: (name: string, handler: (event: unknown, ctx: unknown) => unknown) => hooks.set(name, handler),
    logger: {
      info: () => {},
      warn: (message: string) => console.log(`   warn: ${message}`),
      error: () => {},
    },
  };
  const registration = registerZkr(api as never, { home: join(dir, "home") });
  const tools = new Map(factories.flatMap((factory) => factory({ agentId: "main" })).map((t) => [t.name, t]));
  const call = async (name: string, params: unknown) =>
    (await tools.get(name)!.execute("smoke", params)).details;

  await check("zkr_store -> memory_search -> memory_get through the real zkr CLI", async () => {
    const stored = (await call("zkr_store", {
      kind: "conversation",
      text: "Sam works at Acme",
      captured_at: 1_767_225_600,
      recorded_at: 1_767_225_601,
      claim: {
        subject: "Sam",
        predicate: "employer",
        value: "Acme",
        kind: "fact",
        valid_from: 1_767_225_600,
      },
    })) as { claim_id: string; evidence_id: string };
    const hits = (await call("memory_search", { query: "Acme" })) as Array<Record<string, unknown>>;
    const hit = hits.find((h) => h.path === `zkr://claim/${stored.claim_id}`);
    assert.ok(hit, "claim hit");
    assert.equal(hit.citation, stored.evidence_id);
    const read = (await call("memory_get", { path: hit.path })) as Record<string, unknown>;
    assert.equal(read.text, "Sam employer Acme");
    const manager = (
      await capabilities[0]!.runtime!.getMemorySearchManager({ cfg: {} as never, agentId: "main" })
    ).manager!;
    assert.equal(manager.status().provider, "zkr");
  });

  await check(
    "auto-capture then auto-recall through the real zkr (agent_end, before_prompt_build)",
    async () => {
      const now = Date.now();
      const messages = [
        { role: "user", content: "I keep bees on the roof of my flat.", timestamp: now - 2_000 },
        {
          role: "assistant",
          content: [{ type: "text", text: "Bees on the roof, noted." }],
          timestamp: now - 1_000,
        },
      ];
      const ctx = { agentId: "main", sessionId: "smoke-session", runId: "smoke-run" };
      await hooks.get("agent_end")!({ runId: "smoke-run", messages, success: true }, ctx);
      await hooks.get("agent_end")!({ runId: "smoke-run", messages, success: true }, ctx);
      const found = (await call("zkr_search", { query: "bees roof" })) as {
        items: Array<{ memory: { kind: string } }>;
      };
      assert.equal(found.items.filter((item) => item.memory.kind === "source").length, 1);
      const recall = (await hooks.get("before_prompt_build")!(
        { prompt: "Where are my bees?", currentUserMessage: "Where are my bees?", messages: [] },
        { agentId: "main" },
      )) as { prependContext: string };
      assert.ok(recall.prependContext.includes("I keep bees on the roof"), recall.prependContext);
      console.log(`   transport: ${(registration.runner as unknown as { transport(): string }).transport()}`);
      await registration.close();
    },
  );

  await check("zkr serve client under Node: one child, restart after a crash", async () => {
    const runner = createZkrRunner({
      command: fakeServe,
      database: join(dir, "serve", "m.db"),
      env: { ...process.env, FAKE_SERVE_GRAMMAR: "first" },
    });
    const first = (await runner("search", { query: "a" })) as { pid: number };
    const second = (await runner("search", { query: "b" })) as { pid: number };
    assert.equal(first.pid, second.pid);
    await assert.rejects(runner("search", { query: "crash" }));
    const third = (await runner("search", { query: "c" })) as { pid: number };
    assert.notEqual(third.pid, first.pid);
    assert.equal(runner.transport(), "serve");
    await runner.close();
    assert.ok(!alive(third.pid));
  });

  await check("an idle zkr serve child does not keep the Node host alive", async () => {
    const code = `
      const { createZkrRunner } = await import(${JSON.stringify(pathToFileURL(join(pluginDir, "client.ts")).href)});
      const runner = createZkrRunner({ command: ${JSON.stringify(fakeServe)}, database: ${JSON.stringify(join(dir, "idle", "m.db"))} });
      const answer = await runner("search", { query: "a" });
      console.log(answer.pid);
    `;
    const started = Date.now();
    const host = spawnSync(process.execPath, ["--input-type=module", "-e", code], {
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(host.status, 0, host.stderr);
    assert.ok(Date.now() - started < 15_000, "the host waited for its idle child");
    // The child gets EOF when the host exits and ends on its own.
    const pid = Number(host.stdout.trim());
    const deadline = Date.now() + 5_000;
    while (alive(pid) && Date.now() < deadline) await new Promise((done) => setTimeout(done, 50));
    assert.ok(!alive(pid), "the serve child outlived its host");
  });

  const db = join(dir, "x.db");
  await check("missing binary", () =>
    expectRedacted(runZkr("search", {}, { command: join(dir, "nope"), database: db }), "spawn"),
  );
  await check("non-JSON stdout", () =>
    expectRedacted(
      runZkr("search", {}, { command: script("nj.sh", "cat >/dev/null; echo not json"), database: db }),
      "malformed_output",
    ),
  );
  await check("non-zero exit", () =>
    expectRedacted(
      runZkr(
        "search",
        {},
        { command: script("x.sh", "cat >/dev/null; echo boom >&2; exit 4"), database: db },
      ),
      "exit",
    ),
  );
  await check("stdout flood", () =>
    expectRedacted(
      runZkr("search", {}, { command: script("fo.sh", "cat >/dev/null; yes flood-marker"), database: db }),
      "output_limit",
    ),
  );
  await check("stderr flood", () =>
    expectRedacted(
      runZkr(
        "search",
        {},
        { command: script("fe.sh", "cat >/dev/null; yes flood-marker >&2"), database: db },
      ),
      "output_limit",
    ),
  );
  await check("timeout with SIGKILL escalation", async () => {
    const started = Date.now();
    const pidFile = join(dir, "hang.pid");
    await expectRedacted(
      runZkr(
        "search",
        {},
        {
          command: script("hang.sh", `trap '' TERM; echo $$ > '${pidFile}'; while :; do sleep 0.05; done`),
          database: db,
          timeoutMs: 300,
          killGraceMs: 300,
        },
      ),
      "timeout",
    );
    assert.ok(Date.now() - started < 5_000);
    // The child ignores SIGTERM: it must be gone once the grace period has passed.
    const pid = Number(readFileSync(pidFile, "utf8"));
    const deadline = Date.now() + 3_000;
    while (alive(pid) && Date.now() < deadline) await new Promise((done) => setTimeout(done, 50));
    assert.ok(!alive(pid), "the child that ignored SIGTERM is still running");
  });
  await check("child exiting before reading a large request", async () => {
    for (let i = 0; i < 5; i += 1) {
      await expectRedacted(
        runZkr(
          "remember",
          { text: "z".repeat(900_000) },
          { command: script("early.sh", "exit 3"), database: db },
        ),
        "exit",
      );
    }
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}

console.log(`node smoke: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
