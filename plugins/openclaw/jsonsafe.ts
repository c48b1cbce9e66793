/** Keys that could reach an object's prototype chain when parsed data is later merged or spread. */
const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

/**
 * Parses JSON text from the zkr CLI without prototype-pollution hazards: the
 * keys `__proto__`, `constructor` and `prototype` are dropped at every level
 * (the reviver runs bottom-up, so nested objects are cleaned too). zkr never
 * emits those keys, so nothing legitimate is lost, and the result stays plain
 * data (ordinary objects and arrays) that the host can inspect normally.
 */
export function parseJsonSafely(text: string): unknown {
  return JSON.parse(text, (key: string, value: unknown) => (FORBIDDEN_KEYS.has(key) ? undefined : value));
}

/** True for a non-array object. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}
