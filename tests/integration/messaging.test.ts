import { randomUUID } from 'node:crypto';
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Message } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let node: InProcessNode;

beforeAll(async () => {
  db = await createTestDatabase('messaging');
  // These tests send hundreds of messages quickly; rate limits have their own test.
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: { SEND_BURST: '100000', SEND_RATE_PER_MIN: '100000' },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

/** Collects the messages a client emits (after SDK dedup). */
function inbox(client: MeshClient): Message[] {
  const messages: Message[] = [];
  client.on('message', (message) => messages.push(message));
  return messages;
}

describe('durable messages on one node', () => {
  it('delivers a DM to a connected member and tells the sender how many recipients', async () => {
    const mesh = await createMesh(node, 2);
    const [alice, bob] = mesh.members as [(typeof mesh.members)[0], (typeof mesh.members)[0]];
    const a = await connectPeer(node.wsUrl, mesh, alice);
    const b = await connectPeer(node.wsUrl, mesh, bob);
    const received = b.next('message');
    const sent = await a.send(bob.pubkey, 'hello bob', { id: 'm-1' });
    expect(sent).toMatchObject({ type: 'sent', id: 'm-1', recipients: 1 });
    const message = await received;
    expect(message).toMatchObject({
      type: 'message',
      messageId: sent.messageId,
      id: 'm-1',
      from: alice.pubkey,
      fromSession: a.sessionId,
      to: bob.pubkey,
      body: 'hello bob',
    });
    expect(Date.parse(message.sentAt)).toBeGreaterThan(Date.now() - 10_000);
  });

  it('delivers to every connected session of the recipient member', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b1 = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const b2 = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const both = Promise.all([b1.next('message'), b2.next('message')]);
    const sent = await a.send(mesh.members[1]!.pubkey, 'to both sessions');
    expect(sent.recipients).toBe(1);
    for (const message of await both) expect(message.messageId).toBe(sent.messageId);
  });

  it('keeps a DM for an offline member and delivers it when a session connects', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const sent = await a.send(mesh.members[1]!.pubkey, 'while you were out');
    expect(sent.recipients).toBe(1);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!, { autoAck: false });
    const message = await b.next('message', (m) => m.messageId === sent.messageId);
    expect(message.body).toBe('while you were out');
  });

  it('broadcasts "*" to every other member, online or offline, never to the sender', async () => {
    const mesh = await createMesh(node, 4);
    const [a, b, c] = await Promise.all(
      mesh.members.slice(0, 3).map((m) => connectPeer(node.wsUrl, mesh, m)),
    );
    const aInbox = inbox(a!);
    const got = Promise.all([b!.next('message'), c!.next('message')]);
    const sent = await a!.send('*', 'everyone');
    expect(sent.recipients).toBe(3);
    for (const message of await got) expect(message).toMatchObject({ body: 'everyone', to: '*' });
    const d = await connectPeer(node.wsUrl, mesh, mesh.members[3]!);
    expect((await d.next('message')).messageId).toBe(sent.messageId);
    // The sender's own copy would have arrived before a later DM to itself from b; it never does.
    await b!.send(mesh.members[0]!.pubkey, 'marker');
    await waitFor(() => aInbox.some((m) => m.body === 'marker'));
    expect(aInbox.map((m) => m.body)).toEqual(['marker']);
  });

  it('sends "@group" to the members that declared the group, including offline ones', async () => {
    const mesh = await createMesh(node, 4);
    const [alice, ops1, ops2, other] = mesh.members as [
      (typeof mesh.members)[0],
      (typeof mesh.members)[0],
      (typeof mesh.members)[0],
      (typeof mesh.members)[0],
    ];
    const a = await connectPeer(node.wsUrl, mesh, alice, { groups: ['ops'] });
    const o1 = await connectPeer(node.wsUrl, mesh, ops1, { groups: ['ops', 'dev'] });
    // ops2 declares the group once, then goes offline: the group still reaches it.
    const o2first = await connectPeer(node.wsUrl, mesh, ops2, { groups: ['ops'] });
    o2first.close();
    const x = await connectPeer(node.wsUrl, mesh, other, { groups: ['dev'] });
    const xInbox = inbox(x);
    const got = o1.next('message');
    const sent = await a.send('@ops', 'ops only');
    expect(sent.recipients).toBe(2); // ops1 and ops2, not the sender
    expect((await got).body).toBe('ops only');
    const o2 = await connectPeer(node.wsUrl, mesh, ops2, { groups: ['ops'] });
    expect((await o2.next('message')).messageId).toBe(sent.messageId);
    await a.send(other.pubkey, 'marker');
    await waitFor(() => xInbox.some((m) => m.body === 'marker'));
    expect(xInbox.map((m) => m.body)).toEqual(['marker']);
  });

  it('treats a retried id as the same message: one messageId, one delivery', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const bInbox = inbox(b);
    const first = await a.send(mesh.members[1]!.pubkey, 'once', { id: 'dup-1' });
    const retry = await a.send(mesh.members[1]!.pubkey, 'once', { id: 'dup-1' });
    expect(retry.messageId).toBe(first.messageId);
    const framesSeen: string[] = [];
    b.on('frame', (frame) => {
      if (frame.type === 'message') framesSeen.push(String(frame.messageId));
    });
    await a.send(mesh.members[1]!.pubkey, 'after', { id: 'dup-2' });
    await waitFor(() => bInbox.some((m) => m.id === 'dup-2'));
    expect(bInbox.map((m) => m.id)).toEqual(['dup-1', 'dup-2']);
    expect(framesSeen).not.toContain(first.messageId);
    const rows = await db.query('SELECT count(*)::int AS n FROM messages WHERE client_id = $1', ['dup-1']);
    expect(rows.rows[0]?.n).toBe(1);
  });

  it('keeps per-sender order for pipelined sends, across backlog replay and live delivery', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const count = 200;
    const sends: Promise<unknown>[] = [];
    for (let i = 0; i < count / 2; i++) sends.push(a.send(mesh.members[1]!.pubkey, String(i)));
    // The recipient connects while the sender is still sending: backlog and live messages interleave.
    const bConnecting = connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    for (let i = count / 2; i < count; i++) sends.push(a.send(mesh.members[1]!.pubkey, String(i)));
    const b = await bConnecting;
    const bodies: string[] = [];
    b.on('message', (m) => bodies.push(m.body));
    await Promise.all(sends);
    await waitFor(() => bodies.length >= count, { timeoutMs: 10_000, what: `${count} messages` });
    expect(bodies.map(Number)).toEqual([...Array(count).keys()]);
    // Every message was acked by the SDK: nothing is still owed in this mesh.
    await waitFor(async () => {
      const owed = await db.query(
        `SELECT count(*)::int AS n FROM deliveries d JOIN messages m ON m.id = d.message_id
          WHERE m.mesh_id = $1`,
        [mesh.meshId],
      );
      return owed.rows[0]?.n === 0;
    });
  });

  it('redelivers unacked messages on reconnect (node restart), and the SDK drops the duplicate', async () => {
    const restartDb = await createTestDatabase('messaging_restart');
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    let first: InProcessNode | undefined = await startNode({
      kind: 'in-process',
      databaseUrl: restartDb.url,
      env: {
        PORT: String(port),
        NODE_ID: 'n-first',
      },
    });
    const mesh = await createMesh(first, 2);
    const a = await connectPeer(first.wsUrl, mesh, mesh.members[0]!);
    const sessionId = randomUUID();
    const b = await connectPeer(first.wsUrl, mesh, mesh.members[1]!, { sessionId, autoAck: false });
    const bInbox = inbox(b);
    const messageFrames: string[] = [];
    b.on('frame', (frame) => {
      if (frame.type === 'message') messageFrames.push(String(frame.messageId));
    });
    const unacked = await a.send(mesh.members[1]!.pubkey, 'keep me');
    const acked = await a.send(mesh.members[1]!.pubkey, 'acked one');
    await waitFor(() => bInbox.length === 2);
    b.ack(acked.messageId);
    // The ack is committed: it deleted the delivery row (the member is no longer owed the message).
    await waitFor(async () => {
      const r = await restartDb.query(
        `SELECT 1 FROM deliveries d JOIN messages m ON m.id = d.message_id WHERE m.id || '-' || m.tag = $1`,
        [acked.messageId],
      );
      return r.rowCount === 0;
    });

    const disconnected = b.next('disconnected');
    await first.stop();
    first = undefined;
    expect(await disconnected).toMatchObject({ code: 1001, willReconnect: true });
    const second = await startNode({
      kind: 'in-process',
      databaseUrl: restartDb.url,
      env: { PORT: String(port), NODE_ID: 'n-second' },
    });
    try {
      const welcome = await b.next('welcome', () => true, 10_000);
      expect(welcome.node).toBe('n-second');
      expect(welcome.sessionId).toBe(sessionId);
      await waitFor(() => messageFrames.length === 3);
      // The broker replayed the unacked message (not the acked one); the SDK emitted it only once.
      expect(messageFrames).toEqual([unacked.messageId, acked.messageId, unacked.messageId]);
      expect(bInbox.map((m) => m.messageId)).toEqual([unacked.messageId, acked.messageId]);
    } finally {
      closeAllClients();
      await second.stop();
      await restartDb.drop();
    }
  });
});
