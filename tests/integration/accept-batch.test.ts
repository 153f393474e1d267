import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { type AcceptRequest, acceptBatch } from '../../broker/delivery/accept.js';
import type { Outcome } from '../../broker/delivery/group-commit.js';
import type { AcceptedMessage, Sender } from '../../broker/delivery/records.js';
import { ProtocolError } from '../../protocol/errors.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

/**
 * One accept batch, straight against Postgres (docs/delivery.md § The pipeline): every outcome a request
 * can have, side by side in one batch, in one statement; and a message accepted meanwhile by another node.
 */
let db: TestDatabase;
let pool: Pool;

beforeAll(async () => {
  db = await createTestDatabase('accept_batch');
  pool = createPool(db.url, { max: 2 });
});
afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

interface Mesh {
  id: string;
  /** Members a, b, c (b and c in group `g`), d revoked. */
  members: Record<'a' | 'b' | 'c' | 'd', { id: number; pubkey: string }>;
}

async function createMesh(): Promise<Mesh> {
  const mesh = await db.query<{ id: string }>('INSERT INTO meshes (name) VALUES ($1) RETURNING id', [
    `accept-${randomBytes(4).toString('hex')}`,
  ]);
  const members = {} as Mesh['members'];
  for (const [name, groups] of [
    ['a', []],
    ['b', ['g']],
    ['c', ['g']],
    ['d', []],
  ] as const) {
    const pubkey = randomBytes(32).toString('hex');
    const row = await db.query<{ id: number }>(
      `INSERT INTO members (mesh_id, pubkey, groups, revoked_at) VALUES ($1, $2, $3, $4) RETURNING id`,
      [mesh.rows[0]!.id, pubkey, groups, name === 'd' ? new Date() : null],
    );
    members[name] = { id: Number(row.rows[0]!.id), pubkey };
  }
  return { id: mesh.rows[0]!.id, members };
}

const senderOf = (mesh: Mesh, name: keyof Mesh['members']): Sender => ({
  meshId: mesh.id,
  memberId: mesh.members[name].id,
  sessionId: randomUUID(),
  pubkey: mesh.members[name].pubkey,
});
const value = (outcome: Outcome<AcceptedMessage> | undefined) => {
  if (!outcome?.ok) throw new Error(`refused: ${String(outcome?.error)}`);
  return outcome.value;
};
const refusal = (outcome: Outcome<AcceptedMessage> | undefined) => {
  if (outcome?.ok !== false) throw new Error('accepted');
  const error = outcome.error as ProtocolError;
  expect(error).toBeInstanceOf(ProtocolError);
  return { code: error.code, message: error.message };
};

/** Runs one batch on a client of its own, counting the statements it sends. */
async function accept(requests: AcceptRequest[], backlogMax = 100) {
  const client = await pool.connect();
  let statements = 0;
  const query = client.query.bind(client);
  client.query = ((...args: Parameters<typeof query>) => {
    statements++;
    return query(...args);
  }) as typeof client.query;
  try {
    const outcomes = await acceptBatch(client, requests, { backlogMax });
    return { outcomes, statements };
  } finally {
    client.query = query;
    client.release();
  }
}

describe('an accept batch', () => {
  it('gives each request its outcome, in order, in one statement', async () => {
    const mesh = await createMesh();
    const { a, b, c } = mesh.members;
    const fromA = senderOf(mesh, 'a');
    const { outcomes, statements } = await accept([
      { sender: fromA, message: { id: 'dm', to: b.pubkey, body: 'hi b' } },
      { sender: fromA, message: { id: 'all', to: '*', body: 'hi all' } },
      { sender: fromA, message: { id: 'dm', to: b.pubkey, body: 'hi b (a copy)' } },
      { sender: fromA, message: { id: 'self', to: a.pubkey, body: 'me' } },
      { sender: fromA, message: { id: 'self-ok', to: a.pubkey, body: 'me', allowSelf: true } },
      { sender: fromA, message: { id: 'nobody', to: 'ff'.repeat(32), body: '?' } },
      { sender: fromA, message: { id: 'revoked', to: mesh.members.d.pubkey, body: '?' } },
      { sender: senderOf(mesh, 'd'), message: { id: 'from-revoked', to: b.pubkey, body: '?' } },
      { sender: fromA, message: { id: 'group', to: '@g', body: 'hi g' } },
    ]);
    expect(statements).toBe(1);
    expect(outcomes).toHaveLength(9);

    const dm = value(outcomes[0]);
    expect(dm).toMatchObject({
      recipients: [b.id],
      seqs: [[b.id, 1]],
      duplicate: false,
      nodes: [],
      dropped: 0,
    });
    expect(dm.frame).toMatchObject({ type: 'message', id: 'dm', from: a.pubkey, to: b.pubkey, body: 'hi b' });
    const all = value(outcomes[1]);
    expect(all.recipients.toSorted()).toEqual([b.id, c.id].toSorted());
    expect(all.seqs.toSorted()).toEqual(
      [
        [b.id, 2],
        [c.id, 1],
      ].toSorted(),
    );
    expect(all.nodes).toBeUndefined();
    // The copy is the first one's outcome, marked duplicate: same message, same seqs, nothing new stored.
    expect(value(outcomes[2])).toEqual({ ...dm, duplicate: true });
    expect(refusal(outcomes[3])).toEqual({
      code: 'bad_request',
      message: 'cannot send a message to yourself',
    });
    expect(value(outcomes[4])).toMatchObject({ recipients: [a.id], seqs: [[a.id, 1]] });
    expect(refusal(outcomes[5])).toEqual({
      code: 'not_found',
      message: `no member ${'ff'.repeat(32)} in this mesh`,
    });
    // A revoked member is no recipient, and sends nothing.
    expect(refusal(outcomes[6]).code).toBe('not_found');
    expect(refusal(outcomes[7])).toEqual({ code: 'forbidden', message: 'the sending member is revoked' });
    const group = value(outcomes[8]);
    expect(group.seqs.toSorted()).toEqual(
      [
        [b.id, 3],
        [c.id, 2],
      ].toSorted(),
    );
    expect(group.nodes).toEqual([]);

    const rows = await db.query<{ member: number; seq: number; clientId: string }>(
      `SELECT d.member_id AS member, d.seq, m.client_id AS "clientId"
         FROM deliveries d JOIN messages m ON m.id = d.message_id WHERE m.mesh_id = $1 ORDER BY 1, 2`,
      [mesh.id],
    );
    // Every member's seqs without a gap, in request order (a, b, c were created in that order).
    expect(rows.rows.map((r) => [r.member, r.seq, r.clientId])).toEqual([
      [a.id, 1, 'self-ok'],
      [b.id, 1, 'dm'],
      [b.id, 2, 'all'],
      [b.id, 3, 'group'],
      [c.id, 1, 'all'],
      [c.id, 2, 'group'],
    ]);

    // A retry in a later batch is the original as stored: its recipients, no seqs, nothing sent again.
    const retry = await accept([{ sender: fromA, message: { id: 'all', to: '*', body: 'again' } }]);
    expect(value(retry.outcomes[0])).toEqual({
      frame: all.frame,
      recipients: [b.id, c.id].toSorted((x, y) => x - y),
      seqs: [],
      duplicate: true,
      dropped: 0,
    });
    expect((await db.query('SELECT 1 FROM deliveries WHERE member_id = $1', [b.id])).rowCount).toBe(3);
  });

  it('refuses a DM to a full backlog and skips the full member in a broadcast, counting it', async () => {
    const mesh = await createMesh();
    const { b, c } = mesh.members;
    const fromA = senderOf(mesh, 'a');
    const { outcomes } = await accept(
      [
        { sender: fromA, message: { id: '1', to: b.pubkey, body: '1' } },
        { sender: fromA, message: { id: '2', to: b.pubkey, body: '2' } },
        { sender: fromA, message: { id: '3', to: b.pubkey, body: '3' } },
        { sender: fromA, message: { id: '4', to: '*', body: '4' } },
      ],
      2,
    );
    expect(value(outcomes[1]).seqs).toEqual([[b.id, 2]]);
    expect(refusal(outcomes[2])).toEqual({
      code: 'limit_exceeded',
      message: "the recipient's backlog is full (2 unacked messages)",
    });
    expect(value(outcomes[3])).toMatchObject({ recipients: [c.id], seqs: [[c.id, 1]], dropped: 1 });
    const stored = await db.query<{ recipients: number[] }>(
      `SELECT recipients FROM messages WHERE mesh_id = $1 AND client_id = '4'`,
      [mesh.id],
    );
    expect(stored.rows[0]!.recipients).toEqual([c.id]);
  });

  it('takes a message accepted meanwhile by another node as the original, and leaves no gap in the seqs', async () => {
    const mesh = await createMesh();
    const { b } = mesh.members;
    const fromA = senderOf(mesh, 'a');
    // Another node's accept of the same message, not committed yet when this batch looks for duplicates.
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      const original = await other.query<{ id: number; tag: string }>(
        `INSERT INTO messages (mesh_id, sender_id, sender_session, client_id, target, body, recipients)
         VALUES ($1, $2, $3, 'raced', $4, 'first', $5) RETURNING id, tag`,
        [mesh.id, fromA.memberId, fromA.sessionId, b.pubkey, [b.id]],
      );
      const batch = accept([
        { sender: fromA, message: { id: 'raced', to: b.pubkey, body: 'retry' } },
        { sender: fromA, message: { id: 'next', to: b.pubkey, body: 'next' } },
      ]);
      // The batch waits on the other transaction's message row (the unique key) before deciding.
      await waitFor(
        async () =>
          (
            await db.query(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
            )
          ).rowCount! > 0,
      );
      await other.query('COMMIT');
      const { outcomes } = await batch;
      expect(value(outcomes[0])).toMatchObject({
        recipients: [b.id],
        seqs: [],
        duplicate: true,
        frame: { messageId: `${original.rows[0]!.id}-${original.rows[0]!.tag}`, body: 'first' },
      });
      expect(value(outcomes[1]).seqs).toEqual([[b.id, 1]]);
    } finally {
      await other.end();
    }
  });
});
