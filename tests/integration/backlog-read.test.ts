/**
 * The feed's first read, shared (broker/delivery/store.ts `readBacklog`, issue 26 item 5): the backlogs of
 * sessions starting together are read in one statement, and each member's page is exactly what its own
 * read returns (its rows after its `afterSeq`, oldest first, at most its `limit`, and its last seq), in
 * real Postgres.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { MESSAGE_COLUMNS, type MessageRow, toFrame } from '../../broker/delivery/records.js';
import { MessageStore } from '../../broker/delivery/store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let pool: Pool;

beforeAll(async () => {
  db = await createTestDatabase('backlog_read');
  pool = createPool(db.url, { max: 4 });
});
afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

/** One member's read as the store made it before reads were shared: the reference for every page. */
async function readAlone(memberId: number, afterSeq: number, limit: number) {
  const result = await pool.query<MessageRow & { lastSeq: number; seq: number | null }>(
    `SELECT f.last_seq AS "lastSeq", d.seq, ${MESSAGE_COLUMNS}
       FROM delivery_feeds f
       LEFT JOIN LATERAL (
         SELECT seq, message_id FROM deliveries
          WHERE member_id = f.member_id AND seq > $2
          ORDER BY seq LIMIT $3) d ON true
       LEFT JOIN messages m ON m.id = d.message_id
       LEFT JOIN members s ON s.id = m.sender_id
      WHERE f.member_id = $1
      ORDER BY d.seq`,
    [memberId, afterSeq, limit],
  );
  return {
    lastSeq: Number(result.rows[0]?.lastSeq ?? 0),
    items: result.rows
      .filter((row) => row.seq !== null)
      .map((row) => ({ seq: Number(row.seq), frame: toFrame(row) })),
  };
}

describe('readBacklog', () => {
  it('reads the backlogs of sessions starting together in one statement, each page as its own read', async () => {
    const mesh = await db.query<{ id: string }>('INSERT INTO meshes (name) VALUES ($1) RETURNING id', [
      `backlog-${randomBytes(4).toString('hex')}`,
    ]);
    const meshId = mesh.rows[0]!.id;
    const member = async () => {
      const pubkey = randomBytes(32).toString('hex');
      const row = await db.query<{ id: number }>(
        'INSERT INTO members (mesh_id, pubkey) VALUES ($1, $2) RETURNING id',
        [meshId, pubkey],
      );
      return { memberId: Number(row.rows[0]!.id), pubkey };
    };
    const sender = { meshId, sessionId: randomUUID(), ...(await member()) };
    const [b, c, d] = [await member(), await member(), await member()];
    const store = new MessageStore(pool, { backlogMax: 1000 });
    for (const [to, count] of [
      [b, 7],
      [c, 3],
    ] as const) {
      for (let i = 0; i < count; i++) {
        await store.accept(sender, { id: `${to.pubkey.slice(0, 8)}-${i}`, to: to.pubkey, body: `m${i}` });
      }
    }
    const reads: Array<[number, number, number]> = [
      [b.memberId, 0, 500],
      [b.memberId, 0, 5],
      [b.memberId, 5, 2],
      [b.memberId, 2, 3],
      [c.memberId, 1, 500],
      [d.memberId, 0, 500],
      [sender.memberId, 0, 500],
    ];
    const alone = [];
    for (const read of reads) {
      alone.push(await readAlone(...read));
      expect(await store.read(...read)).toEqual(alone.at(-1));
    }
    expect(alone[0]!.items.map((item) => item.frame.type === 'message' && item.frame.body)).toEqual(
      Array.from({ length: 7 }, (_, i) => `m${i}`),
    );
    expect(alone[1]!.items.map((item) => item.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(alone[3]!.items.map((item) => item.seq)).toEqual([3, 4, 5]);
    expect(alone[5]).toEqual({ lastSeq: 0, items: [] });

    let statements = 0;
    const counting = {
      query: (...args: Parameters<Pool['query']>) => {
        statements++;
        return (pool.query as (...a: unknown[]) => unknown)(...args);
      },
    } as unknown as Pool;
    const shared = new MessageStore(counting, { backlogMax: 1000 });
    const together = await Promise.all(reads.map((read) => shared.readBacklog(...read)));
    expect(together).toEqual(alone);
    // The first read alone (nothing before it in the window), the rest together.
    expect(statements).toBeLessThanOrEqual(2);
  });
});
