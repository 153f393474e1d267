/**
 * The promotion lock (cli/promotion/lock.ts) against the machine's Postgres: one holder per environment, the
 * second told who holds it and since when; a lock goes with its holder's connection; --force-unlock takes
 * only a stale lock, and the holder it took it from sees it lost.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquirePromotionLock, holderName, LOCK_KEY_SQL } from '../../cli/promotion/lock.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('promotion_lock');
});
afterAll(async () => {
  await db?.drop();
});

describe('the promotion lock', () => {
  it('refuses a second holder of the same environment, naming the first; another environment is free', async () => {
    const first = await acquirePromotionLock(db.url, 'staging', 'alice');
    expect(first.held).toBe(true);
    const second = await acquirePromotionLock(db.url, 'staging', 'bob');
    expect(second.held).toBe(false);
    if (second.held) return;
    expect(second.reason).toContain(holderName('alice'));
    expect(second.reason).toMatch(/another promotion of staging holds the lock: .* \(since \d{4}-/);
    expect(second.holder?.holder).toBe(holderName('alice'));
    const other = await acquirePromotionLock(db.url, 'prod', 'bob');
    expect(other.held).toBe(true);
    if (other.held) await other.release();
    if (first.held) await first.release();
    const third = await acquirePromotionLock(db.url, 'staging', 'bob');
    expect(third.held).toBe(true);
    if (third.held) await third.release();
  });

  it('goes with its holder: a holder whose connection ended (its process killed) holds nothing', async () => {
    // A holder from another process, as the lock's own SQL takes it; its connection ends as a killed one's.
    const holder = new pg.Client({
      connectionString: db.url,
      application_name: 'workbench-promote gone@elsewhere:1',
    });
    await holder.connect();
    await holder.query(`SELECT pg_advisory_lock(${LOCK_KEY_SQL})`, ['staging']);
    const refused = await acquirePromotionLock(db.url, 'staging', 'bob');
    expect(refused.held ? '' : refused.reason).toContain('gone@elsewhere:1');
    await holder.end();
    const taken = await acquirePromotionLock(db.url, 'staging', 'bob');
    expect(taken.held).toBe(true);
    if (taken.held) await taken.release();
  });

  it('--force-unlock takes a stale lock only, and its old holder sees it lost', async () => {
    const old = await acquirePromotionLock(db.url, 'staging', 'stuck');
    if (!old.held) throw new Error('not held');
    // A young lock (the 30-minute rule) is refused even with --force-unlock.
    const young = await acquirePromotionLock(db.url, 'staging', 'bob', true);
    expect(young.held ? '' : young.reason).toContain(
      '--force-unlock takes only a lock older than 30 minutes',
    );
    expect(old.lost()).toBe(false);
    // Stale after 0 ms: taken over, the old holder's connection ended.
    const forced = await acquirePromotionLock(db.url, 'staging', 'bob', true, 0);
    expect(forced.held).toBe(true);
    if (!forced.held) return;
    expect(forced.forced?.holder).toBe(holderName('stuck'));
    await expect.poll(() => old.lost()).toBe(true);
    await forced.release();
    await old.release();
  });
});
