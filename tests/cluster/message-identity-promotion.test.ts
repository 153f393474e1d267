/**
 * Message identity across a promotion that lost a WAL tail (issue 25, item 3). A throw-away primary with a
 * streaming replica (cli/cluster/pg-replica.ts, asynchronous as in the two-region simulation), its WAL
 * stream through a proxy that is cut before M1: M1 is accepted, delivered and acked on the primary only.
 * The primary dies, the replica is promoted and the broker started again on it, as a failover does. The
 * promoted server never saw M1, so its sequence hands M1's row id to M2: the peer that saw M1 must still
 * get M2 (its messageId's tag differs), and its ack of M1 must not ack M2.
 */

import type { MeshClient } from '@mesh-broker/sdk';
import { MeshRequestError } from '@mesh-broker/sdk';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runMigrations } from '../../broker/db/migrate.js';
import { PostgresPrimary, PostgresReplica } from '../../cli/cluster/pg-replica.js';
import { freePort } from '../../cli/ports.js';
import { LatencyProxy } from '../../cli/proxies/latency-proxy.js';
import type { Message } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { waitFor } from '../helpers/wait.js';

const DATABASE = 'meshbroker';

let primary: PostgresPrimary;
let link: LatencyProxy;
let replica: PostgresReplica;
let node: InProcessNode | undefined;

function databaseUrl(serverUrl: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${DATABASE}`;
  return url.toString();
}

beforeAll(async () => {
  primary = await PostgresPrimary.start();
  await primary.query(`CREATE DATABASE ${DATABASE}`);
  await runMigrations(databaseUrl(primary.url));
  link = await LatencyProxy.start({ upstream: { port: primary.port } });
  replica = await PostgresReplica.start(primary, { via: { port: link.port } });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  replica?.destroy();
  primary?.destroy();
  await link?.close();
});

/** One count from the mesh database of the server at `serverUrl`. */
async function count(serverUrl: string, sql: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl(serverUrl) });
  await client.connect();
  try {
    return (await client.query<{ n: number }>(sql)).rows[0]!.n;
  } finally {
    await client.end();
  }
}

async function ack(client: MeshClient, messageId: string): Promise<string> {
  try {
    return (await client.request({ type: 'ack', messageId })).type;
  } catch (error) {
    if (error instanceof MeshRequestError) return error.code;
    throw error;
  }
}

describe('message identity across a promotion', () => {
  it('a peer that saw M1, lost with the primary, gets M2 from the promoted replica under the same row id', async () => {
    const port = await freePort();
    node = await startNode({
      kind: 'in-process',
      databaseUrl: databaseUrl(primary.url),
      env: { PORT: String(port), MIGRATE_ON_START: '1' },
    });
    const mesh = await createMesh(node, 2);
    const [alice, bob] = [mesh.members[0]!, mesh.members[1]!];
    const a = await connectPeer(node.wsUrl, mesh, alice);
    const b = await connectPeer(node.wsUrl, mesh, bob, { autoAck: false });
    // The mesh and its members reached the replica; from here on nothing does.
    await replica.caughtUp();
    link.cut();

    const gotM1 = b.next('message', (m: Message) => m.body === 'M1');
    const m1 = await a.send(bob.pubkey, 'M1');
    expect((await gotM1).messageId).toBe(m1.messageId);
    expect(await ack(b, m1.messageId)).toBe('acked');
    // M1 is on the primary only: the replica (read-only, hot standby) has no message at all.
    expect(await count(replica.url, 'SELECT count(*)::int AS n FROM messages')).toBe(0);
    expect(await count(primary.url, 'SELECT count(*)::int AS n FROM messages')).toBe(1);

    // The failover: the primary dies with M1, the replica (which never saw M1) is promoted, the broker is
    // started again on it (same address for the peers, whose SDKs reconnect).
    await node.stop();
    node = undefined;
    primary.destroy();
    await replica.promote();
    node = await startNode({
      kind: 'in-process',
      databaseUrl: databaseUrl(replica.url),
      env: { PORT: String(port), MIGRATE_ON_START: '1' },
    });
    await waitFor(() => a.connected && b.connected, { timeoutMs: 15_000, what: 'both peers back' });

    const gotM2 = b.next('message', (m: Message) => m.body === 'M2');
    const m2 = await a.send(bob.pubkey, 'M2');
    // The promoted server hands out M1's row id again: only the tag tells the two apart.
    expect(m2.messageId.split('-')[0]).toBe(m1.messageId.split('-')[0]);
    expect.soft(m2.messageId).not.toBe(m1.messageId);
    expect(await gotM2, 'the SDK emits M2').toMatchObject({ messageId: m2.messageId, body: 'M2' });
    // The peer's ack of M1 (a message of the lost history) acks nothing; M2's own ack does.
    expect(await ack(b, m1.messageId)).toBe('not_found');
    expect(await ack(b, m2.messageId)).toBe('acked');
  });
});
