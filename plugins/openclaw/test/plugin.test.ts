import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import entry, { PLUGIN_DESCRIPTION, PLUGIN_ID, PLUGIN_NAME, registerZkr } from "../index.ts";
import { CONFIG_JSON_SCHEMA, resolveConfig, ZkrConfigError } from "../config.ts";
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

  test("config schema: four optional non-empty strings, closed, no defaults; entry uses the same schema", () => {
    const schema = manifest.configSchema;
    expect(schema).toEqual(JSON.parse(JSON.stringify(CONFIG_JSON_SCHEMA)));
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required).toBeUndefined();
    expect(Object.keys(schema.properties).sort()).toEqual(["command", "database", "person", "tenant"]);
    for (const property of Object.values(schema.properties) as Record<string, unknown>[]) {
      expect(property.type).toBe("string");
      expect(property.minLength).toBe(1);
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

  test("zkr_store requires captured_at and recorded_at; zkr_correct valid_at and recorded_at; zkr_search exposes as_of", () => {
    const built = toolsFor(setup().tools);
    const schemaOf = (name: string) =>
      tool(built, name).parameters as unknown as { required: string[]; properties: Record<string, any> };
    const store = schemaOf("zkr_store");
    expect(store.required.sort()).toEqual(["captured_at", "kind", "recorded_at", "text"]);
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
    expect(claim.required.sort()).toEqual(["kind", "predicate", "subject", "valid_from", "value"]);
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
    expect(correct.required.sort()).toEqual(["claim_id", "recorded_at", "text", "valid_at", "value"]);
    expect(correct.properties.occurred_at).toBeUndefined();
    const search = schemaOf("zkr_search");
    expect(search.required).toEqual(["query"]);
    expect(search.properties.as_of.required.sort()).toEqual(["recorded_at", "valid_at"]);
    expect(search.properties.as_of.additionalProperties).toBe(false);
    expect(search.properties.limit).toMatchObject({ minimum: 1, maximum: 100 });
    expect(schemaOf("zkr_delete").required.sort()).toEqual(["deleted_at", "source_id"]);
    const reflect = schemaOf("zkr_reflect");
    expect(reflect.required.sort()).toEqual(["day", "evidence_ids", "recorded_at", "summary"]);
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
  });
});
