import { createHash } from "node:crypto";

import { Type, type Static, type TSchema } from "typebox";

import type { ZkrMemoryManager, ZkrScope } from "./memory.ts";
import type { ZkrRunner } from "./client.ts";
import type { ZkrOperation } from "./runner.ts";
import type { AnyAgentTool } from "./sdk-types.ts";

export const SOURCE_KINDS = [
  "conversation",
  "screen",
  "audio",
  "document",
  "integration",
  "user_correction",
] as const;
export const CLAIM_KINDS = ["fact", "profile_fact", "preference", "task", "skill", "recommendation"] as const;

export const ZKR_TOOL_NAMES = [
  "zkr_store",
  "zkr_search",
  "zkr_correct",
  "zkr_delete",
  "zkr_reflect",
] as const;
export const MEMORY_TOOL_NAMES = ["memory_search", "memory_get"] as const;

/** A string enum rendered as `{type: "string", enum: [...]}`, which every model provider accepts. */
function stringEnum<const T extends readonly string[]>(values: T, description: string) {
  return Type.Unsafe<T[number]>({ type: "string", enum: [...values], description });
}

const nonEmpty = (description: string) => Type.String({ minLength: 1, description });
/** An optional integer Unix-seconds time; the plugin fills in now when the model leaves it out. */
const time = (description: string) =>
  Type.Optional(Type.Integer({ description: `${description} Default: now.` }));
/** A time the caller must give (search history). */
const requiredTime = (description: string) => Type.Integer({ description });
const closed = { additionalProperties: false } as const;

export const zkrStoreParameters = Type.Object(
  {
    kind: stringEnum(SOURCE_KINDS, "What the observation came from."),
    text: nonEmpty("The observed text, stored verbatim as evidence."),
    captured_at: time("Unix seconds when the observation was captured."),
    recorded_at: time("Unix seconds when memory records it."),
    claim: Type.Optional(
      Type.Object(
        {
          subject: nonEmpty("Who or what the claim is about, e.g. user."),
          predicate: nonEmpty("The relation, e.g. employer or prefers."),
          value: nonEmpty("The claimed value."),
          kind: stringEnum(CLAIM_KINDS, "The kind of claim."),
          valid_from: Type.Optional(
            Type.Integer({ description: "Unix seconds from which the claim is true. Default: captured_at." }),
          ),
        },
        { ...closed, description: "Optional typed claim backed by this evidence." },
      ),
    ),
  },
  closed,
);

export const zkrSearchParameters = Type.Object(
  {
    query: nonEmpty("What to look for."),
    limit: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 100, description: "Maximum items (default 10)." }),
    ),
    as_of: Type.Optional(
      Type.Object(
        {
          valid_at: requiredTime("Unix seconds: what was true at this time."),
          recorded_at: requiredTime("Unix seconds: as memory knew it at this time."),
        },
        { ...closed, description: "Search a past state of memory instead of the current one." },
      ),
    ),
  },
  closed,
);

export const zkrCorrectParameters = Type.Object(
  {
    claim_id: nonEmpty("The accepted claim to supersede."),
    text: nonEmpty("The correction as stated, stored as new evidence."),
    value: nonEmpty("The corrected claim value."),
    valid_at: time("Unix seconds from which the corrected value is true."),
    recorded_at: time("Unix seconds when memory records the correction."),
  },
  closed,
);

export const zkrDeleteParameters = Type.Object(
  {
    source_id: nonEmpty("The source to delete; its evidence and claims become unavailable."),
    deleted_at: time("Unix seconds of the deletion."),
  },
  closed,
);

export const zkrReflectParameters = Type.Object(
  {
    day: nonEmpty("The day reviewed, as an ISO date (YYYY-MM-DD)."),
    summary: nonEmpty("The review text."),
    evidence_ids: Type.Array(Type.String({ minLength: 1 }), {
      minItems: 1,
      description: "Live evidence ids the review cites.",
    }),
    recorded_at: time("Unix seconds when memory records the review."),
  },
  closed,
);

export const memorySearchParameters = Type.Object(
  {
    query: nonEmpty("What to recall."),
    maxResults: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 100, description: "Maximum hits (default 10)." }),
    ),
    minScore: Type.Optional(
      Type.Number({ minimum: 0, maximum: 1, description: "Drop hits scoring below this." }),
    ),
  },
  closed,
);

export const memoryGetParameters = Type.Object(
  {
    path: nonEmpty("A zkr://source|evidence|claim/<id> path from memory_search."),
    from: Type.Optional(Type.Integer({ minimum: 1, description: "First line to return (default 1)." })),
    lines: Type.Optional(Type.Integer({ minimum: 1, description: "Number of lines (default 50)." })),
  },
  closed,
);

/** OpenClaw tool result: compact JSON text for the model, the value itself as details. */
export function toolResult<T>(value: T): { content: Array<{ type: "text"; text: string }>; details: T } {
  return { content: [{ type: "text", text: JSON.stringify(value) ?? "null" }], details: value };
}

type Params = Record<string, unknown>;

function asParams(value: unknown): Params {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Params) : {};
}

/** Copies only the listed keys (own, defined) from model-supplied parameters. */
function pick(params: Params, keys: readonly string[]): Params {
  const out: Params = {};
  for (const key of keys) {
    if (Object.hasOwn(params, key) && params[key] !== undefined) out[key] = params[key];
  }
  return out;
}

/** Request body for the CLI: the allowed parameters, then the configured scope (overwriting any model value). */
export function scopedRequest(params: Params, keys: readonly string[], scope: ZkrScope): Params {
  return { ...pick(params, keys), tenant_id: scope.tenant, person_id: scope.person };
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const record = value as Params;
    const keys = Object.keys(record)
      .filter((key) => record[key] !== undefined)
      .sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/**
 * Idempotency key for `zkr_store`: a hash of the complete scoped request, so a
 * retried identical call returns the original ids instead of a duplicate
 * source, and two different payloads can never collide into a key conflict.
 */
export function storeIngestionKey(request: Params): string {
  return `openclaw-store:${createHash("sha256").update(canonicalJson(request)).digest("hex")}`;
}

/** Unix seconds for a time the model left out. */
export type DefaultClock = () => number;

/**
 * Now, in integer Unix seconds, but always after the previous default: zkr
 * requires a correction or deletion to advance the intervals of what it amends,
 * so a store then a correct in the same second would otherwise fail. A burst of
 * calls runs a few seconds ahead at most.
 */
export function createDefaultClock(now: () => number = Date.now): DefaultClock {
  let last = 0;
  return () => {
    last = Math.max(Math.floor(now() / 1000), last + 1);
    return last;
  };
}

/** Most `zkr_store` requests remembered for identical retries. */
export const STORE_MEMO_SIZE = 256;

/** What the tools share across agents: the default clock and the recent `zkr_store` requests. */
export interface ToolDefaults {
  clock: DefaultClock;
  /** ingestion key -> the exact request sent, so a retry resends it byte for byte. */
  stores: Map<string, Params>;
}

export function createToolDefaults(clock: DefaultClock = createDefaultClock()): ToolDefaults {
  return { clock, stores: new Map() };
}

function remember(defaults: ToolDefaults, key: string, request: Params): void {
  defaults.stores.set(key, request);
  while (defaults.stores.size > STORE_MEMO_SIZE) {
    const oldest = defaults.stores.keys().next().value;
    if (oldest === undefined) break;
    defaults.stores.delete(oldest);
  }
}

function withDefault(request: Params, key: string, value: number): void {
  if (request[key] === undefined || request[key] === null) request[key] = value;
}

interface ToolSpec<S extends TSchema> {
  name: string;
  label: string;
  description: string;
  parameters: S;
  run: (params: Static<S> & Params, signal?: AbortSignal) => Promise<unknown>;
}

function defineTool<S extends TSchema>(spec: ToolSpec<S>): AnyAgentTool {
  return {
    name: spec.name,
    label: spec.label,
    description: spec.description,
    parameters: spec.parameters,
    async execute(_toolCallId: string, params: unknown, signal?: AbortSignal) {
      return toolResult(await spec.run(asParams(params) as Static<S> & Params, signal));
    },
  };
}

function cliTool<S extends TSchema>(
  runner: ZkrRunner,
  scope: ZkrScope,
  spec: Omit<ToolSpec<S>, "run"> & {
    operation: ZkrOperation;
    keys: readonly string[];
    transform?: (request: Params) => Params;
  },
): AnyAgentTool {
  return defineTool({
    ...spec,
    run: (params, signal) => {
      const request = scopedRequest(params, spec.keys, scope);
      return runner(spec.operation, spec.transform ? spec.transform(request) : request, signal);
    },
  });
}

/**
 * The five explicit zkr tools, bound to one scope. Times the model leaves out
 * default to now ({@link DefaultClock}); a claim's `valid_from` defaults to the
 * source's `captured_at`.
 */
export function createZkrTools(
  runner: ZkrRunner,
  scope: ZkrScope,
  defaults: ToolDefaults = createToolDefaults(),
): AnyAgentTool[] {
  return [
    cliTool(runner, scope, {
      name: "zkr_store",
      label: "Store zkr memory",
      description:
        "Store an observation as cited evidence in zkr memory, optionally with a typed claim. Store durable facts, preferences, decisions and events only. Returns source_id, evidence_id and claim_id.",
      parameters: zkrStoreParameters,
      operation: "remember",
      keys: ["kind", "text", "captured_at", "recorded_at", "claim"],
      transform: (request) => {
        if (request.claim === null) delete request.claim;
        if (request.claim !== undefined) {
          request.claim = pick(asParams(request.claim), [
            "subject",
            "predicate",
            "value",
            "kind",
            "valid_from",
          ]);
        }
        // The key covers what the model asked for (times it gave included, defaults not), so a
        // retried identical call maps to the same key; the request first sent under that key is
        // resent as it was, defaults and all, and zkr returns the original ids.
        const ingestionKey = storeIngestionKey(request);
        const sent = defaults.stores.get(ingestionKey);
        if (sent !== undefined) return structuredClone(sent);
        const full: Params = { ...request, ingestion_key: ingestionKey };
        if (full.captured_at === undefined || full.recorded_at === undefined) {
          const now = defaults.clock();
          withDefault(full, "captured_at", now);
          withDefault(full, "recorded_at", now);
        }
        if (full.claim !== undefined) {
          const claim = { ...asParams(full.claim) };
          withDefault(claim, "valid_from", full.captured_at as number);
          full.claim = claim;
        }
        remember(defaults, ingestionKey, structuredClone(full));
        return full;
      },
    }),
    cliTool(runner, scope, {
      name: "zkr_search",
      label: "Search zkr memory",
      description:
        "Search zkr memory for cited items (excerpt, memory ref, evidence ids, relevance in basis points). Use as_of to see what was true or known at an earlier time.",
      parameters: zkrSearchParameters,
      operation: "search",
      keys: ["query", "limit", "as_of"],
      transform: (request) => {
        if (request.as_of === null) delete request.as_of;
        if (request.as_of !== undefined)
          request.as_of = pick(asParams(request.as_of), ["valid_at", "recorded_at"]);
        return request;
      },
    }),
    cliTool(runner, scope, {
      name: "zkr_correct",
      label: "Correct zkr memory",
      description:
        "Correct an accepted claim: stores the correction text as new evidence and supersedes the old claim with the new value. Prefer this over storing a conflicting fact.",
      parameters: zkrCorrectParameters,
      operation: "correct",
      keys: ["claim_id", "text", "value", "valid_at", "recorded_at"],
      transform: (request) => {
        const now = defaults.clock();
        withDefault(request, "valid_at", now);
        withDefault(request, "recorded_at", now);
        return request;
      },
    }),
    cliTool(runner, scope, {
      name: "zkr_delete",
      label: "Delete zkr source",
      description:
        "Delete a source from zkr memory (tombstone); its evidence and the claims resting only on it become unavailable.",
      parameters: zkrDeleteParameters,
      operation: "delete",
      keys: ["source_id", "deleted_at"],
      transform: (request) => {
        withDefault(request, "deleted_at", defaults.clock());
        return request;
      },
    }),
    cliTool(runner, scope, {
      name: "zkr_reflect",
      label: "Reflect into zkr memory",
      description: "Store a daily review summary that cites live evidence ids from zkr memory.",
      parameters: zkrReflectParameters,
      operation: "review",
      keys: ["day", "summary", "evidence_ids", "recorded_at"],
      transform: (request) => {
        withDefault(request, "recorded_at", defaults.clock());
        return request;
      },
    }),
  ];
}

/** OpenClaw's native `memory_search` / `memory_get`, backed by one memory manager. */
export function createMemoryTools(manager: ZkrMemoryManager): AnyAgentTool[] {
  return [
    defineTool({
      name: "memory_search",
      label: "Memory Search",
      description:
        "Search long-term memory (zkr) for cited snippets about the user and earlier conversations. Hits carry a zkr:// path, a 0..1 score and evidence citations.",
      parameters: memorySearchParameters,
      run: (params, signal) => {
        const options: { maxResults?: number; minScore?: number; signal?: AbortSignal } = {};
        if (typeof params.maxResults === "number") options.maxResults = params.maxResults;
        if (typeof params.minScore === "number") options.minScore = params.minScore;
        if (signal !== undefined) options.signal = signal;
        return manager.search(String(params.query), options);
      },
    }),
    defineTool({
      name: "memory_get",
      label: "Memory Get",
      description: "Read a memory returned by memory_search by its zkr:// path, optionally a range of lines.",
      parameters: memoryGetParameters,
      run: (params) => {
        const read: { relPath: string; from?: number; lines?: number } = { relPath: String(params.path) };
        if (params.from !== undefined) read.from = params.from as number;
        if (params.lines !== undefined) read.lines = params.lines as number;
        return manager.readFile(read);
      },
    }),
  ];
}
