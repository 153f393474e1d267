import { pino } from 'pino';
import { scrub } from './secrets/redact.js';

export type Logger = pino.Logger;

/**
 * JSON logs on stdout; every line carries the node id so a cluster's logs can be merged. Every line is
 * scrubbed of `secrets` (secrets/redact.ts `secretValues`) as it is written, whatever put them there.
 */
export function createLogger(nodeId: string, level: string, secrets: readonly string[] = []): Logger {
  return pino({
    level,
    base: { node: nodeId },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...(secrets.length === 0 ? {} : { hooks: { streamWrite: (line: string) => scrub(line, secrets) } }),
  });
}
