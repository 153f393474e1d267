import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame, WatchTriggered } from '../../protocol/frames.js';
import { PHASE3_FLAGS, TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let cluster: TestCluster;
let server: Server;
let base: string;
let version = 1;

beforeAll(async () => {
  db = await createTestDatabase('ha_watches');
  server = createServer((_request, response) => response.end(`version ${version}`));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  cluster = new TestCluster(db.url, { WATCH_ALLOW_PRIVATE: 'true' });
  // The shipped phase-3 preset, active lease included (docs/active-lease.md: it gates only local rows).
  cluster.setFlags('ha', PHASE3_FLAGS);
  await Promise.all(['w1', 'w2', 'w3'].map((id) => cluster.start(id, 'ha')));
  for (const id of ['w1', 'w2', 'w3']) await cluster.waitActing(id, { 'ha.watches': true });
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  server?.close();
  await db?.drop();
});

const owners = async () =>
  (
    await db.query<{ owner: string | null; n: number }>(
      'SELECT owner_node AS owner, count(*)::int AS n FROM watches WHERE deleted_at IS NULL GROUP BY owner_node ORDER BY 1',
    )
  ).rows;

describe('URL watches owned by leases (ha.watches on, three nodes)', () => {
  it('balances ownership, adopts a killed owner’s watches, and keeps notifying the member wherever it is', async () => {
    const mesh = await cluster.createMesh(1);
    const creator = await connectPeer(cluster.node('w1').wsUrl, mesh, mesh.members[0]!);
    for (let i = 0; i < 6; i++) {
      await creator.request<Frame>({
        type: 'watch.create',
        url: `${base}/page/${i}`,
        mode: 'hash',
        intervalSec: 5,
      });
    }
    await waitFor(async () => (await owners()).map((o) => `${o.owner}:${o.n}`).join() === 'w1:2,w2:2,w3:2', {
      timeoutMs: 10_000,
      what: 'two watches per node',
    });
    // Every watch has its baseline before anything changes.
    await waitFor(async () => {
      const r = await db.query(
        'SELECT count(*)::int AS n FROM watches WHERE last_value IS NOT NULL AND deleted_at IS NULL',
      );
      return r.rows[0]?.n === 6;
    });
    const killedAt = Date.now();
    await cluster.kill('w2');
    await waitFor(async () => !(await owners()).some((o) => o.owner === 'w2'), {
      timeoutMs: 10_000,
      what: 'w2 watches adopted',
    });
    console.log(`watches of a SIGKILLed owner adopted after ${Date.now() - killedAt} ms`);
    expect((await owners()).reduce((sum, o) => sum + o.n, 0)).toBe(6);
    // The creator moves to another node; every watch (adopted or not) still reaches it.
    creator.close();
    const moved = await connectPeer(cluster.node('w3').wsUrl, mesh, mesh.members[0]!);
    const seen = new Set<string>();
    moved.on('watch.triggered', (t: WatchTriggered) => seen.add(t.watchId));
    version = 2;
    await waitFor(() => seen.size === 6, { timeoutMs: 15_000, what: 'six notifications' });
  });
});
