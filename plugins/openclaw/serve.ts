import { spawn, type ChildProcess } from "node:child_process";

import { isRecord, parseJsonSafely } from "./jsonsafe.ts";
import {
  DEFAULT_KILL_GRACE_MS,
  DEFAULT_TIMEOUT_MS,
  MAX_OUTPUT_BYTES,
  signalProcessGroup,
  ZkrCommandError,
  type ZkrFailureKind,
  type ZkrOperation,
} from "./runner.ts";

/**
 * Argument vectors tried for the long-lived server, in order: `zkr serve --db
 * DATABASE`, then `zkr --db DATABASE serve` (the CLI's own grammar). A zkr
 * that refuses both with its usage / unknown command error has no `serve`.
 */
export function serveArgs(database: string): string[][] {
  return [
    ["serve", "--db", database],
    ["--db", database, "serve"],
  ];
}

/** A server that has been idle this long is closed (EOF on its stdin); the next call starts a new one. */
export const DEFAULT_IDLE_MS = 300_000;
/** Consecutive servers that die before answering anything before the client gives up on `serve`. */
export const MAX_FAILED_STARTS = 3;
/** How much of a server's stderr is kept, only to recognise a usage error. */
const STDERR_HEAD_BYTES = 4096;

export interface ZkrServeSettings {
  command: string;
  database: string;
  timeoutMs?: number;
  killGraceMs?: number;
  /** Cap on one response line (bytes, without the newline). */
  maxOutputBytes?: number;
  idleMs?: number;
  env?: NodeJS.ProcessEnv;
}

/** Runs one operation some other way (the one-shot CLI) once `serve` is known to be unavailable. */
export type FallbackRunner = (
  operation: ZkrOperation,
  body: string,
  signal?: AbortSignal,
) => Promise<unknown>;

interface Pending {
  operation: ZkrOperation;
  body: string;
  /** The request line as sent (resent as is to the next argument vector). */
  line: string;
  signal: AbortSignal | undefined;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  timer: ReturnType<typeof setTimeout>;
  onAbort: () => void;
}

/** State of one started server process. */
interface Server {
  child: ChildProcess;
  /** It answered at least one line: it speaks the protocol. */
  answered: boolean;
  stdout: Buffer[];
  stdoutBytes: number;
  stderrHead: Buffer[];
  stderrBytes: number;
  gone: boolean;
}

/** True when `text` is a zkr error envelope saying the CLI does not know `serve` (an older zkr). */
export function isUsageEnvelope(text: string): boolean {
  for (const line of text.split("\n")) {
    const trimmed = line.trim();
    if (trimmed.length === 0) continue;
    try {
      const value = parseJsonSafely(trimmed);
      if (isRecord(value) && typeof value.error === "string") {
        const message = value.error;
        if (message.startsWith("usage:") || message.startsWith("unknown command")) return true;
      }
    } catch {
      // not an envelope
    }
  }
  return false;
}

function unref(stream: unknown): void {
  const target = stream as { unref?: () => void } | null | undefined;
  target?.unref?.();
}

/**
 * A client of one long-lived `zkr serve --db DATABASE` child (one request per
 * line on its stdin, one response per line on its stdout, matched by `id`).
 *
 * - The child is started on the first request and restarted on the next
 *   request after it crashed. It runs in its own process group; a stuck or
 *   flooding child is stopped with SIGTERM, then SIGKILL, sent to the group.
 * - Each request is bounded in time (30 s default: the child is stopped and
 *   every request in flight fails) and its response line in size (1 MiB).
 * - An abort signal fails its request at once; the child's late answer is dropped.
 * - If the child cannot be started, or exits with zkr's usage / unknown command
 *   error (a zkr without `serve`), or {@link MAX_FAILED_STARTS} children in a
 *   row die before answering anything, the client switches for good to the
 *   fallback (one CLI process per operation); requests the dead child never
 *   answered are re-run there only when it cannot have executed them.
 * - The child never keeps the host alive on its own: its handles are unref'd;
 *   pending requests hold the event loop through their timers. It is closed
 *   after {@link DEFAULT_IDLE_MS} without requests and by {@link close}.
 * - Every failure is a {@link ZkrCommandError} (`zkr command failed`); server
 *   output is never echoed.
 */
export class ZkrServeClient {
  readonly #settings: ZkrServeSettings;
  readonly #fallback: FallbackRunner;
  readonly #pending = new Map<number, Pending>();
  #server: Server | undefined;
  #nextId = 1;
  #failedStarts = 0;
  /** Index into {@link serveArgs} of the argument vector in use. */
  #variant = 0;
  #unavailable = false;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** Servers started so far (tests and diagnostics). */
  starts = 0;

  constructor(settings: ZkrServeSettings, fallback: FallbackRunner) {
    this.#settings = settings;
    this.#fallback = fallback;
  }

  /** `serve` while the persistent server is used, `cli` once the client fell back for good. */
  get transport(): "serve" | "cli" {
    return this.#unavailable ? "cli" : "serve";
  }

  /** Sends one request (its compact JSON `body`) and resolves with the server's `ok` value. */
  request(operation: ZkrOperation, body: string, signal?: AbortSignal): Promise<unknown> {
    if (this.#unavailable) return this.#fallback(operation, body, signal);
    if (signal?.aborted) return Promise.reject(new ZkrCommandError("aborted"));
    return new Promise<unknown>((resolve, reject) => {
      const id = this.#nextId++;
      const timeoutMs = this.#settings.timeoutMs ?? DEFAULT_TIMEOUT_MS;
      const onAbort = (): void => {
        if (this.#settle(id)) reject(new ZkrCommandError("aborted"));
      };
      const timer = setTimeout(() => this.#timedOut(id), timeoutMs);
      const line = `{"id":${id},"command":${JSON.stringify(operation)},"request":${body}}\n`;
      this.#pending.set(id, { operation, body, line, signal, resolve, reject, timer, onAbort });
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#clearIdle();
      if (this.#server !== undefined) {
        this.#server.child.stdin?.write(line);
      } else {
        this.#start(); // writes every pending line, this one included
      }
    });
  }

  /** Closes the server: EOF on its stdin, then SIGTERM/SIGKILL if it does not exit in time. */
  async close(): Promise<void> {
    this.#clearIdle();
    const server = this.#server;
    for (const id of [...this.#pending.keys()]) this.#fail(id, "aborted");
    if (server === undefined || server.gone) return;
    const exited = new Promise<void>((resolve) => server.child.once("close", () => resolve()));
    server.child.stdin?.end();
    const grace = this.#settings.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
    const timer = setTimeout(() => this.#stop(server), grace);
    await exited;
    clearTimeout(timer);
  }

  #start(): void {
    const args = serveArgs(this.#settings.database)[this.#variant];
    if (args === undefined) {
      this.#giveUp();
      return;
    }
    let child: ChildProcess;
    try {
      child = spawn(this.#settings.command, args, {
        shell: false,
        windowsHide: true,
        stdio: ["pipe", "pipe", "pipe"],
        env: this.#settings.env ?? process.env,
        detached: process.platform !== "win32",
      });
    } catch {
      this.#giveUp();
      return;
    }
    this.starts += 1;
    const server: Server = {
      child,
      answered: false,
      stdout: [],
      stdoutBytes: 0,
      stderrHead: [],
      stderrBytes: 0,
      gone: false,
    };
    this.#server = server;
    child.unref();
    unref(child.stdin);
    unref(child.stdout);
    unref(child.stderr);
    child.stdin?.on("error", () => {}); // EPIPE after the child died: the exit decides
    child.stdout?.on("error", () => {});
    child.stderr?.on("error", () => {});
    child.stdout?.on("data", (chunk: Buffer | string) => this.#onStdout(server, chunk));
    child.stderr?.on("data", (chunk: Buffer | string) => {
      if (server.stderrBytes >= STDERR_HEAD_BYTES) return;
      const buffer = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk;
      const kept = buffer.subarray(0, STDERR_HEAD_BYTES - server.stderrBytes);
      server.stderrHead.push(kept);
      server.stderrBytes += kept.length;
    });
    child.on("error", () => this.#onExit(server, true));
    child.on("close", () => this.#onExit(server, false));
    for (const pending of this.#pending.values()) child.stdin?.write(pending.line);
  }

  #onStdout(server: Server, chunk: Buffer | string): void {
    if (server.gone || server !== this.#server) return;
    let buffer = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk;
    const cap = this.#settings.maxOutputBytes ?? MAX_OUTPUT_BYTES;
    for (;;) {
      const newline = buffer.indexOf(0x0a);
      if (newline === -1) {
        server.stdout.push(buffer);
        server.stdoutBytes += buffer.length;
        if (server.stdoutBytes > cap) this.#abandon(server, "output_limit");
        return;
      }
      const line = Buffer.concat([...server.stdout, buffer.subarray(0, newline)]);
      server.stdout = [];
      server.stdoutBytes = 0;
      buffer = buffer.subarray(newline + 1);
      if (line.length > cap) {
        this.#abandon(server, "output_limit");
        return;
      }
      this.#onLine(server, line);
      if (server.gone) return;
    }
  }

  #onLine(server: Server, line: Buffer): void {
    let message: unknown;
    try {
      message = parseJsonSafely(new TextDecoder("utf-8", { fatal: true }).decode(line));
    } catch {
      this.#abandon(server, "malformed_output");
      return;
    }
    if (!isRecord(message)) {
      this.#abandon(server, "malformed_output");
      return;
    }
    server.answered = true;
    this.#failedStarts = 0;
    const id = message.id;
    if (typeof id !== "number") return; // an error about a line we did not send
    const pending = this.#pending.get(id);
    if (pending === undefined) return; // aborted or timed out meanwhile
    if (Object.hasOwn(message, "ok")) {
      if (this.#settle(id)) pending.resolve(message.ok);
    } else if (typeof message.error === "string") {
      this.#fail(id, message.error === "record not found" ? "not_found" : "exit");
    } else {
      this.#abandon(server, "malformed_output");
    }
  }

  #onExit(server: Server, spawnError: boolean): void {
    if (server.gone) return;
    server.gone = true;
    if (this.#server === server) this.#server = undefined;
    const stderr = Buffer.concat(server.stderrHead).toString("utf8");
    if (!server.answered && !spawnError && isUsageEnvelope(stderr)) {
      // It refused its arguments before reading a line: nothing was executed. Try the next
      // argument vector; after the last one, this zkr has no `serve`.
      this.#variant += 1;
      if (this.#pending.size > 0) this.#start();
      return;
    }
    if (!server.answered && spawnError) {
      // Not started at all (missing binary, ...): the CLI path reports it per call.
      this.#giveUp();
      return;
    }
    if (!server.answered) {
      this.#failedStarts += 1;
      if (this.#failedStarts >= MAX_FAILED_STARTS) this.#unavailable = true;
    }
    // It may have executed what it did not answer: those requests fail (no blind re-run).
    for (const id of [...this.#pending.keys()]) this.#fail(id, "exit");
  }

  /** Switches to the fallback for good and re-runs every waiting request there. */
  #giveUp(): void {
    this.#unavailable = true;
    const waiting = [...this.#pending.entries()];
    for (const [id, pending] of waiting) {
      if (!this.#settle(id)) continue;
      this.#fallback(pending.operation, pending.body, pending.signal).then(pending.resolve, pending.reject);
    }
  }

  #timedOut(id: number): void {
    if (!this.#pending.has(id)) return;
    this.#fail(id, "timeout");
    // Requests are answered in order: the ones behind a stuck request are stuck too.
    if (this.#server !== undefined) this.#abandon(this.#server, "timeout");
  }

  /** Stops a misbehaving server; every request in flight fails with `kind`. */
  #abandon(server: Server, kind: ZkrFailureKind): void {
    if (server.gone) return;
    server.gone = true;
    if (this.#server === server) this.#server = undefined;
    server.child.stdout?.destroy();
    this.#stop(server);
    for (const id of [...this.#pending.keys()]) this.#fail(id, kind);
  }

  #stop(server: Server): void {
    const { child } = server;
    if (child.exitCode !== null || child.signalCode !== null) return;
    signalProcessGroup(child, "SIGTERM");
    setTimeout(
      () => signalProcessGroup(child, "SIGKILL"),
      this.#settings.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
    );
  }

  #fail(id: number, kind: ZkrFailureKind): void {
    const pending = this.#pending.get(id);
    if (pending !== undefined && this.#settle(id)) pending.reject(new ZkrCommandError(kind));
  }

  /** Removes a request from the table; false when it was already settled. */
  #settle(id: number): boolean {
    const pending = this.#pending.get(id);
    if (pending === undefined) return false;
    this.#pending.delete(id);
    clearTimeout(pending.timer);
    pending.signal?.removeEventListener("abort", pending.onAbort);
    if (this.#pending.size === 0) this.#armIdle();
    return true;
  }

  #armIdle(): void {
    this.#clearIdle();
    if (this.#server === undefined) return;
    const timer = setTimeout(() => {
      this.#idleTimer = undefined;
      if (this.#pending.size === 0 && this.#server !== undefined) void this.close();
    }, this.#settings.idleMs ?? DEFAULT_IDLE_MS);
    timer.unref?.();
    this.#idleTimer = timer;
  }

  #clearIdle(): void {
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
  }
}
