import { pino } from 'pino';

export type Logger = pino.Logger;

/** JSON logs on stdout; every line carries the node id so a cluster's logs can be merged. */
export function createLogger(nodeId: string, level: string): Logger {
  return pino({ level, base: { node: nodeId }, timestamp: pino.stdTimeFunctions.isoTime });
}
