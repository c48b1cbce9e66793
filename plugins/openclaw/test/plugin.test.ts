import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import entry, { PLUGIN_DESCRIPTION, PLUGIN_ID, PLUGIN_NAME, registerZkr } from "../index.ts";
import { CONFIG_JSON_SCHEMA, DEFAULT_RECALL_MIN_SCORE, resolveConfig, ZkrConfigError } from "../config.ts";
import { CAPTURE_MAX_CHARS, lastTurn, RECALL_CLOSE, RECALL_HEADER, RECALL_OPEN } from "../hooks.ts";
import { MEMORY_PROMPT_LINE } from "../memory.ts";
import { ZKR_COMMAND_FAILED, ZkrCommandError } from "../runner.ts";
import { MEMORY_TOOL_NAMES, storeIngestionKey, ZKR_TOOL_NAMES } from "../tools.ts";
import {
  callTool,
  cleanupTempDirs,
  fakeApi,
  fakeRunner,
  PLUGIN_DIR,
  rejection,
  runHook,
  tempDir,
  tool,
  toolsFor,
} from "./helpers.ts";

afterAll(cleanupTempDirs);

const manifest = JSON.parse(readFileSync(join(PLUGIN_DIR, "openclaw.plugin.json"), "utf8"));
const packageJson = JSON.parse(readFileSync(join(PLUGIN_DIR, "package.json"), "utf8"));

/** A fake home that must stay untouched: registration and defaults never create anything. */
const FAKE_HOME = "/nonexistent-zkr-test-home";

function setup(pluginConfig?: Record<string, unknown>, handler?: Parameters<typeof fakeRunner>[0]) {
  const { runner, calls } = fakeRunner(handler);
  const { api, capabilities, tools } = fakeApi(pluginConfig);
  const registration = registerZkr(api, { runner, home: FAKE_HOME });
  return { api, capabilities, tools, calls, registration };
}

const ALL_TOOL_NAMES = [...ZKR_TOOL_NAMES, ...MEMORY_TOOL_NAMES];

describe("manifest and package", () => {
  test("manifest id is zkr and kind is memory", () => {
    expect(manifest.id).toBe("zkr");
    expect(manifest.kind).toBe("memory");
    expect(manifest.name).toBe(PLUGIN_NAME);
    expect(manifest.description).toBe(PLUGIN_DESCRIPTION);
    expect(manifest.activation).toEqual({ onStartup: true });
  });

  test("registered tool names equal contracts.tools", () => {
    const { tools } = setup();
    const registered = tools.flatMap((registration) => registration.names);
    expect([...registered].sort()).toEqual([...manifest.contracts.tools].sort());
    const built = [...toolsFor(tools, "agent-a").keys()];
    expect(built.sort()).toEqual([...manifest.contracts.tools].sort());
    expect(new Set(manifest.contracts.tools).size).toBe(7);
  });

  test("config schema: optional settings, closed, no schema defaults; entry uses the same schema", () => {
    const schema = manifest.configSchema;
    expect(schema).toEqual(JSON.parse(JSON.stringify(CONFIG_JSON_SCHEMA)));
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required).toBeUndefined();
    expect(Object.keys(schema.properties).sort()).toEqual([
      "autoCapture",
      "autoRecall",
      "command",
      "database",
      "minScore",
      "person",
      "recallLimit",
      "serve",
      "tenant",
    ]);
    for (const key of ["command", "database", "person", "tenant"]) {
      expect(schema.properties[key].type).toBe("string");
      expect(schema.properties[key].minLength).toBe(1);
    }
    for (const key of ["autoCapture", "autoRecall", "serve"])
      expect(schema.properties[key].type).toBe("boolean");
    expect(schema.properties.minScore).toMatchObject({ type: "number", minimum: 0, maximum: 1 });
    expect(schema.properties.recallLimit).toMatchObject({ type: "integer", minimum: 1, maximum: 20 });
    for (const property of Object.values(schema.properties) as Record<string, unknown>[]) {
      expect(property.default).toBeUndefined();
    }
    const entrySchema = entry.configSchema;
    expect(entrySchema.jsonSchema).toEqual(schema);
    expect(entrySchema.safeParse?.({ database: "~/x.db" }).success).toBe(true);
    expect(entrySchema.safeParse?.({ database: "" }).success).toBe(false);
    expect(entrySchema.safeParse?.({ shell: "sh" }).success).toBe(false);
  });

  test("entry identity matches the manifest", () => {
    expect(entry.id).toBe(PLUGIN_ID);
    expect(entry.id).toBe(manifest.id);
    expect(entry.name).toBe(manifest.name);
    expect(typeof entry.register).toBe("function");
  });

  test("package.json points OpenClaw at index.ts and declares compat/build versions", () => {
    expect(packageJson.type).toBe("module");
    expect(packageJson.openclaw.extensions).toEqual(["./index.ts"]);
    const version = packageJson.devDependencies.openclaw;
    expect(version).toMatch(/^\d{4}\.\d+\.\d+(-[\w.]+)?$/);
    expect(packageJson.peerDependencies.openclaw).toBe(`>=${version}`);
    expect(packageJson.openclaw.compat).toEqual({ pluginApi: `>=${version}`, minGatewayVersion: version });
    expect(packageJson.openclaw.build).toEqual({ openclawVersion: version, pluginSdkVersion: version });
    expect(existsSync(join(PLUGIN_DIR, "bun.lock"))).toBe(true);
  });
});

describe("registration against a fake API", () => {
  test("registers one memory capability with a prompt builder and a runtime", () => {
    const { capabilities } = setup();
    expect(capabilities).toHaveLength(1);
    const capability = capabilities[0]!;
    expect(typeof capability.promptBuilder).toBe("function");
    expect(capability.runtime).toBeDefined();
  });

  test("registers the native group memory_search/memory_get and the five zkr tools", () => {
    const { tools } = setup();
    expect(tools.map((registration) => registration.names)).toEqual([
      ["memory_search", "memory_get"],
      ["zkr_store", "zkr_search", "zkr_correct", "zkr_delete", "zkr_reflect"],
    ]);
    for (const registration of tools) {
      const built = registration.factory({ agentId: "a" });
      expect(built.map((t) => t.name)).toEqual(registration.names);
    }
  });

  test("every tool has a label, a description and a closed object schema", () => {
    const tools = toolsFor(setup().tools);
    const labels: Record<string, string> = {
      zkr_store: "Store zkr memory",
      zkr_search: "Search zkr memory",
      zkr_correct: "Correct zkr memory",
      zkr_delete: "Delete zkr source",
      zkr_reflect: "Reflect into zkr memory",
      memory_search: "Memory Search",
      memory_get: "Memory Get",
    };
    for (const name of ALL_TOOL_NAMES) {
      const t = tool(tools, name);
      expect(t.label).toBe(labels[name]!);
      expect(t.description.length).toBeGreaterThan(10);
      const schema = t.parameters as unknown as Record<string, unknown>;
      expect(schema.type).toBe("object");
      expect(schema.additionalProperties).toBe(false);
      const properties = schema.properties as Record<string, unknown>;
      for (const forbidden of [
        "tenant_id",
        "person_id",
        "ingestion_key",
        "locator",
        "tier",
        "processing_state",
        "query_embedding",
      ]) {
        expect(properties[forbidden]).toBeUndefined();
      }
    }
  });

  test("missing config means all defaults; nothing is created in the home directory", () => {
    const { registration } = setup();
    expect(registration.config).toEqual({
      command: "zkr",
      database: join(FAKE_HOME, ".zkr", "memory.db"),
      databaseConfigured: false,
      tenant: "openclaw",
      autoRecall: true,
      autoCapture: true,
      minScore: DEFAULT_RECALL_MIN_SCORE,
      recallLimit: 5,
      serve: true,
    });
    expect(existsSync(FAKE_HOME)).toBe(false);
  });

  test("the prompt line appears only when memory_search is available", () => {
    const builder = setup().capabilities[0]!.promptBuilder!;
    expect(builder({ availableTools: new Set(["memory_search", "memory_get"]) })).toEqual([
      MEMORY_PROMPT_LINE,
    ]);
    expect(builder({ availableTools: new Set(["zkr_search"]) })).toEqual([]);
    expect(builder({ availableTools: new Set() })).toEqual([]);
  });

  test("the runtime keeps one manager per agent and reports the builtin backend", async () => {
    const runtime = setup().capabilities[0]!.runtime!;
    const cfg = {} as never;
    const a1 = (await runtime.getMemorySearchManager({ cfg, agentId: "agent-a" })).manager;
    const a2 = (await runtime.getMemorySearchManager({ cfg, agentId: "agent-a" })).manager;
    const b = (await runtime.getMemorySearchManager({ cfg, agentId: "agent-b" })).manager;
    expect(a1).toBe(a2!);
    expect(b).not.toBe(a1!);
    expect(runtime.resolveMemoryBackendConfig({ cfg, agentId: "agent-a" })).toEqual({ backend: "builtin" });
    await runtime.closeMemorySearchManager!({ cfg, agentId: "agent-a" });
    const a3 = (await runtime.getMemorySearchManager({ cfg, agentId: "agent-a" })).manager;
    expect(a3).not.toBe(a1!);
    await runtime.closeAllMemorySearchManagers!();
    expect((await runtime.getMemorySearchManager({ cfg, agentId: "agent-b" })).manager).not.toBe(b!);
  });

  test("status and probes are honest: FTS available, no vectors, no embeddings", async () => {
    const dir = tempDir();
    const runtime = setup({ database: join(dir, "m.db"), tenant: "acme", person: "sam" }).capabilities[0]!
      .runtime!;
    const manager = (await runtime.getMemorySearchManager({ cfg: {} as never, agentId: "main" })).manager!;
    expect(manager.status()).toEqual({
      backend: "builtin",
      provider: "zkr",
      dbPath: join(dir, "m.db"),
      sources: ["memory"],
      fts: { enabled: true, available: true },
      vector: { enabled: false, available: false },
      custom: { tenant: "acme", person: "sam" },
    });
    expect(await manager.probeEmbeddingAvailability()).toMatchObject({ ok: false, checked: true });
    expect(await manager.probeVectorAvailability()).toBe(false);
    expect("sync" in manager).toBe(false);
    expect("close" in manager).toBe(false);
  });
});

describe("scope and tools", () => {
  test("zkr_search forces the configured scope over model-supplied tenant_id/person_id", async () => {
    const { tools, calls } = setup({ tenant: "acme" }, () => ({ gaps: [], items: [], query: "q" }));
    const built = toolsFor(tools, "agent-a");
    const schema = tool(built, "zkr_search").parameters as unknown as { properties: Record<string, unknown> };
    expect(schema.properties.tenant_id).toBeUndefined();
    expect(schema.properties.person_id).toBeUndefined();
    const details = await callTool(built, "zkr_search", {
      query: "Acme",
      limit: 5,
      as_of: { valid_at: 10, recorded_at: 20 },
      tenant_id: "evil-tenant",
      person_id: "evil-person",
    });
    expect(details).toEqual({ gaps: [], items: [], query: "q" });
    expect(calls).toEqual([
      {
        operation: "search",
        input: {
          query: "Acme",
          limit: 5,
          as_of: { valid_at: 10, recorded_at: 20 },
          tenant_id: "acme",
          person_id: "agent-a",
        },
        signal: undefined,
      },
    ]);
  });

  test("tools built for agent-a and agent-b send those ids as person_id", async () => {
    const { tools, calls } = setup(undefined, () => ({ gaps: [], items: [], query: "q" }));
    await callTool(toolsFor(tools, "agent-a"), "zkr_search", { query: "x" });
    await callTool(toolsFor(tools, "agent-b"), "zkr_search", { query: "x" });
    await callTool(toolsFor(tools, "agent-a"), "memory_search", { query: "x" });
    await callTool(toolsFor(tools, "agent-b"), "memory_search", { query: "x" });
    await callTool(toolsFor(tools), "memory_search", { query: "x" });
    expect(calls.map((call) => call.input.person_id)).toEqual([
      "agent-a",
      "agent-b",
      "agent-a",
      "agent-b",
      "default",
    ]);
    expect(calls.map((call) => call.input.tenant_id)).toEqual(Array(5).fill("openclaw"));
  });

  test("a configured person overrides the agent id", async () => {
    const { tools, calls } = setup({ person: "sam" }, () => ({ items: [] }));
    await callTool(toolsFor(tools, "agent-a"), "zkr_search", { query: "x" });
    await callTool(toolsFor(tools, "agent-b"), "memory_search", { query: "x" });
    expect(calls.map((call) => call.input.person_id)).toEqual(["sam", "sam"]);
  });

  test("times are optional (the plugin fills in now); zkr_search exposes as_of", () => {
    const built = toolsFor(setup().tools);
    const schemaOf = (name: string) =>
      tool(built, name).parameters as unknown as { required: string[]; properties: Record<string, any> };
    const store = schemaOf("zkr_store");
    expect(store.required.sort()).toEqual(["kind", "text"]);
    expect(store.properties.captured_at.type).toBe("integer");
    expect(store.properties.kind.enum).toEqual([
      "conversation",
      "screen",
      "audio",
      "document",
      "integration",
      "user_correction",
    ]);
    const claim = store.properties.claim;
    expect(claim.additionalProperties).toBe(false);
    expect(claim.required.sort()).toEqual(["kind", "predicate", "subject", "value"]);
    expect(claim.properties.valid_from.type).toBe("integer");
    expect(claim.properties.kind.enum).toEqual([
      "fact",
      "profile_fact",
      "preference",
      "task",
      "skill",
      "recommendation",
    ]);
    expect(store.properties.valid_at).toBeUndefined();
    const correct = schemaOf("zkr_correct");
    expect(correct.required.sort()).toEqual(["claim_id", "text", "value"]);
    expect(correct.properties.valid_at.type).toBe("integer");
    expect(correct.properties.occurred_at).toBeUndefined();
    const search = schemaOf("zkr_search");
    expect(search.required).toEqual(["query"]);
    expect(search.properties.as_of.required.sort()).toEqual(["recorded_at", "valid_at"]);
    expect(search.properties.as_of.additionalProperties).toBe(false);
    expect(search.properties.limit).toMatchObject({ minimum: 1, maximum: 100 });
    expect(schemaOf("zkr_delete").required.sort()).toEqual(["source_id"]);
    const reflect = schemaOf("zkr_reflect");
    expect(reflect.required.sort()).toEqual(["day", "evidence_ids", "summary"]);
    expect(reflect.properties.evidence_ids.items.minLength).toBe(1);
    const memorySearch = schemaOf("memory_search");
    expect(memorySearch.required).toEqual(["query"]);
    expect(memorySearch.properties.maxResults).toMatchObject({ type: "integer", minimum: 1, maximum: 100 });
    expect(memorySearch.properties.minScore).toMatchObject({ type: "number", minimum: 0, maximum: 1 });
    const memoryGet = schemaOf("memory_get");
    expect(memoryGet.required).toEqual(["path"]);
    expect(memoryGet.properties.from).toMatchObject({ type: "integer", minimum: 1 });
  });

  test("each zkr tool maps to its CLI command with only its own keys plus scope", async () => {
    const { tools, calls } = setup({ tenant: "t" }, () => ({ ok: true }));
    const built = toolsFor(tools, "p");
    const store = {
      kind: "conversation",
      text: "Sam works at Acme",
      captured_at: 100,
      recorded_at: 200,
      claim: {
        subject: "Sam",
        predicate: "employer",
        value: "Acme",
        kind: "fact",
        valid_from: 90,
        tier: "archive",
      },
      ingestion_key: "model-chosen",
      locator: { device_id: "d" },
    };
    await callTool(built, "zkr_store", store);
    await callTool(built, "zkr_correct", {
      claim_id: "c",
      text: "now Beta",
      value: "Beta",
      valid_at: 300,
      recorded_at: 310,
    });
    await callTool(built, "zkr_delete", { source_id: "s", deleted_at: 400 });
    await callTool(built, "zkr_reflect", {
      day: "2026-01-02",
      summary: "sum",
      evidence_ids: ["e-1"],
      recorded_at: 500,
    });
    expect(calls.map((call) => call.operation)).toEqual(["remember", "correct", "delete", "review"]);
    const remember = calls[0]!.input;
    const expectedStore = {
      kind: "conversation",
      text: "Sam works at Acme",
      captured_at: 100,
      recorded_at: 200,
      claim: { subject: "Sam", predicate: "employer", value: "Acme", kind: "fact", valid_from: 90 },
      tenant_id: "t",
      person_id: "p",
    };
    expect(remember).toEqual({ ...expectedStore, ingestion_key: storeIngestionKey(expectedStore) });
    expect(remember.ingestion_key).toMatch(/^openclaw-store:[0-9a-f]{64}$/);
    expect(calls[1]!.input).toEqual({
      claim_id: "c",
      text: "now Beta",
      value: "Beta",
      valid_at: 300,
      recorded_at: 310,
      tenant_id: "t",
      person_id: "p",
    });
    expect(calls[2]!.input).toEqual({ source_id: "s", deleted_at: 400, tenant_id: "t", person_id: "p" });
    expect(calls[3]!.input).toEqual({
      day: "2026-01-02",
      summary: "sum",
      evidence_ids: ["e-1"],
      recorded_at: 500,
      tenant_id: "t",
      person_id: "p",
    });
  });

  test("the store ingestion key is stable per payload and differs across payloads and scopes", () => {
    const base = {
      kind: "conversation",
      text: "a",
      captured_at: 1,
      recorded_at: 2,
      tenant_id: "t",
      person_id: "p",
    };
    const reordered = {
      person_id: "p",
      tenant_id: "t",
      recorded_at: 2,
      captured_at: 1,
      text: "a",
      kind: "conversation",
    };
    expect(storeIngestionKey(base)).toBe(storeIngestionKey(reordered));
    expect(storeIngestionKey(base)).not.toBe(storeIngestionKey({ ...base, text: "b" }));
    expect(storeIngestionKey(base)).not.toBe(storeIngestionKey({ ...base, person_id: "q" }));
    expect(storeIngestionKey(base)).not.toBe(storeIngestionKey({ ...base, recorded_at: 3 }));
  });

  test("explicit null for optional objects is dropped, not forwarded", async () => {
    const { tools, calls } = setup(undefined, () => ({ ok: true }));
    const built = toolsFor(tools, "a");
    await callTool(built, "zkr_store", {
      kind: "screen",
      text: "x",
      captured_at: 1,
      recorded_at: 2,
      claim: null,
    });
    await callTool(built, "zkr_search", { query: "x", as_of: null });
    expect(Object.hasOwn(calls[0]!.input, "claim")).toBe(false);
    expect(Object.hasOwn(calls[1]!.input, "as_of")).toBe(false);
  });

  test("the tool's abort signal reaches the runner", async () => {
    const { tools, calls } = setup(undefined, () => ({ items: [] }));
    const controller = new AbortController();
    await tool(toolsFor(tools, "a"), "zkr_search").execute("id", { query: "x" }, controller.signal);
    expect(calls[0]!.signal).toBe(controller.signal);
  });

  test("a runner throwing `zkr command failed` makes zkr_search reject with that message", async () => {
    const { tools } = setup(undefined, () => {
      throw new ZkrCommandError("exit");
    });
    const built = toolsFor(tools, "a");
    const error = await rejection(tool(built, "zkr_search").execute("id", { query: "x" }));
    expect(error.message).toBe(ZKR_COMMAND_FAILED);
    const memoryError = await rejection(tool(built, "memory_search").execute("id", { query: "x" }));
    expect(memoryError.message).toBe(ZKR_COMMAND_FAILED);
  });
});

describe("config", () => {
  test("defaults, ~ expansion and relative paths", () => {
    expect(resolveConfig(undefined, { home: "/home/u" }).database).toBe("/home/u/.zkr/memory.db");
    expect(resolveConfig({ database: "~/m/x.db" }, { home: "/home/u" })).toEqual({
      command: "zkr",
      database: "/home/u/m/x.db",
      databaseConfigured: true,
      tenant: "openclaw",
      autoRecall: true,
      autoCapture: true,
      minScore: DEFAULT_RECALL_MIN_SCORE,
      recallLimit: 5,
      serve: true,
    });
    expect(resolveConfig({ database: "~" }, { home: "/home/u" }).database).toBe("/home/u");
    expect(resolveConfig({ database: "~other/x.db" }, { home: "/home/u", cwd: "/w" }).database).toBe(
      "/w/~other/x.db",
    );
    expect(resolveConfig({ database: "rel/x.db" }, { home: "/home/u", cwd: "/w" }).database).toBe(
      "/w/rel/x.db",
    );
    expect(resolveConfig({ command: "~/bin/zkr" }, { home: "/home/u" }).command).toBe("/home/u/bin/zkr");
    expect(
      resolveConfig({ command: "/opt/zkr/bin/zkr", tenant: "x", person: "y" }, { home: "/h" }),
    ).toMatchObject({
      command: "/opt/zkr/bin/zkr",
      tenant: "x",
      person: "y",
    });
  });

  test("rejects unknown keys, empty strings and non-strings", () => {
    expect(() => resolveConfig({ shell: "bash" })).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ command: "" })).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ tenant: "  " })).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ database: 3 })).toThrow(ZkrConfigError);
    expect(() => resolveConfig([])).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ autoRecall: "no" })).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ minScore: 1.5 })).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ recallLimit: 2.5 })).toThrow(ZkrConfigError);
    expect(() => resolveConfig({ recallLimit: 21 })).toThrow(ZkrConfigError);
    const custom = resolveConfig({
      autoRecall: false,
      autoCapture: false,
      minScore: 0,
      recallLimit: 3,
      serve: false,
    });
    expect(custom).toMatchObject({
      autoRecall: false,
      autoCapture: false,
      minScore: 0,
      recallLimit: 3,
      serve: false,
    });
  });
});

describe("default times", () => {
  const NOW_MS = 1_800_000_000_500;

  function timed(handler?: Parameters<typeof fakeRunner>[0]) {
    const { runner, calls } = fakeRunner(handler ?? (() => ({ ok: true })));
    const { api, tools } = fakeApi();
    registerZkr(api, { runner, home: FAKE_HOME, now: () => NOW_MS });
    return { built: toolsFor(tools, "a"), calls };
  }

  test("left-out times are now; valid_from follows captured_at; each default advances past the last", async () => {
    const { built, calls } = timed();
    await callTool(built, "zkr_store", {
      kind: "conversation",
      text: "Sam works at Acme",
      claim: { subject: "Sam", predicate: "employer", value: "Acme", kind: "fact" },
    });
    await callTool(built, "zkr_store", { kind: "document", text: "given", captured_at: 5, recorded_at: 6 });
    await callTool(built, "zkr_correct", { claim_id: "c", text: "now Beta", value: "Beta" });
    await callTool(built, "zkr_delete", { source_id: "s" });
    await callTool(built, "zkr_reflect", { day: "2027-01-15", summary: "s", evidence_ids: ["e"] });
    const [store, given, correct, del, review] = calls.map((call) => call.input);
    expect(store).toMatchObject({ captured_at: 1_800_000_000, recorded_at: 1_800_000_000 });
    expect((store!.claim as Record<string, unknown>).valid_from).toBe(1_800_000_000);
    expect(given).toMatchObject({ captured_at: 5, recorded_at: 6 });
    expect(correct).toMatchObject({ valid_at: 1_800_000_001, recorded_at: 1_800_000_001 });
    expect(del).toMatchObject({ deleted_at: 1_800_000_002 });
    expect(review).toMatchObject({ recorded_at: 1_800_000_003 });
  });

  test("a retried zkr_store with defaulted times resends the identical request (same ingestion key)", async () => {
    const { built, calls } = timed();
    const params = { kind: "conversation", text: "retry me" };
    await callTool(built, "zkr_store", params);
    await callTool(built, "zkr_correct", { claim_id: "c", text: "t", value: "v" }); // the clock moves on
    await callTool(built, "zkr_store", params);
    expect(calls[2]!.input).toEqual(calls[0]!.input);
    await callTool(built, "zkr_store", { ...params, text: "another" });
    expect(calls[3]!.input.ingestion_key).not.toBe(calls[0]!.input.ingestion_key);
  });
});

describe("auto-recall and auto-capture hooks", () => {
  const hit = (id: string, points: number, excerpt: string) => ({
    evidence_ids: [`e-${id}`],
    excerpt,
    memory: { id, kind: "claim" },
    relevance_basis_points: points,
  });

  function hooked(pluginConfig?: Record<string, unknown>, handler?: Parameters<typeof fakeRunner>[0]) {
    const { runner, calls } = fakeRunner(handler);
    const fake = fakeApi(pluginConfig);
    registerZkr(fake.api, { runner, home: FAKE_HOME, now: () => 1_800_000_000_000 });
    return { ...fake, calls };
  }

  test("both hooks are on by default and each can be switched off", () => {
    expect([...hooked().hooks.keys()].sort()).toEqual(["agent_end", "before_prompt_build"]);
    expect([...hooked({ autoRecall: false }).hooks.keys()]).toEqual(["agent_end"]);
    expect([...hooked({ autoCapture: false }).hooks.keys()]).toEqual(["before_prompt_build"]);
    expect([...hooked({ autoRecall: false, autoCapture: false }).hooks.keys()]).toEqual([]);
  });

  test("auto-recall searches the current user message and injects hits above the floor, cited", async () => {
    const { hooks, calls } = hooked({ minScore: 0.5, recallLimit: 2 }, () => ({
      items: [
        hit("c-1", 9000, "Sam works at Acme"),
        hit("c-2", 6000, "Sam likes\n oolong tea"),
        hit("c-3", 5500, "third"),
        hit("c-4", 4000, "below the floor"),
      ],
      gaps: [],
    }));
    const result = (await runHook(
      hooks,
      "before_prompt_build",
      { prompt: "history... Where does Sam work?", currentUserMessage: "Where does Sam work?", messages: [] },
      { agentId: "main" },
    )) as { prependContext: string };
    expect(calls).toHaveLength(1);
    expect(calls[0]!.operation).toBe("search");
    expect(calls[0]!.input).toEqual({
      tenant_id: "openclaw",
      person_id: "main",
      query: "Where does Sam work?",
      limit: 100,
    });
    expect(result.prependContext).toBe(
      [
        RECALL_OPEN,
        RECALL_HEADER,
        "- Sam works at Acme [evidence: e-c-1]",
        "- Sam likes oolong tea [evidence: e-c-2]",
        RECALL_CLOSE,
      ].join("\n"),
    );
    expect(calls[0]!.signal).toBeInstanceOf(AbortSignal);
  });

  test("auto-recall adds nothing for a blank message, no hit above the floor, or a failing search", async () => {
    const low = hooked({ minScore: 0.95 }, () => ({ items: [hit("c-1", 9000, "x")], gaps: [] }));
    expect(await runHook(low.hooks, "before_prompt_build", { prompt: "Sam?", messages: [] })).toBeUndefined();
    expect(await runHook(low.hooks, "before_prompt_build", { prompt: "  ", messages: [] })).toBeUndefined();
    expect(low.calls).toHaveLength(1);
    const failing = hooked(undefined, () => {
      throw new ZkrCommandError("timeout");
    });
    expect(
      await runHook(failing.hooks, "before_prompt_build", { prompt: "Sam?", messages: [] }),
    ).toBeUndefined();
    expect(failing.logs).toContain("warn zkr: auto-recall skipped (timeout)");
  });

  test("auto-recall's query never contains an earlier injected block", async () => {
    const { hooks, calls } = hooked(undefined, () => ({ items: [], gaps: [] }));
    await runHook(hooks, "before_prompt_build", {
      prompt: `${RECALL_OPEN}\nold memory\n${RECALL_CLOSE}\n\nWhat now?`,
      messages: [],
    });
    expect(calls[0]!.input.query).toBe("What now?");
  });

  const turn = (user: unknown, assistant: unknown, extra: unknown[] = []) => [
    { role: "user", content: "earlier", timestamp: 1_700_000_000_000 },
    { role: "assistant", content: [{ type: "text", text: "earlier reply" }], timestamp: 1_700_000_001_000 },
    { role: "user", content: user, timestamp: 1_800_000_100_000 },
    {
      role: "assistant",
      content: [{ type: "toolCall", id: "t", name: "x", arguments: {} }],
      timestamp: 1_800_000_101_000,
    },
    { role: "toolResult", content: [{ type: "text", text: "tool output" }], timestamp: 1_800_000_102_000 },
    { role: "assistant", content: assistant, timestamp: 1_800_000_105_000 },
    ...extra,
  ];

  test("auto-capture stores the last turn once, keyed by session and turn, with the messages' times", async () => {
    const { hooks, calls } = hooked({ tenant: "t" }, () => ({
      source_id: "s",
      evidence_id: "e",
      claim_id: null,
    }));
    const messages = turn(
      [{ type: "text", text: `${RECALL_OPEN}\n- injected\n${RECALL_CLOSE}\n\nI moved to Porto` }],
      [
        { type: "thinking", thinking: "hidden" },
        { type: "text", text: "Porto it is." },
      ],
    );
    const ctx = { agentId: "main", sessionKey: "agent:main:main", sessionId: "sess-1", runId: "run-1" };
    await runHook(hooks, "agent_end", { runId: "run-1", messages, success: true }, ctx);
    expect(calls).toHaveLength(1);
    const request = calls[0]!.input;
    expect(calls[0]!.operation).toBe("remember");
    expect(request).toEqual({
      tenant_id: "t",
      person_id: "main",
      kind: "conversation",
      text: "User: I moved to Porto\nAssistant: Porto it is.",
      captured_at: 1_800_000_100,
      recorded_at: 1_800_000_105,
      ingestion_key: request.ingestion_key,
    });
    expect(request.ingestion_key).toMatch(/^openclaw-turn:[0-9a-f]{64}$/);

    // The same turn again (a re-fired agent_end, a retried run): the same request.
    await runHook(
      hooks,
      "agent_end",
      { runId: "run-2", messages, success: true },
      { ...ctx, runId: "run-2" },
    );
    expect(calls[1]!.input).toEqual(request);
    // Another session or a later turn gets another key.
    await runHook(hooks, "agent_end", { messages, success: true }, { ...ctx, sessionId: "sess-2" });
    expect(calls[2]!.input.ingestion_key).not.toBe(request.ingestion_key);
    const later = [
      ...messages,
      { role: "user", content: "next", timestamp: 1_800_000_200_000 },
      { role: "assistant", content: [{ type: "text", text: "ok" }], timestamp: 1_800_000_201_000 },
    ];
    await runHook(hooks, "agent_end", { messages: later, success: true }, ctx);
    expect(calls[3]!.input.ingestion_key).not.toBe(request.ingestion_key);
    expect(calls[3]!.input.text).toBe("User: next\nAssistant: ok");
  });

  test("auto-capture skips failed runs, cron/heartbeat runs and turns without text; failures are logged", async () => {
    const { hooks, calls, logs } = hooked(undefined, () => {
      throw new ZkrCommandError("exit");
    });
    const messages = turn("hello", [{ type: "text", text: "hi" }]);
    await runHook(hooks, "agent_end", { messages, success: false }, {});
    await runHook(hooks, "agent_end", { messages, success: true }, { trigger: "cron" });
    await runHook(hooks, "agent_end", { messages, success: true }, { trigger: "heartbeat" });
    await runHook(
      hooks,
      "agent_end",
      { messages: turn("  ", [{ type: "text", text: "x" }]), success: true },
      {},
    );
    await runHook(hooks, "agent_end", { messages: turn("q", [{ type: "toolCall" }]), success: true }, {});
    await runHook(hooks, "agent_end", { messages: [], success: true }, {});
    expect(calls).toHaveLength(0);
    await runHook(hooks, "agent_end", { messages, success: true }, { trigger: "user" });
    expect(calls).toHaveLength(1);
    expect(calls[0]!.input.person_id).toBe("default");
    expect(logs).toContain("warn zkr: auto-capture failed (exit)");
  });

  test("auto-capture without message times uses now, and long sides are cut", async () => {
    const { hooks, calls } = hooked(undefined, () => ({}));
    const long = "x".repeat(CAPTURE_MAX_CHARS + 10);
    await runHook(
      hooks,
      "agent_end",
      {
        messages: [
          { role: "user", content: long },
          { role: "assistant", content: [{ type: "text", text: "ok" }] },
        ],
        success: true,
      },
      {},
    );
    const request = calls[0]!.input;
    expect(request.captured_at).toBe(1_800_000_000);
    expect(request.recorded_at).toBe(1_800_000_000);
    expect((request.text as string).length).toBeLessThan(CAPTURE_MAX_CHARS + 40);
    expect(lastTurn([{ role: "user", content: "only a question" }])).toBeUndefined();
  });
});
