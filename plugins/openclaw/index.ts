import { buildJsonPluginConfigSchema, definePluginEntry } from "openclaw/plugin-sdk/plugin-entry";

import {
  CONFIG_JSON_SCHEMA,
  personFor,
  resolveConfig,
  type ResolveConfigOptions,
  type ZkrConfig,
} from "./config.ts";
import { createZkrRunner, type ZkrRunner } from "./client.ts";
import { createAutoCapture, createAutoRecall } from "./hooks.ts";
import { createMemoryHost, promptBuilder, type ZkrMemoryHost } from "./memory.ts";
import type { OpenClawPluginApi, OpenClawPluginToolContext } from "./sdk-types.ts";
import {
  createMemoryTools,
  createDefaultClock,
  createToolDefaults,
  createZkrTools,
  MEMORY_TOOL_NAMES,
  ZKR_TOOL_NAMES,
} from "./tools.ts";

export { ZKR_COMMAND_FAILED, ZkrCommandError, runZkr } from "./runner.ts";
export { createZkrRunner } from "./client.ts";
export { resolveConfig } from "./config.ts";
export { ZkrMemoryManager, createMemoryHost } from "./memory.ts";
export { MEMORY_TOOL_NAMES, ZKR_TOOL_NAMES } from "./tools.ts";

export const PLUGIN_ID = "zkr";
export const PLUGIN_NAME = "zkr Memory";
export const PLUGIN_DESCRIPTION = "Evidence-backed temporal memory tools powered by the local zkr CLI.";

/** The part of OpenClaw's plugin API this plugin uses (a fake in tests). */
export type ZkrPluginApi = Pick<
  OpenClawPluginApi,
  "pluginConfig" | "registerMemoryCapability" | "registerTool" | "on" | "logger"
>;

export interface RegisterOptions extends ResolveConfigOptions {
  /** Replaces the zkr runner (tests). */
  runner?: ZkrRunner;
  /** Clock for default times, in milliseconds (tests). */
  now?: () => number;
}

export interface ZkrRegistration {
  config: ZkrConfig;
  memory: ZkrMemoryHost;
  runner: ZkrRunner;
  /** Closes the plugin's own `zkr serve` child (what `gateway_stop` does). */
  close(): Promise<void>;
}

/**
 * Registers the memory capability (prompt line + runtime), OpenClaw's native
 * `memory_search` / `memory_get` tools, the five explicit `zkr_*` tools and,
 * unless switched off, the auto-recall (`before_prompt_build`) and
 * auto-capture (`agent_end`) hooks; `gateway_stop` closes the `zkr serve`
 * child. Registration itself spawns nothing and touches no file.
 */
export function registerZkr(api: ZkrPluginApi, options: RegisterOptions = {}): ZkrRegistration {
  const config = resolveConfig(api.pluginConfig, options);
  const own =
    options.runner === undefined
      ? createZkrRunner({ command: config.command, database: config.database, serve: config.serve })
      : undefined;
  const runner: ZkrRunner = options.runner ?? own!;
  const memory = createMemoryHost(config, runner);
  const now = options.now ?? Date.now;
  const toolDefaults = createToolDefaults(createDefaultClock(now));

  api.registerMemoryCapability({ promptBuilder, runtime: memory.runtime });

  api.registerTool(
    (context: OpenClawPluginToolContext) => createMemoryTools(memory.managerFor(context.agentId)),
    {
      names: [...MEMORY_TOOL_NAMES],
    },
  );

  api.registerTool(
    (context: OpenClawPluginToolContext) =>
      createZkrTools(
        runner,
        { tenant: config.tenant, person: personFor(config, context.agentId) },
        toolDefaults,
      ),
    { names: [...ZKR_TOOL_NAMES] },
  );

  if (config.autoRecall) api.on("before_prompt_build", createAutoRecall(config, memory, api.logger));
  if (config.autoCapture) api.on("agent_end", createAutoCapture(config, runner, api.logger, now));
  if (own !== undefined) api.on("gateway_stop", () => own.close());

  return { config, memory, runner, close: async () => await own?.close() };
}

export default definePluginEntry({
  id: PLUGIN_ID,
  name: PLUGIN_NAME,
  description: PLUGIN_DESCRIPTION,
  configSchema: () =>
    buildJsonPluginConfigSchema(CONFIG_JSON_SCHEMA, { cacheKey: "plugin-config-schema:zkr" }),
  register(api) {
    registerZkr(api);
  },
});
