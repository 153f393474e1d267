/**
 * Counts the broker's Postgres round trips, by the operation they were made for (issue 26 item 5): what a
 * resume costs is then read off a metric (`mesh_broker_db_round_trips_total`), not inferred from the
 * server's commit count, which every other node's background work swamps.
 *
 * The operation is carried by AsyncLocalStorage: `asOperation('hello', work)` labels every statement `work`
 * sends, on any pooled client, until it settles (a statement a batcher sends for several callers at once is
 * labelled with the context of the call that started the batch). Everything else is `other`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type pg from 'pg';

/** Operations a round trip can be labelled with; a bounded set, so the metric's series stay bounded. */
export type DbOperation = 'hello' | 'session' | 'backlog' | 'other';

/** What one round trip was: a statement, or a transaction's BEGIN, COMMIT or ROLLBACK. */
export type RoundTripKind = 'statement' | 'begin' | 'commit' | 'rollback';

export type RoundTripCounter = (operation: DbOperation, kind: RoundTripKind) => void;

const current = new AsyncLocalStorage<DbOperation>();

/** Runs `work` with every Postgres round trip it makes labelled `operation`. */
export function asOperation<T>(operation: DbOperation, work: () => Promise<T>): Promise<T> {
  return current.run(operation, work);
}

function kindOf(statement: unknown): RoundTripKind {
  const text = typeof statement === 'string' ? statement : (statement as { text?: unknown } | null)?.text;
  if (typeof text !== 'string') return 'statement';
  const word = text.trimStart().slice(0, 8).toUpperCase();
  if (word.startsWith('BEGIN')) return 'begin';
  if (word.startsWith('COMMIT')) return 'commit';
  if (word.startsWith('ROLLBACK')) return 'rollback';
  return 'statement';
}

/**
 * Makes `client` report each query it sends. pg-pool's own `pool.query` sends through the client's
 * `query`, so wrapping every client the pool connects counts both ways of querying, once each.
 */
export function countRoundTrips(client: pg.Client, counted: RoundTripCounter): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    counted(current.getStore() ?? 'other', kindOf(args[0]));
    return query(...args);
  };
}
