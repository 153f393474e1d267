/**
 * The SDK's `streams.subscribe(name, { recover: true })` against real brokers with stream positions (issue
 * 28, items 2 and 4 together): two nodes with `ha.streams`; the subscriber reaches each through a link the
 * test controls, so it is offline exactly while the publisher goes on. When it comes back on the other node,
 * the SDK resumes with `since` and the subscription delivers what it missed, once each and in order, then
 * the live ones; past the history's bound it says `recovered: false` and why instead of skipping silently.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MeshClient, StreamMessage, StreamRecovery } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CuttableLink } from '../../cli/proxies/cuttable-link.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNodes } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const HISTORY_SIZE = 50;
let db: TestDatabase;
let dir: string;
let nodes: TestNode[];
const links: CuttableLink[] = [];

beforeAll(async () => {
  db = await createTestDatabase('sdk_stream_recovery');
  dir = mkdtempSync(join(tmpdir(), 'wb-sdk-recovery-'));
  writeFileSync(
    join(dir, 'recovery.json'),
    renderFlagsDocument({ ...defaultFlagValues(), 'ha.streams': true, 'ha.presence': true }),
  );
  nodes = await startNodes({
    kind: 'in-process',
    databaseUrl: db.url,
    count: 2,
    env: {
      FLAGS_DIR: dir,
      FLAGS_ENV: 'recovery',
      STREAM_HISTORY_SIZE: String(HISTORY_SIZE),
      FRAME_RATE_PER_SEC: '100000',
      FRAME_BURST: '100000',
    },
  });
}, 60_000);
afterEach(async () => {
  closeAllClients();
  for (const link of links.splice(0)) await link.close();
});
afterAll(async () => {
  for (const node of nodes ?? []) await node.stop();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

/** A subscriber on node 0 whose connections to both nodes go through links; and a publisher on node 1. */
async function peers(mesh: TestMesh, stream: string) {
  const toA = await CuttableLink.start(nodes[0]!.wsUrl);
  const toB = await CuttableLink.start(nodes[1]!.wsUrl);
  links.push(toA, toB);
  const subscriber = await connectPeer([toA.wsUrl, toB.wsUrl], mesh, mesh.members[1]!, {
    retry: { initialDelayMs: 20, maxDelayMs: 100 },
  });
  const publisher = await connectPeer(nodes[1]!.wsUrl, mesh, mesh.members[0]!);
  const subscription = subscriber.streams.subscribe(stream, { recover: true });
  await subscription.ready;
  const got: number[] = [];
  const recoveries: StreamRecovery[] = [];
  subscription.on('data', (m: StreamMessage) => got.push(m.data as number));
  subscription.on('recovered', (r) => recoveries.push(r));
  return { toA, toB, subscriber, publisher, got, recoveries };
}

async function publish(publisher: MeshClient, stream: string, from: number, to: number) {
  for (let n = from; n <= to; n++) await publisher.request({ type: 'stream.publish', stream, data: n });
}

/** Cuts the subscriber off both nodes; `back` lets it reach node 1 again. */
function offline(toA: CuttableLink, toB: CuttableLink, subscriber: MeshClient) {
  toA.refuse(true);
  toB.refuse(true);
  toA.cut();
  toB.cut();
  return {
    gone: waitFor(() => subscriber.state !== 'connected', { what: 'the subscriber offline' }),
    back: async () => {
      toB.refuse(false);
      await waitFor(() => subscriber.state === 'connected' && subscriber.node === nodes[1]!.nodeId, {
        what: 'the subscriber welcomed by node 1',
      });
    },
  };
}

describe('streams.subscribe with recover, across a disconnect and a move to another node', () => {
  it('delivers what was published while it was away, once each and in order, then the live ones', async () => {
    const mesh = await createMesh(nodes[0]!, 2);
    const { toA, toB, subscriber, publisher, got, recoveries } = await peers(mesh, 'quotes');
    await publish(publisher, 'quotes', 1, 10);
    await waitFor(() => got.length === 10, { what: 'the first 10' });
    const link = offline(toA, toB, subscriber);
    await link.gone;
    await publish(publisher, 'quotes', 11, 30); // while the subscriber has no socket
    await link.back();
    await waitFor(() => recoveries.length === 1, { what: 'the recovery' });
    await publish(publisher, 'quotes', 31, 35);
    await waitFor(() => got.length >= 35, { what: 'every publish' });
    expect(recoveries[0]).toMatchObject({ recovered: true, since: { offset: 10 } });
    expect(got).toEqual(Array.from({ length: 35 }, (_, i) => i + 1));
  });

  it(`past the history's bound (${HISTORY_SIZE}) it says recovered: false and why, then goes on live`, async () => {
    const mesh = await createMesh(nodes[0]!, 2);
    const { toA, toB, subscriber, publisher, got, recoveries } = await peers(mesh, 'firehose');
    await publish(publisher, 'firehose', 1, 5);
    await waitFor(() => got.length === 5, { what: 'the first 5' });
    const link = offline(toA, toB, subscriber);
    await link.gone;
    await publish(publisher, 'firehose', 6, 5 + HISTORY_SIZE + 20);
    await link.back();
    await waitFor(() => recoveries.length === 1, { what: 'the answer to the resume' });
    expect(recoveries[0]).toMatchObject({ recovered: false, reason: 'history_trimmed' });
    const live = 5 + HISTORY_SIZE + 21;
    await publish(publisher, 'firehose', live, live);
    await waitFor(() => got.includes(live), { what: 'the next live publish' });
    // Nothing older was passed off as recovered: the first 5, then only what the node sent as live.
    expect(got.slice(0, 5)).toEqual([1, 2, 3, 4, 5]);
    expect(got.slice(5)).toEqual([live]);
  });
});
