import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { createZkrRunner } from "../client.ts";
import {
  MAX_OUTPUT_BYTES,
  MAX_REQUEST_BYTES,
  runZkr,
  ZKR_COMMAND_FAILED,
  ZkrCommandError,
  type ZkrOperation,
} from "../runner.ts";
import { cleanupTempDirs, rejection, script, tempDir } from "./helpers.ts";

afterAll(cleanupTempDirs);

const SECRET = "SECRET-MARKER-7f3a";

function expectRedacted(error: Error, kind: string, ...forbidden: string[]): void {
  expect(error).toBeInstanceOf(ZkrCommandError);
  expect(error.message).toBe(ZKR_COMMAND_FAILED);
  expect(String(error)).toBe("Error: zkr command failed");
  expect((error as ZkrCommandError).kind).toBe(kind as ZkrCommandError["kind"]);
  expect(error.cause).toBeUndefined();
  for (const text of [SECRET, ...forbidden]) {
    expect(String(error)).not.toContain(text);
    expect(JSON.stringify(error)).not.toContain(text);
  }
}

describe("runZkr", () => {
  test("a missing binary fails with exactly `Error: zkr command failed`, not naming the command", async () => {
    const dir = tempDir();
    const command = join(dir, `no-such-zkr-${SECRET}`);
    const error = await rejection(
      runZkr("search", { query: SECRET }, { command, database: join(dir, "m.db") }),
    );
    expectRedacted(error, "spawn", command);
  });

  test("spawns the executable without a shell and with the argv --db DATABASE OPERATION", async () => {
    const dir = tempDir();
    // Prints its argv as JSON; a shell would have expanded the `$HOME` and `;` in the database path.
    const command = script(
      dir,
      "argv.sh",
      `cat >/dev/null; printf '['; sep=''; for a in "$@"; do printf '%s"%s"' "$sep" "$a"; sep=','; done; printf ']\\n'`,
    );
    const database = join(dir, "odd $HOME; name.db");
    const value = await runZkr("get", { target: { kind: "claim", id: "x" } }, { command, database });
    expect(value).toEqual(["--db", database, "get"]);
  });

  test("writes the compact JSON request to stdin and returns the parsed stdout value", async () => {
    const dir = tempDir();
    const command = script(dir, "echo.sh", "cat");
    const input = { tenant_id: "t", person_id: "p", query: "Acme ünïcode", limit: 3 };
    expect(await runZkr("search", input, { command, database: join(dir, "m.db") })).toEqual(input);
    const capture = join(dir, "stdin.txt");
    const tee = script(dir, "tee.sh", `cat > '${capture}'; echo '{"ok":true}'`);
    await runZkr("search", input, { command: tee, database: join(dir, "m.db") });
    expect(readFileSync(capture, "utf8")).toBe(JSON.stringify(input));
  });

  test("returns any JSON type (arrays, null)", async () => {
    const dir = tempDir();
    const array = script(dir, "array.sh", `cat >/dev/null; echo '[1,"a",null]'`);
    const nullish = script(dir, "null.sh", `cat >/dev/null; echo null`);
    expect(await runZkr("search", {}, { command: array, database: join(dir, "m.db") })).toEqual([
      1,
      "a",
      null,
    ]);
    expect(await runZkr("search", {}, { command: nullish, database: join(dir, "m.db") })).toBeNull();
  });

  test("exit 0 with `not json` on stdout is rejected", async () => {
    const dir = tempDir();
    const command = script(dir, "notjson.sh", `cat >/dev/null; echo 'not json ${SECRET}'`);
    expectRedacted(
      await rejection(runZkr("search", {}, { command, database: join(dir, "m.db") })),
      "malformed_output",
    );
  });

  test("empty stdout and invalid UTF-8 are malformed output", async () => {
    const dir = tempDir();
    const empty = script(dir, "empty.sh", "cat >/dev/null");
    const latin1 = script(dir, "latin1.sh", `cat >/dev/null; printf '"\\377"\\n'`);
    for (const command of [empty, latin1]) {
      expectRedacted(
        await rejection(runZkr("search", {}, { command, database: join(dir, "m.db") })),
        "malformed_output",
      );
    }
  });

  test("a non-zero exit is rejected without leaking stderr, stdout or the request", async () => {
    const dir = tempDir();
    const command = script(
      dir,
      "fail.sh",
      `cat >/dev/null; echo '{"error":"${SECRET} stderr"}' >&2; echo '{"out":"${SECRET}"}'; exit 1`,
    );
    const error = await rejection(
      runZkr("remember", { text: `request ${SECRET}` }, { command, database: join(dir, "m.db") }),
    );
    expectRedacted(error, "exit", command, "request");
  });

  test("a death by signal is a failure", async () => {
    const dir = tempDir();
    const command = script(dir, "suicide.sh", "cat >/dev/null; kill -KILL $$");
    expectRedacted(await rejection(runZkr("search", {}, { command, database: join(dir, "m.db") })), "exit");
  });

  test("the CLI's `record not found` envelope is classified as not_found (still redacted)", async () => {
    const dir = tempDir();
    const command = script(
      dir,
      "missing.sh",
      `cat >/dev/null; echo '{"error":"record not found"}' >&2; exit 1`,
    );
    expectRedacted(await rejection(runZkr("get", {}, { command, database: join(dir, "m.db") })), "not_found");
  });

  test("stdout flooding past 1 MiB is killed and rejected, the marker absent", async () => {
    const dir = tempDir();
    const command = script(
      dir,
      "flood-out.sh",
      `cat >/dev/null; while :; do echo '${SECRET}${"x".repeat(200)}'; done`,
    );
    const started = Date.now();
    const error = await rejection(runZkr("search", {}, { command, database: join(dir, "m.db") }));
    expectRedacted(error, "output_limit");
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  test("stderr flooding past 1 MiB is killed and rejected, the marker absent", async () => {
    const dir = tempDir();
    const command = script(
      dir,
      "flood-err.sh",
      `cat >/dev/null; while :; do echo '${SECRET}${"y".repeat(200)}' >&2; done`,
    );
    expectRedacted(
      await rejection(runZkr("search", {}, { command, database: join(dir, "m.db") })),
      "output_limit",
    );
  });

  test("the cap counts stdout and stderr together", async () => {
    const dir = tempDir();
    // 700 KiB on each stream: each alone is under 1 MiB, together they are over.
    const command = script(
      dir,
      "split.sh",
      `cat >/dev/null; head -c 716800 /dev/zero | tr '\\0' a >&2; printf '"'; head -c 716800 /dev/zero | tr '\\0' b; printf '"\\n'`,
    );
    expectRedacted(
      await rejection(runZkr("search", {}, { command, database: join(dir, "m.db") })),
      "output_limit",
    );
    expect(MAX_OUTPUT_BYTES).toBe(1_048_576);
  });

  test("output just under the cap is accepted", async () => {
    const dir = tempDir();
    const command = script(
      dir,
      "big.sh",
      `cat >/dev/null; printf '"'; head -c 1048000 /dev/zero | tr '\\0' c; printf '"\\n'`,
    );
    const value = await runZkr("search", {}, { command, database: join(dir, "m.db") });
    expect(typeof value === "string" && value.length).toBe(1_048_000);
  });

  test("a hanging child times out and is killed", async () => {
    const dir = tempDir();
    const pidFile = join(dir, "pid");
    const command = script(dir, "hang.sh", `echo $$ > '${pidFile}'; exec sleep 30`);
    const started = Date.now();
    const error = await rejection(
      runZkr("search", {}, { command, database: join(dir, "m.db"), timeoutMs: 300, killGraceMs: 200 }),
    );
    expectRedacted(error, "timeout");
    expect(Date.now() - started).toBeLessThan(5_000);
    const pid = Number(readFileSync(pidFile, "utf8"));
    await Bun.sleep(300);
    expect(processAlive(pid)).toBe(false);
  });

  test("a child ignoring SIGTERM is escalated to SIGKILL", async () => {
    const dir = tempDir();
    const pidFile = join(dir, "pid");
    const command = script(
      dir,
      "stubborn.sh",
      `trap '' TERM; echo $$ > '${pidFile}'; while :; do sleep 0.05; done`,
    );
    const error = await rejection(
      runZkr("search", {}, { command, database: join(dir, "m.db"), timeoutMs: 300, killGraceMs: 300 }),
    );
    expectRedacted(error, "timeout");
    const pid = Number(readFileSync(pidFile, "utf8"));
    await Bun.sleep(150);
    expect(processAlive(pid)).toBe(true); // SIGTERM was ignored ...
    await Bun.sleep(800);
    expect(processAlive(pid)).toBe(false); // ... and SIGKILL followed.
  });

  test("a timeout also stops what the child started (its process group)", async () => {
    const dir = tempDir();
    const pidFile = join(dir, "pid");
    const command = script(dir, "wrapper.sh", `sleep 30 & echo $! > '${pidFile}'; wait`);
    const error = await rejection(
      runZkr("search", {}, { command, database: join(dir, "m.db"), timeoutMs: 1_000, killGraceMs: 200 }),
    );
    expectRedacted(error, "timeout");
    const pid = Number(readFileSync(pidFile, "utf8"));
    await Bun.sleep(300);
    expect(processAlive(pid)).toBe(false);
  });

  test("an abort signal kills the running child", async () => {
    const dir = tempDir();
    const command = script(dir, "slow.sh", "exec sleep 30");
    const controller = new AbortController();
    const pending = runZkr("search", {}, { command, database: join(dir, "m.db"), signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    expectRedacted(await rejection(pending), "aborted");
  });

  test("an already aborted signal rejects before spawning", async () => {
    const dir = tempDir();
    const marker = join(dir, "spawned");
    const command = script(dir, "mark.sh", `touch '${marker}'; echo '{}'`);
    const controller = new AbortController();
    controller.abort();
    const error = await rejection(
      runZkr("search", {}, { command, database: join(dir, "m.db"), signal: controller.signal }),
    );
    expectRedacted(error, "aborted");
    expect(existsSync(marker)).toBe(false);
  });

  test("a child that exits without reading a large request causes no unhandled pipe error", async () => {
    const dir = tempDir();
    const command = script(dir, "noread.sh", "exit 3");
    const input = { text: "z".repeat(900_000) };
    for (let i = 0; i < 5; i += 1) {
      expectRedacted(
        await rejection(runZkr("remember", input, { command, database: join(dir, "m.db") })),
        "exit",
      );
    }
    const ok = script(dir, "noread-ok.sh", `echo '{"ok":true}'`);
    expect(await runZkr("remember", input, { command: ok, database: join(dir, "m.db") })).toEqual({
      ok: true,
    });
  });

  test("requests over 1 MiB are refused without spawning", async () => {
    const dir = tempDir();
    const marker = join(dir, "spawned");
    const command = script(dir, "mark.sh", `touch '${marker}'; cat >/dev/null; echo '{}'`);
    const error = await rejection(
      runZkr("remember", { text: "q".repeat(MAX_REQUEST_BYTES) }, { command, database: join(dir, "m.db") }),
    );
    expectRedacted(error, "request_too_large");
    expect(existsSync(marker)).toBe(false);
  });

  test("unknown operations are refused", async () => {
    const dir = tempDir();
    const command = script(dir, "ok.sh", `cat >/dev/null; echo '{}'`);
    const error = await rejection(
      runZkr("export" as ZkrOperation, {}, { command, database: join(dir, "m.db") }),
    );
    expectRedacted(error, "invalid_operation");
  });

  test("parsed output cannot pollute prototypes", async () => {
    const dir = tempDir();
    const command = script(
      dir,
      "proto.sh",
      `cat >/dev/null; echo '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}},"items":[{"__proto__":{"polluted":true},"ok":1}],"prototype":1}'`,
    );
    const value = (await runZkr("search", {}, { command, database: join(dir, "m.db") })) as Record<
      string,
      unknown
    >;
    expect(Object.keys(value)).toEqual(["items"]);
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    const merged: Record<string, unknown> = { ...value, ...(value.items as Record<string, unknown>[])[0] };
    expect(merged.polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.keys((value.items as Record<string, unknown>[])[0]!)).toEqual(["ok"]);
  });
});

describe("createZkrRunner", () => {
  test("creates the database's parent directory on first use only", async () => {
    const dir = tempDir();
    const command = script(dir, "ok.sh", `cat >/dev/null; echo '{}'`);
    const database = join(dir, "nested", "deeper", "memory.db");
    const runner = createZkrRunner({ command, database, serve: false });
    expect(runner.transport()).toBe("cli");
    expect(existsSync(join(dir, "nested"))).toBe(false);
    await runner("search", {});
    expect(existsSync(join(dir, "nested", "deeper"))).toBe(true);
  });

  test("a parent directory that cannot be created fails redacted", async () => {
    const dir = tempDir();
    const command = script(dir, "ok.sh", `cat >/dev/null; echo '{}'`);
    const blocker = script(dir, "file-not-dir", "");
    const runner = createZkrRunner({ command, database: join(blocker, "memory.db"), serve: false });
    expectRedacted(await rejection(runner("search", {})), "database_dir", blocker);
  });
});

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie still answers signal 0; treat it as dead.
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) Z /.test(stat);
  } catch {
    return true;
  }
}
