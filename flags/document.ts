/**
 * The flags file of an environment (`flags/environments/<env>.json`): `{"flags": {"ha.audit": true, …}}`.
 * Parsing never throws: it returns the values it could read and the problems it found, so a node can
 * report a bad file and keep acting on its last good values.
 */
import { defaultFlagValues, FLAG_KEYS, type FlagValues, isFlagKey } from './registry.js';

export interface ParsedFlags {
  /** Complete values (defaults for flags the file does not name), or undefined when the file is unusable. */
  values: FlagValues | undefined;
  problems: string[];
}

export function parseFlagsDocument(text: string): ParsedFlags {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    return { values: undefined, problems: [`not valid JSON: ${(error as Error).message}`] };
  }
  const flags = (document as { flags?: unknown } | null)?.flags;
  if (typeof flags !== 'object' || flags === null || Array.isArray(flags)) {
    return { values: undefined, problems: ['expected an object {"flags": {"<key>": true|false, …}}'] };
  }
  const problems: string[] = [];
  const values = defaultFlagValues();
  for (const [key, value] of Object.entries(flags)) {
    if (!isFlagKey(key)) problems.push(`unknown flag "${key}" (known: ${FLAG_KEYS.join(', ')})`);
    else if (typeof value !== 'boolean')
      problems.push(`flag "${key}" must be true or false, got ${JSON.stringify(value)}`);
    else values[key] = value;
  }
  // Any problem makes the whole file suspect: keep acting on the last good values instead.
  return { values: problems.length === 0 ? values : undefined, problems };
}

export function renderFlagsDocument(values: FlagValues): string {
  return `${JSON.stringify({ flags: values }, null, 2)}\n`;
}
