// Runs inside the Node.js that OpenClaw requires (see loader-check.sh).
// 1. `openclaw plugins inspect zkr --runtime --json` must report the plugin as
//    loaded from this directory, in the memory slot, with all seven tools.
// 2. The host's own memory facade (openclaw/plugin-sdk/memory-host-search)
//    must load the plugin through the real loader and return our manager,
//    whose search/read reach the real zkr CLI.
// Usage: node loader-check-host.mjs OPENCLAW_PACKAGE_DIR PLUGIN_DIR CONFIG_JSON ZKR_COMMAND DATABASE
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [openclawDir, pluginDir, configPath, zkrCommand, database] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(join(pluginDir, "openclaw.plugin.json"), "utf8"));
const openclawVersion = JSON.parse(readFileSync(join(openclawDir, "package.json"), "utf8")).version;
let passed = 0;

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
ok(
  `openclaw ${openclawVersion} plugins inspect zkr --runtime: status=${plugin.status}, kind=${plugin.kind}, ` +
    `memory slot selected, tools=${plugin.toolNames.join(",")}`,
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
await host.closeActiveMemorySearchManagers(cfg);
ok(`host memory facade -> zkr manager: search hit ${hit.path} (score ${hit.score}), read "${read.text}"`);

console.log(`loader check: ${passed} passed, 0 failed`);
process.exit(0);
