import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { seriesValue } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let cluster: TestCluster;
let server: Server;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase('ha_watches_lease');
  server = createServer((_request, response) => response.end('content'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  cluster = new TestCluster(db.url, { WATCH_ALLOW_PRIVATE: 'true' });
  // Phase 3's combination: shared watches behind the active lease.
  cluster.setFlags('ha', ['ha.watches', 'ha.active-lease', 'ha.presence']);
  await Promise.all(['l1', 'l2', 'l3'].map((id) => cluster.start(id, 'ha')));
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  server?.close();
  await db?.drop();
});

describe('shared watches behind the active lease', () => {
  // Phase 3's model (docs/active-lease.md): the lease gates only local background work; shared watches
  // are claimed per watch in Postgres, so every node polls its share, standbys included.
  it('has every node poll its share of the watches, wherever they were created, standbys included', async () => {
    const mesh = await cluster.createMesh(1);
    for (const id of ['l1', 'l2', 'l3']) {
      const peer = await connectPeer(cluster.node(id).wsUrl, mesh, mesh.members[0]!);
      await peer.request({ type: 'watch.create', url: `${base}/${id}`, mode: 'hash', intervalSec: 5 });
      await peer.request({ type: 'watch.create', url: `${base}/${id}/b`, mode: 'status', intervalSec: 5 });
    }
    await waitFor(
      async () => {
        const r = await db.query<{ owner: string | null; polled: boolean }>(
          'SELECT owner_node AS owner, last_checked_at IS NOT NULL AS polled FROM watches WHERE deleted_at IS NULL',
        );
        return r.rows.length === 6 && r.rows.every((row) => row.polled && row.owner);
      },
      { timeoutMs: 10_000, what: 'all six watches owned and polled' },
    );
    const holders: string[] = [];
    for (const id of ['l1', 'l2', 'l3']) {
      const health = (await (await fetch(`${cluster.node(id).url}/health`)).json()) as {
        backgroundWork: string;
      };
      if (health.backgroundWork === 'active') holders.push(id);
    }
    expect(holders).toHaveLength(1); // the lease is held, by one node only
    // Balanced over the three nodes (two each), the two standbys included; metrics say the same.
    await waitFor(
      async () => {
        const r = await db.query<{ owner: string; n: number }>(
          'SELECT owner_node AS owner, count(*)::int AS n FROM watches WHERE deleted_at IS NULL GROUP BY 1',
        );
        return r.rows.length === 3 && r.rows.every((row) => row.n === 2);
      },
      { timeoutMs: 10_000, what: 'two watches per node' },
    );
    for (const id of ['l1', 'l2', 'l3']) {
      const text = await (await fetch(`${cluster.node(id).url}/metrics`)).text();
      expect(seriesValue(text, 'mesh_broker_watches_owned', { node: id })).toBe(2);
    }
  });
});
