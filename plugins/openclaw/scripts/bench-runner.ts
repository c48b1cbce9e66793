/**
 * Per-operation latency through the plugin's runner: one `zkr serve` child
 * against one CLI process per operation, on a fresh small database. Prints
 * numbers, asserts nothing.
 *
 * Usage: bun scripts/bench-runner.ts [ZKR_COMMAND] [N]
 * (ZKR_COMMAND defaults to test/fixtures/zkr-python.sh, N to 40.)
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { createZkrRunner } from "../client.ts";

const here = dirname(fileURLToPath(import.meta.url));
const command = process.argv[2] ?? join(here, "..", "test", "fixtures", "zkr-python.sh");
const n = Number(process.argv[3] ?? 40);
const scope = { tenant_id: "bench", person_id: "bench" };

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
}

for (const serve of [true, false]) {
  const dir = mkdtempSync(join(tmpdir(), "zkr-openclaw-bench-"));
  const runner = createZkrRunner({ command, database: join(dir, "m.db"), serve });
  try {
    await runner("search", { ...scope, query: "warm up", limit: 5 });
    const times: Record<string, number[]> = { remember: [], search: [] };
    for (let i = 0; i < n; i += 1) {
      let started = performance.now();
      await runner("remember", {
        ...scope,
        kind: "conversation",
        text: `note ${i} about kayaks and fjords`,
        captured_at: 1_700_000_000 + i,
        recorded_at: 1_700_000_000 + i,
      });
      times.remember!.push(performance.now() - started);
      started = performance.now();
      await runner("search", { ...scope, query: "kayaks fjords", limit: 5 });
      times.search!.push(performance.now() - started);
    }
    for (const [operation, list] of Object.entries(times)) {
      list.sort((a, b) => a - b);
      console.log(
        `${runner.transport()} ${operation}: p50 ${percentile(list, 50).toFixed(2)} ms, ` +
          `p95 ${percentile(list, 95).toFixed(2)} ms (n=${n})`,
      );
    }
  } finally {
    await runner.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
