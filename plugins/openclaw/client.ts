import { mkdirSync } from "node:fs";
import { dirname } from "node:path";

import {
  encodeRequest,
  runZkrEncoded,
  ZkrCommandError,
  type RunZkrOptions,
  type ZkrOperation,
} from "./runner.ts";
import { ZkrServeClient } from "./serve.ts";

/** A bound zkr runner: one operation, one JSON request, optional abort signal. */
export type ZkrRunner = (operation: ZkrOperation, input: unknown, signal?: AbortSignal) => Promise<unknown>;

/** The runner the plugin builds: also says how it reaches zkr and can be closed. */
export interface ZkrRunnerHandle extends ZkrRunner {
  /** `serve` (one persistent `zkr serve` child) or `cli` (one `zkr` process per operation). */
  transport(): "serve" | "cli";
  /** How many `zkr serve` children were started so far (0 on the CLI path). */
  serverStarts(): number;
  /** Ends the persistent child, if any (EOF, then SIGTERM/SIGKILL). Later calls start a new one. */
  close(): Promise<void>;
}

export interface ZkrRunnerSettings {
  command: string;
  database: string;
  /** Use `zkr serve` (default true); false runs one CLI process per operation. */
  serve?: boolean;
  timeoutMs?: number;
  killGraceMs?: number;
  maxOutputBytes?: number;
  /** Idle time after which the persistent child is closed. */
  idleMs?: number;
  env?: NodeJS.ProcessEnv;
}

/**
 * Binds zkr to one executable and database. Operations go to one persistent
 * `zkr serve --db DATABASE` child (see {@link ZkrServeClient}), or, when
 * `serve` is off or unavailable (an older zkr), to one CLI process each
 * ({@link runZkrEncoded}); both paths apply the same request checks, time and
 * output bounds and the same redacted error. The database's parent directory
 * is created (mode 0700) on the first call only, never at registration time.
 */
export function createZkrRunner(settings: ZkrRunnerSettings): ZkrRunnerHandle {
  let directoryReady = false;
  const cli = (operation: ZkrOperation, body: string, signal?: AbortSignal): Promise<unknown> => {
    const options: RunZkrOptions = { command: settings.command, database: settings.database };
    if (signal !== undefined) options.signal = signal;
    if (settings.timeoutMs !== undefined) options.timeoutMs = settings.timeoutMs;
    if (settings.killGraceMs !== undefined) options.killGraceMs = settings.killGraceMs;
    if (settings.maxOutputBytes !== undefined) options.maxOutputBytes = settings.maxOutputBytes;
    if (settings.env !== undefined) options.env = settings.env;
    return runZkrEncoded(operation, body, options);
  };
  const server = settings.serve === false ? undefined : new ZkrServeClient(settings, cli);

  const run = async (operation: ZkrOperation, input: unknown, signal?: AbortSignal): Promise<unknown> => {
    const body = encodeRequest(operation, input);
    if (!directoryReady) {
      try {
        mkdirSync(dirname(settings.database), { recursive: true, mode: 0o700 });
      } catch {
        throw new ZkrCommandError("database_dir");
      }
      directoryReady = true;
    }
    return server === undefined ? cli(operation, body, signal) : server.request(operation, body, signal);
  };
  return Object.assign(run, {
    transport: (): "serve" | "cli" => server?.transport ?? "cli",
    serverStarts: (): number => server?.starts ?? 0,
    close: async (): Promise<void> => {
      await server?.close();
    },
  });
}
