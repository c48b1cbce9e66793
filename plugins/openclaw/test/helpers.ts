import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import type { ZkrPluginApi } from "../index.ts";
import type { ZkrRunner } from "../client.ts";
import type { ZkrOperation } from "../runner.ts";
import type { AnyAgentTool, MemoryPluginCapability, OpenClawPluginToolContext } from "../sdk-types.ts";

export const PLUGIN_DIR = resolve(import.meta.dir, "..");

/** The real zkr CLI: $ZKR_TEST_COMMAND, else the wrapper that runs this repository's Python package. */
export const REAL_ZKR_COMMAND =
  process.env.ZKR_TEST_COMMAND ?? join(PLUGIN_DIR, "test", "fixtures", "zkr-python.sh");

const tempDirs: string[] = [];

export function tempDir(prefix = "zkr-openclaw-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

export function cleanupTempDirs(): void {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** Writes an executable `/bin/sh` script and returns its path. */
export function script(dir: string, name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

export interface RunnerCall {
  operation: ZkrOperation;
  input: Record<string, unknown>;
  signal: AbortSignal | undefined;
}

/** A runner that records calls and answers from a handler. */
export function fakeRunner(
  handler: (operation: ZkrOperation, input: Record<string, unknown>) => unknown = () => ({}),
): { runner: ZkrRunner; calls: RunnerCall[] } {
  const calls: RunnerCall[] = [];
  const runner: ZkrRunner = async (operation, input, signal) => {
    const record = structuredClone(input) as Record<string, unknown>;
    calls.push({ operation, input: record, signal });
    return handler(operation, record);
  };
  return { runner, calls };
}

export interface RegisteredTool {
  factory: (context: OpenClawPluginToolContext) => AnyAgentTool[];
  names: string[];
}

/** A registered typed hook handler (`api.on`). */
export type HookHandler = (event: any, ctx: any) => unknown;

/** Records what the plugin registers; stands in for OpenClaw's plugin API. */
export function fakeApi(pluginConfig?: Record<string, unknown>) {
  const capabilities: MemoryPluginCapability[] = [];
  const tools: RegisteredTool[] = [];
  const hooks = new Map<string, HookHandler[]>();
  const logs: string[] = [];
  const api = {
    pluginConfig,
    logger: {
      debug: (message: string) => logs.push(`debug ${message}`),
      info: (message: string) => logs.push(`info ${message}`),
      warn: (message: string) => logs.push(`warn ${message}`),
      error: (message: string) => logs.push(`error ${message}`),
    },
    on(name: string, handler: HookHandler) {
      hooks.set(name, [...(hooks.get(name) ?? []), handler]);
    },
    registerMemoryCapability(capability: MemoryPluginCapability) {
      capabilities.push(capability);
    },
    registerTool(tool: unknown, opts?: { name?: string; names?: string[] }) {
      if (typeof tool !== "function") throw new Error("expected a tool factory");
      tools.push({
        factory: tool as RegisteredTool["factory"],
        names: opts?.names ?? (opts?.name ? [opts.name] : []),
      });
    },
  } as unknown as ZkrPluginApi;
  return { api, capabilities, tools, hooks, logs };
}

/** Runs the single handler registered for a hook. */
export async function runHook(
  hooks: Map<string, HookHandler[]>,
  name: string,
  event: unknown,
  ctx: unknown = {},
): Promise<unknown> {
  const handlers = hooks.get(name) ?? [];
  if (handlers.length !== 1) throw new Error(`expected one ${name} handler, found ${handlers.length}`);
  return handlers[0]!(event, ctx);
}

/** Builds every registered tool for one agent and indexes them by name. */
export function toolsFor(tools: RegisteredTool[], agentId?: string): Map<string, AnyAgentTool> {
  const byName = new Map<string, AnyAgentTool>();
  const context: OpenClawPluginToolContext = agentId === undefined ? {} : { agentId };
  for (const registration of tools) {
    for (const tool of registration.factory(context)) byName.set(tool.name, tool);
  }
  return byName;
}

export function tool(tools: Map<string, AnyAgentTool>, name: string): AnyAgentTool {
  const found = tools.get(name);
  if (found === undefined) throw new Error(`tool ${name} not registered`);
  return found;
}

/** Runs a tool and returns its `details`, checking the text content mirrors it. */
export async function callTool(
  tools: Map<string, AnyAgentTool>,
  name: string,
  params: unknown,
): Promise<unknown> {
  const result = await tool(tools, name).execute("call-1", params);
  const first = result.content[0];
  if (first === undefined || first.type !== "text") throw new Error("expected a text result");
  if (first.text !== JSON.stringify(result.details)) throw new Error("text content does not mirror details");
  return result.details;
}

/** Captures a rejection (fails when the promise resolves). */
export async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof Error) return error;
    throw new Error(`rejected with a non-Error: ${String(error)}`);
  }
  throw new Error("expected the promise to reject");
}
