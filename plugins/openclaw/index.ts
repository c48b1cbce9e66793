import { buildJsonPluginConfigSchema, definePluginEntry } from "openclaw/plugin-sdk/plugin-entry";

import {
  CONFIG_JSON_SCHEMA,
  personFor,
  resolveConfig,
  type ResolveConfigOptions,
  type ZkrConfig,
} from "./config.ts";
import { createMemoryHost, promptBuilder, type ZkrMemoryHost } from "./memory.ts";
import { createZkrRunner, type ZkrRunner } from "./runner.ts";
import type { OpenClawPluginApi, OpenClawPluginToolContext } from "./sdk-types.ts";
import { createMemoryTools, createZkrTools, MEMORY_TOOL_NAMES, ZKR_TOOL_NAMES } from "./tools.ts";

export { ZKR_COMMAND_FAILED, ZkrCommandError, runZkr, createZkrRunner } from "./runner.ts";
export { resolveConfig } from "./config.ts";
export { ZkrMemoryManager, createMemoryHost } from "./memory.ts";
export { MEMORY_TOOL_NAMES, ZKR_TOOL_NAMES } from "./tools.ts";

export const PLUGIN_ID = "zkr";
export const PLUGIN_NAME = "zkr Memory";
export const PLUGIN_DESCRIPTION = "Evidence-backed temporal memory tools powered by the local zkr CLI.";

/** The part of OpenClaw's plugin API this plugin uses (a fake in tests). */
export type ZkrPluginApi = Pick<
  OpenClawPluginApi,
  "pluginConfig" | "registerMemoryCapability" | "registerTool"
>;

export interface RegisterOptions extends ResolveConfigOptions {
  /** Replaces the CLI runner (tests). */
  runner?: ZkrRunner;
}

export interface ZkrRegistration {
  config: ZkrConfig;
  memory: ZkrMemoryHost;
}

/**
 * Registers the memory capability (prompt line + runtime), OpenClaw's native
 * `memory_search` / `memory_get` tools and the five explicit `zkr_*` tools.
 * Registration itself spawns nothing and touches no file.
 */
export function registerZkr(api: ZkrPluginApi, options: RegisterOptions = {}): ZkrRegistration {
  const config = resolveConfig(api.pluginConfig, options);
  const runner = options.runner ?? createZkrRunner({ command: config.command, database: config.database });
  const memory = createMemoryHost(config, runner);

  api.registerMemoryCapability({ promptBuilder, runtime: memory.runtime });

  api.registerTool(
    (context: OpenClawPluginToolContext) => createMemoryTools(memory.managerFor(context.agentId)),
    {
      names: [...MEMORY_TOOL_NAMES],
    },
  );

  api.registerTool(
    (context: OpenClawPluginToolContext) =>
      createZkrTools(runner, { tenant: config.tenant, person: personFor(config, context.agentId) }),
    { names: [...ZKR_TOOL_NAMES] },
  );

  return { config, memory };
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
