import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { createZkrRunner, type ZkrRunnerHandle, type ZkrRunnerSettings } from "../client.ts";
import { ZKR_COMMAND_FAILED, ZkrCommandError } from "../runner.ts";
import { isUsageEnvelope, serveArgs } from "../serve.ts";
import { cleanupTempDirs, PLUGIN_DIR, rejection, script, tempDir } from "./helpers.ts";

const FAKE_SERVE = join(PLUGIN_DIR, "test", "fixtures", "fake-serve.py");
const runners: ZkrRunnerHandle[] = [];

afterEach(async () => {
  for (const runner of runners.splice(0)) await runner.close();
});
afterAll(cleanupTempDirs);

interface Fake {
  runner: ZkrRunnerHandle;
  dir: string;
  database: string;
  /** One entry per server start: [pid, argv]. */
  starts(): Array<[number, string]>;
}

function fake(grammar = "first", settings: Partial<ZkrRunnerSettings> = {}): Fake {
  const dir = tempDir();
  const log = join(dir, "starts.log");
  const database = join(dir, "m.db");
  const runner = createZkrRunner({
    command: FAKE_SERVE,
    database,
    env: { ...process.env, FAKE_SERVE_LOG: log, FAKE_SERVE_GRAMMAR: grammar },
    ...settings,
  });
  runners.push(runner);
  const starts = (): Array<[number, string]> =>
    existsSync(log)
      ? readFileSync(log, "utf8")
          .trim()
          .split("\n")
          .map((line) => {
            const space = line.indexOf(" ");
            return [Number(line.slice(0, space)), line.slice(space + 1)] as [number, string];
          })
      : [];
  return { runner, dir, database, starts };
}

type Echo = { echo: Record<string, unknown>; pid: number };

function expectFailed(error: Error, kind: string): void {
  expect(error).toBeInstanceOf(ZkrCommandError);
  expect(String(error)).toBe(`Error: ${ZKR_COMMAND_FAILED}`);
  expect((error as ZkrCommandError).kind).toBe(kind as ZkrCommandError["kind"]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true;
  }
}

describe("zkr serve client", () => {
  test("one persistent child answers every request, matched by id", async () => {
    const { runner, database, starts } = fake();
    const first = (await runner("search", { query: "a" })) as Echo;
    const second = (await runner("get", { target: { kind: "claim", id: "c" } })) as Echo;
    expect(first.echo).toEqual({ query: "a" });
    expect(second.echo).toEqual({ target: { kind: "claim", id: "c" } });
    expect(first.pid).toBe(second.pid);
    expect(starts()).toEqual([[first.pid, `serve --db ${database}`]]);
    expect(runner.transport()).toBe("serve");
  });

  test("concurrent requests answered out of order reach their own callers", async () => {
    const { runner } = fake();
    const held = runner("search", { query: "hold" });
    const next = runner("search", { query: "next" });
    const [a, b] = (await Promise.all([held, next])) as Echo[];
    expect(a!.echo.query).toBe("hold");
    expect(b!.echo.query).toBe("next");
  });

  test("an error line fails only its request; `record not found` is kind not_found", async () => {
    const { runner } = fake();
    expectFailed(await rejection(runner("get", { query: "missing" })), "not_found");
    expect(((await runner("search", { query: "still here" })) as Echo).echo.query).toBe("still here");
  });

  test("a crashed child fails the request in flight and is restarted by the next request", async () => {
    const { runner, starts } = fake();
    const before = (await runner("search", { query: "a" })) as Echo;
    expectFailed(await rejection(runner("search", { query: "crash" })), "exit");
    const after = (await runner("search", { query: "b" })) as Echo;
    expect(after.pid).not.toBe(before.pid);
    expect(starts()).toHaveLength(2);
    expect(runner.transport()).toBe("serve");
  });

  test("a stuck request times out; its child (and what waits behind it) is stopped", async () => {
    const { runner, starts } = fake("first", { timeoutMs: 800, killGraceMs: 200 });
    const ok = (await runner("search", { query: "a" })) as Echo;
    const stuck = runner("search", { query: "hang" });
    const behind = runner("search", { query: "behind" });
    expectFailed(await rejection(stuck), "timeout");
    expectFailed(await rejection(behind), "timeout");
    await Bun.sleep(400);
    expect(alive(ok.pid)).toBe(false);
    expect(((await runner("search", { query: "c" })) as Echo).pid).not.toBe(ok.pid);
    expect(starts()).toHaveLength(2);
  });

  test("a response line over the cap or a non-JSON line stops the child; the next request restarts it", async () => {
    const { runner } = fake();
    const ok = (await runner("search", { query: "a" })) as Echo;
    const error = await rejection(runner("search", { query: "flood" }));
    expectFailed(error, "output_limit");
    expect(JSON.stringify(error)).not.toContain("MMMM");
    expectFailed(await rejection(runner("search", { query: "garbage" })), "malformed_output");
    await Bun.sleep(300);
    expect(alive(ok.pid)).toBe(false);
    expect(((await runner("search", { query: "b" })) as Echo).echo.query).toBe("b");
  });

  test("an abort fails its request at once; the child keeps serving", async () => {
    const { runner } = fake();
    const controller = new AbortController();
    const held = runner("search", { query: "hold" }, controller.signal);
    setTimeout(() => controller.abort(), 50);
    expectFailed(await rejection(held), "aborted");
    const already = new AbortController();
    already.abort();
    expectFailed(await rejection(runner("search", { query: "x" }, already.signal)), "aborted");
    expect(((await runner("search", { query: "after" })) as Echo).echo.query).toBe("after");
  });

  test("the CLI grammar `--db DB serve` is tried when `serve --db DB` is a usage error", async () => {
    const { runner, database, starts } = fake("second");
    const answer = (await runner("search", { query: "a" })) as Echo;
    expect(answer.echo.query).toBe("a");
    expect(starts().map(([, argv]) => argv)).toEqual([`serve --db ${database}`, `--db ${database} serve`]);
    await runner("search", { query: "b" });
    expect(starts()).toHaveLength(2);
  });

  test("a zkr without serve (usage errors for both grammars) falls back to one CLI call per operation", async () => {
    const dir = tempDir();
    const calls = join(dir, "calls.log");
    // An older zkr: the usage envelope for anything but `--db DB COMMAND`, `unknown command` for serve.
    const command = script(
      dir,
      "old-zkr.sh",
      `echo "$*" >> '${calls}'
if [ "$1" != "--db" ]; then echo '{"error":"usage: zkr --db PATH COMMAND (use --help)"}' >&2; exit 1; fi
if [ "$3" = "serve" ]; then echo '{"error":"unknown command \\"serve\\""}' >&2; exit 1; fi
request=$(cat); printf '{"cli":"%s","request":%s}\\n' "$3" "$request"`,
    );
    const database = join(dir, "m.db");
    const runner = createZkrRunner({ command, database });
    runners.push(runner);
    const [a, b] = await Promise.all([runner("search", { query: "a" }), runner("get", { query: "b" })]);
    expect(a).toEqual({ cli: "search", request: { query: "a" } });
    expect(b).toEqual({ cli: "get", request: { query: "b" } });
    expect(runner.transport()).toBe("cli");
    expect(await runner("remember", { text: "c" })).toEqual({ cli: "remember", request: { text: "c" } });
    const lines = readFileSync(calls, "utf8").trim().split("\n");
    expect(lines.slice(0, 2)).toEqual([`serve --db ${database}`, `--db ${database} serve`]);
    expect(lines.slice(2).sort()).toEqual([
      `--db ${database} get`,
      `--db ${database} remember`,
      `--db ${database} search`,
    ]);
  });

  test("a missing executable fails redacted through the CLI path, not naming it", async () => {
    const dir = tempDir();
    const command = join(dir, "no-such-zkr");
    const runner = createZkrRunner({ command, database: join(dir, "m.db") });
    runners.push(runner);
    const error = await rejection(runner("search", { query: "x" }));
    expectFailed(error, "spawn");
    expect(String(error)).not.toContain(command);
    expect(runner.transport()).toBe("cli");
  });

  test("children that keep dying before answering make the client give up on serve", async () => {
    const dir = tempDir();
    const starts = join(dir, "starts");
    const command = script(
      dir,
      "dies.sh",
      `if [ "$1" = "serve" ]; then echo x >> '${starts}'; exit 7; fi
cat >/dev/null; echo '{"cli":true}'`,
    );
    const runner = createZkrRunner({ command, database: join(dir, "m.db") });
    runners.push(runner);
    for (let i = 0; i < 3; i += 1) expectFailed(await rejection(runner("search", { query: "x" })), "exit");
    expect(runner.transport()).toBe("cli");
    expect(await runner("search", { query: "x" })).toEqual({ cli: true });
    expect(readFileSync(starts, "utf8").trim().split("\n")).toHaveLength(3);
  });

  test("close ends the child with EOF; a later request starts a new one", async () => {
    const { runner, starts } = fake();
    const first = (await runner("search", { query: "a" })) as Echo;
    await runner.close();
    expect(alive(first.pid)).toBe(false);
    const second = (await runner("search", { query: "b" })) as Echo;
    expect(second.pid).not.toBe(first.pid);
    expect(starts()).toHaveLength(2);
  });

  test("an idle child is closed after the idle time", async () => {
    const { runner } = fake("first", { idleMs: 200 });
    const first = (await runner("search", { query: "a" })) as Echo;
    await Bun.sleep(700);
    expect(alive(first.pid)).toBe(false);
  });

  test("usage envelopes are recognised, other errors are not", () => {
    expect(isUsageEnvelope('{"error":"usage: zkr --db PATH COMMAND (use --help)"}\n')).toBe(true);
    expect(isUsageEnvelope('{"error":"unknown command \\"serve\\""}')).toBe(true);
    expect(isUsageEnvelope('{"error":"database is locked"}')).toBe(false);
    expect(isUsageEnvelope("usage: something")).toBe(false);
    expect(serveArgs("/d.db")).toEqual([
      ["serve", "--db", "/d.db"],
      ["--db", "/d.db", "serve"],
    ]);
  });
});
