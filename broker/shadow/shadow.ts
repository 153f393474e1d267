/**
 * Shadow mode (flag value `shadow`, docs/flags.md § Shadow): the row keeps serving from its local
 * implementation, and after each call it serves, the row's comparator asks the shared implementation (read
 * only, or a shadow copy of its state) what it would have answered, and the runner compares the two.
 *
 * Contract of a comparator (one per row, `<row>/shadow.ts`, one job):
 * - it never changes what a peer sees and never writes the shared row's live state: it reads the shared
 *   rows, or keeps its own copy (Redis keys under `shadow:`, never read by a serving implementation);
 * - `start` opens what it needs (its copy's connection), `stop` closes it and forgets the copy;
 * - `compare` gets a call the local implementation just answered and its answer, and returns both answers
 *   in a comparable form (plain JSON: order-free sets sorted), or undefined for a call it only mirrors
 *   into its copy (a release after an admission, say). It throws when the shared side could not answer.
 * - `capture`, when given, reads what the local side decided at the moment of its answer (who a publish
 *   reached, which session a call was routed to): comparisons run later, off the peer's path, when the
 *   local state may have moved on. What it returns is what `compare` gets as `local`.
 * - a call the local side refused is compared only for the methods in `comparesRefusals`, and only for a
 *   refusal of the protocol (a ProtocolError): `local` is then `{ refused: <its code> }`.
 */
export interface ShadowSample {
  /** What was asked, for the mismatch list (`peers.list <mesh>`, `admit <mesh>`). */
  subject: string;
  local: unknown;
  shared: unknown;
}

export interface RowShadow {
  /** The methods of the row's interface the comparator is given (others are not observed). */
  readonly observes: readonly string[];
  /** Of those, the methods whose protocol refusals are compared too (`local` is `{ refused: code }`). */
  readonly comparesRefusals?: readonly string[];
  /** What the local side decided, read when it answered (synchronous, cheap; see the contract above). */
  capture?(method: string, args: readonly unknown[], answer: unknown): unknown;
  start(): Promise<void>;
  stop(): Promise<void>;
  compare(method: string, args: readonly unknown[], local: unknown): Promise<ShadowSample | undefined>;
}

/** How a refusal of the local side is compared: its protocol error code. */
export interface Refused {
  refused: string;
}

/** The code of a protocol refusal (a ProtocolError: `not_found`, `conflict`…), or undefined for other errors. */
export function refusalCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return error instanceof Error && typeof code === 'string' ? code : undefined;
}

export type ShadowOutcome = 'agree' | 'disagree' | 'error';

/** One mismatch as the console shows it. */
export interface ShadowMismatch {
  at: string;
  subject: string;
  outcome: 'disagree' | 'error';
  local?: unknown;
  shared?: unknown;
  error?: string;
}

/** Order-free, key-order-free JSON: two answers are the same when these strings are. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) =>
    item && typeof item === 'object' && !Array.isArray(item)
      ? Object.fromEntries(
          Object.entries(item as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)),
        )
      : item,
  );
}

/**
 * The planted divergence (plant `shadow-divergence`): what the shared side answered, made different in a
 * way every comparison sees (a boolean negated, a list one entry short or one longer, anything else wrapped).
 */
export function diverge(value: unknown): unknown {
  if (typeof value === 'boolean') return !value;
  if (typeof value === 'number') return value + 1;
  if (Array.isArray(value)) return value.length > 0 ? value.slice(1) : ['planted'];
  return { planted: value ?? null };
}
