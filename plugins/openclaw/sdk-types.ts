/**
 * Type-only views of the OpenClaw plugin SDK surfaces this plugin implements.
 *
 * OpenClaw 2026.9.x no longer exports the memory manager types under a public
 * subpath, so they are derived from the public `MemoryPluginCapability`
 * (`openclaw/plugin-sdk/memory-host-core`) and `OpenClawPluginApi`
 * (`openclaw/plugin-sdk/plugin-entry`). Nothing here exists at runtime.
 */
import type {
  AnyAgentTool,
  OpenClawPluginApi,
  OpenClawPluginToolContext,
} from "openclaw/plugin-sdk/plugin-entry";
import type { MemoryPluginCapability } from "openclaw/plugin-sdk/memory-host-core";

export type { AnyAgentTool, MemoryPluginCapability, OpenClawPluginApi, OpenClawPluginToolContext };

export type MemoryPluginRuntime = NonNullable<MemoryPluginCapability["runtime"]>;
export type MemoryPromptSectionBuilder = NonNullable<MemoryPluginCapability["promptBuilder"]>;
export type RegisteredMemorySearchManager = NonNullable<
  Awaited<ReturnType<MemoryPluginRuntime["getMemorySearchManager"]>>["manager"]
>;
export type MemorySearchOptions = NonNullable<Parameters<RegisteredMemorySearchManager["search"]>[1]>;
export type MemorySearchResult = Awaited<ReturnType<RegisteredMemorySearchManager["search"]>>[number];
export type MemoryReadParams = Parameters<RegisteredMemorySearchManager["readFile"]>[0];
export type MemoryProviderStatus = ReturnType<RegisteredMemorySearchManager["status"]>;
export type MemoryEmbeddingProbeResult = Awaited<
  ReturnType<RegisteredMemorySearchManager["probeEmbeddingAvailability"]>
>;
