/**
 * The audit hash chain's arithmetic (docs/protocol.md § Audit), shared by every writer and by the
 * independent verifier so that both compute exactly the same bytes.
 */
import { createHash } from 'node:crypto';

export const GENESIS = 'genesis';

/** JSON with object keys sorted, no whitespace, `undefined` members dropped (arrays keep `null`). */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value))
    return `[${value.map((item) => (item === undefined ? 'null' : canonicalJson(item))).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, item]) => item !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
}

export interface ChainFields {
  prevHash: string;
  meshId: string;
  seq: number;
  eventType: string;
  actor: string | null;
  payload: unknown;
  createdAt: Date;
}

export function auditHash(row: ChainFields): string {
  const text = [
    row.prevHash,
    row.meshId,
    row.seq,
    row.eventType,
    row.actor ?? '',
    canonicalJson(row.payload),
    row.createdAt.toISOString(),
  ].join('|');
  return createHash('sha256').update(text, 'utf8').digest('hex');
}
