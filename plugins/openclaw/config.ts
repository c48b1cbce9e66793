import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";

/** Plugin settings after defaults are applied. `person` stays undefined when the active agent id decides it. */
export interface ZkrConfig {
  /** Executable to spawn (a path or a name looked up on PATH). Never run through a shell. */
  command: string;
  /** Absolute path of the zkr SQLite database. */
  database: string;
  /** True when `database` came from the plugin config rather than the built-in default. */
  databaseConfigured: boolean;
  tenant: string;
  person?: string;
  /** Inject cited memories for the user's message before the agent runs (`before_prompt_build`). */
  autoRecall: boolean;
  /** Store each completed turn (`agent_end`), keyed by session and turn so a retry never duplicates. */
  autoCapture: boolean;
  /** Relevance floor (0..1, relevance_basis_points / 10000) for auto-recall. */
  minScore: number;
  /** Most memories auto-recall injects. */
  recallLimit: number;
  /** Talk to one persistent `zkr serve` child (falls back to one CLI call per operation). */
  serve: boolean;
}

export const DEFAULT_COMMAND = "zkr";
export const DEFAULT_TENANT = "openclaw";
export const DEFAULT_PERSON = "default";
/**
 * Auto-recall's default relevance floor, as a 0..1 score
 * (`relevance_basis_points / 10000`). One place: the retrieval work owns its value.
 */
export const DEFAULT_RECALL_MIN_SCORE = 0.25;
export const DEFAULT_RECALL_LIMIT = 5;
export const MAX_RECALL_LIMIT = 20;

const CONFIG_KEYS = [
  "command",
  "database",
  "tenant",
  "person",
  "autoRecall",
  "autoCapture",
  "minScore",
  "recallLimit",
  "serve",
] as const;

/** JSON Schema of the plugin config; identical to `configSchema` in openclaw.plugin.json (a test checks it). */
export const CONFIG_JSON_SCHEMA = {
  type: "object",
  additionalProperties: false,
  properties: {
    command: {
      type: "string",
      minLength: 1,
      description:
        "zkr executable: a path or a name looked up on PATH (default zkr). Spawned directly, never through a shell.",
    },
    database: {
      type: "string",
      minLength: 1,
      description: "zkr database file (default ~/.zkr/memory.db); a leading ~ is expanded.",
    },
    tenant: {
      type: "string",
      minLength: 1,
      description: "tenant_id forced onto every request (default openclaw).",
    },
    person: {
      type: "string",
      minLength: 1,
      description: "person_id forced onto every request (default: the active agent id).",
    },
    autoRecall: {
      type: "boolean",
      description:
        "Before each agent run, inject the cited memories relevant to the user's message (default true).",
    },
    autoCapture: {
      type: "boolean",
      description: "After each completed turn, store it in zkr as a conversation source (default true).",
    },
    minScore: {
      type: "number",
      minimum: 0,
      maximum: 1,
      description: "Relevance floor (0..1) a memory needs to be auto-recalled.",
    },
    recallLimit: {
      type: "integer",
      minimum: 1,
      maximum: 20,
      description: "Most memories auto-recall injects (default 5).",
    },
    serve: {
      type: "boolean",
      description:
        "Keep one zkr serve child per database (default true); false runs one zkr process per operation.",
    },
  },
} as const;

export class ZkrConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ZkrConfigError";
  }
}

function readOptionalBoolean(raw: Record<string, unknown>, key: string): boolean | undefined {
  const value = raw[key];
  if (value === undefined) return undefined;
  if (typeof value !== "boolean") throw new ZkrConfigError(`zkr plugin config "${key}" must be a boolean`);
  return value;
}

function readOptionalNumber(
  raw: Record<string, unknown>,
  key: string,
  min: number,
  max: number,
  integer: boolean,
): number | undefined {
  const value = raw[key];
  if (value === undefined) return undefined;
  if (
    typeof value !== "number" ||
    !Number.isFinite(value) ||
    value < min ||
    value > max ||
    (integer && !Number.isInteger(value))
  ) {
    const what = integer ? "an integer" : "a number";
    throw new ZkrConfigError(`zkr plugin config "${key}" must be ${what} from ${min} to ${max}`);
  }
  return value;
}

function readOptionalString(raw: Record<string, unknown>, key: string): string | undefined {
  if (!Object.hasOwn(raw, key)) return undefined;
  const value = raw[key];
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.trim().length === 0 || value.includes("\0")) {
    throw new ZkrConfigError(`zkr plugin config "${key}" must be a non-empty string`);
  }
  return value;
}

/** Expands a leading `~` or `~/` (also `~\` on Windows) to the home directory. `~user` is left alone. */
export function expandHome(path: string, home: string): string {
  if (path === "~") return home;
  if (path.startsWith("~/") || (process.platform === "win32" && path.startsWith("~\\"))) {
    return join(home, path.slice(2));
  }
  return path;
}

export interface ResolveConfigOptions {
  /** Home directory used for the default database and `~` expansion; defaults to `os.homedir()`. */
  home?: string;
  /** Base for relative database paths; defaults to `process.cwd()`. */
  cwd?: string;
}

/**
 * Validates `api.pluginConfig` (the manifest schema already rejects unknown keys
 * and empty strings; this repeats the check so direct callers get the same rules)
 * and applies the defaults: command `zkr`, database `<home>/.zkr/memory.db`,
 * tenant `openclaw`, person = active agent id (resolved per call), auto-recall
 * and auto-capture on, recall floor {@link DEFAULT_RECALL_MIN_SCORE}, at most
 * 5 recalled memories, `zkr serve` on.
 */
export function resolveConfig(raw: unknown, options: ResolveConfigOptions = {}): ZkrConfig {
  const input: Record<string, unknown> =
    raw === undefined || raw === null ? {} : (raw as Record<string, unknown>);
  if (typeof input !== "object" || Array.isArray(input)) {
    throw new ZkrConfigError("zkr plugin config must be an object");
  }
  for (const key of Object.keys(input)) {
    if (!(CONFIG_KEYS as readonly string[]).includes(key)) {
      throw new ZkrConfigError(`zkr plugin config has unknown key "${key}"`);
    }
  }
  const home = options.home ?? homedir();
  const command = readOptionalString(input, "command") ?? DEFAULT_COMMAND;
  const configuredDatabase = readOptionalString(input, "database");
  const tenant = readOptionalString(input, "tenant") ?? DEFAULT_TENANT;
  const person = readOptionalString(input, "person");
  let database: string;
  if (configuredDatabase === undefined) {
    database = join(home, ".zkr", "memory.db");
  } else {
    const expanded = expandHome(configuredDatabase, home);
    database = isAbsolute(expanded) ? expanded : resolve(options.cwd ?? process.cwd(), expanded);
  }
  const config: ZkrConfig = {
    command: expandHome(command, home),
    database,
    databaseConfigured: configuredDatabase !== undefined,
    tenant,
    autoRecall: readOptionalBoolean(input, "autoRecall") ?? true,
    autoCapture: readOptionalBoolean(input, "autoCapture") ?? true,
    minScore: readOptionalNumber(input, "minScore", 0, 1, false) ?? DEFAULT_RECALL_MIN_SCORE,
    recallLimit: readOptionalNumber(input, "recallLimit", 1, MAX_RECALL_LIMIT, true) ?? DEFAULT_RECALL_LIMIT,
    serve: readOptionalBoolean(input, "serve") ?? true,
  };
  if (person !== undefined) config.person = person;
  return config;
}

/** The person scope for one agent: configured `person`, else the agent id, else `default`. */
export function personFor(config: ZkrConfig, agentId: string | undefined): string {
  if (config.person !== undefined) return config.person;
  if (typeof agentId === "string" && agentId.trim().length > 0) return agentId;
  return DEFAULT_PERSON;
}
