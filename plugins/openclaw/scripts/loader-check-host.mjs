// Runs inside the Node.js that OpenClaw requires (see loader-check.sh).
// 1. `openclaw plugins inspect zkr --runtime --json` must report the plugin as
//    loaded from this directory, in the memory slot, with all seven tools.
// 2. The host's own memory facade (openclaw/plugin-sdk/memory-host-search)
//    must load the plugin through the real loader and return our manager,
//    whose search/read reach the real zkr CLI.
// Usage: node loader-check-host.mjs OPENCLAW_PACKAGE_DIR PLUGIN_DIR CONFIG_JSON ZKR_COMMAND DATABASE
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [openclawDir, pluginDir, configPath, zkrCommand, database] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(join(pluginDir, "openclaw.plugin.json"), "utf8"));
const openclawVersion = JSON.parse(readFileSync(join(openclawDir, "package.json"), "utf8")).version;
let passed = 0;

/** Imports the dist chunk of this OpenClaw that exports `loadOpenClawPlugins`. */
async function findLoaderModule() {
  const dist = join(openclawDir, "dist");
  for (const name of readdirSync(dist)) {
    if (!name.endsWith(".mjs")) continue;
    const text = readFileSync(join(dist, name), "utf8");
    const match = /export \{[^}]*\bloadOpenClawPlugins as (\w+)[,\s}]/.exec(text);
    if (match && /^function loadOpenClawPlugins\(/m.test(text)) {
      const module = await import(pathToFileURL(join(dist, name)).href);
      return { loadOpenClawPlugins: module[match[1]] };
    }
  }
  throw new Error("loadOpenClawPlugins not found in this OpenClaw");
}

function ok(message) {
  passed += 1;
  console.log(`ok - ${message}`);
}

// 1. plugins inspect --runtime
const inspect = spawnSync(
  process.execPath,
  [join(openclawDir, "openclaw.mjs"), "plugins", "inspect", "zkr", "--runtime", "--json"],
  {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    timeout: 240_000,
  },
);
if (inspect.status !== 0) {
  console.error(inspect.stderr);
  throw new Error(`openclaw plugins inspect zkr --runtime exited ${inspect.status}`);
}
const report = JSON.parse(inspect.stdout);
const plugin = report.plugin;
assert.equal(plugin.id, "zkr");
assert.equal(plugin.status, "loaded", `status ${plugin.status}: ${plugin.error ?? ""}`);
assert.equal(plugin.imported, true);
assert.equal(plugin.kind, "memory");
assert.equal(plugin.memorySlotSelected, true);
assert.equal(plugin.rootDir, pluginDir);
assert.deepEqual([...plugin.toolNames].sort(), [...manifest.contracts.tools].sort());
assert.deepEqual(
  report.tools.map((group) => group.names),
  [
    ["memory_search", "memory_get"],
    ["zkr_store", "zkr_search", "zkr_correct", "zkr_delete", "zkr_reflect"],
  ],
);
const errors = (report.diagnostics ?? []).filter((d) => d.level === "error");
assert.deepEqual(errors, [], "no error diagnostics");
const blocked = (report.diagnostics ?? []).filter((d) => /blocked/.test(d.message ?? ""));
assert.deepEqual(blocked, [], "no blocked hook registrations");
// auto-recall, auto-capture and closing the zkr serve child, allowed by hooks.allowConversationAccess.
assert.deepEqual((report.typedHooks ?? []).map((hook) => hook.name).sort(), [
  "agent_end",
  "before_prompt_build",
  "gateway_stop",
]);
assert.equal(plugin.hookCount, 3);
ok(
  `openclaw ${openclawVersion} plugins inspect zkr --runtime: status=${plugin.status}, kind=${plugin.kind}, ` +
    `memory slot selected, tools=${plugin.toolNames.join(",")}, hooks=agent_end,before_prompt_build,gateway_stop`,
);
for (const d of report.diagnostics ?? []) console.log(`   diagnostic (${d.level}): ${d.message}`);

// 2. memory capability through the host facade
const seed = spawnSync(zkrCommand, ["--db", database, "remember"], {
  input: JSON.stringify({
    tenant_id: "openclaw",
    person_id: "main",
    kind: "conversation",
    text: "Sam said he works at Acme.",
    captured_at: 1_767_225_600,
    recorded_at: 1_767_225_601,
    claim: { subject: "Sam", predicate: "employer", value: "Acme", kind: "fact", valid_from: 1_767_225_600 },
  }),
  encoding: "utf8",
});
assert.equal(seed.status, 0, `seeding with the zkr CLI failed: ${seed.stderr}`);
const stored = JSON.parse(seed.stdout);

const cfg = JSON.parse(readFileSync(configPath, "utf8"));
const host = await import(pathToFileURL(join(openclawDir, "dist/plugin-sdk/memory-host-search.js")).href);
const { manager, error } = await host.getActiveMemorySearchManager({ cfg, agentId: "main" });
assert.ok(manager, `no memory manager from the host: ${error}`);
const status = manager.status();
assert.equal(status.provider, "zkr");
assert.equal(status.dbPath, database);
assert.deepEqual(status.vector, { enabled: false, available: false });
const hits = await manager.search("Acme", { maxResults: 5 });
const hit = hits.find((h) => h.path === `zkr://claim/${stored.claim_id}`);
assert.ok(hit, `claim not found in ${JSON.stringify(hits)}`);
assert.equal(hit.citation, stored.evidence_id);
const read = await manager.readFile({ relPath: hit.path });
assert.equal(read.status, "ok");
assert.equal(read.text, "Sam employer Acme");
const missing = await manager.readFile({ relPath: "zkr://claim/00000000000000000000000000000000" });
assert.equal(missing.status, "not_found");
ok(`host memory facade -> zkr manager: search hit ${hit.path} (score ${hit.score}), read "${read.text}"`);

// 3. auto-capture and auto-recall through OpenClaw's own hook runner (the loaded plugin's
//    registrations, with the conversation-access policy the config grants).
const pluginRuntime = await import(
  pathToFileURL(join(openclawDir, "dist/plugin-sdk/plugin-runtime.js")).href
);
if (!pluginRuntime.getGlobalHookRunner()) {
  // The memory facade loads plugins without activating them. Load and activate the registry
  // the way the gateway does, through OpenClaw's own loader (loadOpenClawPlugins, which is
  // internal: found by its export name in the pinned OpenClaw's dist).
  const loader = findLoaderModule();
  const { loadOpenClawPlugins } = await loader;
  loadOpenClawPlugins({ config: cfg, activate: true, throwOnLoadError: true });
}
const hooks = pluginRuntime.getGlobalHookRunner();
assert.ok(hooks, "OpenClaw has no global hook runner after loading the plugin");
assert.ok(hooks.hasHooks("agent_end"), "agent_end is not registered with the host");
assert.ok(hooks.hasHooks("before_prompt_build"), "before_prompt_build is not registered with the host");
const now = Date.now();
const messages = [
  { role: "user", content: "My sister Maya lives in Lisbon and teaches violin.", timestamp: now - 2_000 },
  {
    role: "assistant",
    content: [{ type: "text", text: "Noted: Maya, Lisbon, violin." }],
    timestamp: now - 1_000,
  },
];
const hookCtx = { agentId: "main", sessionKey: "agent:main:main", sessionId: "loader-check", runId: "run-1" };
await hooks.runAgentEnd({ runId: "run-1", messages, success: true }, hookCtx);
await hooks.runAgentEnd({ runId: "run-1", messages, success: true }, hookCtx); // fired twice: stored once
const turns = (await manager.search("Maya violin Lisbon", { maxResults: 10 })).filter((h) =>
  h.path.startsWith("zkr://source/"),
);
assert.equal(turns.length, 1, `expected one captured turn, got ${JSON.stringify(turns)}`);
assert.equal(
  turns[0].snippet,
  "User: My sister Maya lives in Lisbon and teaches violin.\nAssistant: Noted: Maya, Lisbon, violin.",
);
const built = await hooks.runBeforePromptBuild(
  { prompt: "Where does Maya live?", currentUserMessage: "Where does Maya live?", messages: [] },
  { agentId: "main", sessionKey: "agent:main:main", sessionId: "loader-check" },
);
assert.ok(built?.prependContext?.includes("<zkr-memory>"), `no recall block: ${JSON.stringify(built)}`);
assert.ok(built.prependContext.includes("Maya lives in Lisbon"), built.prependContext);
await hooks.runGatewayStop({ reason: "loader check" }, {});
ok(
  `OpenClaw hook runner -> agent_end captured the turn once (${turns[0].path}), before_prompt_build recalled it`,
);
await host.closeActiveMemorySearchManagers(cfg);

console.log(`loader check: ${passed} passed, 0 failed`);
process.exit(0);
