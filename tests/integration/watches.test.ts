import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame, WatchTriggered } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let node: InProcessNode; // allows loopback targets (the test's own HTTP server)
let strict: InProcessNode; // the default: private targets refused
let server: Server;
let base: string;
const site = { page: 'first version', state: 'pending', status: 200 };

beforeAll(async () => {
  db = await createTestDatabase('watches');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      WATCH_ALLOW_PRIVATE: 'true',
      WATCH_MAX_PER_MEMBER: '4',
      PRESENCE_GRACE_MS: '1500',
    },
  });
  strict = await startNode({ kind: 'in-process', databaseUrl: db.url });
  server = createServer((request, response) => {
    if (request.url === '/page') response.end(site.page);
    else if (request.url === '/api')
      response
        .setHeader('content-type', 'application/json')
        .end(JSON.stringify({ data: { state: site.state } }));
    else response.writeHead(site.status).end('status page');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await strict?.stop();
  server?.close();
  await db?.drop();
});

type Created = Frame & { watchId: string };
type Listed = Frame & {
  watches: Array<{ watchId: string; lastValue: string | null; lastError: string | null }>;
};

describe('URL watches on one node', () => {
  it('notifies the creating member durably: a change (hash), entering a match (json), a status change', async () => {
    const mesh = await createMesh(node, 1);
    const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!, { autoAck: false });
    const create = (fields: object) =>
      creator.request<Created>({ type: 'watch.create', intervalSec: 5, ...fields });
    const hash = await create({ url: `${base}/page`, mode: 'hash' });
    const json = await create({
      url: `${base}/api`,
      mode: 'json',
      extract: 'data.state',
      notifyOn: 'match:ready',
    });
    const status = await create({ url: `${base}/status`, mode: 'status' });
    // The first poll records a baseline for each.
    await waitFor(async () => {
      const list = await creator.request<Listed>({ type: 'watch.list' });
      return list.watches.length === 3 && list.watches.every((w) => w.lastValue !== null);
    });
    const triggered: WatchTriggered[] = [];
    creator.on('watch.triggered', (t) => triggered.push(t));
    site.page = 'second version';
    site.state = 'ready';
    site.status = 503;
    await waitFor(() => triggered.length === 3, { timeoutMs: 12_000, what: 'three notifications' });
    const byId = Object.fromEntries(triggered.map((t) => [t.watchId, t]));
    expect(byId[hash.watchId]).toMatchObject({ type: 'watch.triggered', url: `${base}/page` });
    expect(byId[hash.watchId]!.oldValue).not.toBe(byId[hash.watchId]!.newValue);
    expect(byId[json.watchId]).toMatchObject({ oldValue: 'pending', newValue: 'ready' });
    expect(byId[status.watchId]).toMatchObject({ oldValue: '200', newValue: '503' });
    // Unacked, so still owed: another session of the same member gets all three on connect.
    const later = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const replayed: string[] = [];
    later.on('watch.triggered', (t) => replayed.push(t.watchId));
    await waitFor(() => replayed.length === 3);
    expect(replayed.sort()).toEqual([hash.watchId, json.watchId, status.watchId].sort());
  });

  it('refuses private, loopback and link-local targets unless allowed, and bad fields', async () => {
    const mesh = await createMesh(strict, 1);
    const a = await connectPeer(strict.wsUrl, mesh, mesh.members[0]!);
    const create = (fields: object) =>
      a.request({ type: 'watch.create', mode: 'status', intervalSec: 5, ...fields });
    for (const url of [
      `${base}/page`,
      'http://localhost:9/',
      'http://10.1.2.3/',
      'http://169.254.169.254/latest',
      'http://[::1]/',
    ]) {
      await expect(create({ url })).rejects.toThrow('forbidden');
    }
    await expect(create({ url: 'ftp://example.com/file' })).rejects.toThrow('bad_request');
    await expect(create({ url: 'not a url' })).rejects.toThrow('bad_request');
    await expect(create({ url: 'http://93.184.216.34/', intervalSec: 4 })).rejects.toThrow(
      'field "intervalSec"',
    );
    await expect(create({ url: 'http://93.184.216.34/', mode: 'xml' })).rejects.toThrow('field "mode"');
    await expect(create({ url: 'http://93.184.216.34/', extract: 'a.b' })).rejects.toThrow(
      '"extract" goes with mode "json"',
    );
    await expect(create({ url: 'http://93.184.216.34/', mode: 'json', extract: 'a..b' })).rejects.toThrow(
      'field "extract"',
    );
    await expect(create({ url: 'http://93.184.216.34/', notifyOn: 'sometimes' })).rejects.toThrow(
      'field "notifyOn"',
    );
    const rows = await db.query('SELECT count(*)::int AS n FROM watches WHERE mesh_id = $1', [mesh.meshId]);
    expect(rows.rows[0]?.n).toBe(0);
  });

  it('lists and deletes for the creating member only, within the per-member limit', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const create = () =>
      a.request<Created>({ type: 'watch.create', url: `${base}/status`, mode: 'status', intervalSec: 60 });
    const made = [await create(), await create(), await create(), await create()];
    await expect(create()).rejects.toThrow('limit_exceeded');
    expect((await b.request<Listed>({ type: 'watch.list' })).watches).toEqual([]);
    await expect(b.request({ type: 'watch.delete', watchId: made[0]!.watchId })).rejects.toThrow('forbidden');
    expect(await a.request({ type: 'watch.delete', watchId: made[0]!.watchId })).toMatchObject({
      type: 'watch.deleted',
    });
    await expect(a.request({ type: 'watch.delete', watchId: made[0]!.watchId })).rejects.toThrow('not_found');
    const left = await a.request<Listed>({ type: 'watch.list' });
    expect(left.watches.map((w) => w.watchId).sort()).toEqual(
      made
        .slice(1)
        .map((w) => w.watchId)
        .sort(),
    );
  });

  it('documents the local gap: a watch ends with its creator session on this node', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const { watchId } = await a.request<Created>({
      type: 'watch.create',
      url: `${base}/page`,
      mode: 'hash',
      intervalSec: 60,
    });
    a.close();
    await waitFor(
      async () => {
        const r = await db.query('SELECT deleted_at FROM watches WHERE id = $1', [watchId]);
        return r.rows[0]?.deleted_at;
      },
      { timeoutMs: 5000 },
    );
  });
});
