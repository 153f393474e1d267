/**
 * The broker writes only to the primary of record (broker/db/primary-fence.ts, docs/design.md § Fencing):
 * a broker whose DATABASE_URL leads to a demoted server (in recovery), to a server made read-only, or to an
 * old primary that came back writable on an older timeline after its replica was promoted answers
 * `unavailable`, never `sent`, and serves again once the URL leads to the primary.
 *
 * DATABASE_URL points at a TCP route (a LatencyProxy with no delay) that the test re-points from one
 * throw-away server to another, closing its open connections as HAProxy does when its backend changes
 * (`on-marked-down shutdown-sessions`): the broker never learns the address changed.
 */
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { MeshClient } from '@mesh-broker/sdk';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { PrimaryFence } from '../../broker/db/primary-fence.js';
import { PostgresPrimary, PostgresReplica } from '../../cli/cluster/pg-replica.js';
import { LatencyProxy } from '../../cli/proxies/latency-proxy.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

/** A fixed address whose upstream can be changed; a change cuts the connections already open. */
class Route {
  private proxy: LatencyProxy | undefined;

  private constructor(readonly port: number) {}

  static async to(upstreamPort: number): Promise<Route> {
    const route = new Route(await freePort());
    await route.to(upstreamPort);
    return route;
  }

  get databaseUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async to(upstreamPort: number): Promise<void> {
    await this.proxy?.close();
    this.proxy = await LatencyProxy.start({ upstream: { port: upstreamPort }, port: this.port });
  }

  async close(): Promise<void> {
    await this.proxy?.close();
  }
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  closeAllClients();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(() => closeAllClients());

interface Setup {
  primary: PostgresPrimary;
  replica: PostgresReplica;
  route: Route;
  node: TestNode;
  mesh: TestMesh;
  sender: MeshClient;
  receiver: MeshClient;
}

/** A primary, its streaming replica, a route to the primary, a node on the route and two peers. */
async function setUp(): Promise<Setup> {
  const primary = await PostgresPrimary.start();
  cleanups.push(() => primary.destroy());
  const replica = await PostgresReplica.start(primary);
  cleanups.push(() => replica.destroy());
  const route = await Route.to(primary.port);
  cleanups.push(() => route.close());
  const node = await startNode({
    kind: 'in-process',
    databaseUrl: route.databaseUrl,
    // A throw-away server of the test's own: the node migrates it as its owner (no mesh_broker role there).
    env: { MIGRATE_ON_START: '1' },
  });
  cleanups.push(() => node.stop());
  const mesh = await createMesh(node, 2);
  const sender = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
  const receiver = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
  return { primary, replica, route, node, mesh, sender, receiver };
}

/** `sent`, or the code of the error the DM was answered with. */
async function dm(setup: Setup, body: string): Promise<string> {
  try {
    await setup.sender.send(setup.mesh.members[1]!.pubkey, body, { timeoutMs: 5000 });
    return 'sent';
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
}

async function health(node: TestNode): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${node.url}/health`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function primaryGauge(node: TestNode, state: string): Promise<number | undefined> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const match = new RegExp(`mesh_broker_db_primary\\{[^}]*state="${state}"[^}]*\\} (\\d+)`).exec(text);
  return match ? Number(match[1]) : undefined;
}

async function bodiesOn(server: { query: PostgresPrimary['query'] }, bodies: string[]): Promise<string[]> {
  const { rows } = await server.query<{ body: string }>('SELECT body FROM messages WHERE body = ANY($1)', [
    bodies,
  ]);
  return rows.map((row) => row.body);
}

/** Waits until a DM is answered `sent`; any answer but `sent` or `unavailable` fails at once. */
async function untilSent(setup: Setup, body: string): Promise<void> {
  await waitFor(
    async () => {
      const answer = await dm(setup, body);
      if (answer !== 'sent' && answer !== 'unavailable') throw new Error(`DM answered ${answer}`);
      return answer === 'sent';
    },
    { timeoutMs: 20_000, intervalMs: 100, what: `${body} answered sent` },
  );
}

/**
 * Sets default_transaction_read_only server-wide and returns once backends that were already connected run with
 * it. pg_reload_conf() only signals the postmaster, which re-reads the file and signals its backends later: a DM
 * sent at once could still run on the old setting (CI saw `sent`). A connection opened before the reload sees the
 * new value only after the postmaster has signalled every backend, the broker's pooled ones among them.
 */
async function setReadOnly(server: PostgresPrimary, value: 'on' | 'off'): Promise<void> {
  const witness = new pg.Client({ connectionString: server.url });
  await witness.connect();
  try {
    await witness.query(
      value === 'on'
        ? 'ALTER SYSTEM SET default_transaction_read_only = on'
        : 'ALTER SYSTEM RESET default_transaction_read_only',
    );
    await witness.query('SELECT pg_reload_conf()');
    await waitFor(
      async () =>
        (await witness.query('SHOW default_transaction_read_only')).rows[0]?.default_transaction_read_only ===
        value,
      {
        timeoutMs: 10_000,
        intervalMs: 20,
        what: `default_transaction_read_only = ${value} on an open connection`,
      },
    );
  } finally {
    await witness.end();
  }
}

/**
 * Starts the (stopped) old primary as a hot standby of `conninfo`'s server: standby.signal and
 * primary_conninfo, what a failover tool does to demote it (without pg_rewind it may not replay a
 * diverged history, and stays a read-only standby all the same).
 */
function demote(primary: PostgresPrimary, conninfo: string): void {
  writeFileSync(join(primary.dataDir, 'standby.signal'), '');
  appendFileSync(join(primary.dataDir, 'postgresql.auto.conf'), `primary_conninfo = '${conninfo}'\n`);
  primary.server.start();
}

/** Stops the primary (as a crash), promotes the replica: a new timeline on the replica. */
async function failOver(setup: Setup): Promise<void> {
  await setup.replica.caughtUp();
  setup.primary.server.stop();
  await setup.replica.promote();
}

describe('the primary of record', () => {
  it('a broker on a demoted primary (restarted as a standby of the promoted replica) answers unavailable, never sent, and serves again once routed to the new primary', async () => {
    const setup = await setUp();
    const { node, primary, replica, route } = setup;
    expect(await dm(setup, 'before')).toBe('sent');
    // A node started on a standby waits for a primary (bounded) instead of running migrations and serving.
    await expect(
      startNode({
        kind: 'in-process',
        databaseUrl: replica.url,
        env: { STARTUP_DB_WAIT_MS: '1000', MIGRATE_ON_START: '1' },
      }),
    ).rejects.toThrow(/was not the primary of record within 1 s .*in recovery/);
    await failOver(setup);
    // The old primary comes back demoted: a hot standby of the new primary.
    demote(primary, `host=127.0.0.1 port=${replica.port} user=replicator`);
    // Postgres answers (a standby serves reads): the refusal below is not an outage.
    await waitFor(
      async () => {
        const { body } = await health(node);
        return body.db === 'up' || body.db === 'not_primary';
      },
      { timeoutMs: 20_000, what: 'Postgres answering behind the route' },
    );
    const during = ['during-1', 'during-2', 'during-3'];
    const answers: string[] = [];
    for (const body of during) answers.push(await dm(setup, body));
    expect(answers).toEqual(['unavailable', 'unavailable', 'unavailable']);
    expect(await health(node)).toMatchObject({
      status: 503,
      body: { status: 'unavailable', db: 'not_primary' },
    });
    expect(await primaryGauge(node, 'in_recovery')).toBe(1);

    const got = setup.receiver.next('message');
    await route.to(replica.port);
    await untilSent(setup, 'after');
    expect(await primaryGauge(node, 'primary')).toBe(1);
    // Every message but `before` the receiver gets is `after`: nothing refused was stored anywhere.
    const first = await got;
    expect(['before', 'after']).toContain(first.body);
    expect(await bodiesOn(replica, [...during, 'after'])).toEqual(['after']);
    expect(await bodiesOn(primary, during)).toEqual([]);
  }, 60_000);

  it('an old primary that comes back writable on an older timeline is refused by a broker that saw the new one; nothing written to it is acknowledged', async () => {
    const setup = await setUp();
    const { node, primary, replica, route } = setup;
    expect(await dm(setup, 'before')).toBe('sent');
    await failOver(setup);
    await route.to(replica.port);
    await untilSent(setup, 'on-the-new-primary');
    // The promotion seen: the newest timeline is 2, the state still `primary`.
    expect(await (await fetch(`${node.url}/metrics`)).text()).toMatch(/mesh_broker_db_timeline\{[^}]*\} 2\n/);
    // The old primary comes back as it was: writable, on timeline 1 (the split brain HA must prevent).
    primary.server.start();
    await route.to(primary.port);
    const during = ['stale-1', 'stale-2', 'stale-3'];
    const answers: string[] = [];
    for (const body of during) answers.push(await dm(setup, body));
    expect(answers).toEqual(['unavailable', 'unavailable', 'unavailable']);
    expect(await bodiesOn(primary, during)).toEqual([]);
    expect(await health(node)).toMatchObject({ status: 503, body: { db: 'not_primary' } });
    expect(await primaryGauge(node, 'old_timeline')).toBe(1);

    // Both are writable now (the split brain): a connection to the old one, checked before the new
    // timeline was seen, is refused at its next checkout without a round trip.
    const fence = new PrimaryFence();
    const toOld = new pg.Client({ connectionString: primary.url });
    const toNew = new pg.Client({ connectionString: replica.url });
    await toOld.connect();
    await toNew.connect();
    try {
      await fence.verify(toOld);
      expect(fence.admits(toOld)).toBe('yes');
      await fence.verify(toNew);
      expect(fence.timeline).toBe(2);
      expect(fence.admits(toOld)).toBe('old_timeline');
      expect(fence.admits(toNew)).toBe('yes');
      await expect(fence.verify(toOld)).rejects.toMatchObject({ reason: 'old_timeline' });
    } finally {
      await toOld.end();
      await toNew.end();
    }

    await route.to(replica.port);
    await untilSent(setup, 'back');
    expect(await bodiesOn(replica, [...during, 'back'])).toEqual(['back']);
  }, 60_000);

  it('a write refused as read-only (SQLSTATE 25006, a server fenced with default_transaction_read_only) answers unavailable and re-checks every connection', async () => {
    const setup = await setUp();
    const { node, primary } = setup;
    expect(await dm(setup, 'before')).toBe('sent');
    await setReadOnly(primary, 'on');
    const answers: string[] = [];
    for (const body of ['ro-1', 'ro-2']) answers.push(await dm(setup, body));
    expect(answers).toEqual(['unavailable', 'unavailable']);
    expect(await health(node)).toMatchObject({ status: 503, body: { db: 'not_primary' } });
    expect(await primaryGauge(node, 'read_only')).toBe(1);

    await setReadOnly(primary, 'off');
    await untilSent(setup, 'writable-again');
    expect(await bodiesOn(primary, ['ro-1', 'ro-2', 'writable-again'])).toEqual(['writable-again']);
  }, 60_000);
});
