import type pg from 'pg';
import type { Pool } from '../db/pool.js';
import type { Regions } from './regions.js';

/** `ha.regions` off: every list read on the primary pool, every node may take any mesh's work. */
export class LocalRegions implements Regions {
  constructor(
    private readonly primary: Pool,
    private readonly counted: () => void,
  ) {}

  read<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    this.counted();
    return this.primary.query<R>(text, values);
  }

  async defers(): Promise<boolean> {
    return false;
  }

  async deferred(): Promise<string[]> {
    return [];
  }

  async activate(): Promise<void> {}
  async deactivate(): Promise<void> {}
  async close(): Promise<void> {}
}
