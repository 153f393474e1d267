/**
 * Message identity across a rewound history (issue 25, item 3). A restore of a backup taken before a
 * message (docs/runbooks/backup-and-restore.md) sets `messages.id`'s sequence back, so the next message gets
 * the id of one a peer has already seen. The messageId's random tag (migration 0014) keeps the two apart: the
 * SDK, which drops repeats by messageId, emits the new message, and an ack of the old one acks nothing.
 * The restore here is a real one: `pg_dump` before M1, `pg_restore --clean` after it, brokers stopped.
 */

import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { type MeshClient, MeshRequestError } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../cli/ports.js';
import type { Message } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const run = promisify(execFile);

let db: TestDatabase;
let node: InProcessNode | undefined;
let port: number;
let scratch: string;

beforeAll(async () => {
  db = await createTestDatabase('message_identity');
  scratch = await mkdtemp(join(tmpdir(), 'message-identity-'));
  port = await freePort();
  node = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { PORT: String(port) } });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
  await rm(scratch, { recursive: true, force: true });
});

/** Resolves with the first message the SDK emits (after its dedup) that `match` accepts. */
function emitted(client: MeshClient, match: (m: Message) => boolean): Promise<Message> {
  return client.next('message', match);
}

async function ack(client: MeshClient, messageId: string): Promise<string> {
  try {
    const reply = await client.request({ type: 'ack', messageId });
    return reply.type;
  } catch (error) {
    if (error instanceof MeshRequestError) return error.code;
    throw error;
  }
}

/** Delivery rows owed for the message with this exact messageId (row id and tag). */
async function owed(messageId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM deliveries d JOIN messages m ON m.id = d.message_id
      WHERE m.id || '-' || m.tag = $1`,
    [messageId],
  );
  return rows[0]!.n;
}

describe('message identity across a restore', () => {
  it('a peer that saw M1 before the restore gets M2, which reuses M1 row id; an ack of M1 does not ack M2', async () => {
    const mesh = await createMesh(node!, 2);
    const [alice, bob] = [mesh.members[0]!, mesh.members[1]!];
    const a = await connectPeer(node!.wsUrl, mesh, alice);
    const b = await connectPeer(node!.wsUrl, mesh, bob, { autoAck: false });

    const backup = join(scratch, 'before-m1.dump');
    await run('pg_dump', ['-Fc', '-f', backup, db.url]);

    const gotM1 = emitted(b, (m) => m.body === 'M1');
    const m1 = await a.send(bob.pubkey, 'M1');
    expect((await gotM1).messageId).toBe(m1.messageId);
    expect(await ack(b, m1.messageId)).toBe('acked');

    // The runbook's restore: every broker stopped, the dump restored over the database, brokers started.
    await node!.stop();
    node = undefined;
    await run('pg_restore', ['--clean', '--if-exists', '--single-transaction', '-d', db.url, backup]);
    node = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { PORT: String(port) } });
    await waitFor(() => a.connected && b.connected, { timeoutMs: 15_000, what: 'both peers back' });

    const gotM2 = emitted(b, (m) => m.body === 'M2');
    const m2 = await a.send(bob.pubkey, 'M2');
    // The restored sequence hands M2 the row id M1 had: the identity must still differ.
    expect(m2.messageId.split('-')[0]).toBe(m1.messageId.split('-')[0]);
    expect.soft(m2.messageId).not.toBe(m1.messageId);
    const message = await gotM2;
    expect(message, 'the SDK emits M2').toMatchObject({ messageId: m2.messageId, body: 'M2' });

    // A stale ack of M1 (same row id, other tag) acks nothing: M2 is still owed.
    expect(await ack(b, m1.messageId)).toBe('not_found');
    expect(await owed(m2.messageId)).toBe(1);
    expect(await ack(b, m2.messageId)).toBe('acked');
    expect(await owed(m2.messageId)).toBe(0);
  });
});

describe('message identity across a rewind under a running broker', () => {
  it('a session connected through the rewind gets M2 at once (its feed starts again), not only after a reconnect', async () => {
    const mesh = await createMesh(node!, 2);
    const [alice, bob] = [mesh.members[0]!, mesh.members[1]!];
    const a = await connectPeer(node!.wsUrl, mesh, alice);
    const b = await connectPeer(node!.wsUrl, mesh, bob, { autoAck: false });
    const gotM1 = emitted(b, (m) => m.body === 'M1');
    const m1 = await a.send(bob.pubkey, 'M1');
    await gotM1;
    expect(await ack(b, m1.messageId)).toBe('acked');

    // History set back under the running broker to before M1, as a failover to a replica that never got
    // M1 does behind a load balancer (the brokers and their sessions stay up): M1 gone, the member's feed
    // and the id sequence back where they were.
    const rowId = m1.messageId.split('-')[0]!;
    await db.query('DELETE FROM messages WHERE id = $1', [rowId]);
    await db.query(
      `UPDATE delivery_feeds f SET last_seq = last_seq - 1 FROM members m
        WHERE m.id = f.member_id AND m.pubkey = $1`,
      [bob.pubkey],
    );
    await db.query(`ALTER TABLE messages ALTER COLUMN id RESTART WITH ${Number(rowId)}`);

    const gotM2 = emitted(b, (m) => m.body === 'M2');
    const m2 = await a.send(bob.pubkey, 'M2');
    expect(m2.messageId.split('-')[0]).toBe(rowId);
    expect(b.connected).toBe(true);
    expect(await gotM2, 'the live session gets M2').toMatchObject({ messageId: m2.messageId });
    expect(await ack(b, m2.messageId)).toBe('acked');
  });
});

describe('the messageId format', () => {
  it('is <row id>-<16 hex>; an ack of a bare row id is a bad_request and acks nothing', async () => {
    const mesh = await createMesh(node!, 2);
    const a = await connectPeer(node!.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node!.wsUrl, mesh, mesh.members[1]!, { autoAck: false });
    const got = emitted(b, (m) => m.body === 'format');
    const sent = await a.send(mesh.members[1]!.pubkey, 'format');
    expect(sent.messageId).toMatch(/^[1-9]\d*-[0-9a-f]{16}$/);
    expect((await got).messageId).toBe(sent.messageId);

    const bare = sent.messageId.split('-')[0]!;
    await expect(b.request({ type: 'ack', messageId: bare })).rejects.toMatchObject({
      code: 'bad_request',
      message: expect.stringContaining('messageId'),
    });
    expect(await owed(sent.messageId)).toBe(1);
    const otherTag = `${bare}-${'0'.repeat(16)}`;
    expect(await ack(b, otherTag)).toBe('not_found');
    expect(await owed(sent.messageId)).toBe(1);
    expect(await ack(b, sent.messageId)).toBe('acked');
    expect(await owed(sent.messageId)).toBe(0);
  });
});
