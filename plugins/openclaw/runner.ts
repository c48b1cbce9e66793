import { spawn, type ChildProcess } from "node:child_process";

import { isRecord, parseJsonSafely } from "./jsonsafe.ts";

/** The only error message a failing CLI call ever produces (no stderr, stdout, paths or request data). */
export const ZKR_COMMAND_FAILED = "zkr command failed";

/** CLI commands the plugin may run. Anything else is refused before spawning. */
export const ZKR_OPERATIONS = ["remember", "search", "get", "correct", "delete", "review"] as const;
export type ZkrOperation = (typeof ZKR_OPERATIONS)[number];

export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_KILL_GRACE_MS = 2_000;
/** Cap on stdout + stderr bytes together. */
export const MAX_OUTPUT_BYTES = 1_048_576;
/** The CLI refuses requests above 1 MiB; refusing them here avoids spawning and a broken pipe. */
export const MAX_REQUEST_BYTES = 1_048_576;

/**
 * Why a call failed. Kept on the error for logs, tests and control flow
 * (`not_found` becomes a "not found" read result); it never carries data.
 */
export type ZkrFailureKind =
  | "invalid_operation"
  | "invalid_request"
  | "request_too_large"
  | "database_dir"
  | "spawn"
  | "aborted"
  | "timeout"
  | "output_limit"
  | "exit"
  | "not_found"
  | "malformed_output";

/**
 * The single, redacted failure of a zkr CLI call. Its message is always
 * `zkr command failed`, its name stays `Error` (so it prints as
 * `Error: zkr command failed`) and it has no `cause`.
 */
export class ZkrCommandError extends Error {
  readonly kind: ZkrFailureKind;

  constructor(kind: ZkrFailureKind) {
    super(ZKR_COMMAND_FAILED);
    this.kind = kind;
  }
}

export interface RunZkrOptions {
  /** Executable path or name (resolved on PATH by the OS). Spawned directly, never via a shell. */
  command: string;
  /** Database path passed as `--db`. */
  database: string;
  /** Aborting kills the child and rejects the call. */
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Time between SIGTERM and SIGKILL when a child has to be stopped. */
  killGraceMs?: number;
  maxOutputBytes?: number;
  /** Child environment; defaults to the host's environment. */
  env?: NodeJS.ProcessEnv;
}

function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** True when the CLI's stderr is exactly the `record not found` envelope. */
function isNotFoundEnvelope(stderr: Buffer): boolean {
  if (stderr.length === 0 || stderr.length > 256) return false;
  try {
    const value = parseJsonSafely(stderr.toString("utf8"));
    return isRecord(value) && value.error === "record not found";
  } catch {
    return false;
  }
}

/**
 * Runs `command --db database operation` with `input` as compact JSON on stdin
 * and resolves with the parsed stdout value (any JSON type).
 *
 * Safety rules: no shell; fixed argument vector; only the six known
 * operations; requests over 1 MiB are refused; a hard timeout (30 s default)
 * and an output cap (1 MiB over stdout + stderr together) stop the child with
 * SIGTERM, escalating to SIGKILL after a grace period; stdin errors (a child
 * that exits without reading) are absorbed; stdout must be valid UTF-8 JSON
 * and is parsed without prototype-pollution hazards. Every failure rejects
 * with {@link ZkrCommandError} (`zkr command failed`); captured output is never
 * echoed.
 */
export function runZkr(operation: ZkrOperation, input: unknown, options: RunZkrOptions): Promise<unknown> {
  let body: string;
  try {
    body = encodeRequest(operation, input);
  } catch (error) {
    return Promise.reject(error);
  }
  return runZkrEncoded(operation, body, options);
}

/**
 * Checks the operation against the allow-list and encodes the request as
 * compact JSON, refusing requests over 1 MiB (the CLI's limit). Throws
 * {@link ZkrCommandError}.
 */
export function encodeRequest(operation: ZkrOperation, input: unknown): string {
  if (!(ZKR_OPERATIONS as readonly string[]).includes(operation)) {
    throw new ZkrCommandError("invalid_operation");
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(input);
  } catch {
    text = undefined;
  }
  if (typeof text !== "string") throw new ZkrCommandError("invalid_request");
  if (Buffer.byteLength(text, "utf8") > MAX_REQUEST_BYTES) throw new ZkrCommandError("request_too_large");
  return text;
}

/**
 * Sends `name` to the child's whole process group (POSIX; children are spawned `detached`,
 * so their group id is their pid), falling back to the child itself when the group is gone
 * or on Windows. Never throws: an exited child is not an error.
 */
export function signalProcessGroup(child: ChildProcess, name: NodeJS.Signals): void {
  const pid = child.pid;
  if (pid !== undefined && process.platform !== "win32") {
    try {
      process.kill(-pid, name);
      return;
    } catch {
      // The group is gone (or was never made); signal the child itself.
    }
  }
  try {
    child.kill(name);
  } catch {
    // Already gone or not killable.
  }
}

/** {@link runZkr} for a request already checked and encoded by {@link encodeRequest}. */
export function runZkrEncoded(
  operation: ZkrOperation,
  encoded: string,
  options: RunZkrOptions,
): Promise<unknown> {
  return new Promise<unknown>((resolvePromise, rejectPromise) => {
    const signal = options.signal;
    if (signal?.aborted) {
      rejectPromise(new ZkrCommandError("aborted"));
      return;
    }
    const body = Buffer.from(encoded, "utf8");

    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const killGraceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
    const maxOutputBytes = options.maxOutputBytes ?? MAX_OUTPUT_BYTES;

    let child: ChildProcess;
    try {
      child = spawn(options.command, ["--db", options.database, operation], {
        shell: false,
        windowsHide: true,
        stdio: ["pipe", "pipe", "pipe"],
        env: options.env ?? process.env,
        // Its own process group (POSIX), so stopping it also stops whatever it started
        // (a wrapper script's `zkr`, a `sleep`): signals go to the whole group.
        detached: process.platform !== "win32",
      });
    } catch {
      rejectPromise(new ZkrCommandError("spawn"));
      return;
    }

    let settled = false;
    let outputBytes = 0;
    const stdoutChunks: Buffer[] = [];
    const stderrChunks: Buffer[] = [];
    let timeoutTimer: ReturnType<typeof setTimeout> | undefined;

    const onAbort = (): void => {
      fail("aborted");
    };

    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      if (timeoutTimer !== undefined) clearTimeout(timeoutTimer);
      signal?.removeEventListener("abort", onAbort);
      return true;
    };

    const signalGroup = (name: NodeJS.Signals): void => signalProcessGroup(child, name);

    const stop = (): void => {
      if (!isRunning(child)) return;
      signalGroup("SIGTERM");
      // Not unref'd: a host that is about to exit still waits (at most the grace period)
      // for the SIGKILL of a child that ignored SIGTERM, instead of leaving it running.
      // The timer is kept when the child exits: what it started may still run in its group.
      setTimeout(() => signalGroup("SIGKILL"), killGraceMs);
    };

    function fail(kind: ZkrFailureKind): void {
      if (!settle()) return;
      stop();
      // Stop reading: nothing more is needed and a flooding child gets EPIPE.
      child.stdout?.destroy();
      child.stderr?.destroy();
      rejectPromise(new ZkrCommandError(kind));
    }

    const collect = (chunks: Buffer[]) => (chunk: Buffer | string) => {
      if (settled) return;
      const buffer = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk;
      outputBytes += buffer.length;
      if (outputBytes > maxOutputBytes) {
        fail("output_limit");
        return;
      }
      chunks.push(buffer);
    };

    child.on("error", () => {
      // Spawn failure (e.g. missing binary) or a failed kill; either way the call is over.
      fail("spawn");
    });
    child.stdout?.on("data", collect(stdoutChunks));
    child.stderr?.on("data", collect(stderrChunks));
    // Ignore errors on the pipes themselves (EPIPE when the child exits early,
    // ECONNRESET after destroy); the exit status decides the outcome.
    child.stdin?.on("error", () => {});
    child.stdout?.on("error", () => {});
    child.stderr?.on("error", () => {});

    child.on("close", (code: number | null) => {
      if (settled) return;
      if (code !== 0) {
        fail(isNotFoundEnvelope(Buffer.concat(stderrChunks)) ? "not_found" : "exit");
        return;
      }
      let value: unknown;
      try {
        const text = new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(stdoutChunks));
        value = parseJsonSafely(text);
      } catch {
        fail("malformed_output");
        return;
      }
      if (settle()) resolvePromise(value);
    });

    timeoutTimer = setTimeout(() => fail("timeout"), timeoutMs);
    signal?.addEventListener("abort", onAbort, { once: true });

    child.stdin?.end(body);
  });
}
