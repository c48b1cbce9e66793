import { personFor, type ZkrConfig } from "./config.ts";
import { isRecord } from "./jsonsafe.ts";
import type { ZkrRunner } from "./client.ts";
import { ZkrCommandError } from "./runner.ts";
import type {
  MemoryEmbeddingProbeResult,
  MemoryPluginRuntime,
  MemoryPromptSectionBuilder,
  MemoryProviderStatus,
  MemoryReadParams,
  MemorySearchOptions,
  MemorySearchResult,
  RegisteredMemorySearchManager,
} from "./sdk-types.ts";

/** The scope forced onto every request; never taken from tool arguments. */
export interface ZkrScope {
  tenant: string;
  person: string;
}

export const DEFAULT_MAX_RESULTS = 10;
/**
 * zkr's relevance is absolute (the share of the query's weighted words an item
 * holds): without a `minScore`, hits below this floor are weak partial matches
 * and are dropped. An explicit `minScore` (0 included) replaces it.
 */
export const DEFAULT_MIN_SCORE = 0.15;
/** The CLI clamps `limit` to 100; asking for more would be silently cut anyway. */
export const CLI_MAX_LIMIT = 100;
export const DEFAULT_READ_LINES = 50;

export const POSITIVE_INTEGERS_MESSAGE = "from and lines must be positive integers";
export const INVALID_PATH_MESSAGE = "invalid zkr memory path";

const MEMORY_KINDS = ["source", "evidence", "claim"] as const;
type MemoryKind = (typeof MEMORY_KINDS)[number];
const MEMORY_PATH = /^zkr:\/\/(source|evidence|claim)\/([^/\s]+)$/;

/** One cited item as printed by `zkr search` / `zkr get`. */
export interface ZkrItem {
  evidence_ids: string[];
  excerpt: string;
  memory: { id: string; kind: MemoryKind };
  relevance_basis_points: number;
}

export type ZkrReadResult =
  | {
      status: "ok";
      text: string;
      path: string;
      from: number;
      lines: number;
      truncated: boolean;
      nextFrom?: number;
    }
  | { status: "not_found"; text: ""; path: string };

function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((entry) => typeof entry === "string");
}

/** Validates one CLI item; anything else means the CLI broke its contract. */
export function toZkrItem(value: unknown): ZkrItem {
  if (!isRecord(value)) throw new ZkrCommandError("malformed_output");
  const { evidence_ids, excerpt, memory, relevance_basis_points } = value;
  if (
    !isStringArray(evidence_ids) ||
    typeof excerpt !== "string" ||
    !isRecord(memory) ||
    typeof memory.id !== "string" ||
    !(MEMORY_KINDS as readonly unknown[]).includes(memory.kind) ||
    typeof relevance_basis_points !== "number" ||
    !Number.isInteger(relevance_basis_points) ||
    relevance_basis_points < 0 ||
    relevance_basis_points > 10_000
  ) {
    throw new ZkrCommandError("malformed_output");
  }
  return {
    evidence_ids: [...evidence_ids],
    excerpt,
    memory: { id: memory.id, kind: memory.kind as MemoryKind },
    relevance_basis_points,
  };
}

export function splitLines(text: string): string[] {
  return text.split(/\r?\n/);
}

/** Maps a CLI item to OpenClaw's search hit. `endLine` counts the excerpt's lines. */
export function toSearchResult(item: ZkrItem): MemorySearchResult {
  return {
    path: `zkr://${item.memory.kind}/${item.memory.id}`,
    startLine: 1,
    endLine: splitLines(item.excerpt).length,
    score: item.relevance_basis_points / 10_000,
    snippet: item.excerpt,
    source: "memory",
    citation: item.evidence_ids.join(", "),
  };
}

function clampMaxResults(value: unknown): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1) return DEFAULT_MAX_RESULTS;
  return Math.min(value, CLI_MAX_LIMIT);
}

function minScoreOf(value: unknown): number {
  if (value === undefined) return DEFAULT_MIN_SCORE;
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? value : 0;
}

function isPositiveInteger(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 1;
}

/**
 * OpenClaw memory manager for one scope. Search and read go through the zkr
 * CLI; nothing is indexed, embedded or synced locally, so there is no `sync`
 * or `close`.
 */
export class ZkrMemoryManager {
  readonly scope: ZkrScope;
  readonly #runner: ZkrRunner;
  readonly #database: string;

  constructor(runner: ZkrRunner, scope: ZkrScope, database: string) {
    this.#runner = runner;
    this.scope = { tenant: scope.tenant, person: scope.person };
    this.#database = database;
  }

  /**
   * `zkr search` mapped to OpenClaw hits, keeping those whose score (zkr's
   * absolute relevance / 10000) reaches `minScore` (default
   * `DEFAULT_MIN_SCORE`). When `minScore` is given, the CLI is asked for its
   * maximum (100) so the score filter runs before the cut to `maxResults`
   * (default 10). An abort signal is honoured before and during
   * the CLI call (the child is killed).
   */
  async search(query: string, opts: MemorySearchOptions = {}): Promise<MemorySearchResult[]> {
    if (opts.signal?.aborted) throw new ZkrCommandError("aborted");
    if (opts.sources !== undefined && !opts.sources.includes("memory")) return [];
    if (typeof query !== "string" || query.trim().length === 0) return [];
    const maxResults = clampMaxResults(opts.maxResults);
    const minScore = minScoreOf(opts.minScore);
    const limit = opts.minScore !== undefined && minScore > 0 ? CLI_MAX_LIMIT : maxResults;
    const output = await this.#runner(
      "search",
      { tenant_id: this.scope.tenant, person_id: this.scope.person, query, limit },
      opts.signal,
    );
    if (!isRecord(output) || !Array.isArray(output.items)) throw new ZkrCommandError("malformed_output");
    return output.items
      .map((item) => toSearchResult(toZkrItem(item)))
      .filter((hit) => hit.score >= minScore)
      .slice(0, maxResults);
  }

  /**
   * `zkr get` for a `zkr://<source|evidence|claim>/<id>` path, returning the
   * excerpt's lines `[from, from + lines)` (defaults 1 and 50). A record that
   * is unknown, deleted or outside the scope reads as `not_found`.
   */
  async readFile(params: MemoryReadParams): Promise<ZkrReadResult> {
    const { relPath } = params;
    const from = params.from ?? 1;
    const count = params.lines ?? DEFAULT_READ_LINES;
    if (!isPositiveInteger(from) || !isPositiveInteger(count)) throw new Error(POSITIVE_INTEGERS_MESSAGE);
    const match = typeof relPath === "string" ? MEMORY_PATH.exec(relPath) : null;
    if (match === null) throw new Error(INVALID_PATH_MESSAGE);
    const [, kind, id] = match as unknown as [string, MemoryKind, string];
    let output: unknown;
    try {
      output = await this.#runner("get", {
        tenant_id: this.scope.tenant,
        person_id: this.scope.person,
        target: { kind, id },
      });
    } catch (error) {
      if (error instanceof ZkrCommandError && error.kind === "not_found") {
        return { status: "not_found", text: "", path: relPath };
      }
      throw error;
    }
    const item = toZkrItem(output);
    const all = splitLines(item.excerpt);
    const slice = all.slice(from - 1, from - 1 + count);
    const truncated = from - 1 + slice.length < all.length;
    const result: ZkrReadResult = {
      status: "ok",
      text: slice.join("\n"),
      path: relPath,
      from,
      lines: slice.length,
      truncated,
    };
    if (truncated) result.nextFrom = from + slice.length;
    return result;
  }

  status(): MemoryProviderStatus {
    return {
      backend: "builtin",
      provider: "zkr",
      dbPath: this.#database,
      sources: ["memory"],
      fts: { enabled: true, available: true },
      vector: { enabled: false, available: false },
      custom: { tenant: this.scope.tenant, person: this.scope.person },
    };
  }

  /** The plugin never embeds text (no embedding service), so embeddings are unavailable. */
  async probeEmbeddingAvailability(): Promise<MemoryEmbeddingProbeResult> {
    return { ok: false, checked: true, error: "zkr plugin does not compute embeddings" };
  }

  async probeVectorAvailability(): Promise<boolean> {
    return false;
  }
}

// Compile-time check that the manager satisfies the host's contract.
const _managerContract = (manager: ZkrMemoryManager): RegisteredMemorySearchManager => manager;
void _managerContract;

export interface ZkrMemoryHost {
  runtime: MemoryPluginRuntime;
  /** The (lazily created, cached) manager for one agent id. */
  managerFor(agentId: string | undefined): ZkrMemoryManager;
}

/** One manager per agent id, created on first use; closing just forgets it (nothing is held open). */
export function createMemoryHost(config: ZkrConfig, runner: ZkrRunner): ZkrMemoryHost {
  const managers = new Map<string, ZkrMemoryManager>();
  const keyFor = (agentId: string | undefined): string =>
    typeof agentId === "string" && agentId.trim().length > 0 ? agentId : "default";
  const managerFor = (agentId: string | undefined): ZkrMemoryManager => {
    const key = keyFor(agentId);
    let manager = managers.get(key);
    if (manager === undefined) {
      manager = new ZkrMemoryManager(
        runner,
        { tenant: config.tenant, person: personFor(config, key) },
        config.database,
      );
      managers.set(key, manager);
    }
    return manager;
  };
  const runtime: MemoryPluginRuntime = {
    async getMemorySearchManager(params) {
      return { manager: managerFor(params.agentId) };
    },
    resolveMemoryBackendConfig() {
      return { backend: "builtin" };
    },
    async closeMemorySearchManager(params) {
      managers.delete(keyFor(params.agentId));
    },
    async closeAllMemorySearchManagers() {
      managers.clear();
    },
  };
  return { runtime, managerFor };
}

export const MEMORY_PROMPT_LINE =
  "Before answering questions about the user's earlier context, preferences, or decisions, search zkr memory with memory_search and cite the evidence ids it returns.";

/** Adds the memory instruction only when the agent can actually call `memory_search`. */
export const promptBuilder: MemoryPromptSectionBuilder = (params) =>
  params.availableTools.has("memory_search") ? [MEMORY_PROMPT_LINE] : [];
