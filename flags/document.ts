/**
 * The flags file of an environment (`flags/environments/<env>.json`): `{"flags": {"ha.audit": true, …}}`.
 * Parsing never throws: it returns the values it could read and the problems it found, so a node can
 * report a bad file and keep acting on its last good values.
 */
import {
  defaultFlagValues,
  FLAG_KEYS,
  type FlagKey,
  type FlagValues,
  isFlagKey,
  parseFlagMode,
} from './registry.js';

export interface ParsedFlags {
  /** Complete values (defaults for flags the file does not name), or undefined when the file is unusable. */
  values: FlagValues | undefined;
  /** The flags set to "shadow" (their value in `values` is false: the local implementation serves). */
  shadow: FlagKey[];
  problems: string[];
}

export function parseFlagsDocument(text: string): ParsedFlags {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    return { values: undefined, shadow: [], problems: [`not valid JSON: ${(error as Error).message}`] };
  }
  const flags = (document as { flags?: unknown } | null)?.flags;
  if (typeof flags !== 'object' || flags === null || Array.isArray(flags)) {
    return {
      values: undefined,
      shadow: [],
      problems: ['expected an object {"flags": {"<key>": true|false|"shadow", …}}'],
    };
  }
  const problems: string[] = [];
  const values = defaultFlagValues();
  const shadow: FlagKey[] = [];
  for (const [key, value] of Object.entries(flags)) {
    const mode = parseFlagMode(value);
    if (!isFlagKey(key)) problems.push(`unknown flag "${key}" (known: ${FLAG_KEYS.join(', ')})`);
    else if (mode === undefined)
      problems.push(`flag "${key}" must be true, false or "shadow", got ${JSON.stringify(value)}`);
    else {
      values[key] = mode === 'on';
      if (mode === 'shadow') shadow.push(key);
    }
  }
  // Any problem makes the whole file suspect: keep acting on the last good values instead.
  return problems.length === 0 ? { values, shadow, problems } : { values: undefined, shadow: [], problems };
}

/** The file's text: each flag true or false, or "shadow" for the flags in `shadow` that are not on. */
export function renderFlagsDocument(values: FlagValues, shadow: readonly FlagKey[] = []): string {
  const flags = Object.fromEntries(
    Object.entries(values).map(([key, on]) => [key, !on && shadow.includes(key as FlagKey) ? 'shadow' : on]),
  );
  return `${JSON.stringify({ flags }, null, 2)}\n`;
}
