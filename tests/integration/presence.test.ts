import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { PeerLeft } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const GRACE_MS = 400;
let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('presence');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: { PRESENCE_GRACE_MS: String(GRACE_MS), MESH_CONNECTION_CAP: '300' },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

describe('presence on one node', () => {
  it('peers.list comes in pages of at most 64 KiB (150 sessions of long names and 32 groups); the SDK follows them', async () => {
    const mesh = await createMesh(node, 2);
    const groups = Array.from({ length: 32 }, (_, i) => `${String(i).padStart(2, '0')}${'g'.repeat(62)}`);
    const sockets = [];
    for (let i = 0; i < 150; i++) {
      sockets.push(
        await rawSession(
          node.wsUrl,
          helloFrame(mesh, mesh.members[1]!, { name: `${i}`.padEnd(128, 'n'), groups }),
        ),
      );
    }
    const observer = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
    observer.send({ type: 'peers.list', rid: 'p1' });
    const first = await observer.next((f) => f.type === 'peers');
    expect(Buffer.byteLength(JSON.stringify(first))).toBeLessThanOrEqual(64 * 1024);
    expect(typeof first.next).toBe('string');
    const client = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const all = await client.peers();
    expect(new Set(all.map((p) => p.sessionId)).size).toBe(152);
    for (const socket of [...sockets, observer]) socket.close();
  });

  it('announces joins, lists peers with their node, and announces a leave after the grace period', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!, { name: 'alice' });
    const joined = a.next('peer.joined');
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!, { name: 'bob', groups: ['ops'] });
    expect(await joined).toEqual({
      type: 'peer.joined',
      pubkey: mesh.members[1]!.pubkey,
      sessionId: b.sessionId,
      name: 'bob',
    });

    const peers = await a.peers();
    expect(peers.map((p) => [p.name, p.node, p.sessionId]).sort()).toEqual(
      [
        ['alice', node.nodeId, a.sessionId],
        ['bob', node.nodeId, b.sessionId],
      ].sort(),
    );
    expect(peers.find((p) => p.name === 'bob')?.groups).toEqual(['ops']);

    const left = a.next('peer.left');
    const closedAt = Date.now();
    b.close();
    expect(await left).toEqual({
      type: 'peer.left',
      pubkey: mesh.members[1]!.pubkey,
      sessionId: b.sessionId,
    });
    expect(Date.now() - closedAt).toBeGreaterThanOrEqual(GRACE_MS - 50);
    expect((await a.peers()).map((p) => p.name)).toEqual(['alice']);
    const rows = await db.query('SELECT count(*)::int AS n FROM presence WHERE session_id = $1', [
      b.sessionId,
    ]);
    expect(rows.rows[0]?.n).toBe(0);
  });

  it('treats a reconnect within the grace period as the same presence: no leave, no second join', async () => {
    const mesh = await createMesh(node, 3);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const events: string[] = [];
    a.on('peer.joined', (e) => events.push(`joined ${e.sessionId}`));
    a.on('peer.left', (e) => events.push(`left ${e.sessionId}`));
    const sessionB = randomUUID();
    const b1 = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[1]!, { sessionId: sessionB }));
    b1.close();
    await b1.closed;
    const b2 = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[1]!, { sessionId: sessionB }));
    // A later session that leaves for good: its peer.left comes after B's would have.
    const c = await connectPeer(node.wsUrl, mesh, mesh.members[2]!);
    const cLeft = a.next('peer.left', (e: PeerLeft) => e.sessionId === c.sessionId, 5000);
    c.close();
    await cLeft;
    expect(events).toEqual([`joined ${sessionB}`, `joined ${c.sessionId}`, `left ${c.sessionId}`]);
    expect((await a.peers()).map((p) => p.sessionId).sort()).toEqual([a.sessionId, sessionB].sort());
    b2.close();
  });

  it('says resumed in the welcome when a session comes back within the grace period', async () => {
    const mesh = await createMesh(node, 1);
    const sessionId = randomUUID();
    const first = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!, { sessionId }));
    first.close();
    await first.closed;
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[0]!, { sessionId });
    expect((await b.connect()).resumed).toBe(true);
  });
});
